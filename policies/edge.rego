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
