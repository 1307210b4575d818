"""Each decision of a plan placed where a reviewer acts on it (the file, line and column of the edit
that made it fire, else of the item it is about) with the numbers of its fix, its gate and its waiver.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import spec
from fleetops.envelope import DecisionStatus
from fleetops.plan_result import PlanDecision


@dataclass(frozen=True)
class Edited:
    """What a change edited, for placing each decision at it: the environment file's edited fields
    (head's, in file order) and the first changed line of each changed policy and program file."""

    env_file: str = ""
    fields: Sequence[spec.Loc] = ()
    policy_files: dict[str, int] = field(default_factory=dict)
    program_files: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def _first(self) -> dict[spec.Loc, spec.Loc]:
        # Every prefix of an edited field -> the first edited field under it: one lookup per decision,
        # not a scan of every field (a new environment's are all edited).
        first: dict[spec.Loc, spec.Loc] = {}
        for loc in self.fields:
            for end in range(1, len(loc) + 1):
                first.setdefault(loc[:end], loc)
        return first

    def first_within(self, scope: spec.Loc) -> spec.Loc | None:
        """The first edited field at or under `scope`."""
        return self._first.get(scope)


# The field of its item a rule is about, when the item has several (a tenant's quota: guaranteed or burst).
_RULE_FIELD: dict[str, spec.Loc] = {
    "quota.guaranteed_over_capacity": ("guaranteed",),
    "quota.tenant_share": ("guaranteed",),
    "quota.burst_over_capacity": ("burst",),
    "priority.value_outside_band": ("value",),
    "priority.batch_preempts": ("preemption",),
    "priority.multiple_global_defaults": ("global_default",),
    "edge.latency": ("latency_ms",),
    "edge.missing_fingerprints": ("fingerprints",),
    "network.egress_anywhere": ("network", "egress_cidrs"),
    "quota.unbounded_device": ("quota",),  # the quota it lacks; a pool it gained is found as the tenant's edit
    "autoscaling.max_beyond_burst": ("replicas", "max"),
    "autoscaling.spend_over_budget": ("replicas", "max"),
}
# Fields outside a decision's item that make the rule fire for it: a fleet-wide setting, or what the
# cost is made of (a cost increase is about the edit that costs; being over budget, about the budget).
_RULE_CAUSES: dict[str, tuple[spec.Loc, ...]] = {
    "network.missing_default_deny": (("network", "default_deny"),),
    "network.edge_egress_not_allowed": (("network", "center_endpoints"),),
    "change.cost_increase_approvals": (("clusters",), ("prices",)),
    "budget.alert_threshold": (("budget", "alert_at"),),  # a lowered threshold, when the budget itself is not edited
    "autoscaling.max_beyond_burst": (("tenants",), ("scheduler",)),  # a lowered burst, or less lent
    "autoscaling.spend_over_budget": (("budget", "monthly"), ("prices",), ("clusters",)),
}


def explain(rows: list[dict[str, Any]], env: spec.Environment | None, positions: spec.Positions | None, policies: Path,
            edited: Edited = Edited()) -> list[PlanDecision]:
    """Each decision with where it comes from (`location`), how to fix it, its gate (a deny that
    more approvals resolve is an `approval`, not a denial of the change itself) and its waiver."""
    from fleetops import policy

    meta = {m.rule_id: m for m in policy.rule_metadata(policy.load_bundle(policies))}
    waivers = {w.where: w.waiver for w in policy.load_waivers(policies / policy.WAIVERS_FILE, dt.date.today()).active}
    out = []
    for row in rows:
        rule = meta.get(row["rule"])
        row = dict(row)
        if row["status"] == DecisionStatus.DENY and rule is not None and rule.gate is policy.Resolution.APPROVAL:
            row["status"] = DecisionStatus.APPROVAL.value
        if (where := location(row, env, positions, edited)) is not None:
            row["location"] = where
        row["fix"] = suggest_fix(row, env) or (rule.fix if rule else "")
        out.append(PlanDecision.of(row, waivers.get(row.get("waived_by") or "")))
    return out


def location(row: dict[str, Any], env: spec.Environment | None, positions: spec.Positions | None,
             edited: Edited) -> dict[str, Any] | None:
    """The file, line and column a decision is about: the first changed line of the policy or program
    file a change rule is about; else the edited field of the environment file's item its subject
    comes from (the rule's own field of it, else any edited field in it, else a field that makes the
    rule fire for it); a decision about rendered objects nothing in the environment file explains is
    the program change's; else the item's field the rule is about."""
    subject, rule = row.get("subject") or {}, row["rule"]
    kind = subject.get("kind")
    if kind == "Policies" and edited.policy_files:
        return _first_change(edited.policy_files)
    if kind == "Program" and edited.program_files:
        return _first_change(edited.program_files)
    if kind == "Environment" and env is None and edited.env_file:  # removed: its whole file is the edit
        return {"file": edited.env_file, "line": 1, "column": 1}
    if env is None or positions is None or not subject:
        return None
    item = locate(subject, env)
    if kind == "DeviceResource" and not subject.get("tenant"):  # a cluster's sum: the quota this change edited there
        item = _edited_quota(subject, env, edited) or item
    own = item + _RULE_FIELD.get(rule, ())
    for scope in (own, item, *_RULE_CAUSES.get(rule, ())):
        if (loc := edited.first_within(scope)) is not None:
            return _at(positions, loc)
    if edited.program_files and not row.get("waived_by"):
        return _first_change(edited.program_files)
    return _at(positions, own)


def _at(positions: spec.Positions, loc: spec.Loc) -> dict[str, Any]:
    line, column = positions.at(loc)
    return {"file": positions.file, "line": line, "column": column}


def _first_change(files: dict[str, int]) -> dict[str, Any]:
    name = min(files)
    return {"file": name, "line": files[name], "column": 1}


def _edited_quota(subject: dict[str, Any], env: spec.Environment, edited: Edited) -> spec.Loc | None:
    """The tenant quota of `subject`'s device resource this change edited on its cluster."""
    resource, cluster = subject.get("name"), subject.get("cluster")
    quotas = (("tenants", i, "quota", resource) for i, t in enumerate(env.tenants) if cluster in t.clusters and resource in t.quota)
    return next((loc for loc in quotas if edited.first_within(loc)), None)


def locate(resource: dict[str, Any], env: spec.Environment) -> spec.Loc:
    """The field of the environment file a decision's resource comes from (the nearest one declared)."""
    kind, name, cluster, tenant = (resource.get(k) for k in ("kind", "name", "cluster", "tenant"))
    if kind == "Service":
        index = next((k for k, s in enumerate(env.services) if (s.tenant, s.cluster, s.name) == (tenant, cluster, name)), None)
        if index is not None:
            return ("services", index)
    tenants = {t.name: i for i, t in enumerate(env.tenants)}
    clusters = {c.name: i for i, c in enumerate(env.clusters)}
    if tenant in tenants:
        i = tenants[tenant]
        bound = [resource["field"]] if resource.get("field") else []  # a quota's `guaranteed` or `burst`
        field = {"DeviceResource": ("quota", name, *bound), "PriorityClass": ("priority_classes",), "NetworkPolicy": ("network",),
                 "Pool": ("pools",), "Namespace": ()}.get(kind, ())
        return ("tenants", i, *field)
    if kind == "Budget":
        return ("budget", "monthly")
    if kind == "Price":
        return ("prices", name)
    if kind == "PriorityClass":
        index = next((k for k, p in enumerate(env.priority_classes) if p.name == name), None)
        return ("priority_classes", index) if index is not None else ("priority_classes",)
    if cluster in clusters:
        ci = clusters[cluster]
        c = env.clusters[ci]
        for field, groups in (("pools", c.pools), ("edge_groups", c.edge_groups)):
            for gi, g in enumerate(groups):
                if g.name == name or (kind == "DeviceResource" and name in spec.group_capacity(g)):
                    return ("clusters", ci, field, gi, "nodes") if kind == "DeviceResource" else ("clusters", ci, field, gi)
        if kind == "Group":  # removed: the list it was removed from
            return ("clusters", ci, "edge_groups" if c.role == "edge" else "pools")
        return ("clusters", ci)
    return ("environment",)


def suggest_fix(row: dict[str, Any], env: spec.Environment | None) -> str:
    """The numbers of a fix where the decision gives them: quota over capacity by how much, or how many nodes;
    a burst Kueue will not grant, to what. The numbers are the decision's `figures`, as the rule computed them."""
    figures, subject = row.get("figures") or {}, row.get("subject") or {}
    resource, cluster = subject.get("name"), subject.get("cluster")
    if row["rule"] == "quota.burst_unreachable" and {"burst", "reachable"} <= figures.keys():
        reach = figures["reachable"]
        return (f"lower {subject.get('tenant')}'s burst {resource} to {reach} on {cluster or 'its cluster'}, or add "
                f"{figures['burst'] - reach} {resource} no tenant guarantees to its pools, "
                "or let the tenants lend more of their guarantee (scheduler.lend_fraction)")
    if row["rule"] in ("autoscaling.max_beyond_burst", "autoscaling.spend_over_budget") and "fits" in figures:
        raise_what = f"{subject.get('tenant')}'s burst on {cluster}" if row["rule"] == "autoscaling.max_beyond_burst" else "budget.monthly in its own reviewed PR"
        return f"lower {subject.get('tenant')}/{subject.get('name')}'s replicas.max to {figures['fits']}, or raise {raise_what}"
    if row["rule"] != "quota.guaranteed_over_capacity" or not {"quota", "limit", "headroom_percent"} <= figures.keys() or env is None:
        return ""
    excess, keep = figures["quota"] - figures["limit"], 1 - figures["headroom_percent"] / 100
    fixes = [f"lower guaranteed {resource} by {excess} across the tenants on {cluster}"]
    pools = [g for c in env.clusters if c.name == cluster for g in c.pools if resource in spec.group_capacity(g)]
    if pools:
        pool = pools[0]
        per_node = spec.group_capacity(pool)[resource] / pool.nodes
        fixes.append(f"add {math.ceil(excess / (per_node * keep))} nodes to {pool.name}")
    return ", or ".join(fixes + ["merge a waiver first in its own PR"])
