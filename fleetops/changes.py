"""A change in the words of the fleet: pools, sharing, tenants, prices, and every line of the file.

`fleet_changes` says what a reviewer asks first ("center-bj/h100-train: nodes 16 -> 24 (+64
nvidia.com/gpu, +135,488 USD/mo)"); `spec_changes` lists every field of the environment file that
changed, with its line, so that a change with no effect on objects (an edge fingerprint, a comment-
free reorder aside) is still seen; `file_diff` shows a changed policy, data or waiver file. Changes to
what decides who may run where (fingerprints, network allow lists, isolation, node matching,
waivers, owners) are flagged as security-relevant.
"""

from __future__ import annotations

import datetime
import difflib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleetops import spec

# A field whose path holds one of these decides who may run where, or who is trusted.
SECURITY_FIELDS = {"fingerprints", "network", "isolation", "allow_from_tenants", "allow_to_endpoints",
                   "center_endpoints", "match", "name_pattern", "edge_runtime"}
# Policy files whose change weakens or strengthens the gate itself.
SECURITY_FILES = {"policies/waivers.yaml", "policies/owners.yaml"}


class PlanSide(StrEnum):
    """The side of a change whose file holds a line."""

    BASE = "base"
    HEAD = "head"


@dataclass(frozen=True)
class SpecChange:
    """One edited field of the environment file: its value on each side and its line (head's; base's
    for a removed field)."""

    path: str  # as `spec.format_loc` writes it, list items by name
    old: Any  # None: not in base
    new: Any  # None: not in head
    file: str
    line: int
    side: PlanSide  # the side whose file holds `line`
    # the key that makes it decide who or what is let in (`fingerprints`, an allow list, a node match, ...); "" if none
    security_field: str

    @property
    def security(self) -> bool:
        return bool(self.security_field)

    @property
    def place(self) -> str:
        """`file:line`, marked `base:` when the line is the base's (a removed field): head's file has no such line."""
        return f"{'base:' if self.side is PlanSide.BASE else ''}{self.file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new, "file": self.file, "line": self.line,
                "side": self.side.value, "place": self.place, "security": self.security}


@dataclass(frozen=True)
class FleetChange:
    """One change in fleet terms (`changes.fleet_changes`): a sentence, and what it moves."""

    subject: str  # `cluster/pool`, `tenants/name`, `environment/name`, ...
    text: str
    security: bool
    devices: int
    cost: float  # monthly



def money(value: float) -> str:
    return f"{value:+,.0f}"


def _groups(env: spec.Environment | None) -> dict[str, spec.Group]:
    if env is None:
        return {}
    return {f"{c.name}/{g.name}": g for c in env.clusters for g in (*c.pools, *c.edge_groups)}


def _sharing(group: spec.Group) -> str:
    if not isinstance(group, spec.Pool) or group.sharing.mode == "exclusive":
        return "exclusive"
    if group.sharing.mode == "time-slicing":
        return f"time-slicing x{group.sharing.replicas or 1}"
    profiles = group.sharing.mig.profiles if group.sharing.mig else {}
    return "mig " + ", ".join(f"{p} x{n}" for p, n in sorted(profiles.items()))


def _spot(group: spec.Group) -> str:
    return f"spot at {group.spot.price:g}/device-hour" if isinstance(group, spec.Pool) and group.spot else "not spot"


def _units(group: spec.Group) -> str:
    return ", ".join(f"{n:,} {r}" for r, n in spec.group_capacity(group).items())


def _unit_delta(before: spec.Group, after: spec.Group) -> str:
    b, a = spec.group_capacity(before), spec.group_capacity(after)
    return ", ".join(f"{a.get(r, 0) - b.get(r, 0):+,} {r}" for r in sorted(set(a) | set(b)) if a.get(r, 0) != b.get(r, 0))


