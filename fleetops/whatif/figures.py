"""What a replay did to the work, in figures: made from the replay's records, one `SideFigures` per side.

- allocation utilisation: device-time admitted over device-time available, per cluster, resource and flavor
  (a flavor is a pool), per resource, and in total, beside the load the trace offered (its ceiling) and
  the backlog left at the end of the window; and the same utilisation hour by hour over the window;
- queueing delay, from arrival to first admission, p50/p90/p99 per tenant and per class, and the share of
  jobs that waited more than an hour. A job still waiting at the end of the window counts with the wait
  it has had so far (a lower bound: the figures are never flattered by leaving it out);
- preemptions: who preempted whom, and the device-hours of the runs they ended;
- guarantees not honoured: the minutes a tenant with work waiting held less than min(its guarantee, its
  demand) of a resource while another tenant held more than its own guarantee (borrowed), and how long
  the longest such stretch lasted before it was reclaimed;
- fairness: Jain's index over tenants of use / guarantee (device-time admitted over the device-time of
  its guarantees in the window), 1 when every tenant got the same share of its guarantee.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetops import spec
from fleetops.whatif.replay import Record
from fleetops.whatif.trace import Trace

HOUR = 3600.0
# The utilisation over the window is kept per hour, or per longer step so that a window has at most this many
# (a year's replay is drawn from 1,000 points, not 8,784).
MOST_STEPS = 1000


@dataclass(frozen=True)
class Utilisation:
    cluster: str
    resource: str
    flavor: str  # "" for the resource's total over its flavors
    admitted_device_hours: float
    available_device_hours: float

    @property
    def utilisation(self) -> float:
        return self.admitted_device_hours / self.available_device_hours if self.available_device_hours else 0.0


@dataclass(frozen=True)
class Waits:
    """Queueing delay of a group of jobs (a tenant's, a class's), in hours."""

    group: str
    jobs: int
    p50: float
    p90: float
    p99: float
    over_an_hour: float  # the share of the jobs that waited more than an hour
    never_admitted: int


@dataclass(frozen=True)
class Preemption:
    preemptor_tenant: str
    preemptor_class: str
    victim_tenant: str
    victim_class: str
    count: int
    device_hours_lost: float


@dataclass(frozen=True)
class Guarantee:
    """A tenant's guarantee of a resource on a cluster, and how often it was not honoured."""

    tenant: str
    cluster: str
    resource: str
    unhonoured_minutes: float
    episodes: int
    longest_minutes: float


