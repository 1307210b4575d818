# METADATA
# title: Edge node groups
# description: Edge groups detect outages quickly but tolerate a lost heartbeat, keep latency low, run no training, and admit only known devices.
package fleet.edge

cfg := data.fleet_data.edge

edge_groups contains [cluster.name, group] if {
	some cluster in input.spec.clusters
	some group in cluster.edge_groups
}

# METADATA
# title: Heartbeat well inside the offline grace
# description: The offline grace period holds at least the configured number of heartbeat intervals, so one late heartbeat never marks an edge node offline.
# custom:
#   severity: medium
#   control_id: FLEET-EDGE-01
#   fix: "make offline_grace_seconds at least the data.yaml multiple of heartbeat_seconds"
deny contains d if {
	some [cluster, group] in edge_groups
	group.heartbeat_seconds * cfg.min_heartbeats_per_grace > group.offline_grace_seconds
	d := {
		"rule": "edge.heartbeat_grace",
		"severity": "medium",
		"msg": sprintf("%s: edge group %s heartbeats every %ds but its offline grace is %ds, want at least %d heartbeats in it", [cluster, group.name, group.heartbeat_seconds, group.offline_grace_seconds, cfg.min_heartbeats_per_grace]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

# METADATA
# title: Edge latency bound
# description: The declared latency from an edge group to its center is at most the configured maximum (20 ms); slower sites need another design, not this gate.
# custom:
#   severity: medium
#   control_id: FLEET-EDGE-02
#   fix: "lower latency_ms to the data.yaml edge limit, or serve the workload from a center cluster"
#   location: {field: latency_ms}
deny contains d if {
	some [cluster, group] in edge_groups
	group.latency_ms > cfg.max_latency_ms
	d := {
		"rule": "edge.latency",
		"severity": "medium",
		"msg": sprintf("%s: edge group %s declares %d ms latency, at most %d ms allowed", [cluster, group.name, group.latency_ms, cfg.max_latency_ms]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

edge_clusters contains c.name if {
	some c in input.spec.clusters
	c.role == "edge"
}

# METADATA
# title: No training on edge
# description: Edge devices are low-power inference targets; a tenant that runs training workloads is not placed on an edge cluster.
# custom:
#   severity: high
#   control_id: FLEET-EDGE-03
#   fix: "remove training from the tenant's workloads on edge clusters"
deny contains d if {
	some tenant in input.spec.tenants
	"training" in tenant.workloads
	some cluster in tenant.clusters
	cluster in edge_clusters
	d := {
		"rule": "edge.training_on_edge",
		"severity": "high",
		"msg": sprintf("%s: tenant %s runs training workloads on an edge cluster", [cluster, tenant.name]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "Namespace", "name": tenant.name},
	}
}

# METADATA
# title: Edge devices are allow-listed
# description: Every edge group lists the fingerprints of the devices allowed to join; without a list any device that reaches the site joins the fleet.
# custom:
#   severity: high
#   control_id: FLEET-EDGE-04
#   fix: "list the devices' key fingerprints (sha256:...) under the edge group's fingerprints"
#   location: {field: fingerprints}
deny contains d if {
	some [cluster, group] in edge_groups
	count(object.get(group, "fingerprints", [])) == 0
	d := {
		"rule": "edge.missing_fingerprints",
		"severity": "high",
		"msg": sprintf("%s: edge group %s has no device fingerprint allow list", [cluster, group.name]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

# METADATA
# title: A blip does not move work
# description: A group that moves its pods on disconnect waits at least the configured number of heartbeats after its node goes unreachable; a shorter wait moves work off a node that only missed a heartbeat or two.
# custom:
#   severity: medium
#   control_id: FLEET-EDGE-05
#   fix: "raise disconnect.after_seconds to at least the data.yaml min_heartbeats_before_move times heartbeat_seconds"
deny contains d if {
	some [cluster, group] in edge_groups
	group.disconnect.action == "move"
	want := group.heartbeat_seconds * cfg.min_heartbeats_before_move
	group.disconnect.after_seconds < want
	d := {
		"rule": "edge.disconnect_blip",
		"severity": "medium",
		"msg": sprintf("%s: edge group %s moves its pods %ds after a node goes unreachable, under %d heartbeats of %ds: a blip would move work; wait at least %ds", [cluster, group.name, group.disconnect.after_seconds, cfg.min_heartbeats_before_move, group.heartbeat_seconds, want]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

# METADATA
# title: Work moves before the node is given up
# description: A group that moves its pods on disconnect moves them within its offline grace; fleetops cordons a node after the grace and counts it out of capacity, and work still bound to it then neither runs for the fleet nor is placed elsewhere.
# custom:
#   severity: medium
#   control_id: FLEET-EDGE-06
#   fix: "lower disconnect.after_seconds to at most offline_grace_seconds, or raise the grace"
deny contains d if {
	some [cluster, group] in edge_groups
	group.disconnect.action == "move"
	group.disconnect.after_seconds > group.offline_grace_seconds
	d := {
		"rule": "edge.disconnect_after_cordon",
		"severity": "medium",
		"msg": sprintf("%s: edge group %s moves its pods %ds after a node goes unreachable, later than its offline grace of %ds, when fleetops has already cordoned the node", [cluster, group.name, group.disconnect.after_seconds, group.offline_grace_seconds]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

batch_classes contains pc.name if {
	some pc in input.spec.priority_classes
	pc.workload == "batch"
}

# METADATA
# title: Offline work is low-priority batch
# description: The work an edge group runs while disconnected (offline_work) carries batch priority classes only; serving or training classes there would hold the group's devices with nobody to preempt them until the uplink returns.
# custom:
#   severity: high
#   control_id: FLEET-EDGE-07
#   fix: "list only priority classes with workload batch under the group's offline_work.priority_classes"
deny contains d if {
	some [cluster, group] in edge_groups
	some name in object.get(group, ["offline_work", "priority_classes"], [])
	not name in batch_classes
	d := {
		"rule": "edge.offline_priority",
		"severity": "high",
		"msg": sprintf("%s: edge group %s runs %s as offline work, which is not a batch priority class", [cluster, group.name, name]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

# METADATA
# title: Cached models come over TLS
# description: Every model an edge group caches is fetched from an https source; the digest check catches a changed file, but a plaintext fetch shows the site's traffic and what it runs to anyone on the path.
# custom:
#   severity: high
#   control_id: FLEET-EDGE-08
#   fix: "serve the model from an https URL"
deny contains d if {
	some [cluster, group] in edge_groups
	some model in object.get(group, "model_cache", [])
	not startswith(model.source, "https://")
	d := {
		"rule": "edge.cache_source",
		"severity": "high",
		"msg": sprintf("%s: edge group %s fetches model %s over plain http", [cluster, group.name, model.name]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}

# METADATA
# title: Model cache leaves disk headroom
# description: The models an edge group caches take at most the configured fraction of each node's declared disk, leaving room for images, logs and the workloads' scratch.
# custom:
#   severity: low
#   control_id: FLEET-EDGE-09
#   fix: "cache fewer or smaller models, or declare nodes with a larger disk_gb"
warn contains d if {
	some [cluster, group] in edge_groups
	count(object.get(group, "model_cache", [])) > 0
	needed := sum([m.size_gb | some m in group.model_cache])
	needed > group.disk_gb * cfg.max_cache_disk_fraction
	d := {
		"rule": "edge.cache_headroom",
		"severity": "low",
		"msg": sprintf("%s: edge group %s caches %d GB of models on nodes of %d GB disk, more than %v of it", [cluster, group.name, needed, group.disk_gb, cfg.max_cache_disk_fraction]),
		"resource": {"cluster": cluster, "kind": "EdgeGroup", "name": group.name},
	}
}
