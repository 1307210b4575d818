# METADATA
# title: Change review
# description: Rules over the change under review (base vs head, from fleetops plan), not over the fleet itself. Large quota raises, large cost increases and removing an environment need more approvals; editing the policies is reported so that their owners review it.
package fleet.change

cfg := data.fleet_data.change

# input.change is null outside a plan: every rule below is then undefined and nothing fires.
change := input.change

default approvals := 0

approvals := change.approvals

short := approvals < cfg.required_approvals

raised(before, after) := after - before if after > before

big_raise(before, after) if raised(before, after) > cfg.max_quota_increase_devices

big_raise(before, after) if {
	before > 0
	raised(before, after) > before * cfg.max_quota_increase_fraction
}

big_raise(before, after) if {
	before == 0
	after > 0
}

# METADATA
# title: Large quota raise needs approvals
# description: Raising a tenant's guaranteed or burst quota by more than the configured share or device count needs the configured number of approvals.
# custom:
#   severity: high
#   control_id: FLEET-CHANGE-01
#   fix: "get the required approvals, or raise the quota in smaller steps"
#   gate: approval
deny contains d if {
	short
	some q in change.quota_changes
	some field in ["guaranteed", "burst"]
	big_raise(q.before[field], q.after[field])
	d := {
		"rule": "change.quota_raise_approvals",
		"severity": "high",
		"msg": sprintf("%s: tenant %s %s %s raised %d -> %d needs %d approvals, has %d", [q.cluster, q.tenant, q.resource, field, q.before[field], q.after[field], cfg.required_approvals, approvals]),
		"resource": {"cluster": q.cluster, "tenant": q.tenant, "kind": "DeviceResource", "name": q.resource},
	}
}

# METADATA
# title: Large cost increase needs approvals
# description: A projected monthly cost increase above the configured share of the base cost needs the configured number of approvals.
# custom:
#   severity: medium
#   control_id: FLEET-CHANGE-02
#   fix: "get the required approvals, or add capacity in smaller steps"
#   gate: approval
deny contains d if {
	short
	change.cost_before > 0
	change.cost_after - change.cost_before > change.cost_before * cfg.max_cost_increase_fraction
	d := {
		"rule": "change.cost_increase_approvals",
		"severity": "medium",
		"msg": sprintf("monthly cost rises %d -> %d (more than %d%%): needs %d approvals, has %d", [round(change.cost_before), round(change.cost_after), round(cfg.max_cost_increase_fraction * 100), cfg.required_approvals, approvals]),
		"resource": {"kind": "Budget", "name": input.environment},
	}
}

# METADATA
# title: Removing an environment needs approvals
# description: Deleting an environment file removes every object of it from its clusters; it needs the configured number of approvals.
# custom:
#   severity: high
#   control_id: FLEET-CHANGE-03
#   fix: "get the required approvals"
#   gate: approval
deny contains d if {
	short
	change.environment_removed
	d := {
		"rule": "change.environment_removed_approvals",
		"severity": "high",
		"msg": sprintf("the change deletes environment %s: needs %d approvals, has %d", [input.environment, cfg.required_approvals, approvals]),
		"resource": {"kind": "Environment", "name": input.environment},
	}
}

# METADATA
# title: Policy change needs the policy owners
# description: A change that edits policies/ is judged by the base revision's policies; the edit itself takes effect after merge and needs the policy owners' review (policies/owners.yaml).
# custom:
#   severity: medium
#   control_id: FLEET-CHANGE-04
warn contains d if {
	count(change.policy_files_changed) > 0
	d := {
		"rule": "change.policy_files_changed",
		"severity": "medium",
		"msg": sprintf("edits %s: needs review by the policy owners", [concat(", ", change.policy_files_changed)]),
		"resource": {"kind": "Policies", "name": "policies/"},
	}
}

# METADATA
# title: Pool or edge group removed
# description: Removing a pool or edge group takes its nodes out of every tenant's flavors; reviewers should see it named.
# custom:
#   severity: low
#   control_id: FLEET-CHANGE-05
warn contains d if {
	some group in change.groups_removed
	d := {
		"rule": "change.group_removed",
		"severity": "low",
		"msg": sprintf("removes pool or edge group %s", [group]),
		"resource": {"kind": "Group", "name": group},
	}
}