def _physical(groups: list[spec.Group]) -> dict[str, int]:
    """Physical devices per device resource, largest first."""
    totals: dict[str, int] = {}
    for g in groups:
        totals[g.device.resource] = totals.get(g.device.resource, 0) + spec.physical_devices(g)
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _totals(env: spec.Environment, clusters: list[spec.Cluster], sign: str) -> tuple[str, int, float]:
    """`392 pools, 6,700 nvidia.com/gpu, …, +X USD/mo` of some clusters, with their devices and cost."""
    groups = [g for c in clusters for g in (*c.pools, *c.edge_groups)]
    pools, edge = sum(len(c.pools) for c in clusters), sum(len(c.edge_groups) for c in clusters)
    devices = _physical(groups)
    cost = sum(spec.group_monthly_cost(env, g) for g in groups) * (-1 if sign == "-" else 1)
    parts = [_count(pools, "pool")] + ([_count(edge, "edge group")] if edge else [])
    parts += [f"{sign}{n:,} {r}" for r, n in devices.items()] + [f"{money(cost)} {env.budget.currency}/mo"]
    return ", ".join(parts), sum(devices.values()), cost


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _environment_change(env: spec.Environment, verb: str, sign: str) -> FleetChange:
    """An environment added or removed, in one line of totals: its every pool and tenant would be thousands."""
    text, devices, cost = _totals(env, env.clusters, sign)
    tenants = f", {_count(len(env.tenants), 'tenant')}" if env.tenants else ""
    return FleetChange(f"environment/{env.environment}", f"environment {env.environment} {verb}: {_count(len(env.clusters), 'cluster')}{tenants}, {text}",
                       security=False, devices=devices, cost=cost)


def _cluster_changes(before: spec.Environment, after: spec.Environment) -> tuple[list[FleetChange], set[str]]:
    """Clusters added or removed, one line each with their totals, and the clusters they cover."""
    old, new = {c.name: c for c in before.clusters}, {c.name: c for c in after.clusters}
    out = []
    for name in sorted(set(old) ^ set(new)):
        env, cluster, sign, verb = (after, new[name], "+", "added") if name in new else (before, old[name], "-", "removed")
        text, devices, cost = _totals(env, [cluster], sign)
        out.append(FleetChange(f"clusters/{name}", f"cluster {name} {verb}: {text}", security=False, devices=devices, cost=cost))
    return out, set(old) ^ set(new)


def _size(change: FleetChange) -> tuple[float, int, bool, str]:
    """Largest first: cost moved, then devices moved; security-relevant before others of the same size."""
    return (-abs(change.cost), -abs(change.devices), not change.security, change.subject)


def fleet_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[FleetChange]:
    """What changed in clusters, pools, edge groups, tenants and prices, each as one sentence (`text`)
    with the devices (`devices`) and monthly cost (`cost`) it moves, largest first. An environment or
    cluster added or removed is one sentence of totals, not one per pool and tenant."""
    if after is None:
        return [_environment_change(before, "removed", "-")] if before is not None else []
    if before is None:
        return [_environment_change(after, "added", "+")]
    out, whole = _cluster_changes(before, after)
    currency = after.budget.currency

    def add(subject: str, text: str, security: bool = False, devices: int = 0, cost: float = 0.0) -> None:
        out.append(FleetChange(subject, text, security, devices, cost))

    old, new = _groups(before), _groups(after)
    for name in sorted(set(old) | set(new)):
        if name.split("/", 1)[0] in whole:
            continue
        b, a = old.get(name), new.get(name)
        if a is not None and b is None:
            add(name, f"{name} added: {a.nodes} nodes x {a.device.per_node} {a.device.model}, {_sharing(a)} "
                      f"({_units(a)}, {money(spec.group_monthly_cost(after, a))} {currency}/mo)", devices=spec.physical_devices(a), cost=spec.group_monthly_cost(after, a))
        elif b is not None and a is None:
            add(name, f"{name} removed: {b.nodes} nodes x {b.device.per_node} {b.device.model} "
                      f"(-{_units(b)}, {money(-spec.group_monthly_cost(before, b))} {currency}/mo)", devices=spec.physical_devices(b), cost=-spec.group_monthly_cost(before, b))
        elif a is not None and b is not None:
            cost = spec.group_monthly_cost(after, a) - spec.group_monthly_cost(before, b)
            repriced = spec.repriced_monthly_cost(before, after, b, a)  # the price edit's own line says it: not the nodes'
            moved = spec.physical_devices(a) - spec.physical_devices(b)
            if a.nodes != b.nodes:
                add(name, f"{name}: nodes {b.nodes} → {a.nodes} ({_unit_delta(b, a)}, {money(cost - repriced)} {currency}/mo)",
                    devices=moved, cost=cost - repriced)
            if _sharing(a) != _sharing(b):
                add(name, f"{name}: sharing {_sharing(b)} → {_sharing(a)} (schedulable {_units(b)} → {_units(a)})",
                    devices=spec.physical_devices(a))
            if a.device != b.device:
                add(name, f"{name}: device {b.device.per_node} x {b.device.model} → {a.device.per_node} x {a.device.model}",
                    devices=max(spec.physical_devices(a), spec.physical_devices(b)), cost=0.0 if a.nodes != b.nodes else cost)
            if _spot(a) != _spot(b):
                moves = repriced if spec.is_spot(a) and spec.is_spot(b) else 0.0 if a.nodes != b.nodes else cost
                add(name, f"{name}: {_spot(b)} → {_spot(a)} ({money(moves)} {currency}/mo)", devices=spec.physical_devices(a), cost=moves)
            if isinstance(a, spec.EdgeGroup) and isinstance(b, spec.EdgeGroup):
                for fp in sorted(set(a.fingerprints) - set(b.fingerprints)):
                    add(name, f"{name}: device fingerprint {fp} trusted", security=True)
                for fp in sorted(set(b.fingerprints) - set(a.fingerprints)):
                    add(name, f"{name}: device fingerprint {fp} no longer trusted", security=True)
                for text in _continuity_changes(b, a):
                    add(name, f"{name}: {text}")
    out += _tenant_changes(before, after)
    out += [FleetChange(f"reach/{r['cluster']}/{r['to']}", r["text"], security=True, devices=0, cost=0.0) for r in reach_changes(before, after)]
    for model in sorted(set(before.prices) | set(after.prices)):
        p, q = before.prices.get(model), after.prices.get(model)
        if p != q and p is not None and q is not None:
            devices, moves = spec.model_price_change(after, model, p, q)
            add(f"prices/{model}", f"price of {model}: {p:g} → {q:g} {currency}/device-hour ({money(moves)} {currency}/mo on "
                                   f"{devices:,} devices)", devices=devices, cost=moves)
    if before.budget.monthly != after.budget.monthly:
        add("budget", f"monthly budget {before.budget.monthly:,.0f} → {after.budget.monthly:,.0f} {currency}")
    return sorted(out, key=_size)


