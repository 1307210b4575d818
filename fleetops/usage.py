"""Measured utilisation and spend of what a change touches, read from Prometheus for the plan.

The figures come from the metering recording rules (modules/metering.py, the shared metric contract):
`fleetops:tenant_devices:physical` {cluster, pool, tenant, resource}, the physical devices a tenant's
running pods hold, and `fleetops:tenant_spend:per_hour` {cluster, pool, tenant, currency}. Two queries
per plan, grouped by label, whatever the number of tenants; both are sampled at a fixed resolution
(`STEP`) over the window, so that an hour a tenant held nothing counts as nothing held rather than
being left out of an average. A cluster with no series at all in the window was not measured (the
metering rules are not loaded there, or Prometheus lost it): its rows are `unavailable`, never zero;
so are the rows a sample that is no number (NaN, Inf) or negative would have counted in.

Utilisation is measured against the base revision's fleet, the one that ran: a tenant's physical
devices held on average / the physical devices behind its guarantee (units / the pool's sharing
factor, on the pools that hold it, `spec.guarantee_placement`); a pool's, the sum over its tenants /
its physical devices. The Prometheus URL and token are the judging process's own (CLI), never the
revision's; nothing here carries them into the plan.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from enum import Enum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from fleetops import durations, spec
from fleetops.metrics import DEVICES, SPEND
from fleetops.prometheus import finite

STEP_SECONDS = 300  # the resolution of the window's samples: the recording rules' evaluation order of magnitude
MAX_WINDOW_SECONDS = 400 * 86400  # beyond a year of samples, a plan's query is a batch job


class Status(str, Enum):
    measured = "measured"
    unavailable = "unavailable"


class Window(BaseModel):
    """How far back a plan measures: a duration (fleetops.durations: 30d, 12h, 2w)."""

    model_config = ConfigDict(frozen=True)
    text: str
    seconds: int

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    def spoken(self) -> str:
        return durations.parse(self.text).spoken()


def parse_window(text: str) -> Window:
    """`30d` -> a window; anything else raises ValueError with what is wrong."""
    duration = durations.parse(text)
    if duration.seconds < STEP_SECONDS or duration.seconds > MAX_WINDOW_SECONDS:
        raise ValueError(f"{text!r}: a window is at least {STEP_SECONDS // 60} minutes and at most {MAX_WINDOW_SECONDS // 86400} days")
    return Window(text=duration.text, seconds=duration.seconds)


class SampleLike(Protocol):
    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def value(self) -> float: ...


class Source(Protocol):
    """What usage needs of a Prometheus client (fleetops.prometheus.Prometheus)."""

    def query(self, expr: str, at: dt.datetime) -> Iterable[SampleLike]: ...


def queries(window: Window) -> dict[str, str]:
    """The plan's two instant queries: average physical devices held per (cluster, pool, tenant) over the
    window, and the money spent per (cluster, tenant, currency) in it; absent samples count as nothing."""
    sub = f"[{window.text}:{STEP_SECONDS}s]"
    return {
        "devices": f"sum by (cluster, pool, tenant) (sum_over_time({DEVICES}{sub})) * {STEP_SECONDS} / {window.seconds}",
        "spend": f"sum by (cluster, tenant, currency) (sum_over_time({SPEND}{sub})) * {STEP_SECONDS / 3600!r}",
    }


class TenantUsage(BaseModel):
    """A tenant's guarantee of one device resource on one cluster, and what it used of it."""

    tenant: str
    cluster: str
    resource: str
    guaranteed: int  # units, at base
    guaranteed_after: int  # units, at head
    guaranteed_devices: float  # physical devices behind the base guarantee
    status: Status
    reason: str = ""
    used_devices: float | None = None  # physical devices held on average over the window
    utilisation: float | None = None  # used_devices / guaranteed_devices; None without a guarantee
    spend: float | None = None  # on this cluster over the window, all its resources; None: unknown (no spend series)
    currency: str = ""


class PoolUsage(BaseModel):
    cluster: str
    pool: str
    resource: str
    physical_devices: int  # at base
    physical_devices_after: int
    status: Status
    reason: str = ""
    used_devices: float | None = None
    utilisation: float | None = None


class Usage(BaseModel):
    """The policy input's `usage` and the plan's `usage`: measured, or why not."""

    status: Status
    reason: str = ""
    window: str
    window_hours: float
    tenants: list[TenantUsage] = []
    pools: list[PoolUsage] = []


# --- what the change touches ---------------------------------------------------------------------


def _pools(env: spec.Environment | None) -> dict[tuple[str, str], spec.Pool]:
    return {(c.name, p.name): p for c in env.clusters for p in c.pools} if env is not None else {}


