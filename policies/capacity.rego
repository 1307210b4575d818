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
