package fleet.work_test

import data.fleet.work

tenant(name, before, after) := {
	"tenant": name, "jobs": 4, "wait_p50_hours": 0, "wait_p50_hours_after": 0, "wait_p99_hours": before, "wait_p99_hours_after": after,
	"device_hours": 48, "device_hours_after": 40, "never_admitted": 0, "never_admitted_after": 0,
}

with_work(tenants, approvals) := {
	"environment": "dev",
	"change": {"approvals": approvals, "work": {"source": "jobs.csv", "jobs": 4, "window_hours": 24, "tenants": tenants}},
}

rules(decisions) := {d.rule | some d in decisions}

test_no_work_figures_no_decisions if {
	count(work.deny) == 0 with input as {"environment": "dev", "change": {"approvals": 0}}
	count(work.deny) == 0 with input as {"environment": "dev", "change": null}
}

test_a_wait_from_nothing_to_hours_needs_approvals if {
	decisions := work.deny with input as with_work([tenant("ml-sandbox", 0, 4), tenant("platform-dev", 0, 0)], 0)
	rules(decisions) == {"work.wait_worse"}
	count(decisions) == 1
	some d in decisions
	contains(d.msg, "tenant ml-sandbox's p99 wait grows 0 h -> 4 h over the 4 jobs of jobs.csv")
	d.resource.tenant == "ml-sandbox"
	d.figures.allowed_hours == 1
}

test_a_wait_longer_by_less_than_the_hours_is_not_gated if {
	count(work.deny) == 0 with input as with_work([tenant("ml-sandbox", 0, 0.9)], 0)
}

test_a_long_wait_a_little_longer_is_not_gated if {
	# 10 h -> 14 h: 4 h longer, but 40% of 10 h, under the 50% the data allows
	count(work.deny) == 0 with input as with_work([tenant("ml-sandbox", 10, 14)], 0)
}

test_a_long_wait_much_longer_needs_approvals if {
	decisions := work.deny with input as with_work([tenant("ml-sandbox", 10, 16.256)], 0)
	rules(decisions) == {"work.wait_worse"}
	some d in decisions
	contains(d.msg, "grows 10 h -> 16.26 h")
	d.figures.allowed_hours == 5
}

test_a_shorter_wait_is_not_gated if {
	count(work.deny) == 0 with input as with_work([tenant("ml-sandbox", 4, 0)], 0)
}

test_approvals_resolve_a_longer_wait if {
	count(work.deny) == 0 with input as with_work([tenant("ml-sandbox", 0, 4)], 2)
}