def _disconnect_text(group: spec.EdgeGroup) -> str:
    d = group.disconnect
    return "pods stay bound" if d.after_seconds is None else f"pods move after {d.after_seconds}s"


def _offline_text(group: spec.EdgeGroup) -> str:
    w = group.offline_work
    return "none" if w is None else f"{w.devices} {group.device.resource} for {', '.join(w.tenants)} ({', '.join(w.priority_classes)})"


def _continuity_changes(before: spec.EdgeGroup, after: spec.EdgeGroup) -> list[str]:
    """What a lost uplink does to the group, and what its nodes cache, as it changed."""
    out = []
    if before.disconnect != after.disconnect:
        out.append(f"on disconnect {_disconnect_text(before)} → {_disconnect_text(after)}")
    if before.offline_work != after.offline_work:
        out.append(f"offline work {_offline_text(before)} → {_offline_text(after)}")
    old, new = {m.name: m for m in before.model_cache}, {m.name: m for m in after.model_cache}
    for name in sorted(set(old) | set(new)):
        b, a = old.get(name), new.get(name)
        if b is None and a is not None:
            out.append(f"caches model {name} ({a.size_gb} GB, {a.digest[:19]}…) on every node")
        elif a is None and b is not None:
            out.append(f"no longer caches model {name} ({b.size_gb} GB)")
        elif a is not None and b is not None and a != b:
            what = [f"digest {b.digest[:19]}… → {a.digest[:19]}…"] if a.digest != b.digest else []
            what += [f"{b.size_gb} → {a.size_gb} GB"] if a.size_gb != b.size_gb else []
            what += ["source changed"] if a.source != b.source else []
            out.append(f"cached model {name}: {', '.join(what)} (refetched on every node)")
    return out


def _quota_text(tenant: spec.Tenant) -> str:
    return ", ".join(f"{q.guaranteed}/{q.burst} {r}" for r, q in sorted(tenant.quota.items())) or "no device quota"


def _guaranteed(tenant: spec.Tenant) -> int:
    """Devices a tenant is guaranteed across its clusters (its quota holds per cluster)."""
    return sum(q.guaranteed for q in tenant.quota.values()) * len(tenant.clusters)


