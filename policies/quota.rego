# METADATA
# title: Device quota
# description: Guaranteed and burst device quota fit each cluster's schedulable capacity, and every tenant namespace enforces it.
package fleet.quota

cfg := data.fleet_data.quota

# Integer limits: quotas are whole devices, and flooring once here keeps OPA and regorus from
# disagreeing on the last bit of a float product.
allowed(units, fraction) := floor((units * fraction) + 0.000001)

capacity_of(cluster, resource) := object.get(object.get(input.facts.capacity, cluster, {}), resource, 0)

# "cluster/namespace/requests.<resource>" for every hard limit that a rendered ResourceQuota sets.
enforced contains sprintf("%s/%s/%s", [r.cluster, r.namespace, key]) if {
	some r in data.fleet.lib.of_kind("ResourceQuota")
	some key, _ in r.manifest.spec.hard
}

# METADATA
# title: Guaranteed quota fits capacity with headroom
# description: Per cluster and device resource, the guaranteed quota of all tenants is at most capacity x (1 - headroom), so failed or drained nodes do not break promises.
# custom:
#   severity: high
#   control_id: FLEET-QUOTA-01
#   fix:
#     - "lower guaranteed {name} by {excess} across the tenants on {cluster}"
#     - "add {nodes} nodes to {pool}"
#     - "merge a waiver first in its own PR"
#   location: {field: guaranteed}
deny contains d if {
	some cluster, per in input.facts.quota
	some resource, q in per
	units := capacity_of(cluster, resource)
	limit := allowed(units, 1 - cfg.headroom)
	q.guaranteed > limit
	d := {
		"rule": "quota.guaranteed_over_capacity",
		"severity": "high",
		"msg": sprintf("%s: guaranteed %s quota %d exceeds %d (capacity %d less %d%% headroom)", [cluster, resource, q.guaranteed, limit, units, round(cfg.headroom * 100)]),
		"resource": {"cluster": cluster, "kind": "DeviceResource", "name": resource},
		"figures": {"quota": q.guaranteed, "limit": limit, "capacity": units, "headroom_percent": round(cfg.headroom * 100)},
		"fix_values": object.union({"excess": q.guaranteed - limit}, nodes_for(cluster, resource, q.guaranteed - limit, round(cfg.headroom * 100))),
	}
}

# The first pool of `cluster` (in file order) with `resource`, and how many more of its nodes hold `excess`
# units with the headroom kept free: the fix of quota.guaranteed_over_capacity; none where no pool has it.
nodes_for(cluster, resource, excess, headroom_percent) := {"pool": pool.name, "nodes": ceil(excess / ((units / pool.nodes) * (1 - (headroom_percent / 100))))} if {
	pools := [p | some c in input.spec.clusters; c.name == cluster; some p in c.pools; input.facts.groups[p.name].units[resource]]
	pool := pools[0]
	units := input.facts.groups[pool.name].units[resource]
} else := {}

# METADATA
# title: Burst quota fits capacity
# description: No tenant may burst to more devices of a resource than its cluster has.
# custom:
#   severity: high
#   control_id: FLEET-QUOTA-02
#   fix: "lower the tenants' burst quota, or add nodes to a pool of this device, or merge a waiver first in its own PR"
#   location: {field: burst}
deny contains d if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
	some resource, q in tenant.quota
	units := capacity_of(cluster, resource)
	q.burst > units
	d := {
		"rule": "quota.burst_over_capacity",
		"severity": "high",
		"msg": sprintf("%s: tenant %s bursts to %d %s but the cluster has %d", [cluster, tenant.name, q.burst, resource, units]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "DeviceResource", "name": resource},
	}
}

