package fleet.edge_test

import data.fleet.edge

group(heartbeat, grace, latency, fingerprints) := {
	"name": "g1",
	"heartbeat_seconds": heartbeat,
	"offline_grace_seconds": grace,
	"latency_ms": latency,
	"fingerprints": fingerprints,
	"disconnect": {"action": "stay", "after_seconds": null},
	"model_cache": [],
	"offline_work": null,
	"disk_gb": null,
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

moving(after) := object.union(group(10, 60, 20, fp), {"disconnect": {"action": "move", "after_seconds": after}})

test_a_move_within_a_few_heartbeats_fires_and_one_after_them_passes if {
	"edge.disconnect_blip" in rules(edge.deny) with input as with_group(moving(29))
	count(edge.deny) == 0 with input as with_group(moving(30))
}

test_a_move_after_the_offline_grace_fires if {
	"edge.disconnect_after_cordon" in rules(edge.deny) with input as with_group(moving(61))
	count(edge.deny) == 0 with input as with_group(moving(60))
}

test_staying_is_judged_by_neither_move_rule if {
	count(edge.deny) == 0 with input as with_group(group(10, 30, 20, fp))
}

classes := [{"name": "batch-low", "workload": "batch"}, {"name": "serve", "workload": "inference"}]

offline(names) := object.union(with_group(object.union(group(10, 30, 20, fp), {"offline_work": {"tenants": ["infer"], "priority_classes": names, "devices": 1}})), {"spec": {"priority_classes": classes}})

test_offline_work_of_a_serving_class_fires if {
	decisions := edge.deny with input as offline(["batch-low", "serve"])
	rules(decisions) == {"edge.offline_priority"}
	{d.msg | some d in decisions} == {"edge: edge group g1 runs serve as offline work, which is not a batch priority class"}
	count(edge.deny) == 0 with input as offline(["batch-low"])
}

cached(source, size, disk) := with_group(object.union(group(10, 30, 20, fp), {"disk_gb": disk, "model_cache": [{"name": "m", "size_gb": size, "source": source, "digest": "sha256:00"}]}))

test_a_plain_http_model_source_fires if {
	"edge.cache_source" in rules(edge.deny) with input as cached("http://models.example/m", 1, 10)
	count(edge.deny) == 0 with input as cached("https://models.example/m", 1, 10)
}

test_a_cache_over_the_disk_fraction_warns if {
	"edge.cache_headroom" in rules(edge.warn) with input as cached("https://models.example/m", 9, 10)
	count(edge.warn) == 0 with input as cached("https://models.example/m", 8, 10)
}
