package fleet.priority_test

import data.fleet.priority

pc(name, workload, value, preemption, global_default) := {
	"cluster": "c1",
	"kind": "PriorityClass",
	"name": name,
	"manifest": {
		"metadata": {"labels": {"fleetops.io/workload": workload}},
		"value": value,
		"preemptionPolicy": preemption,
		"globalDefault": global_default,
	},
}

classes := [
	pc("inference-critical", "inference", 100000, "PreemptLowerPriority", false),
	pc("training-standard", "training", 5000, "PreemptLowerPriority", false),
	pc("batch-low", "batch", 100, "Never", true),
]

base := {
	"facts": {"capacity": {"c1": {}}},
	"resources": classes,
	"spec": {
		"priority_classes": [
			{"name": "inference-critical", "workload": "inference"},
			{"name": "training-standard", "workload": "training"},
			{"name": "batch-low", "workload": "batch"},
		],
		"tenants": [{"name": "t", "workloads": ["training", "batch"], "priority_classes": ["training-standard", "batch-low"]}],
	},
}

rules(decisions) := {d.rule | some d in decisions}

with_classes(extra) := object.union(base, {"resources": array.concat(classes, extra)})

test_clean_input_has_no_decisions if {
	count(priority.deny) == 0 with input as base
}

test_value_above_band_fires if {
	"priority.value_outside_band" in rules(priority.deny) with input as with_classes([pc("training-huge", "training", 60000, "PreemptLowerPriority", false)])
}

test_value_below_band_fires if {
	"priority.value_outside_band" in rules(priority.deny) with input as with_classes([pc("inference-low", "inference", 10, "PreemptLowerPriority", false)])
}

test_multiple_global_defaults_fires if {
	decisions := priority.deny with input as with_classes([pc("training-default", "training", 2000, "PreemptLowerPriority", true)])
	some d in decisions
	d.rule == "priority.multiple_global_defaults"
	d.resource.cluster == "c1"
}

test_batch_preempting_fires if {
	"priority.batch_preempts" in rules(priority.deny) with input as with_classes([pc("batch-eager", "batch", 200, "PreemptLowerPriority", false)])
}

test_class_not_allowed_fires if {
	greedy := object.union(base, {"spec": {"tenants": [{"name": "t", "workloads": ["batch"], "priority_classes": ["inference-critical"]}]}})
	"priority.class_not_allowed" in rules(priority.deny) with input as greedy
}