def _tenant_changes(before: spec.Environment, after: spec.Environment) -> list[FleetChange]:
    old, new = {t.name: t for t in before.tenants}, {t.name: t for t in after.tenants}
    out = []

    def add(subject: str, text: str, security: bool = False, devices: int = 0) -> None:
        out.append(FleetChange(subject, text, security, devices, 0.0))

    for name in sorted(set(old) | set(new)):
        b, a = old.get(name), new.get(name)
        subject = f"tenants/{name}"
        if a is not None and b is None:
            add(subject, f"tenant {name} added on {', '.join(a.clusters)}: {_quota_text(a)} (guaranteed/burst)", devices=_guaranteed(a))
        elif b is not None and a is None:
            add(subject, f"tenant {name} removed from {', '.join(b.clusters)}", devices=_guaranteed(b))
        elif a is not None and b is not None:
            for resource in sorted(set(a.quota) | set(b.quota)):
                qb, qa = b.quota.get(resource), a.quota.get(resource)
                if qb != qa:
                    before_text = f"{qb.guaranteed}/{qb.burst}" if qb else "none"
                    after_text = f"{qa.guaranteed}/{qa.burst}" if qa else "none"
                    moved = ((qa.guaranteed if qa else 0) - (qb.guaranteed if qb else 0)) * len(a.clusters)
                    add(subject, f"tenant {name}: {resource} {before_text} → {after_text} (guaranteed/burst per cluster)", devices=moved)
            if a.isolation != b.isolation or a.network != b.network:
                add(subject, f"tenant {name}: network isolation or allow lists changed", security=True)
            if set(a.clusters) != set(b.clusters):
                add(subject, f"tenant {name}: clusters {', '.join(b.clusters)} → {', '.join(a.clusters)}", devices=_guaranteed(a))
            if a.spill_over != b.spill_over:  # where its work may run: a worker's Kueue takes jobs submitted elsewhere
                add(subject, f"tenant {name}: spill-over {_spill_text(b.spill_over)} → {_spill_text(a.spill_over)}", security=True)
    return out


def _spill_text(spill: spec.SpillOver | None) -> str:
    if spill is None:
        return "none"
    return f"submitted on {spill.manager}, run on {', '.join(spill.workers)} (MultiKueue)"


def _openings(env: spec.Environment) -> dict[tuple[str, spec.End, spec.End], set[str]]:
    """(cluster, destination, source) -> the ports the environment's flows open between them ("*": every port)."""
    out: dict[tuple[str, spec.End, spec.End], set[str]] = {}
    for flow in spec.reach(env).flows:
        if flow.source != flow.destination:
            out.setdefault((flow.cluster, flow.destination, flow.source), set()).update([str(p) for p in flow.ports] or ["*"])
    return out


def _ports_text(ports: set[str]) -> str:
    return "every port" if "*" in ports else ",".join(sorted(ports, key=lambda p: (len(p), p)))


def reach_changes(before: spec.Environment, after: spec.Environment) -> list[dict[str, Any]]:
    """Who may newly reach whom, and who no longer may, per cluster, pair and port, from the two sides'
    network intent (spec.reach): "center-bj: speech ← vision :8080 opened". `strict`: the destination is
    a tenant whose `isolation` is strict at head (fleet.network's approval rule reads it)."""
    old, new = _openings(before), _openings(after)
    strict = {t.name for t in after.tenants if t.isolation == "strict"}
    out = []
    for key in sorted(set(old) | set(new)):
        cluster, destination, source = key
        into_strict = destination.kind is spec.Kind.TENANT and destination.name in strict
        was, now = old.get(key, set()), new.get(key, set())
        opened = set() if "*" in was else (now - was)
        closed = set() if "*" in now else (was - now)
        for ports, verb in ((opened, "opened"), (closed, "closed")):
            if ports:
                out.append({"cluster": cluster, "to": str(destination), "from": str(source), "ports": sorted(ports),
                            "opened": verb == "opened", "strict": verb == "opened" and into_strict,
                            "text": f"{cluster}: {destination} ← {source} :{_ports_text(ports)} {verb}"})
    return out


# --- every field of the file ------------------------------------------------------------------


Leaves = dict[str, tuple[Any, spec.Loc]]  # a readable path -> the value written there and its place


def _leaves(value: Any, loc: spec.Loc, shown: str, out: Leaves) -> None:
    """Flatten to leaves keyed by a readable path; lists of named items are keyed by name, not index,
    so that inserting a tenant does not show every later tenant as changed."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _leaves(item, loc + (key,), f"{shown}.{key}" if shown else str(key), out)
    elif _named_items(value):
        for index, item in enumerate(value):
            _leaves(item, loc + (index,), f"{shown}[{item['name']}]", out)
    else:
        out[shown] = (_as_written(value), loc)


def _as_written(value: Any) -> Any:
    """A leaf as JSON can carry it: YAML's dates (a prepaid tenant's top-ups) as the ISO text they were written in."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    return value


_ABSENT = object()  # a part (the file, a key, a named item) one side does not have
Parsed = tuple[Any, "spec.Positions | None"]  # a side's environment file: its data and node positions


