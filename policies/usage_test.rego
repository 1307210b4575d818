package fleet.usage_test

import data.fleet.usage

tenant(status, utilisation, before, after) := {
	"tenant": "vision", "cluster": "center-bj", "resource": "nvidia.com/gpu", "guaranteed": before, "guaranteed_after": after,
	"guaranteed_devices": before, "status": status, "reason": "no --prometheus given", "utilisation": utilisation,
}

pool(status, utilisation, before, after) := {
	"cluster": "center-bj", "pool": "h100-train", "resource": "nvidia.com/gpu", "physical_devices": before,
	"physical_devices_after": after, "status": status, "reason": "Prometheus did not answer: timed out", "utilisation": utilisation,
}

with_usage(tenants, pools, approvals) := {
	"environment": "prod",
	"change": {"approvals": approvals},
	"usage": {"status": "measured", "window": "30d", "window_hours": 720, "tenants": tenants, "pools": pools},
}

rules(decisions) := {d.rule | some d in decisions}

test_no_usage_input_no_decisions if {
	count(usage.deny) == 0 with input as {"environment": "prod", "usage": null}
	count(usage.warn) == 0 with input as {"environment": "prod", "usage": null}
}

test_raising_an_underused_guarantee_needs_approvals if {
	decisions := usage.deny with input as with_usage([tenant("measured", 0.31, 96, 140)], [], 0)
	rules(decisions) == {"usage.guarantee_raise_underused"}
	some d in decisions
	contains(d.msg, "used 31% of 96 over 30d")
}

test_raising_a_well_used_guarantee_is_not_gated if {
	count(usage.deny) == 0 with input as with_usage([tenant("measured", 0.5, 96, 140)], [], 0)
}

test_lowering_an_underused_guarantee_is_not_gated if {
	count(usage.deny) == 0 with input as with_usage([tenant("measured", 0.1, 96, 48)], [], 0)
}

test_approvals_resolve_an_underused_raise if {
	count(usage.deny) == 0 with input as with_usage([tenant("measured", 0.1, 96, 140)], [], 2)
}

test_a_guarantee_without_a_measure_of_use_is_not_gated if {
	count(usage.deny) == 0 with input as with_usage([tenant("measured", null, 0, 8)], [], 0)
}

test_growing_an_idle_pool_needs_approvals if {
	rules(usage.deny) == {"usage.pool_growth_idle"} with input as with_usage([], [pool("measured", 0.44, 128, 160)], 0)
}

test_growing_a_busy_pool_is_not_gated if {
	count(usage.deny) == 0 with input as with_usage([], [pool("measured", 0.6, 128, 160)], 0)
}

test_shrinking_an_idle_pool_is_not_gated if {
	count(usage.deny) == 0 with input as with_usage([], [pool("measured", 0.1, 128, 96)], 0)
}

test_unknown_use_is_never_zero_use if {
	input_doc := with_usage([tenant("unavailable", null, 96, 140)], [pool("unavailable", null, 128, 160)], 0)
	count(usage.deny) == 0 with input as input_doc
	warned := usage.warn with input as input_doc
	rules(warned) == {"usage.unmeasured"}
	count(warned) == 2
	some d in warned
	contains(d.msg, "utilisation unknown: no --prometheus given")
}

test_unknown_use_of_a_cut_is_not_reported if {
	count(usage.warn) == 0 with input as with_usage([tenant("unavailable", null, 96, 48)], [pool("unavailable", null, 128, 96)], 0)
}
