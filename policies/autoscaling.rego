# METADATA
# title: Inference autoscaling
# description: Each service's autoscaler stops where its tenant's quota and the budget do; its max replicas fit what Kueue grants the tenant on the service's pools, and their spend fits the budget.
package fleet.autoscaling

import data.fleet.budget

# input.facts.services[i] is spec.services[i] in fleet terms (fleetops/grants.py `services`): `reachable`
# is what Kueue grants its tenant of its device on its pools on an idle cluster, read from the rendered
# queues as quota.burst_unreachable reads it; `replica_monthly` and `monthly_at_max` its devices' cost.

label(s) := sprintf("%s/%s", [s.tenant, s.name])

subject(s) := {"kind": "Service", "cluster": s.cluster, "tenant": s.tenant, "name": s.name}

# METADATA
# title: Max replicas within the reachable burst
# description: Max replicas x devices per replica is at most what Kueue grants the tenant on the service's pools (its guarantee and what it may borrow there); replicas past it would wait unadmitted while the autoscaler counts them as serving.
# custom:
#   severity: high
#   control_id: FLEET-SCALE-01
#   fix:
#     - "lower {tenant}/{name}'s replicas.max to {fits}"
#     - "raise {tenant}'s burst on {cluster}"
#   location: {field: replicas.max, causes: [tenants, scheduler]} # a lowered burst, or less lent
deny contains d if {
	some i, s in input.spec.services
	f := input.facts.services[i]
	f.at_max > f.reachable
	fits := floor(f.reachable / s.devices.count)
	d := {
		"rule": "autoscaling.max_beyond_burst",
		"severity": "high",
		"msg": sprintf("%s: at max %d replicas x %d %s it asks for %d, beyond the reachable burst of %d on %s: lower replicas.max to %d, or raise %s's burst", [label(s), s.replicas.max, s.devices.count, s.devices.resource, f.at_max, f.reachable, concat(", ", s.pools), fits, s.tenant]),
		"resource": subject(s),
		"figures": {"max": s.replicas.max, "at_max": f.at_max, "reachable": f.reachable, "fits": fits},
	}
}

at_max_total := sum([f.monthly_at_max | some f in input.facts.services])

# The declared fleet's cost as the budget rule judges it (the larger of head and base prices in a plan),
# and every service at its max on top: what the month may cost when all of them scale up at once.
spend := budget.cost + at_max_total

# METADATA
# title: Spend at max replicas within budget
# description: The declared fleet's monthly cost plus every service's devices at max replicas x price per device-hour x 730 hours is at most the monthly budget.
# custom:
#   severity: high
#   control_id: FLEET-SCALE-02
#   fix:
#     - "lower {tenant}/{name}'s replicas.max to {fits}"
#     - "raise budget.monthly in its own reviewed PR"
#   location: {field: replicas.max, causes: [budget.monthly, prices, clusters]}
deny contains d if {
	budget.cost <= budget.budget.monthly # else budget.over_budget says it, and no max of the services' would fit
	spend > budget.budget.monthly
	some i, s in input.spec.services
	f := input.facts.services[i]
	f.monthly_at_max > 0
	others := spend - f.monthly_at_max
	fits := max([0, floor((budget.budget.monthly - others) / f.replica_monthly)])
	d := {
		"rule": "autoscaling.spend_over_budget",
		"severity": "high",
		"msg": sprintf("%s: at max %d replicas it spends %d %s a month; with the fleet's %d and the other services' at max that is %d, over the budget of %d: lower replicas.max to %d, or raise budget.monthly", [label(s), s.replicas.max, round(f.monthly_at_max), budget.budget.currency, round(budget.cost), round(spend), round(budget.budget.monthly), fits]),
		"resource": subject(s),
		"figures": {"max": s.replicas.max, "monthly_at_max": f.monthly_at_max, "spend": spend, "budget": budget.budget.monthly, "fits": fits},
	}
}
