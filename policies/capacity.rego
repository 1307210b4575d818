# METADATA
# title: Live capacity
# description: With a live node inventory, the Ready nodes of each cluster offer at least the guaranteed quota. A warning, not a deny, so the reconciler reports shortfalls without thrashing.
package fleet.capacity

# cluster -> its Ready nodes; built once so each (cluster, resource) scans only its own nodes.
ready_nodes := {cluster: nodes |
	some cluster, _ in input.facts.quota
	nodes := [n | some n in input.live.nodes; n.cluster == cluster; n.ready == true]
}

# METADATA
# title: Live Ready capacity covers guaranteed quota
# description: For each cluster and device resource, the allocatable devices of Ready live nodes are at least the guaranteed quota sum.
# custom:
#   severity: medium
#   control_id: FLEET-CAP-01
warn contains d if {
	is_object(input.live)
	some cluster, per in input.facts.quota
	some resource, q in per
	ready := sum([to_number(object.get(n.allocatable, resource, 0)) | some n in ready_nodes[cluster]])
	ready < q.guaranteed
	d := {
		"rule": "capacity.live_below_guaranteed",
		"severity": "medium",
		"msg": sprintf("%s: Ready nodes offer %d %s but tenants are guaranteed %d", [cluster, ready, resource, q.guaranteed]),
		"resource": {"cluster": cluster, "kind": "DeviceResource", "name": resource},
	}
}

# Every pool and edge group some tenant's workloads may land on (facts.eligible: the pools a tenant
# names, else every pool but the spot ones; the edge groups it names).
usable_groups contains name if {
	some per_cluster in input.facts.eligible
	some names in per_cluster
	some name in names
}

# A group's physical devices priced per device-hour for a month: a spot pool at its own price, else its model's.
group_price(group) := group.spot.price if is_object(object.get(group, "spot", null))

else := object.get(input.spec.prices, group.device.model, 0)

# METADATA
# title: Capacity some tenant can use
# description: Every pool and edge group is one some tenant's workloads may land on (a tenant names it under pools or edge_groups; a tenant naming no pools gets every pool but the spot ones). Kueue admits no job onto a flavor no tenant's ClusterQueue lists, so such a group is paid for and idle.
# custom:
#   severity: medium
#   control_id: FLEET-CAP-02
#   fix:
#     - "name {name} under the {field} of a tenant on {cluster}"
#     - "remove it ({monthly_cost} {currency} a month)"
warn contains d if {
	some cluster in input.spec.clusters
	some field in ["pools", "edge_groups"]
	some group in object.get(cluster, field, [])
	not group.name in usable_groups
	fact := input.facts.groups[group.name]
	monthly := round((fact.physical_devices * group_price(group)) * input.facts.hours_per_month)
	d := {
		"rule": "capacity.unused_group",
		"severity": "medium",
		"msg": sprintf("%s: %s %s (%d %s) is one no tenant may use: %d %s a month idle", [cluster.name, {"pools": "pool", "edge_groups": "edge group"}[field], group.name, fact.physical_devices, fact.model, monthly, input.spec.budget.currency]),
		"resource": {"cluster": cluster.name, "kind": {"pools": "Pool", "edge_groups": "EdgeGroup"}[field], "name": group.name},
		"figures": {"monthly_cost": monthly, "physical_devices": fact.physical_devices},
		"fix_values": {"field": field, "currency": input.spec.budget.currency},
	}
}