# METADATA
# title: Burst is what Kueue will grant
# description: On an idle cluster the rendered Kueue queues let each tenant hold its declared burst (facts.grants, computed from the rendered Cohorts and ClusterQueues as Kueue v0.17 does). A tenant that keeps part of its guarantee from lending, or a pool that shrinks, can leave another tenant's burst a promise no one keeps.
# custom:
#   severity: high
#   control_id: FLEET-QUOTA-06
#   fix:
#     - "lower {tenant}'s burst {name} to {reachable} on {cluster}"
#     - "add {short} {name} no tenant guarantees to its pools"
#     - "let the tenants lend more of their guarantee (scheduler.lend_fraction)"
deny contains d if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
	some resource, q in tenant.quota
	g := input.facts.grants[cluster][tenant.name][resource]
	g.reachable < q.burst
	d := {
		"rule": "quota.burst_unreachable",
		"severity": "high",
		"msg": sprintf("%s: tenant %s bursts to %d %s but Kueue grants it at most %d on an idle cluster (guaranteed %d)", [cluster, tenant.name, q.burst, resource, g.reachable, g.guaranteed]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "DeviceResource", "name": resource, "field": "burst"},
		"figures": {"burst": q.burst, "reachable": g.reachable, "guaranteed": g.guaranteed},
		"fix_values": {"short": q.burst - g.reachable},
	}
}

# METADATA
# title: One tenant's guaranteed share is bounded
# description: Where tenants share a cluster's device resource, none holds more guaranteed quota than the configured share of its capacity. A sole holder is not limited, as it crowds out no one.
# custom:
#   severity: medium
#   control_id: FLEET-QUOTA-03
#   fix: "lower this tenant's guaranteed quota, or add capacity, or merge a waiver first in its own PR"
#   location: {field: guaranteed}
deny contains d if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
	some resource, q in tenant.quota
	input.facts.quota[cluster][resource].tenants > 1
	units := capacity_of(cluster, resource)
	limit := allowed(units, cfg.max_tenant_share)
	q.guaranteed > limit
	d := {
		"rule": "quota.tenant_share",
		"severity": "medium",
		"msg": sprintf("%s: tenant %s guarantees %d of %d %s, above the %d%% share limit (%d)", [cluster, tenant.name, q.guaranteed, units, resource, round(cfg.max_tenant_share * 100), limit]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "DeviceResource", "name": resource},
		"figures": {"guaranteed": q.guaranteed, "units": units, "limit": limit},
	}
}

# METADATA
# title: Every quota is enforced by a ResourceQuota
# description: Each tenant namespace has a ResourceQuota limiting requests of every device resource in the tenant's quota; without it pods bypass the scheduler queue's limits.
# custom:
#   severity: high
#   control_id: FLEET-QUOTA-04
#   fix: "keep the device ResourceQuota the tenant component renders (check modules/tenant.py)"
deny contains d if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
	some resource, _ in tenant.quota
	not sprintf("%s/%s/requests.%s", [cluster, tenant.name, resource]) in enforced
	d := {
		"rule": "quota.missing_resourcequota",
		"severity": "high",
		"msg": sprintf("%s: namespace %s has no ResourceQuota on requests.%s", [cluster, tenant.name, resource]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "Namespace", "name": tenant.name},
	}
}

# METADATA
# title: Reachable devices without a quota
# description: A tenant whose pools offer a device resource it has no quota for can request that resource without limit (taints only slow this down).
# custom:
#   severity: low
#   control_id: FLEET-QUOTA-05
#   location: {field: quota} # the quota it lacks; a pool it gained is found as the tenant's edit
warn contains d if {
	some tenant in input.spec.tenants
	some cluster in tenant.clusters
	some group in input.facts.eligible[tenant.name][cluster]
	some resource, _ in input.facts.groups[group].units
	not tenant.quota[resource]
	d := {
		"rule": "quota.unbounded_device",
		"severity": "low",
		"msg": sprintf("%s: tenant %s can reach %s through its pools but has no quota for it", [cluster, tenant.name, resource]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "Namespace", "name": tenant.name},
	}
}
