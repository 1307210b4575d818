# METADATA
# title: Workload host privileges
# description: Pods and pod templates run without host privileges (privileged containers, hostPath volumes, the host's network, PID or IPC namespace, host ports, added capabilities, Windows host processes), except the system components fleetops ships, each with only what upstream deploys it with and only its own images; never in a tenant namespace.
package fleet.workloads

cfg := data.fleet_data.workloads

# The pod spec inside each kind that makes pods.
templated := ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"]

# An array, not a set: a set would hash every pod spec.
pods := array.concat(array.concat(
	[{"r": ref(r), "spec": r.manifest.spec} | some r in data.fleet.lib.of_kind("Pod")],
	[{"r": ref(r), "spec": r.manifest.spec.template.spec} | some kind in templated; some r in data.fleet.lib.of_kind(kind)],
), [{"r": ref(r), "spec": r.manifest.spec.jobTemplate.spec.template.spec} | some r in data.fleet.lib.of_kind("CronJob")])

ref(r) := {"cluster": r.cluster, "kind": r.kind, "namespace": r.namespace, "name": r.name}

containers(spec) := [c | some field in ["initContainers", "containers", "ephemeralContainers"]; some c in object.get(spec, field, [])]

# Each host privilege a pod spec uses, as a word data.yaml lists (its containers listed once).
uses(spec) := used if {
	cs := containers(spec)
	used := {u |
		some field in ["hostNetwork", "hostPID", "hostIPC"]
		object.get(spec, field, false) == true
		u := field
	} | {"privileged" |
		some c in cs
		object.get(c, ["securityContext", "privileged"], false) == true
	} | {sprintf("hostPath %s", [object.get(v.hostPath, "path", "")]) |
		some v in object.get(spec, "volumes", [])
		v.hostPath
	} | {sprintf("capability %s", [cap]) |
		some c in cs
		some cap in object.get(c, ["securityContext", "capabilities", "add"], [])
	} | {"hostProcess" |
		some context in array.concat([object.get(spec, "securityContext", {})], [object.get(c, "securityContext", {}) | some c in cs])
		object.get(context, ["windowsOptions", "hostProcess"], false) == true
	} | {sprintf("hostPort %v", [port.hostPort]) |
		some c in cs
		some port in object.get(c, "ports", [])
		port.hostPort
	}
}

# What a system component may use, in the same words.
granted(entry) := {"privileged" | object.get(entry, "privileged", false) == true} |
	{h | some h in object.get(entry, "host_namespaces", [])} |
	{sprintf("hostPath %s", [p]) | some p in object.get(entry, "host_paths", [])} |
	{sprintf("capability %s", [c]) | some c in object.get(entry, "capabilities", [])}

# What a pod may use: what the entry it is a system component of grants, if it runs only that entry's images.
allowed(pod) := {use |
	some entry in cfg.system_components
	data.fleet.lib.system_component(pod.r, entry)
	every c in containers(pod.spec) {
		c.image in entry.images
	}
	some use in granted(entry)
}

name_of(r) := sprintf("%s/%s", [r.namespace, r.name])

# METADATA
# title: No host privileges outside the system components
# description: A Pod, Deployment, DaemonSet, StatefulSet, ReplicaSet, ReplicationController, Job or CronJob that is privileged, mounts a hostPath, uses the host's network, PID or IPC namespace or a host port, adds a capability or runs as a Windows host process is denied, unless it is a system component listed under workloads.system_components (kind, namespace, name) using only what that entry grants, with only its images; a tenant namespace never qualifies.
# custom:
#   severity: critical
#   control_id: FLEET-WORK-01
#   fix: "drop the host privilege; a system component that needs it is listed under workloads.system_components in policies/data.yaml, in its own reviewed PR"
deny contains d if {
	some pod in pods
	used := uses(pod.spec)
	count(used) > 0
	some use in used - allowed(pod)
	r := pod.r
	d := {
		"rule": "workloads.host_privilege",
		"severity": "critical",
		"msg": sprintf("%s: %s %s uses %s, which only a system component listed in workloads.system_components may, with its own images", [r.cluster, r.kind, name_of(r), use]),
		"resource": r,
	}
}

# METADATA
# title: No host folders through PersistentVolumes
# description: A PersistentVolume with a hostPath or local source hands a folder of a node to whichever claim binds it, in any namespace; fleetops renders none, and a rendered one is denied like a hostPath volume in a pod.
# custom:
#   severity: critical
#   control_id: FLEET-WORK-04
#   fix: "remove the PersistentVolume; storage comes from a StorageClass's provisioner"
deny contains d if {
	some r in data.fleet.lib.of_kind("PersistentVolume")
	some source in ["hostPath", "local"]
	r.manifest.spec[source]
	d := {
		"rule": "workloads.host_volume",
		"severity": "critical",
		"msg": sprintf("%s: PersistentVolume %s hands out the node folder %s (%s) to any claim", [r.cluster, r.name, object.get(r.manifest.spec[source], "path", ""), source]),
		"resource": {"cluster": r.cluster, "kind": r.kind, "name": r.name},
	}
}

account(spec) := object.get(spec, "serviceAccountName", object.get(spec, "serviceAccount", "default"))

# METADATA
# title: A system role's ServiceAccount runs only its own workload
# description: A pod that runs as a ServiceAccount bound to a role holding sensitive permissions (the reconciler's, a device plugin's; see rbac.sensitive) is that account's own Deployment or DaemonSet, named like it, as fleetops renders each component; any other pod in its namespace would borrow the role.
# custom:
#   severity: critical
#   control_id: FLEET-WORK-02
#   fix: "run the workload as a ServiceAccount of its own, bound to a role with only what it needs"
deny contains d if {
	some pod in pods
	name := account(pod.spec)
	sprintf("%s/%s/%s", [pod.r.cluster, pod.r.namespace, name]) in data.fleet.rbac.powerful_accounts
	not own_workload(pod.r, name)
	r := pod.r
	d := {
		"rule": "workloads.borrowed_service_account",
		"severity": "critical",
		"msg": sprintf("%s: %s %s runs as ServiceAccount %s, which is bound to a role holding sensitive permissions: only its own workload may", [r.cluster, r.kind, name_of(r), name]),
		"resource": r,
	}
}

own_workload(r, name) if {
	r.kind in {"Deployment", "DaemonSet"}
	r.name == name
}

pod_security_label := "pod-security.kubernetes.io/enforce"

# METADATA
# title: Tenant namespaces enforce a Pod Security level
# description: Every tenant namespace carries pod-security.kubernetes.io/enforce at a level of workloads.tenant_pod_security (baseline or restricted), so that the pods tenants create themselves, which no policy here sees, cannot be privileged either; a program that drops or lowers the label would let them.
# custom:
#   severity: critical
#   control_id: FLEET-WORK-03
#   fix: "keep the pod-security.kubernetes.io/enforce label modules/tenant.py sets on the namespace"
deny contains d if {
	some r in data.fleet.lib.of_kind("Namespace")
	sprintf("%s/%s", [r.cluster, r.name]) in data.fleet.lib.tenant_namespaces
	level := object.get(r.manifest, ["metadata", "labels", pod_security_label], "(none)")
	not level in cfg.tenant_pod_security
	d := {
		"rule": "workloads.tenant_pod_security",
		"severity": "critical",
		"msg": sprintf("%s: tenant namespace %s enforces Pod Security level %s, not one of %s", [r.cluster, r.name, level, concat(", ", cfg.tenant_pod_security)]),
		"resource": {"cluster": r.cluster, "tenant": r.name, "kind": "Namespace", "name": r.name},
	}
}
