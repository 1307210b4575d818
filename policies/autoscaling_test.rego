package fleet.autoscaling_test

import data.fleet.autoscaling

service(max) := {
	"name": "asr", "tenant": "speech", "cluster": "bj", "pools": ["a100", "h100"],
	"devices": {"resource": "nvidia.com/gpu", "count": 2}, "replicas": {"min": 1, "max": max},
}

# Kueue grants speech 16 on a100 and h100 together; 500 a month per replica, the fleet 8,000 of 10,000.
fleet(max) := {
	"environment": "prod",
	"spec": {"services": [service(max)], "budget": {"monthly": 10000, "currency": "USD", "alert_at": []}},
	"facts": {
		"monthly_cost": 8000,
		"services": [{"at_max": 2 * max, "reachable": 16, "replica_monthly": 500, "monthly_at_max": 500 * max}],
	},
}

denied(rule, decisions) := [d | some d in decisions; d.rule == rule]

test_max_within_the_burst_on_its_pools_is_allowed if {
	count(denied("autoscaling.max_beyond_burst", autoscaling.deny)) == 0 with input as fleet(8) # 8 x 2 = 16, all it reaches
}

test_max_beyond_the_burst_on_its_pools_is_denied_with_the_max_that_fits if {
	[d] := denied("autoscaling.max_beyond_burst", autoscaling.deny) with input as fleet(9)
	d.figures == {"max": 9, "at_max": 18, "reachable": 16, "fits": 8}
	d.resource == {"kind": "Service", "cluster": "bj", "tenant": "speech", "name": "asr"}
	d.msg == "speech/asr: at max 9 replicas x 2 nvidia.com/gpu it asks for 18, beyond the reachable burst of 16 on a100, h100: lower replicas.max to 8, or raise speech's burst"
}

test_a_tenant_kueue_grants_nothing_is_denied if {
	[d] := denied("autoscaling.max_beyond_burst", autoscaling.deny) with input as fleet(1) with input.facts.services as [{"at_max": 2, "reachable": 0, "replica_monthly": 500, "monthly_at_max": 500}]
	d.figures == {"max": 1, "at_max": 2, "reachable": 0, "fits": 0}
}

test_spend_at_max_within_the_budget_is_allowed if {
	count(denied("autoscaling.spend_over_budget", autoscaling.deny)) == 0 with input as fleet(4)
}

test_spend_at_max_beyond_the_budget_is_denied_with_the_max_that_fits if {
	[d] := denied("autoscaling.spend_over_budget", autoscaling.deny) with input as fleet(5)
	d.figures.fits == 4
	d.msg == "speech/asr: at max 5 replicas it spends 2500 USD a month; with the fleet's 8000 and the other services' at max that is 10500, over the budget of 10000: lower replicas.max to 4, or raise budget.monthly"
}

test_spend_is_judged_at_the_base_prices_when_higher if {
	planned := object.union(fleet(3), {"change": {"cost_after_base_prices": 9000}})
	[d] := denied("autoscaling.spend_over_budget", autoscaling.deny) with input as planned
	d.figures.fits == 2
}

test_a_fleet_over_budget_without_its_services_is_the_budget_rules_alone if {
	over := object.union(fleet(1), {"facts": {"monthly_cost": 10001}})
	count(denied("autoscaling.spend_over_budget", autoscaling.deny)) == 0 with input as over
}