def _factor(pool: spec.Group, resource: str) -> float:
    """Schedulable units of `resource` per physical device of the pool (time-slicing replicas, MIG slices)."""
    units, devices = spec.group_capacity(pool).get(resource, 0), spec.physical_shares(pool).get(resource, 0)
    return units / devices if devices else 0.0


def _tenant_rows(before: spec.Environment, quota_changes: list[dict[str, Any]]) -> list[tuple[TenantUsage, list[str]]]:
    """Each tenant quota the change edits that the base held, with the pools and edge groups offering its
    resource on its cluster: what it held there counts, borrowed or not."""
    clusters = {c.name: c for c in before.clusters}
    tenants = {t.name: t for t in before.tenants}
    out = []
    for q in quota_changes:
        tenant, cluster = tenants.get(q["tenant"]), clusters.get(q["cluster"])
        if tenant is None or cluster is None or q["resource"] not in tenant.quota or cluster.name not in tenant.clusters:
            continue  # new at head: nothing of it ran to measure
        groups = {g.name: g for g in (*cluster.pools, *cluster.edge_groups)}
        # The guarantee in physical devices: each pool's share of it over that pool's sharing factor.
        held = spec.guarantee_placement(before, cluster).held.get((tenant.name, q["resource"]), {})
        devices = sum(units / f for name, units in held.items() if name in groups and (f := _factor(groups[name], q["resource"])))
        row = TenantUsage(tenant=tenant.name, cluster=cluster.name, resource=q["resource"], guaranteed=q["before"]["guaranteed"],
                          guaranteed_after=q["after"]["guaranteed"], guaranteed_devices=round(devices, 4), status=Status.unavailable)
        out.append((row, [name for name, g in groups.items() if q["resource"] in spec.group_capacity(g)]))
    return out


def _pool_rows(before: spec.Environment, after: spec.Environment | None) -> list[PoolUsage]:
    """Each pool of the base whose physical devices the change moves (nodes or devices per node)."""
    head = _pools(after)
    rows = []
    for key, pool in _pools(before).items():
        now = head.get(key)
        if now is not None and spec.physical_devices(now) != spec.physical_devices(pool):
            rows.append(PoolUsage(cluster=key[0], pool=key[1], resource=pool.device.resource, physical_devices=spec.physical_devices(pool),
                                  physical_devices_after=spec.physical_devices(now), status=Status.unavailable))
    return rows


# --- measuring --------------------------------------------------------------------------------------


def unavailable(window: Window, reason: str, before: spec.Environment | None, after: spec.Environment | None,
                quota_changes: list[dict[str, Any]]) -> Usage:
    """What the change touches, each row unmeasured with `reason` (never read as zero use); nothing
    touched is nothing unknown."""
    if before is None:
        return Usage(status=Status.measured, window=window.text, window_hours=window.hours)
    tenants = [row.model_copy(update={"reason": reason}) for row, _ in _tenant_rows(before, quota_changes)]
    pools = [row.model_copy(update={"reason": reason}) for row in _pool_rows(before, after)]
    status = Status.unavailable if tenants or pools else Status.measured
    return Usage(status=status, reason=reason if tenants or pools else "", window=window.text, window_hours=window.hours,
                 tenants=tenants, pools=pools)


