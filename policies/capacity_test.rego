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
