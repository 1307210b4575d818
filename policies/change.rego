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
		"resource": {"cluster": q.cluster, "tenant": q.tenant, "kind": "DeviceResource", "name": q.resource, "field": field},
	}
}

# The head's cost as judged: the larger of its own prices and the base revision's reference for each
# group (cost_after_base_prices; fleetops.spec.Reference), so that a price cut, a renamed model or a new
# spot pool in the same change cannot hide the capacity it adds.
head_costs contains change.cost_after

head_costs contains change.cost_after_base_prices if is_number(change.cost_after_base_prices)

judged_cost := max(head_costs)

default cost_note := ""

cost_note := " at the base revision's prices" if judged_cost > change.cost_after

# METADATA
# title: Large cost increase needs approvals
# description: A projected monthly cost increase above the configured share of the base cost needs the configured number of approvals. The head is costed with the larger of its own prices and the base revision's (cost_after_base_prices).
# custom:
#   severity: medium
#   control_id: FLEET-CHANGE-02
#   fix: "get the required approvals, or add capacity in smaller steps"
#   gate: approval
#   location: {causes: [clusters, prices]} # a cost increase is about the edit that costs
deny contains d if {
	short
	change.cost_before > 0
	judged_cost - change.cost_before > change.cost_before * cfg.max_cost_increase_fraction
	d := {
		"rule": "change.cost_increase_approvals",
		"severity": "medium",
		"msg": sprintf("monthly cost rises %d -> %d%s (more than %d%%): needs %d approvals, has %d", [round(change.cost_before), round(judged_cost), cost_note, round(cfg.max_cost_increase_fraction * 100), cfg.required_approvals, approvals]),
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
# title: Program change needs approvals
# description: A change to the program, everything a deploy runs or reads as code or data (PROGRAM in fleetops/revisions.py, the render's folders, the packaging, the policy pack, the image and the CI; program_files_changed), can change every object, or what runs with the deploy's credentials, whatever the environment file says; it needs the configured number of code owners' approvals.
# custom:
#   severity: high
#   control_id: FLEET-CHANGE-06
#   fix: "get the code owners' approvals, or keep the program change in its own reviewed PR"
#   gate: approval
deny contains d if {
	short
	files := change.program_files_changed
	count(files) > 0
	d := {
		"rule": "change.program_approvals",
		"severity": "high",
		"msg": sprintf("changes the program that renders the fleet (%s): needs %d approvals, has %d", [listed(files), cfg.required_approvals, approvals]),
		"resource": {"kind": "Program", "name": input.environment},
	}
}

# At most five names, then how many more: a large refactor must not flood the plan comment.
listed(files) := concat(", ", files) if count(files) <= 5

listed(files) := sprintf("%s and %d more", [concat(", ", array.slice(files, 0, 5)), count(files) - 5]) if count(files) > 5

cheaper(p) if {
	is_number(p.before)
	is_number(p.after)
	p.after < p.before
}

cheaper(p) if p.after == 0

# Rounded to 4 decimals first: %v writes a tiny float differently in OPA (1e-07) and regorus
# (0.0000001), and %.4f an integer.
price(value) := sprintf("%v", [round(value * 10000) / 10000]) if is_number(value)

price(null) := "unpriced"

# METADATA
# title: Price decrease needs approvals
# description: Lowering a device model's price per device-hour, or setting one to 0, lowers the projected cost of every node of that model and with it what the budget and cost rules see; it needs the configured number of approvals.
# custom:
#   severity: high
#   control_id: FLEET-CHANGE-07
#   fix: "get the required approvals, or change prices in their own reviewed PR"
#   gate: approval
deny contains d if {
	short
	some p in change.price_changes
	cheaper(p)
	d := {
		"rule": "change.price_decrease_approvals",
		"severity": "high",
		"msg": sprintf("price of %s per device-hour %s -> %s: needs %d approvals, has %d", [p.model, price(p.before), price(p.after), cfg.required_approvals, approvals]),
		"resource": {"kind": "Price", "name": p.model},
	}
}

# METADATA
# title: Price below its reference needs approvals
# description: A pool or edge group priced per device-hour below the reference its base revision gives it (a device model renamed to a cheaper one, a new model below the highest price of its device resource, a new spot pool below its model's price, a spot price cut), or a model priced for the first time below every price the base knows (below_reference). The budget and cost rules judge the head at the reference; the lower price itself needs the configured number of approvals.
# custom:
#   severity: high
#   control_id: FLEET-CHANGE-08
#   fix: "get the required approvals, or price the device in its own reviewed PR"
#   gate: approval
deny contains d if {
	short
	some p in change.below_reference
	d := {
		"rule": "change.price_below_reference_approvals",
		"severity": "high",
		"msg": sprintf("%s is priced %s per device-hour, below %s, %s: needs %d approvals, has %d", [p.subject, price(p.price), price(p.reference), p.basis, cfg.required_approvals, approvals]),
		"resource": p.resource,
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
	[cluster, name] := split(group, "/")
	d := {
		"rule": "change.group_removed",
		"severity": "low",
		"msg": sprintf("removes pool or edge group %s", [group]),
		"resource": {"kind": "Group", "cluster": cluster, "name": name},
	}
}
