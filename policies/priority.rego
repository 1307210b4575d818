# METADATA
# title: Priority classes
# description: Priority values stay inside their workload class's band, defaults and preemption are safe, and tenants use only classes of their workloads.
package fleet.priority

bands := data.fleet_data.priority.bands

priority_classes := data.fleet.lib.of_kind("PriorityClass")

workload_of(r) := r.manifest.metadata.labels["fleetops.io/workload"]

outside(value, band) if value < band.min

outside(value, band) if value > band.max

# METADATA
# title: Priority value inside its workload band
# description: A PriorityClass value lies inside the band configured for its workload class (inference above training above batch), so classes never interleave.
# custom:
#   severity: high
#   control_id: FLEET-PRIO-01
#   fix: "set the value inside its workload's band in policies/data.yaml priority.bands"
#   location: {field: value}
deny contains d if {
	some r in priority_classes
	band := bands[workload_of(r)]
	outside(r.manifest.value, band)
	d := {
		"rule": "priority.value_outside_band",
		"severity": "high",
		"msg": sprintf("%s: PriorityClass %s value %d is outside the %s band [%d, %d]", [r.cluster, r.name, r.manifest.value, workload_of(r), band.min, band.max]),
		"resource": {"cluster": r.cluster, "kind": "PriorityClass", "name": r.name},
	}
}

# METADATA
# title: At most one global default priority
# description: Kubernetes takes an arbitrary one when several PriorityClasses are globalDefault; a cluster has at most one.
# custom:
#   severity: high
#   control_id: FLEET-PRIO-02
#   fix: "keep global_default on one priority class"
#   location: {field: global_default}
deny contains d if {
	some cluster, _ in input.facts.capacity
	defaults := sort([r.name | some r in priority_classes; r.cluster == cluster; r.manifest.globalDefault == true])
	count(defaults) > 1
	d := {
		"rule": "priority.multiple_global_defaults",
		"severity": "high",
		"msg": sprintf("%s: %d PriorityClasses are globalDefault: %s", [cluster, count(defaults), concat(", ", defaults)]),
		"resource": {"cluster": cluster, "kind": "PriorityClass", "name": defaults[1]},
	}
}

# METADATA
# title: Batch classes never preempt
# description: Batch work waits for capacity; a batch PriorityClass has preemptionPolicy Never so it cannot evict running work.
# custom:
#   severity: medium
#   control_id: FLEET-PRIO-03
#   fix: "set preemption: Never on batch priority classes"
#   location: {field: preemption}
deny contains d if {
	some r in priority_classes
	workload_of(r) == "batch"
	r.manifest.preemptionPolicy != "Never"
	d := {
		"rule": "priority.batch_preempts",
		"severity": "medium",
		"msg": sprintf("%s: batch PriorityClass %s has preemptionPolicy %s, want Never", [r.cluster, r.name, r.manifest.preemptionPolicy]),
		"resource": {"cluster": r.cluster, "kind": "PriorityClass", "name": r.name},
	}
}

class_workload := {pc.name: pc.workload | some pc in input.spec.priority_classes}

# METADATA
# title: Tenants use classes of their workloads
# description: A tenant may use a priority class only if the class's workload is one of the tenant's declared workloads.
# custom:
#   severity: medium
#   control_id: FLEET-PRIO-04
#   fix: "use a priority class declared in priority_classes and allowed for the tenant's workloads"
deny contains d if {
	some tenant in input.spec.tenants
	some name in tenant.priority_classes
	workload := class_workload[name]
	not workload in tenant.workloads
	d := {
		"rule": "priority.class_not_allowed",
		"severity": "medium",
		"msg": sprintf("tenant %s uses %s priority class %s but runs only %s", [tenant.name, workload, name, concat(", ", tenant.workloads)]),
		"resource": {"tenant": tenant.name, "kind": "PriorityClass", "name": name},
	}
}
