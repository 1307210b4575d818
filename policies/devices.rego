# METADATA
# title: Device plugins and sharing
# description: Every pool's devices are advertised by a device plugin pinned to it, and GPU sharing (time-slicing, MIG) stays inside safe, valid settings.
package fleet.devices

cfg := data.fleet_data.devices

group_labels := {"fleetops.io/pool", "fleetops.io/edge-group"}

# Decisions name fleet concepts in the same CamelCase as Kubernetes kinds.
concept := {"pool": "Pool", "edge_group": "EdgeGroup"}

# "cluster/group" for every kube-system DaemonSet pinned to a pool or edge group by nodeSelector.
targeted contains sprintf("%s/%s", [r.cluster, value]) if {
	some r in input.resources
	r.kind == "DaemonSet"
	r.namespace == "kube-system"
	some key, value in r.manifest.spec.template.spec.nodeSelector
	key in group_labels
}

# METADATA
# title: Every pool has its device plugin
# description: Each pool and edge group has a device plugin DaemonSet in kube-system whose nodeSelector targets it; otherwise its devices are never advertised and its quota is fiction.
# custom:
#   severity: high
#   control_id: FLEET-DEV-01
deny contains d if {
	some name, group in input.facts.groups
	not sprintf("%s/%s", [group.cluster, name]) in targeted
	d := {
		"rule": "devices.missing_plugin",
		"severity": "high",
		"msg": sprintf("%s: no device plugin DaemonSet targets %s %s (%s)", [group.cluster, group.kind, name, group.resource]),
		"resource": {"cluster": group.cluster, "kind": concept[group.kind], "name": name},
	}
}

# METADATA
# title: Time-slicing replicas are bounded
# description: A time-sliced GPU shares memory and compute between replicas without isolation; more than the configured replicas per GPU starves every sharer.
# custom:
#   severity: high
#   control_id: FLEET-DEV-02
deny contains d if {
	some r in input.resources
	r.kind == "ConfigMap"
	r.namespace == "kube-system"
	config := yaml.unmarshal(r.manifest.data["config.yaml"])
	some shared in config.sharing.timeSlicing.resources
	shared.replicas > cfg.max_time_slicing_replicas
	d := {
		"rule": "devices.time_slicing_replicas",
		"severity": "high",
		"msg": sprintf("%s: ConfigMap %s time-slices %s into %d replicas, at most %d allowed", [r.cluster, r.name, shared.name, shared.replicas, cfg.max_time_slicing_replicas]),
		"resource": {"cluster": r.cluster, "kind": "ConfigMap", "namespace": r.namespace, "name": r.name},
	}
}

mig_pools contains [cluster.name, pool] if {
	some cluster in input.spec.clusters
	some pool in cluster.pools
	pool.sharing.mode == "mig"
}

# METADATA
# title: MIG profiles are valid for the GPU model
# description: Each MIG profile of a pool exists on its GPU model family; an unknown model or profile makes mig-manager fail and the pool advertise nothing.
# custom:
#   severity: high
#   control_id: FLEET-DEV-03
deny contains d if {
	some [cluster, pool] in mig_pools
	not cfg.mig_models[pool.device.model]
	d := {
		"rule": "devices.mig_profile_invalid",
		"severity": "high",
		"msg": sprintf("%s: pool %s uses MIG on %s, which has no MIG profile table", [cluster, pool.name, pool.device.model]),
		"resource": {"cluster": cluster, "kind": "Pool", "name": pool.name},
	}
}

deny contains d if {
	some [cluster, pool] in mig_pools
	family := cfg.mig_models[pool.device.model]
	some profile, _ in pool.sharing.mig.profiles
	not profile in cfg.mig_profiles[family]
	d := {
		"rule": "devices.mig_profile_invalid",
		"severity": "high",
		"msg": sprintf("%s: pool %s: MIG profile %s does not exist on %s (valid: %s)", [cluster, pool.name, profile, family, concat(", ", cfg.mig_profiles[family])]),
		"resource": {"cluster": cluster, "kind": "Pool", "name": pool.name},
	}
}

# METADATA
# title: Strict tenants avoid time-sliced GPUs
# description: A tenant with isolation strict must not be placed on a time-sliced pool, where other tenants' processes share its GPU memory.
# custom:
#   severity: high
#   control_id: FLEET-DEV-04
deny contains d if {
	some tenant in input.spec.tenants
	tenant.isolation == "strict"
	some cluster, groups in input.facts.eligible[tenant.name]
	some name in groups
	input.facts.groups[name].sharing == "time-slicing"
	d := {
		"rule": "devices.strict_on_time_slicing",
		"severity": "high",
		"msg": sprintf("%s: tenant %s has isolation strict but may land on time-sliced pool %s", [cluster, tenant.name, name]),
		"resource": {"cluster": cluster, "tenant": tenant.name, "kind": "Pool", "name": name},
	}
}
