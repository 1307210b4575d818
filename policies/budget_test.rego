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
