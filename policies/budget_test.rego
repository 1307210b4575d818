package fleet.budget_test

import data.fleet.budget

at(cost) := {
	"environment": "prod",
	"facts": {"monthly_cost": cost},
	"spec": {"budget": {"monthly": 1000, "currency": "USD", "alert_at": [0.8, 0.95]}},
}

rules(decisions) := {d.rule | some d in decisions}

test_under_every_threshold_has_no_decisions if {
	count(budget.deny) == 0 with input as at(799)
	count(budget.warn) == 0 with input as at(799)
}

test_over_budget_fires if {
	"budget.over_budget" in rules(budget.deny) with input as at(1000.5)
}

test_at_budget_is_allowed if {
	count(budget.deny) == 0 with input as at(1000)
}

test_each_crossed_threshold_warns if {
	"budget.alert_threshold" in rules(budget.warn) with input as at(800)
	count(budget.warn) == 1 with input as at(800)
	count(budget.warn) == 2 with input as at(960)
}

# In a plan: the head costed at the base revision's prices (a price cut in the same change).
planned(cost, base_priced) := object.union(at(cost), {"change": {"cost_after_base_prices": base_priced}})

test_base_prices_judge_the_budget_when_higher if {
	decisions := budget.deny with input as planned(500, 1500)
	some d in decisions
	d.rule == "budget.over_budget"
	d.msg == "projected monthly cost 1500 USD at the base revision's prices exceeds the budget of 1000 by 500 (150%)"
}

test_head_prices_judge_the_budget_when_higher if {
	count(budget.deny) == 0 with input as planned(900, 400)
	"budget.over_budget" in rules(budget.deny) with input as planned(1100, 400)
}

test_no_base_prices_outside_a_plan if {
	count(budget.deny) == 0 with input as object.union(at(900), {"change": null})
	count(budget.deny) == 0 with input as planned(900, null)
}
