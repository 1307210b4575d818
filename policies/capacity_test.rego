package fleet.capacity_test

import data.fleet.capacity

node(name, gpus, ready) := {"cluster": "c1", "name": name, "allocatable": {"nvidia.com/gpu": gpus, "cpu": "64"}, "ready": ready}

at(nodes) := {
	"facts": {"quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 16, "burst": 32}}}},
	"live": {"nodes": nodes},
}

test_enough_ready_capacity_has_no_decisions if {
	count(capacity.warn) == 0 with input as at([node("n1", "8", true), node("n2", 8, true)])
}

test_not_ready_nodes_do_not_count if {
	decisions := capacity.warn with input as at([node("n1", "8", true), node("n2", "8", false)])
	some d in decisions
	d.rule == "capacity.live_below_guaranteed"
	d.resource.name == "nvidia.com/gpu"
}

test_without_live_inventory_nothing_is_reported if {
	count(capacity.warn) == 0 with input as {"facts": {"quota": {"c1": {"nvidia.com/gpu": {"guaranteed": 16}}}}, "live": null}
}

# c1 has a pool a tenant names, a spot pool none names, and an edge group none names.
fleet(eligible) := {
	"spec": {
		"clusters": [{"name": "c1", "pools": [
			{"name": "used", "device": {"model": "A100"}},
			{"name": "spot", "device": {"model": "A100"}, "spot": {"price": 1}},
		], "edge_groups": [{"name": "jetsons", "device": {"model": "Orin"}}]}],
		"prices": {"A100": 2, "Orin": 0.5},
		"budget": {"currency": "USD"},
	},
	"facts": {
		"hours_per_month": 730,
		"eligible": eligible,
		"groups": {
			"used": {"kind": "pool", "model": "A100", "physical_devices": 8},
			"spot": {"kind": "pool", "model": "A100", "physical_devices": 16},
			"jetsons": {"kind": "edge_group", "model": "Orin", "physical_devices": 4},
		},
	},
	"live": null,
}

test_a_group_no_tenant_may_use_is_flagged_with_its_idle_cost if {
	ds := capacity.warn with input as fleet({"t": {"c1": ["used"]}})
	unused := {d.resource.name: d | some d in ds; d.rule == "capacity.unused_group"}
	object.keys(unused) == {"spot", "jetsons"}
	unused.spot.resource == {"cluster": "c1", "kind": "Pool", "name": "spot"}
	unused.spot.figures == {"monthly_cost": 11680, "physical_devices": 16} # 16 x 1 (its spot price) x 730
	unused.spot.msg == "c1: pool spot (16 A100) is one no tenant may use: 11680 USD a month idle"
	unused.jetsons.resource.kind == "EdgeGroup"
	unused.jetsons.figures.monthly_cost == 1460 # 4 x 0.5 x 730
	unused.jetsons.fix_values == {"field": "edge_groups", "currency": "USD"}
}

test_every_group_some_tenant_may_use_is_not_flagged if {
	ds := capacity.warn with input as fleet({"t": {"c1": ["used", "spot"]}, "u": {"c1": ["jetsons"]}})
	count({d | some d in ds; d.rule == "capacity.unused_group"}) == 0
}
