package fleet.change_test

import data.fleet.change

base := {
	"approvals": 0,
	"quota_changes": [],
	"cost_before": 1000,
	"cost_after": 1000,
	"environment_removed": false,
	"policy_files_changed": [],
	"groups_removed": [],
}

with_change(extra) := {"environment": "prod", "change": object.union(base, extra)}

raise(before, after) := {"quota_changes": [{
	"tenant": "vision", "cluster": "center-bj", "resource": "nvidia.com/gpu",
	"before": {"guaranteed": before, "burst": before}, "after": {"guaranteed": after, "burst": after},
}]}

rules(decisions) := {d.rule | some d in decisions}

test_no_change_no_decisions if {
	count(change.deny) == 0 with input as with_change({})
	count(change.warn) == 0 with input as with_change({})
}

test_no_change_input_no_decisions if {
	count(change.deny) == 0 with input as {"environment": "prod"}
}

test_small_quota_raise_allowed if {
	count(change.deny) == 0 with input as with_change(raise(40, 50))
}

test_quota_raise_over_half_needs_approvals if {
	"change.quota_raise_approvals" in rules(change.deny) with input as with_change(raise(10, 16))
}

test_quota_raise_over_device_count_needs_approvals if {
	"change.quota_raise_approvals" in rules(change.deny) with input as with_change(raise(100, 140))
}

test_quota_from_zero_needs_approvals if {
	"change.quota_raise_approvals" in rules(change.deny) with input as with_change(raise(0, 4))
}

test_quota_raise_with_two_approvals_allowed if {
	count(change.deny) == 0 with input as with_change(object.union(raise(10, 40), {"approvals": 2}))
}

test_quota_cut_allowed if {
	count(change.deny) == 0 with input as with_change(raise(40, 8))
}

test_cost_increase_needs_approvals if {
	"change.cost_increase_approvals" in rules(change.deny) with input as with_change({"cost_after": 1300})
	count(change.deny) == 0 with input as with_change({"cost_after": 1100})
}

test_environment_removed_needs_approvals if {
	"change.environment_removed_approvals" in rules(change.deny) with input as with_change({"environment_removed": true})
	count(change.deny) == 0 with input as with_change({"environment_removed": true, "approvals": 3})
}

test_policy_edit_warns if {
	"change.policy_files_changed" in rules(change.warn) with input as with_change({"policy_files_changed": ["policies/quota.rego"]})
}

test_group_removed_warns if {
	"change.group_removed" in rules(change.warn) with input as with_change({"groups_removed": ["center-sh/fpga-arria10"]})
}
