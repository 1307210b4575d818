"""A change in the words of the fleet: pools, sharing, tenants, prices, and every line of the file.

`fleet_changes` says what a reviewer asks first ("center-bj/h100-train: nodes 16 -> 24 (+64
nvidia.com/gpu, +135,488 USD/mo)"); `spec_changes` lists every field of the environment file that
changed, with its line, so that a change with no effect on objects (an edge fingerprint, a comment-
free reorder aside) is still seen; `file_diff` shows a changed policy, data or waiver file. Changes to
what decides who may run where (fingerprints, network allow lists, isolation, node matching,
waivers, owners) are flagged as security-relevant.
"""

from __future__ import annotations

import difflib
from typing import Any

from fleetops import spec

# A field whose path holds one of these decides who may run where, or who is trusted.
SECURITY_FIELDS = {"fingerprints", "network", "isolation", "allow_from_tenants", "allow_to_endpoints",
                   "center_endpoints", "match", "name_pattern", "edge_runtime"}
# Policy files whose change weakens or strengthens the gate itself.
SECURITY_FILES = {"policies/waivers.yaml", "policies/owners.yaml"}


def _money(value: float) -> str:
    return f"{value:+,.0f}"


def _groups(env: spec.Environment | None) -> dict[str, spec.Group]:
    if env is None:
        return {}
    return {f"{c.name}/{g.name}": g for c in env.clusters for g in (*c.pools, *c.edge_groups)}


def _monthly(env: spec.Environment, group: spec.Group) -> float:
    return spec.physical_devices(group) * env.prices.get(group.device.model, 0.0) * spec.HOURS_PER_MONTH


def _sharing(group: spec.Group) -> str:
    if not isinstance(group, spec.Pool) or group.sharing.mode == "exclusive":
        return "exclusive"
    if group.sharing.mode == "time-slicing":
        return f"time-slicing x{group.sharing.replicas or 1}"
    profiles = group.sharing.mig.profiles if group.sharing.mig else {}
    return "mig " + ", ".join(f"{p} x{n}" for p, n in sorted(profiles.items()))


def _units(group: spec.Group) -> str:
    return ", ".join(f"{n:,} {r}" for r, n in spec.group_capacity(group).items())


def _unit_delta(before: spec.Group, after: spec.Group) -> str:
    b, a = spec.group_capacity(before), spec.group_capacity(after)
    return ", ".join(f"{a.get(r, 0) - b.get(r, 0):+,} {r}" for r in sorted(set(a) | set(b)) if a.get(r, 0) != b.get(r, 0))


def fleet_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    """What changed in pools, edge groups, tenants and prices, each as one sentence (`text`)."""
    out: list[dict[str, Any]] = []
    currency = (after or before).budget.currency if (after or before) else ""

    def add(subject: str, text: str, security: bool = False) -> None:
        out.append({"subject": subject, "text": text, "security": security})

    old, new = _groups(before), _groups(after)
    for name in sorted(set(old) | set(new)):
        b, a = old.get(name), new.get(name)
        if a is not None and b is None:
            add(name, f"{name} added: {a.nodes} nodes x {a.device.per_node} {a.device.model}, {_sharing(a)} "
                      f"({_units(a)}, {_money(_monthly(after, a))} {currency}/mo)")
        elif b is not None and a is None:
            add(name, f"{name} removed: {b.nodes} nodes x {b.device.per_node} {b.device.model} "
                      f"(-{_units(b)}, {_money(-_monthly(before, b))} {currency}/mo)")
        elif a is not None and b is not None:
            cost = _monthly(after, a) - _monthly(before, b)
            if a.nodes != b.nodes:
                add(name, f"{name}: nodes {b.nodes} → {a.nodes} ({_unit_delta(b, a)}, {_money(cost)} {currency}/mo)")
            if _sharing(a) != _sharing(b):
                add(name, f"{name}: sharing {_sharing(b)} → {_sharing(a)} (schedulable {_units(b)} → {_units(a)})")
            if a.device != b.device:
                add(name, f"{name}: device {b.device.per_node} x {b.device.model} → {a.device.per_node} x {a.device.model}")
            if isinstance(a, spec.EdgeGroup) and isinstance(b, spec.EdgeGroup):
                for fp in sorted(set(a.fingerprints) - set(b.fingerprints)):
                    add(name, f"{name}: device fingerprint {fp} trusted", security=True)
                for fp in sorted(set(b.fingerprints) - set(a.fingerprints)):
                    add(name, f"{name}: device fingerprint {fp} no longer trusted", security=True)
    out += _tenant_changes(before, after)
    for model in sorted(set(before.prices if before else {}) | set(after.prices if after else {})):
        p, q = (before.prices.get(model) if before else None), (after.prices.get(model) if after else None)
        if p != q and p is not None and q is not None:
            add(f"prices/{model}", f"price of {model}: {p:g} → {q:g} {currency}/device-hour")
    if before and after and before.budget.monthly != after.budget.monthly:
        add("budget", f"monthly budget {before.budget.monthly:,.0f} → {after.budget.monthly:,.0f} {currency}")
    return out


