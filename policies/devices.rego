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
	some r in data.fleet.lib.of_kind("DaemonSet")
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
#   fix: "use a device resource with a known plugin (nvidia.com/*, huawei.com/Ascend*, fpga.intel.com/*)"
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
#   fix: "set sharing.replicas within the range of policies/data.yaml devices.time_slicing"
deny contains d if {
	some r in data.fleet.lib.of_kind("ConfigMap")
	r.namespace == "kube-system"
	r.manifest.metadata.labels["app.kubernetes.io/name"] == "nvidia-device-plugin"
	some text in r.manifest.data # one config file per key, selected by the node label nvidia.com/device-plugin.config
	config := yaml.unmarshal(text)
	some shared in config.sharing.timeSlicing.resources
	shared.replicas > cfg.max_time_slicing_replicas
	d := {
		"rule": "devices.time_slicing_replicas",
		"severity": "high",
		"msg": sprintf("%s: ConfigMap %s time-slices %s into %d replicas, at most %d allowed", [r.cluster, r.name, shared.name, shared.replicas, cfg.max_time_slicing_replicas]),
		"resource": {"cluster": r.cluster, "kind": "ConfigMap", "namespace": r.namespace, "name": r.name},
	}
}

# METADATA
# title: Strict tenants avoid time-sliced GPUs
# description: A tenant with isolation strict must not be placed on a time-sliced pool, where other tenants' processes share its GPU memory.
# custom:
#   severity: high
#   control_id: FLEET-DEV-04
#   fix: "give strict-isolation tenants pools without time-slicing (tenant pools), or make the tenant shared"
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
