# METADATA
# title: Budget
# description: The projected monthly cost of every declared device stays within the environment's budget; alert thresholds warn ahead of it.
package fleet.budget

# In a plan, the head is also costed at the base revision's reference prices (input.change.cost_after_base_prices,
# fleetops.spec.Reference: each group at the larger of its own price and what the base says it costs; a
# renamed model or a new spot pool at the highest price the base knows for its device resource, or its
# model's): the budget is judged with the larger cost, so that a price the change sets alone cannot hide
# the capacity it adds.
costs contains input.facts.monthly_cost

costs contains input.change.cost_after_base_prices if is_number(input.change.cost_after_base_prices)

cost := max(costs)

default priced := ""

priced := " at the base revision's prices" if cost > input.facts.monthly_cost

budget := input.spec.budget

percent := round((cost * 100) / budget.monthly)

# METADATA
# title: Projected cost within budget
# description: Physical devices x price per device-hour x 730 hours is at most the monthly budget; in a plan, priced with the larger of the head's and the base revision's prices.
# custom:
#   severity: high
#   control_id: FLEET-BUDGET-01
#   fix: "lower nodes or quota in this environment by {over} {currency} a month, or raise budget.monthly in its own reviewed PR"
#   location: {causes: [clusters, prices]} # what the change did to the cost, when the budget itself is not edited
deny contains d if {
	cost > budget.monthly
	over := round(cost) - round(budget.monthly)
	d := {
		"rule": "budget.over_budget",
		"severity": "high",
		"msg": sprintf("projected monthly cost %d %s%s exceeds the budget of %d by %d (%d%%)", [round(cost), budget.currency, priced, round(budget.monthly), over, percent]),
		"resource": {"kind": "Budget", "name": input.environment},
		"figures": {"cost": round(cost), "budget": round(budget.monthly), "over": over},
		"fix_values": {"currency": budget.currency},
	}
}

# METADATA
# title: Budget alert threshold crossed
# description: Warn for each alert threshold (fraction of the monthly budget) that the projected cost has reached.
# custom:
#   severity: low
#   control_id: FLEET-BUDGET-02
#   location: {causes: [budget.alert_at]} # a lowered threshold, when the budget itself is not edited
warn contains d if {
	some threshold in budget.alert_at
	cost >= budget.monthly * threshold
	d := {
		"rule": "budget.alert_threshold",
		"severity": "low",
		"msg": sprintf("projected monthly cost %d %s%s is %d%% of the budget of %d, past the %d%% alert", [round(cost), budget.currency, priced, percent, round(budget.monthly), round(threshold * 100)]),
		"resource": {"kind": "Budget", "name": input.environment},
	}
}