def _quota_text(tenant: spec.Tenant) -> str:
    return ", ".join(f"{q.guaranteed}/{q.burst} {r}" for r, q in sorted(tenant.quota.items())) or "no device quota"


def _tenant_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    old = {t.name: t for t in before.tenants} if before else {}
    new = {t.name: t for t in after.tenants} if after else {}
    out = []
    for name in sorted(set(old) | set(new)):
        b, a = old.get(name), new.get(name)
        subject = f"tenants/{name}"
        if a is not None and b is None:
            out.append({"subject": subject, "security": False,
                        "text": f"tenant {name} added on {', '.join(a.clusters)}: {_quota_text(a)} (guaranteed/burst)"})
        elif b is not None and a is None:
            out.append({"subject": subject, "security": False, "text": f"tenant {name} removed from {', '.join(b.clusters)}"})
        elif a is not None and b is not None:
            for resource in sorted(set(a.quota) | set(b.quota)):
                qb, qa = b.quota.get(resource), a.quota.get(resource)
                if qb != qa:
                    before_text = f"{qb.guaranteed}/{qb.burst}" if qb else "none"
                    after_text = f"{qa.guaranteed}/{qa.burst}" if qa else "none"
                    out.append({"subject": subject, "security": False,
                                "text": f"tenant {name}: {resource} {before_text} → {after_text} (guaranteed/burst per cluster)"})
            if a.isolation != b.isolation or a.network != b.network:
                out.append({"subject": subject, "security": True, "text": f"tenant {name}: network isolation or allow lists changed"})
            if set(a.clusters) != set(b.clusters):
                out.append({"subject": subject, "security": False, "text": f"tenant {name}: clusters {', '.join(b.clusters)} → {', '.join(a.clusters)}"})
    return out


# --- every field of the file ------------------------------------------------------------------


def _leaves(value: Any, loc: spec.Loc, shown: str, out: dict[str, tuple[Any, spec.Loc]]) -> None:
    """Flatten to leaves keyed by a readable path; lists of named items are keyed by name, not index,
    so that inserting a tenant does not show every later tenant as changed."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _leaves(item, loc + (key,), f"{shown}.{key}" if shown else str(key), out)
    elif isinstance(value, list) and value and all(isinstance(i, dict) and "name" in i for i in value):
        for index, item in enumerate(value):
            _leaves(item, loc + (index,), f"{shown}[{item['name']}]", out)
    else:
        out[shown] = (value, loc)


Parsed = tuple[Any, "spec.Positions | None"]  # a side's environment file: its data and node positions


def parse(text: str | None, file: str) -> Parsed:
    """A side's environment file as data with positions; (None, None) when it is absent or not YAML."""
    if text is None:
        return None, None
    try:
        return spec.parse_yaml(text, file)
    except spec.SpecError:
        return None, None


def spec_changes(base: Parsed, head: Parsed) -> list[dict[str, Any]]:
    """Every changed field of the environment file: path, old and new value, the line (head's, or
    base's for a removed field) and whether it is security-relevant."""
    sides = []
    for data, positions in (base, head):
        leaves: dict[str, tuple[Any, spec.Loc]] = {}
        if positions is not None:
            _leaves(data, (), "", leaves)
        sides.append((leaves, positions))
    (old, old_pos), (new, new_pos) = sides
    out = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path, (None, ())), new.get(path, (None, ()))
        if path in old and path in new and before[0] == after[0]:
            continue
        where = new_pos if path in new else old_pos
        loc = after[1] if path in new else before[1]
        line = where.nodes.get(loc, (1, 1))[0] if where is not None else 1
        security = any(str(part) in SECURITY_FIELDS for part in loc)
        out.append({"path": path, "old": before[0] if path in old else None, "new": after[0] if path in new else None,
                    "file": where.file, "line": line, "side": "head" if path in new else "base", "security": security})
    return out


def file_diff(before: str | None, after: str | None, name: str) -> str:
    """A unified diff of one text file between base and head."""
    return "".join(difflib.unified_diff((before or "").splitlines(True), (after or "").splitlines(True),
                                        f"a/{name}", f"b/{name}", n=2))
