package fleet.quota_test

import data.fleet.quota

# Two tenants share 100 GPUs on c1: guaranteed 90 = capacity less 10% headroom, a holds exactly 50%.
base := {
	"facts": {
		"capacity": {"c1": {"nvidia.com/gpu": 100}},
		"quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 90, "burst": 160, "tenants": 2}}},
		"eligible": {"a": {"c1": ["p1"]}, "b": {"c1": ["p1"]}},
		"groups": {"p1": {"units": {"nvidia.com/gpu": 100}}},
	},
	"spec": {"tenants": [
		{"name": "a", "clusters": ["c1"], "quota": {"nvidia.com/gpu": {"guaranteed": 50, "burst": 100}}},
		{"name": "b", "clusters": ["c1"], "quota": {"nvidia.com/gpu": {"guaranteed": 40, "burst": 60}}},
	]},
	"resources": [rq("a"), rq("b")],
}

rq(ns) := {"cluster": "c1", "kind": "ResourceQuota", "namespace": ns, "manifest": {"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}}

tenants(a_quota) := [
	{"name": "a", "clusters": ["c1"], "quota": a_quota},
	{"name": "b", "clusters": ["c1"], "quota": {"nvidia.com/gpu": {"guaranteed": 40, "burst": 60}}},
]

rules(decisions) := {d.rule | some d in decisions}

test_clean_input_has_no_decisions if {
	count(quota.deny) == 0 with input as base
	count(quota.warn) == 0 with input as base
}

test_guaranteed_over_capacity_fires if {
	over := object.union(base, {"facts": {"quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 91}}}}})
	"quota.guaranteed_over_capacity" in rules(quota.deny) with input as over
}

test_guaranteed_over_capacity_counts_missing_capacity_as_zero if {
	facts := object.union(object.remove(base.facts, ["capacity"]), {"capacity": {}})
	gone := object.union(object.remove(base, ["facts"]), {"facts": facts})
	"quota.guaranteed_over_capacity" in rules(quota.deny) with input as gone
}

test_burst_over_capacity_fires if {
	over := object.union(base, {"spec": {"tenants": tenants({"nvidia.com/gpu": {"guaranteed": 50, "burst": 101}})}})
	"quota.burst_over_capacity" in rules(quota.deny) with input as over
}

test_burst_at_capacity_is_allowed if {
	full := object.union(base, {"spec": {"tenants": tenants({"nvidia.com/gpu": {"guaranteed": 50, "burst": 100}})}})
	not "quota.burst_over_capacity" in rules(quota.deny) with input as full
}

test_tenant_share_fires if {
	greedy := object.union(base, {"spec": {"tenants": tenants({"nvidia.com/gpu": {"guaranteed": 51, "burst": 100}})}})
	"quota.tenant_share" in rules(quota.deny) with input as greedy
}

test_tenant_share_ignores_a_sole_holder if {
	alone := object.union(base, {
		"spec": {"tenants": tenants({"nvidia.com/gpu": {"guaranteed": 51, "burst": 100}})},
		"facts": {"quota": {"c1": {"nvidia.com/gpu": {"tenants": 1}}}},
	})
	not "quota.tenant_share" in rules(quota.deny) with input as alone
}

test_tenant_share_limit_comes_from_data if {
	greedy := object.union(base, {"spec": {"tenants": tenants({"nvidia.com/gpu": {"guaranteed": 51, "burst": 100}})}})
	not "quota.tenant_share" in rules(quota.deny) with input as greedy with data.fleet_data.quota.max_tenant_share as 0.6
}

test_missing_resourcequota_fires if {
	bare := object.union(base, {"resources": [rq("a")]})
	decisions := quota.deny with input as bare
	some d in decisions
	d.rule == "quota.missing_resourcequota"
	d.resource.tenant == "b"
}

test_unbounded_device_warns if {
	more := object.union(base, {"facts": {"groups": {"p1": {"units": {"nvidia.com/gpu": 100, "huawei.com/Ascend910": 8}}}}})
	"quota.unbounded_device" in rules(quota.warn) with input as more
}

# What Kueue grants a and b on c1 (facts.grants, from the rendered queues): a's burst of 100 reached.
granted(reachable) := {"c1": {
	"a": {"nvidia.com/gpu": {"guaranteed": 50, "reachable": reachable, "lends": 50}},
	"b": {"nvidia.com/gpu": {"guaranteed": 40, "reachable": 60, "lends": 40}},
}}

test_burst_unreachable_fires_where_kueue_grants_less if {
	short := object.union(base, {"facts": {"grants": granted(99)}})
	ds := quota.deny with input as short
	some d in ds
	d.rule == "quota.burst_unreachable"
	d.msg == "c1: tenant a bursts to 100 nvidia.com/gpu but Kueue grants it at most 99 on an idle cluster (guaranteed 50)"
	d.resource == {"cluster": "c1", "tenant": "a", "kind": "DeviceResource", "name": "nvidia.com/gpu", "field": "burst"}
}

test_burst_unreachable_is_silent_when_kueue_grants_the_burst if {
	met := object.union(base, {"facts": {"grants": granted(100)}})
	not "quota.burst_unreachable" in rules(quota.deny) with input as met
}

test_guaranteed_over_capacity_names_the_pool_and_nodes_of_its_fix if {
	# 11 over 90 on the first pool with the device (p2: 8 per node): 11 / (8 x 0.9) -> 2 nodes; p0 has none of it.
	clusters := [{"name": "c1", "pools": [{"name": "p0", "nodes": 2}, {"name": "p2", "nodes": 4}, {"name": "p1", "nodes": 10}]}]
	groups := {"p0": {"units": {"fpga.intel.com/arria10": 2}}, "p2": {"units": {"nvidia.com/gpu": 32}}, "p1": {"units": {"nvidia.com/gpu": 100}}}
	over := object.union(base, {"spec": {"clusters": clusters}, "facts": {"groups": groups, "quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 101}}}}})
	ds := quota.deny with input as over
	some d in ds
	d.rule == "quota.guaranteed_over_capacity"
	d.fix_values == {"excess": 11, "pool": "p2", "nodes": 2}
}

test_guaranteed_over_capacity_without_a_pool_of_the_device_gives_no_nodes if {
	over := object.union(base, {"spec": {"clusters": [{"name": "c1", "pools": []}]}, "facts": {"quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 91}}}}})
	ds := quota.deny with input as over
	some d in ds
	d.rule == "quota.guaranteed_over_capacity"
	d.fix_values == {"excess": 1}
}