def measure(source: Source, window: Window, before: spec.Environment | None, after: spec.Environment | None,
            quota_changes: list[dict[str, Any]], at: dt.datetime) -> Usage:
    """Utilisation and spend of every tenant quota and pool the change touches, over `window` up to `at`.
    The caller turns a failing `source` into `unavailable`."""
    if before is None:  # a new environment: nothing ran yet
        return Usage(status=Status.measured, window=window.text, window_hours=window.hours)
    tenant_rows, pool_rows = _tenant_rows(before, quota_changes), _pool_rows(before, after)
    if not tenant_rows and not pool_rows:  # nothing to measure: Prometheus is not asked
        return Usage(status=Status.measured, window=window.text, window_hours=window.hours)
    q = queries(window)
    held: dict[tuple[str, str, str], float] = defaultdict(float)  # (cluster, pool, tenant) -> devices
    refused: dict[tuple[str, ...], str] = {}  # (cluster, pool, tenant) of devices, (cluster, tenant) of spend -> why unknown
    for s in source.query(q["devices"], at):
        key = (s.labels.get("cluster", ""), s.labels.get("pool", ""), s.labels.get("tenant", ""))
        held[key] += _counted(s, f"{DEVICES} of {key[2]} on {key[0]}/{key[1]}", key, refused)
    spent: dict[tuple[str, str], tuple[float, str]] = {}
    for s in source.query(q["spend"], at):
        who = (s.labels.get("cluster", ""), s.labels.get("tenant", ""))
        money = _counted(s, f"{SPEND} of {who[1]} on {who[0]}", who, refused)
        spent[who] = (spent.get(who, (0.0, ""))[0] + money, s.labels.get("currency", ""))
    seen = {cluster for cluster, _, _ in held}
    currency = before.budget.currency if before.budget else ""

    def missing(cluster: str) -> str:
        return f"Prometheus has no {DEVICES} series for cluster {cluster} in the last {window.text} (metering rules not loaded there?)"

    def unreadable(*keys: tuple[str, ...]) -> str | None:
        return next((refused[k] for k in keys if k in refused), None)

    tenants = []
    for row, pools in tenant_rows:
        if row.cluster not in seen:
            tenants.append(row.model_copy(update={"reason": missing(row.cluster)}))
            continue
        if why := unreadable(*((row.cluster, pool, row.tenant) for pool in pools), (row.cluster, row.tenant)):
            tenants.append(row.model_copy(update={"reason": why}))
            continue
        used = sum(held.get((row.cluster, pool, row.tenant), 0.0) for pool in pools)
        # No spend series is no spend recorded, not nothing spent: unknown (None), while the use is measured.
        money, unit = spent.get((row.cluster, row.tenant), (None, ""))
        tenants.append(row.model_copy(update={
            "status": Status.measured, "used_devices": round(used, 2), "spend": None if money is None else round(money, 2),
            "currency": unit or currency,
            "utilisation": round(used / row.guaranteed_devices, 4) if row.guaranteed_devices else None}))
    pools_out = []
    for pool_row in pool_rows:
        if pool_row.cluster not in seen:
            pools_out.append(pool_row.model_copy(update={"reason": missing(pool_row.cluster)}))
            continue
        if why := unreadable(*(k for k in held if k[:2] == (pool_row.cluster, pool_row.pool))):
            pools_out.append(pool_row.model_copy(update={"reason": why}))
            continue
        used = sum(v for (cluster, pool, _), v in held.items() if (cluster, pool) == (pool_row.cluster, pool_row.pool))
        pools_out.append(pool_row.model_copy(update={
            "status": Status.measured, "used_devices": round(used, 2),
            "utilisation": round(used / pool_row.physical_devices, 4) if pool_row.physical_devices else None}))
    status = Status.measured if all(r.status is Status.measured for r in (*tenants, *pools_out)) else Status.unavailable
    reason = "" if status is Status.measured else "some clusters have no metering series, or no number in them"
    return Usage(status=status, reason=reason, window=window.text, window_hours=window.hours, tenants=tenants, pools=pools_out)


def _counted(sample: SampleLike, what: str, key: tuple[str, ...], refused: dict[tuple[str, ...], str]) -> float:
    """The sample's value if it reads as use; else 0 added, and `key` marked unknown with why."""
    if finite(sample.value) and sample.value >= 0:
        return float(sample.value)
    refused.setdefault(key, f"Prometheus answered {sample.value!r} for {what}: unknown, not 0")
    return 0.0


# --- what a reviewer reads ------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _arrow(before: int, after: int) -> str:
    return f"{before:,}" if before == after else f"{before:,} → {after:,}"


def _spent(t: TenantUsage, window: str) -> str:
    if t.spend is None:
        return f"spend unknown: Prometheus has no {SPEND} series for {t.tenant} on {t.cluster} in the last {window}"
    return f"{t.spend:,.0f} {t.currency} spent"


def lines(usage: Usage) -> list[str]:
    """One plain line per tenant quota and pool, as the review shows them (the caller escapes them)."""
    window = parse_window(usage.window).spoken()
    out = []
    for t in usage.tenants:
        head = f"{t.tenant} on {t.cluster}: {_arrow(t.guaranteed, t.guaranteed_after)} {t.resource} guaranteed, "
        if t.status is not Status.measured:
            out.append(head + f"utilisation unknown: {t.reason}")
        else:
            used = f"{_num(t.used_devices)} devices held on average" if t.utilisation is None else f"{t.utilisation:.0%} used"
            out.append(head + f"{used} over {window}; {_spent(t, usage.window)}")
    for p in usage.pools:
        head = f"pool {p.pool} on {p.cluster}: {_arrow(p.physical_devices, p.physical_devices_after)} devices, "
        if p.status is not Status.measured:
            out.append(head + f"utilisation unknown: {p.reason}")
        elif p.utilisation is None:
            out.append(head + "none at base to use")
        else:
            out.append(head + f"{p.utilisation:.0%} used over {window}")
    return out
