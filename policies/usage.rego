# METADATA
# title: Measured use
# description: Rules over what the fleet measurably used (input.usage, from fleetops plan --prometheus, over its window); capacity that sits idle is not given more without approvals. A figure Prometheus could not give is never read as zero use, and the rule then says it could not judge.
package fleet.usage

cfg := data.fleet_data.usage

# input.usage is null outside a plan: every rule below is then undefined and nothing fires.
usage := input.usage

default approvals := 0

approvals := input.change.approvals

short := approvals < cfg.required_approvals

raised(t) if t.guaranteed_after > t.guaranteed

grown(p) if p.physical_devices_after > p.physical_devices

percent(x) := round(x * 100)

# METADATA
# title: Raising an under-used guarantee needs approvals
# description: Raising the guarantee of a tenant that used less than `usage.min_tenant_utilisation` of its current guarantee over the measured window needs the configured number of approvals.
# custom:
#   severity: medium
#   control_id: FLEET-USAGE-01
#   fix: "get the required approvals, or let the tenant use its guarantee before raising it"
#   gate: approval
deny contains d if {
	short
	some t in usage.tenants
	t.status == "measured"
	raised(t)
	is_number(t.utilisation)
	t.utilisation < cfg.min_tenant_utilisation
	d := {
		"rule": "usage.guarantee_raise_underused",
		"severity": "medium",
		"msg": sprintf("%s: tenant %s %s guaranteed raised %d -> %d while it used %d%% of %d over %s (under %d%%): needs %d approvals, has %d", [t.cluster, t.tenant, t.resource, t.guaranteed, t.guaranteed_after, percent(t.utilisation), t.guaranteed, usage.window, percent(cfg.min_tenant_utilisation), cfg.required_approvals, approvals]),
		"resource": {"cluster": t.cluster, "tenant": t.tenant, "kind": "DeviceResource", "name": t.resource, "field": "guaranteed"},
		"figures": {"utilisation": t.utilisation, "threshold": cfg.min_tenant_utilisation},
	}
}

# METADATA
# title: Adding nodes to an idle pool needs approvals
# description: Adding devices to a pool whose tenants used less than `usage.min_pool_utilisation` of its physical devices over the measured window needs the configured number of approvals.
# custom:
#   severity: medium
#   control_id: FLEET-USAGE-02
#   fix: "get the required approvals, or move load onto the pool before growing it"
#   gate: approval
deny contains d if {
	short
	some p in usage.pools
	p.status == "measured"
	grown(p)
	is_number(p.utilisation)
	p.utilisation < cfg.min_pool_utilisation
	d := {
		"rule": "usage.pool_growth_idle",
		"severity": "medium",
		"msg": sprintf("%s: pool %s grows %d -> %d devices while %d%% of them were used over %s (under %d%%): needs %d approvals, has %d", [p.cluster, p.pool, p.physical_devices, p.physical_devices_after, percent(p.utilisation), usage.window, percent(cfg.min_pool_utilisation), cfg.required_approvals, approvals]),
		"resource": {"cluster": p.cluster, "kind": "Pool", "name": p.pool},
		"figures": {"utilisation": p.utilisation, "threshold": cfg.min_pool_utilisation},
	}
}

# A warning, not an approval: without a Prometheus (a developer's machine, an environment not metered
# yet) every capacity change would otherwise need approvals, and approvals asked for every change are
# given without reading. The plan and the decision record say the use is unknown; the quota and cost
# approval rules (fleet.change) still hold.
unjudged contains {"cluster": t.cluster, "what": sprintf("raising %s's %s guarantee", [t.tenant, t.resource]), "reason": t.reason, "resource": {"cluster": t.cluster, "tenant": t.tenant, "kind": "DeviceResource", "name": t.resource, "field": "guaranteed"}} if {
	some t in usage.tenants
	t.status == "unavailable"
	raised(t)
}

unjudged contains {"cluster": p.cluster, "what": sprintf("growing pool %s", [p.pool]), "reason": p.reason, "resource": {"cluster": p.cluster, "kind": "Pool", "name": p.pool}} if {
	some p in usage.pools
	p.status == "unavailable"
	grown(p)
}

# METADATA
# title: Use unknown, not judged
# description: The change raises a guarantee or grows a pool, but its use over the window is unknown (no Prometheus given, no answer, or no metering series), so the use rules could not judge it.
# custom:
#   severity: low
#   control_id: FLEET-USAGE-03
warn contains d if {
	some u in unjudged
	d := {
		"rule": "usage.unmeasured",
		"severity": "low",
		"msg": sprintf("%s: could not judge %s by its use: utilisation unknown: %s", [u.cluster, u.what, u.reason]),
		"resource": u.resource,
	}
}
