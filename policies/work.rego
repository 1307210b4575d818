# METADATA
# title: What a change does to the work
# description: Rules over what the change under review does to the fleet's work (input.change.work, from fleetops plan --whatif, a trace of jobs replayed on the real Kueue at base and at head); a change that makes a tenant wait much longer needs approvals.
package fleet.work

cfg := data.fleet_data.work

# input.change.work is there only when plan was given --whatif: every rule below is then undefined and nothing fires.
work := input.change.work

default approvals := 0

approvals := input.change.approvals

short := approvals < cfg.required_approvals

# How much longer the tenant's p99 waits at head than at base, in hours.
longer(t) := t.wait_p99_hours_after - t.wait_p99_hours

hours(x) := round(x * 100) / 100

# Much worse: longer by more than the hours, and (from a p99 above zero) by more than the share of it.
much_worse(t) if {
	longer(t) > cfg.max_p99_wait_increase_hours
	t.wait_p99_hours == 0
}

much_worse(t) if {
	longer(t) > cfg.max_p99_wait_increase_hours
	longer(t) > t.wait_p99_hours * cfg.max_p99_wait_increase_fraction
}

# METADATA
# title: A change that makes a tenant wait much longer needs approvals
# description: When the trace replayed at base and head (plan --whatif) shows a tenant's p99 queueing delay longer at head by more than `work.max_p99_wait_increase_hours` and by more than `work.max_p99_wait_increase_fraction` of its base p99, the change needs `work.required_approvals` approvals.
# custom:
#   severity: medium
#   control_id: FLEET-WAIT-01
#   fix: "get the required approvals, or keep the tenant's quota (or the capacity it waits for) so that its p99 wait grows by at most {allowed_hours} h"
#   gate: approval
#   location: {field: quota, causes: [tenants, clusters, priority_classes]} # the tenant's quota, else the edit that made it wait
deny contains d if {
	short
	some t in work.tenants
	much_worse(t)
	d := {
		"rule": "work.wait_worse",
		"severity": "medium",
		"msg": sprintf("tenant %s's p99 wait grows %v h -> %v h over the %d jobs of %s replayed at base and head (more than %v h and %d%% longer): needs %d approvals, has %d", [t.tenant, hours(t.wait_p99_hours), hours(t.wait_p99_hours_after), t.jobs, work.source, cfg.max_p99_wait_increase_hours, round(cfg.max_p99_wait_increase_fraction * 100), cfg.required_approvals, approvals]),
		"resource": {"tenant": t.tenant, "kind": "Tenant", "name": t.tenant},
		"figures": {"wait_p99_hours": t.wait_p99_hours, "wait_p99_hours_after": t.wait_p99_hours_after, "allowed_hours": hours(max([cfg.max_p99_wait_increase_hours, t.wait_p99_hours * cfg.max_p99_wait_increase_fraction]))},
	}
}
