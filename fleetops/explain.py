"""Each decision of a plan placed where a reviewer acts on it (the file, line and column of the edit
that made it fire, else of the item it is about) with the numbers of its fix, its gate and its waiver.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import spec
from fleetops.envelope import DecisionStatus
from fleetops.plan_result import Location, PlanDecision


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


def explain(decisions: Sequence[PlanDecision], env: spec.Environment | None, positions: spec.Positions | None, policies: Path,
            edited: Edited = Edited()) -> list[PlanDecision]:
    """Each decision with where it comes from (`location`), how to fix it, its gate (a deny that
    more approvals resolve is an `approval`, not a denial of the change itself) and its waiver."""
    from fleetops import policy

    meta = {m.rule_id: m for m in policy.rule_metadata(policy.load_bundle(policies))}
    waivers = {w.where: w.waiver for w in policy.load_waivers(policies / policy.WAIVERS_FILE, dt.date.today()).active}
    out = []
    for d in decisions:
        rule = meta.get(d.rule)
        gated = d.status is DecisionStatus.DENY and rule is not None and rule.gate is policy.Resolution.APPROVAL
        out.append(dataclasses.replace(
            d, status=DecisionStatus.APPROVAL if gated else d.status, fix=fix(rule.fix, d) if rule else "", title=rule.title if rule else "",
            location=location(d, env, positions, edited, rule.field if rule else (), rule.causes if rule else ()),
            waiver=waivers.get(d.waived_by or "")))
    return out


def location(decision: PlanDecision, env: spec.Environment | None, positions: spec.Positions | None,
             edited: Edited, rule_field: spec.Loc = (), causes: Sequence[spec.Loc] = ()) -> Location | None:
    """The file, line and column a decision is about: the first changed line of the policy or program
    file a change rule is about; else the edited field of the environment file's item its subject
    comes from (the rule's own field of it, else any edited field in it, else a field that makes the
    rule fire for it); a decision about rendered objects nothing in the environment file explains is
    the program change's; else the item's field the rule is about. The rule's field and causes are
    its METADATA's (`custom.location`)."""
    subject = decision.subject or {}
    kind = subject.get("kind")
    if kind == "Policies" and edited.policy_files:
        return _first_change(edited.policy_files)
    if kind == "Program" and edited.program_files:
        return _first_change(edited.program_files)
    if kind == "Environment" and env is None and edited.env_file:  # removed: its whole file is the edit
        return Location(edited.env_file, 1, 1)
    if env is None or positions is None or not subject:
        return None
    item = locate(subject, env)
    if kind == "DeviceResource" and not subject.get("tenant"):  # a cluster's sum: the quota this change edited there
        item = _edited_quota(subject, env, edited) or item
    own = item + rule_field
    for scope in (own, item, *causes):
        if (loc := edited.first_within(scope)) is not None:
            return _at(positions, loc)
    if edited.program_files and not decision.waived_by:
        return _first_change(edited.program_files)
    return _at(positions, own)


def _at(positions: spec.Positions, loc: spec.Loc) -> Location:
    line, column = positions.at(loc)
    return Location(positions.file, line, column)


def _first_change(files: dict[str, int]) -> Location:
    name = min(files)
    return Location(name, files[name], 1)


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


def fix(alternatives: Sequence[str], decision: PlanDecision) -> str:
    """A rule's fix (METADATA `custom.fix`) with the decision's values in it: `{name}` is a value of its
    resource, figures or fix_values, as the rule computed them (so a message can be reworded freely);
    an alternative naming a value the decision does not give is left out."""
    values = {**(decision.subject or {}), **(decision.figures or {}), **decision.fix_values}
    shown = [text for text in alternatives if all(name in values for _, name, _, _ in string.Formatter().parse(text) if name)]
    return ", or ".join(text.format_map(values) for text in shown)
