package fleet.workloads_test

import data.fleet.workloads

plugin_image := "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"

pod_spec(image, extra) := object.union({"containers": [{"name": "main", "image": image}]}, extra)

daemonset(ns, name, spec) := {"cluster": "c", "kind": "DaemonSet", "namespace": ns, "name": name, "manifest": {"spec": {"template": {"spec": spec}}}}

device_plugin_volume := {"volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]}

base := {
	"spec": {"tenants": [{"name": "t", "clusters": ["c"]}]},
	"facts": {"groups": {"a100": {"cluster": "c", "sharing": "exclusive"}, "h100": {"cluster": "c", "sharing": "mig"}, "far": {"cluster": "other", "sharing": "exclusive"}}},
	"resources": [
		daemonset("kube-system", "nvidia-device-plugin-a100", pod_spec(plugin_image, device_plugin_volume)),
		daemonset("t", "app", pod_spec("busybox", {})),
	],
}

with_resources(extra) := object.union(base, {"resources": array.concat(base.resources, extra)})

msgs(decisions) := {d.msg | some d in decisions; d.rule == "workloads.host_privilege"}

test_system_components_and_plain_pods_pass if {
	count(workloads.deny) == 0 with input as base
}

test_every_host_privilege_is_named if {
	spec := {
		"hostNetwork": true, "hostPID": true, "hostIPC": true,
		"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
		"containers": [{"name": "a", "image": "x", "securityContext": {"privileged": true}}],
		"initContainers": [{"name": "b", "image": "x", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
		"securityContext": {"windowsOptions": {"hostProcess": true}},
	}
	bad := {"cluster": "c", "kind": "Pod", "namespace": "t", "name": "escape", "manifest": {"spec": spec}}
	msgs(workloads.deny) == {sprintf("c: Pod t/escape uses %s, which only a system component listed in workloads.system_components may, with its own images", [use]) |
		some use in ["hostNetwork", "hostPID", "hostIPC", "hostPath /", "privileged", "capability NET_ADMIN", "hostPort 80", "hostProcess"]
	} with input as with_resources([bad])
}

test_pod_templates_of_every_kind_are_read if {
	privileged := pod_spec("x", {"containers": [{"name": "a", "image": "x", "securityContext": {"privileged": true}}]})
	job := {"cluster": "c", "kind": "Job", "namespace": "t", "name": "j", "manifest": {"spec": {"template": {"spec": privileged}}}}
	cron := {"cluster": "c", "kind": "CronJob", "namespace": "t", "name": "cj", "manifest": {"spec": {"jobTemplate": {"spec": {"template": {"spec": privileged}}}}}}
	rc := {"cluster": "c", "kind": "ReplicationController", "namespace": "t", "name": "rc", "manifest": {"spec": {"template": {"spec": privileged}}}}
	count(msgs(workloads.deny)) == 3 with input as with_resources([job, cron, rc])
}

test_a_system_component_may_use_only_what_it_is_granted if {
	more := daemonset("kube-system", "nvidia-device-plugin-a100", pod_spec(plugin_image, object.union(device_plugin_volume, {"hostNetwork": true})))
	msgs(workloads.deny) == {"c: DaemonSet kube-system/nvidia-device-plugin-a100 uses hostNetwork, which only a system component listed in workloads.system_components may, with its own images"} with input as with_resources([more])
}

test_a_system_component_with_another_image_is_not_trusted if {
	swapped := daemonset("kube-system", "nvidia-device-plugin-a100", pod_spec("evil/plugin", device_plugin_volume))
	count(msgs(workloads.deny)) == 1 with input as with_resources([swapped])
}

test_a_component_name_needs_a_group_of_its_cluster_and_sharing if {
	ghost := daemonset("kube-system", "nvidia-device-plugin-ghost", pod_spec(plugin_image, device_plugin_volume))
	far := daemonset("kube-system", "nvidia-device-plugin-far", pod_spec(plugin_image, device_plugin_volume))
	manager := "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.3-ubuntu20.04"
	not_mig := daemonset("kube-system", "nvidia-mig-manager-a100", pod_spec(manager, {"hostPID": true}))
	mig := daemonset("kube-system", "nvidia-mig-manager-h100", pod_spec(manager, {"hostPID": true}))
	count(msgs(workloads.deny)) == 3 with input as with_resources([ghost, far, not_mig, mig])
}

test_a_tenant_namespace_never_hosts_a_system_component if {
	# Even with the name and the images of one, and data that (wrongly) listed the namespace.
	listed := [object.union(c, {"namespace": "t"}) | some c in data.fleet_data.workloads.system_components]
	in_tenant := daemonset("t", "nvidia-device-plugin-a100", pod_spec(plugin_image, device_plugin_volume))
	denied := msgs(workloads.deny) with input as with_resources([in_tenant]) with data.fleet_data.workloads.system_components as listed
	"c: DaemonSet t/nvidia-device-plugin-a100 uses hostPath /var/lib/kubelet/device-plugins, which only a system component listed in workloads.system_components may, with its own images" in denied
}

deployment(ns, name, spec) := {"cluster": "c", "kind": "Deployment", "namespace": ns, "name": name, "manifest": {"spec": {"template": {"spec": spec}}}}

borrowed(decisions) := {d.msg | some d in decisions; d.rule == "workloads.borrowed_service_account"}

test_only_its_own_workload_runs_as_a_system_roles_account if {
	accounts := {"c/fleetops-system/fleetops-reconciler", "c/other/default"}
	own := deployment("fleetops-system", "fleetops-reconciler", {"serviceAccountName": "fleetops-reconciler", "containers": [{"name": "r", "image": "x"}]})
	thief := deployment("fleetops-system", "miner", {"serviceAccountName": "fleetops-reconciler", "containers": [{"name": "m", "image": "x"}]})
	old_field := deployment("fleetops-system", "old", {"serviceAccount": "fleetops-reconciler", "containers": [{"name": "m", "image": "x"}]})
	by_default := deployment("other", "app", {"containers": [{"name": "m", "image": "x"}]})
	borrowed(workloads.deny) == {
		"c: Deployment fleetops-system/miner runs as ServiceAccount fleetops-reconciler, which is bound to a role holding sensitive permissions: only its own workload may",
		"c: Deployment fleetops-system/old runs as ServiceAccount fleetops-reconciler, which is bound to a role holding sensitive permissions: only its own workload may",
		"c: Deployment other/app runs as ServiceAccount default, which is bound to a role holding sensitive permissions: only its own workload may",
	} with input as with_resources([own, thief, old_field, by_default]) with data.fleet.rbac.powerful_accounts as accounts
}

namespace(name, labels) := {"cluster": "c", "kind": "Namespace", "namespace": "", "name": name, "manifest": {"metadata": {"labels": labels}}}

pod_security(decisions) := {d.msg | some d in decisions; d.rule == "workloads.tenant_pod_security"}

test_tenant_namespaces_enforce_baseline_or_restricted if {
	enforced := [namespace("t", {"pod-security.kubernetes.io/enforce": "restricted"}), namespace("kube-system", {})]
	count(pod_security(workloads.deny)) == 0 with input as with_resources(enforced)
	pod_security(workloads.deny) == {"c: tenant namespace t enforces Pod Security level privileged, not one of baseline, restricted"} with input as with_resources([namespace("t", {"pod-security.kubernetes.io/enforce": "privileged"})])
	pod_security(workloads.deny) == {"c: tenant namespace t enforces Pod Security level (none), not one of baseline, restricted"} with input as with_resources([namespace("t", {})])
}

volume(spec) := {"cluster": "c", "kind": "PersistentVolume", "namespace": "", "name": "pv", "manifest": {"spec": spec}}

test_host_folders_through_persistent_volumes_are_denied if {
	ds := workloads.deny with input as with_resources([volume({"hostPath": {"path": "/"}}), volume({"local": {"path": "/mnt/disk"}})])
	{d.msg | some d in ds; d.rule == "workloads.host_volume"} == {
		"c: PersistentVolume pv hands out the node folder / (hostPath) to any claim",
		"c: PersistentVolume pv hands out the node folder /mnt/disk (local) to any claim",
	}
	count(workloads.deny) == 0 with input as with_resources([volume({"nfs": {"server": "x", "path": "/"}})])
}
