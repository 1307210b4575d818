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
	count(change.deny) == 0 with input as {"environment": "prod", "change": null}
	count(change.warn) == 0 with input as {"environment": "prod", "change": null}
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
	decisions := change.warn with input as with_change({"groups_removed": ["center-sh/fpga-arria10"]})
	some d in decisions
	d.rule == "change.group_removed"
	d.resource == {"kind": "Group", "cluster": "center-sh", "name": "fpga-arria10"}
	d.msg == "removes pool or edge group center-sh/fpga-arria10"
}

test_program_change_needs_approvals if {
	decisions := change.deny with input as with_change({"program_files_changed": ["fleetops/policy.py", "modules/reconciler.py"]})
	some d in decisions
	d.rule == "change.program_approvals"
	d.msg == "changes the program that renders the fleet (fleetops/policy.py, modules/reconciler.py): needs 2 approvals, has 0"
	count(change.deny) == 0 with input as with_change({"program_files_changed": ["modules/tenant.py"], "approvals": 2})
	count(change.deny) == 0 with input as with_change({"program_files_changed": []})
}

test_a_long_program_change_is_named_in_short if {
	files := [sprintf("modules/m%d.py", [i]) | some i in numbers.range(1, 7)]
	decisions := change.deny with input as with_change({"program_files_changed": files})
	some d in decisions
	d.msg == "changes the program that renders the fleet (modules/m1.py, modules/m2.py, modules/m3.py, modules/m4.py, modules/m5.py and 2 more): needs 2 approvals, has 0"
}

prices(before, after) := {"price_changes": [{"model": "H100-SXM-80GB", "before": before, "after": after}]}

test_a_price_decrease_needs_approvals if {
	decisions := change.deny with input as with_change(prices(2.5, 2))
	some d in decisions
	d.rule == "change.price_decrease_approvals"
	d.msg == "price of H100-SXM-80GB per device-hour 2.5 -> 2: needs 2 approvals, has 0"
	count(change.deny) == 0 with input as with_change(object.union(prices(2.5, 2), {"approvals": 2}))
}

test_a_price_set_to_zero_needs_approvals if {
	decisions := change.deny with input as with_change(prices(null, 0))
	some d in decisions
	d.msg == "price of H100-SXM-80GB per device-hour unpriced -> 0: needs 2 approvals, has 0"
	"change.price_decrease_approvals" in rules(change.deny) with input as with_change(prices(3, 0))
	tiny := change.deny with input as with_change(prices(0.0000003, 0.0000001))
	{t.msg | some t in tiny} == {"price of H100-SXM-80GB per device-hour 0 -> 0: needs 2 approvals, has 0"}
}

test_a_price_raise_a_new_price_or_a_removed_one_needs_nothing if {
	count(change.deny) == 0 with input as with_change(prices(2, 3))
	count(change.deny) == 0 with input as with_change(prices(null, 3))
	count(change.deny) == 0 with input as with_change(prices(3, null))
}

test_cost_at_base_prices_shows_the_increase_a_price_cut_hides if {
	# 20x the nodes at a 20th of the price: the head's own cost is flat.
	hidden := {"cost_after": 1000, "cost_after_base_prices": 20000}
	decisions := change.deny with input as with_change(hidden)
	some d in decisions
	d.rule == "change.cost_increase_approvals"
	d.msg == "monthly cost rises 1000 -> 20000 at the base revision's prices (more than 20%): needs 2 approvals, has 0"
	count(change.deny) == 0 with input as with_change({"cost_after": 1100, "cost_after_base_prices": 900})
	count(change.deny) == 0 with input as with_change({"cost_after": 1100, "cost_after_base_prices": null})
}

below(entry) := {"below_reference": [object.union({
	"subject": "pool center-bj/h100-train (H100-CHEAP)", "price": 0.1, "reference": 2.9,
	"basis": "the highest price of nvidia.com/gpu in the base revision, for a model the base does not price",
	"resource": {"cluster": "center-bj", "kind": "Pool", "name": "h100-train"},
}, entry)]}

test_a_price_below_its_reference_needs_approvals if {
	decisions := change.deny with input as with_change(below({}))
	{d.rule | some d in decisions} == {"change.price_below_reference_approvals"}
	some d in decisions
	d.msg == "pool center-bj/h100-train (H100-CHEAP) is priced 0.1 per device-hour, below 2.9, the highest price of nvidia.com/gpu in the base revision, for a model the base does not price: needs 2 approvals, has 0"
	d.resource == {"cluster": "center-bj", "kind": "Pool", "name": "h100-train"}
	count(change.deny) == 0 with input as with_change(object.union(below({}), {"approvals": 2}))
	count(change.deny) == 0 with input as with_change({"below_reference": []})
}