@dataclass
class SideFigures:
    side: str
    revision: str
    utilisation: list[Utilisation]
    total_utilisation: float
    offered_load: float
    backlog_jobs: int
    backlog_device_hours: float
    waits_by_tenant: list[Waits]
    waits_by_class: list[Waits]
    waits_all: Waits
    preemptions: list[Preemption]
    guarantees: list[Guarantee]
    fairness: float
    jobs: int = 0
    finished: int = 0
    notes: list[str] = field(default_factory=list)
    # tenant -> device-hours admitted in the window, runs later preempted included (what it held, not what it finished)
    device_hours_by_tenant: dict[str, float] = field(default_factory=dict)
    # allocation utilisation of the resources the trace asks of, step by step over the window (its time-weighted
    # mean is `total_utilisation`); each step is `step_hours` long, the last one may be shorter
    step_hours: float = 1.0
    utilisation_over_time: list[float] = field(default_factory=list)

    def preemptions_by_class(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for p in self.preemptions:
            out[p.preemptor_class] += p.count
        return dict(out)


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile (0 < q <= 1) of sorted values; 0 for none."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def waits(group: str, records: Iterable[Record], end: float) -> Waits:
    records = list(records)
    seconds = sorted((r.first_admitted if r.first_admitted is not None else end) - r.job.arrival for r in records)
    hours = [s / HOUR for s in seconds]
    return Waits(group, len(records), round(percentile(hours, 0.5), 3), round(percentile(hours, 0.9), 3), round(percentile(hours, 0.99), 3),
                 round(sum(1 for s in seconds if s > HOUR) / len(seconds), 4) if seconds else 0.0,
                 sum(1 for r in records if r.first_admitted is None))


def _utilisation(env: spec.Environment, records: list[Record], window: float) -> list[Utilisation]:
    admitted: dict[tuple[str, str, str], float] = defaultdict(float)
    for r in records:
        for run in r.runs:
            admitted[(r.job.cluster, r.job.resource, run.flavor)] += r.job.devices * ((run.end if run.end is not None else window) - run.start)
    rows = []
    for cluster in env.clusters:
        per_resource: dict[str, list[Utilisation]] = defaultdict(list)
        for group in (*cluster.pools, *cluster.edge_groups):
            for resource, units in spec.group_capacity(group).items():
                per_resource[resource].append(Utilisation(cluster.name, resource, group.name, round(admitted[(cluster.name, resource, group.name)] / HOUR, 3),
                                                          round(units * window / HOUR, 3)))
        for resource, flavors in sorted(per_resource.items()):
            if not any(r.job.cluster == cluster.name and r.job.resource == resource for r in records):
                continue  # a resource the trace asks nothing of says nothing of the configuration
            rows.append(Utilisation(cluster.name, resource, "", round(sum(f.admitted_device_hours for f in flavors), 3),
                                    round(sum(f.available_device_hours for f in flavors), 3)))
            rows += flavors
    return rows


def _over_time(records: list[Record], totals: list[Utilisation], window: float) -> tuple[float, list[float]]:
    """(step, the utilisation of each step): device-time admitted in the step over device-time there was,
    for the (cluster, resource) pairs of `totals`, as `_utilisation` counts them."""
    step = max(HOUR, math.ceil(window / MOST_STEPS / HOUR) * HOUR)
    steps = math.ceil(window / step)
    asked = {(u.cluster, u.resource) for u in totals}
    devices = sum(u.available_device_hours for u in totals) * HOUR / window if window else 0.0
    held = [0.0] * steps
    for r in records:
        if (r.job.cluster, r.job.resource) not in asked:
            continue
        for run in r.runs:
            start, end = run.start, min(run.end if run.end is not None else window, window)
            while start < end:
                index = int(start // step)
                edge = min(end, (index + 1) * step)
                held[index] += r.job.devices * (edge - start)
                start = edge
    return step, [round(h / (devices * (min(window, (i + 1) * step) - i * step)), 4) if devices else 0.0 for i, h in enumerate(held)]


def _preemptions(records: dict[int, Record]) -> list[Preemption]:
    found: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for r in records.values():
        for run in r.runs:
            if run.end is not None and (run.preempted_by is not None or run.reason):
                by = records.get(run.preempted_by) if run.preempted_by is not None else None
                key = (by.job.tenant if by else "?", by.job.priority_class if by else run.reason or "?", r.job.tenant, r.job.priority_class)
                found[key].append(r.job.devices * (run.end - run.start) / HOUR)
    return [Preemption(*key, len(lost), round(sum(lost), 3)) for key, lost in sorted(found.items())]


def _changes(records: list[Record]) -> dict[float, list[tuple[str, int, int]]]:
    """moment -> (tenant, change of devices held, change of devices waiting) of every arrival, admission and end."""
    out: dict[float, list[tuple[str, int, int]]] = defaultdict(list)
    for r in records:
        t, d = r.job.tenant, r.job.devices
        out[r.job.arrival].append((t, 0, d))
        for run in r.runs:
            out[run.start].append((t, d, -d))
            if run.end is not None:
                out[run.end].append((t, -d, 0 if run.end == r.finished else d))  # a preempted run's job waits again
    return out


def _guarantees(env: spec.Environment, records: list[Record], window: float) -> list[Guarantee]:
    """Per (cluster, resource), sweep the moments anything changed; between two, who held what and who waited."""
    out = []
    for cluster, resource in sorted({(r.job.cluster, r.job.resource) for r in records}):
        mine = [r for r in records if (r.job.cluster, r.job.resource) == (cluster, resource)]
        tenants = sorted({r.job.tenant for r in mine})
        guaranteed = {t.name: t.quota[resource].guaranteed for t in env.tenants if resource in t.quota and cluster in t.clusters}
        changes = _changes(mine)
        moments = sorted({*changes, window})
        held, waiting = dict.fromkeys(tenants, 0), dict.fromkeys(tenants, 0)
        total, stretch, episodes, longest = (dict.fromkeys(tenants, 0.0), dict.fromkeys(tenants, 0.0), dict.fromkeys(tenants, 0),
                                             dict.fromkeys(tenants, 0.0))
        for start, end in zip(moments, moments[1:]):
            if start >= window:
                break
            for tenant, more_held, more_waiting in changes[start]:
                held[tenant] += more_held
                waiting[tenant] += more_waiting
            borrowing = {t for t in tenants if held[t] > guaranteed.get(t, 0)}
            for t in tenants:
                if waiting[t] > 0 and held[t] < min(guaranteed.get(t, 0), held[t] + waiting[t]) and borrowing - {t}:
                    episodes[t] += stretch[t] == 0
                    stretch[t] += end - start
                    total[t] += end - start
                    longest[t] = max(longest[t], stretch[t])
                else:
                    stretch[t] = 0.0
        out += [Guarantee(t, cluster, resource, round(total[t] / 60, 1), episodes[t], round(longest[t] / 60, 1)) for t in tenants]
    return out


def _use(records: list[Record], window: float) -> dict[str, float]:
    """tenant -> device-seconds admitted: every run, to its end or to the window's."""
    use: dict[str, float] = defaultdict(float)
    for r in records:
        for run in r.runs:
            use[r.job.tenant] += r.job.devices * ((run.end if run.end is not None else window) - run.start)
    return use


def _fairness(env: spec.Environment, records: list[Record], window: float) -> float:
    """Jain's index over the tenants with a guarantee the trace asks of: (sum x)^2 / (n sum x^2), x = use / guarantee."""
    use = _use(records, window)
    asked = {(r.job.tenant, r.job.cluster, r.job.resource) for r in records}
    owed: dict[str, float] = defaultdict(float)
    for t in env.tenants:
        for resource, quota in t.quota.items():
            for cluster in t.clusters:
                if (t.name, cluster, resource) in asked:
                    owed[t.name] += quota.guaranteed * window
    shares = [use[t] / owed[t] for t in owed if owed[t] > 0]
    squares = sum(x * x for x in shares)
    return round(sum(shares) ** 2 / (len(shares) * squares), 4) if squares else 1.0


def side_figures(side: str, revision: str, env: spec.Environment, trace: Trace, records: dict[int, Record]) -> SideFigures:
    window = trace.window
    done = list(records.values())
    arrived = [r for r in done if r.job.arrival < window]
    rows = _utilisation(env, done, window)
    totals = [u for u in rows if not u.flavor]
    admitted, available = sum(u.admitted_device_hours for u in totals), sum(u.available_device_hours for u in totals)
    offered = trace.offered(env)
    capacity = spec.capacity(env)
    weight = {key: capacity[key[0]][key[1]] for key in offered}
    backlog = [r for r in arrived if not r.running and r.finished is None]
    step, over_time = _over_time(done, totals, window)
    by_tenant: dict[str, list[Record]] = defaultdict(list)
    by_class: dict[str, list[Record]] = defaultdict(list)
    for r in arrived:
        by_tenant[r.job.tenant].append(r)
        by_class[r.job.priority_class].append(r)
    return SideFigures(
        side=side, revision=revision, utilisation=rows,
        total_utilisation=round(admitted / available, 4) if available else 0.0,
        offered_load=round(sum(offered[k] * weight[k] for k in offered) / sum(weight.values()), 4) if weight else 0.0,
        backlog_jobs=len(backlog), backlog_device_hours=round(sum(r.job.devices * r.job.duration for r in backlog) / HOUR, 3),
        waits_by_tenant=[waits(t, rs, window) for t, rs in sorted(by_tenant.items())],
        waits_by_class=[waits(c, rs, window) for c, rs in sorted(by_class.items())],
        waits_all=waits("all", arrived, window), preemptions=_preemptions(records),
        guarantees=_guarantees(env, arrived, window), fairness=_fairness(env, arrived, window),
        jobs=len(arrived), finished=sum(1 for r in arrived if r.finished is not None),
        device_hours_by_tenant={t: round(seconds / HOUR, 3) for t, seconds in sorted(_use(arrived, window).items())},
        step_hours=step / HOUR, utilisation_over_time=over_time,
    )