def parse(text: str | None, file: str) -> Parsed:
    """A side's environment file as data with positions; (None, None) when it is absent or not YAML."""
    if text is None:
        return None, None
    try:
        return spec.parse_yaml(text, file)
    except spec.SpecError:
        return None, None


def spec_changes(base: Parsed, head: Parsed) -> list[SpecChange]:
    """Every changed field of the environment file: path, old and new value, the line (head's, or
    base's for a removed field) and whether it is security-relevant."""
    return spec_changes_and_fields(base, head)[0]


def spec_changes_and_fields(base: Parsed, head: Parsed) -> tuple[list[SpecChange], list[spec.Loc]]:
    """`spec_changes`, and the fields of head's file they are (added or changed leaves, in file order):
    where a decision about an edited item points."""
    (old_data, old_pos), (new_data, new_pos) = base, head
    old: Leaves = {}
    new: Leaves = {}
    if old_pos is not None or new_pos is not None:  # a side without positions is absent or not YAML: it has no fields
        _differing_part(old_data if old_pos is not None else _ABSENT, new_data if new_pos is not None else _ABSENT,
                        ((), ()), "", (old, new))
    out, fields = [], []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path, (None, ())), new.get(path, (None, ()))
        if path in old and path in new and before[0] == after[0]:
            continue
        if path in new:
            fields.append(after[1])
        where = new_pos if path in new else old_pos
        loc = after[1] if path in new else before[1]
        line = where.nodes.get(loc, (1, 1))[0] if where is not None else 1
        # the innermost security-relevant key the field is under (`fingerprints`, `name_pattern`, ...), "" if none
        security_field = next((str(part) for part in reversed(loc) if str(part) in SECURITY_FIELDS), "")
        out.append(SpecChange(path, before[0] if path in old else None, after[0] if path in new else None,
                              where.file, line, PlanSide.HEAD if path in new else PlanSide.BASE, security_field))
    if new_pos is not None:
        fields.sort(key=lambda loc: new_pos.nodes.get(loc, (0, 0)))
    return out, fields


def _differing_leaves(old: Any, new: Any, locs: tuple[spec.Loc, spec.Loc], shown: str, out: tuple[Leaves, Leaves]) -> None:
    """`_leaves` of both sides, walked only where they differ: a part equal on both sides (Python's `==`,
    at C speed) holds equal leaves (flattening both files whole took 0.05 s of the large fleet's plan,
    this 0.007 s: benchmarks/README.md). Mappings are walked key by key and lists of named items name
    by name; any other difference flattens both parts, as `_leaves` does."""
    if isinstance(old, dict) and isinstance(new, dict) and old and new:
        pairs = {key: (old.get(key, _ABSENT), new.get(key, _ABSENT)) for key in (*old, *(k for k in new if k not in old))}
        for key, (was, now) in pairs.items():
            _differing_part(was, now, (locs[0] + (key,), locs[1] + (key,)), f"{shown}.{key}" if shown else str(key), out)
    elif (old_names := _item_names(old)) is not None and (new_names := _item_names(new)) is not None:
        for name in {**old_names, **new_names}:
            i, j = old_names.get(name), new_names.get(name)
            _differing_part(old[i] if i is not None else _ABSENT, new[j] if j is not None else _ABSENT,
                            (locs[0] + (i,) if i is not None else (), locs[1] + (j,) if j is not None else ()), f"{shown}[{name}]", out)
    else:
        _leaves(old, locs[0], shown, out[0])
        _leaves(new, locs[1], shown, out[1])


def _differing_part(old: Any, new: Any, locs: tuple[spec.Loc, spec.Loc], shown: str, out: tuple[Leaves, Leaves]) -> None:
    if old is _ABSENT:
        _leaves(new, locs[1], shown, out[1])
    elif new is _ABSENT:
        _leaves(old, locs[0], shown, out[0])
    elif old != new:
        _differing_leaves(old, new, locs, shown, out)


def _named_items(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def _item_names(value: Any) -> dict[str, int] | None:
    """Each item's index by its name as its paths show it, for a list that `_leaves` keys by name; None
    for any other value, or when two items show the same name (`_leaves` then keeps the later one's
    leaves over the earlier's: both lists are flattened whole, as it does)."""
    if not _named_items(value):
        return None
    names = {f"{item['name']}": index for index, item in enumerate(value)}
    return names if len(names) == len(value) else None


def file_diff(before: str | None, after: str | None, name: str) -> str:
    """A unified diff of one text file between base and head."""
    return "".join(difflib.unified_diff((before or "").splitlines(True), (after or "").splitlines(True),
                                        f"a/{name}", f"b/{name}", n=2))
