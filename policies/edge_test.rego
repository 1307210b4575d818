package fleet.edge_test

import data.fleet.edge

group(heartbeat, grace, latency, fingerprints) := {
	"name": "g1",
	"heartbeat_seconds": heartbeat,
	"offline_grace_seconds": grace,
	"latency_ms": latency,
	"fingerprints": fingerprints,
}

fp := ["sha256:0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"]

with_group(g) := {"spec": {
	"clusters": [{"name": "center", "role": "center", "edge_groups": []}, {"name": "edge", "role": "edge", "edge_groups": [g]}],
	"tenants": [{"name": "infer", "clusters": ["edge"], "workloads": ["inference"]}],
}}

base := with_group(group(10, 30, 20, fp))

rules(decisions) := {d.rule | some d in decisions}

test_clean_input_has_no_decisions if {
	count(edge.deny) == 0 with input as base
}

test_heartbeat_too_close_to_grace_fires if {
	"edge.heartbeat_grace" in rules(edge.deny) with input as with_group(group(10, 29, 20, fp))
}

test_latency_fires if {
	"edge.latency" in rules(edge.deny) with input as with_group(group(10, 30, 21, fp))
}

test_training_on_edge_fires if {
	trainer := object.union(base, {"spec": {"tenants": [{"name": "train", "clusters": ["center", "edge"], "workloads": ["training"]}]}})
	decisions := edge.deny with input as trainer
	some d in decisions
	d.rule == "edge.training_on_edge"
	d.resource.cluster == "edge"
}

test_training_on_center_is_allowed if {
	trainer := object.union(base, {"spec": {"tenants": [{"name": "train", "clusters": ["center"], "workloads": ["training"]}]}})
	count(edge.deny) == 0 with input as trainer
}

test_missing_fingerprints_fires if {
	"edge.missing_fingerprints" in rules(edge.deny) with input as with_group(group(10, 30, 20, []))
}
