"""The jobs a replay submits: read from a CSV the user wrote, or generated in the shape of Alibaba PAI's GPU trace.

A trace is a window of simulated time (seconds from its start, a Monday 00:00) and its jobs. The CSV
(docs/whatif.md) has a header and one job a row:

    arrival,tenant,class,resource,units,pods,duration[,cluster]

`arrival` and `duration` in seconds, `units` the schedulable units of `resource` each of `pods` pods
asks (a time-sliced or MIG unit counts one), `class` one of the tenant's priority classes, `cluster`
one of the tenant's (default: its first cluster that offers the resource). A row that breaks a rule is
refused at its file and line, naming the column; nothing is replayed.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fleetops import spec
from fleetops.errors import Problem, WhatifError

COLUMNS = ("arrival", "tenant", "class", "resource", "units", "pods", "duration")
OPTIONAL = ("cluster",)
DAY = 86400.0
MAX_BYTES = 64 << 20
MAX_JOBS = 200_000
MAX_PROBLEMS = 20  # a file wrong throughout is told its first problems, not a million lines


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: `pods` pods of `units` of `resource` each, for `duration` seconds once admitted."""

    index: int
    arrival: float
    tenant: str
    priority_class: str
    resource: str
    units: int
    pods: int
    duration: float
    cluster: str

    @property
    def devices(self) -> int:
        return self.units * self.pods

    @property
    def name(self) -> str:
        return f"job-{self.index:06d}"


@dataclass(frozen=True)
class Trace:
    """Jobs in arrival order over a window of `window` seconds; `source` says where they came from."""

    jobs: tuple[TraceJob, ...]
    window: float
    source: str

    def offered(self, env: spec.Environment) -> dict[tuple[str, str], float]:
        """(cluster, resource) -> the device-time the jobs ask within the window over the device-time there
        is: the load offered, the ceiling of any allocation."""
        capacity = spec.capacity(env)
        asked: dict[tuple[str, str], float] = {}
        for job in self.jobs:
            key = (job.cluster, job.resource)
            asked[key] = asked.get(key, 0.0) + job.devices * min(job.duration, self.window - job.arrival)
        return {key: asked[key] / (capacity[key[0]][key[1]] * self.window) for key in sorted(asked)}


def _clusters_offering(tenant: spec.Tenant, env: spec.Environment, resource: str) -> list[str]:
    capacity = spec.capacity(env)
    return [c for c in tenant.clusters if capacity.get(c, {}).get(resource, 0) > 0]


def tenant_classes(tenant: spec.Tenant, env: spec.Environment) -> list[str]:
    return list(tenant.priority_classes) or [pc.name for pc in env.priority_classes]


def row_problems(row: dict[str, str], env: spec.Environment) -> Iterator[tuple[str, str]]:
    """(column, what is wrong) for each rule the row breaks; nothing when it is a job."""
    tenants = {t.name: t for t in env.tenants}
    numbers: dict[str, float] = {}
    for column, kind in (("arrival", float), ("duration", float), ("units", int), ("pods", int)):
        try:
            numbers[column] = kind(row[column])
        except ValueError:
            yield column, f"{'a whole number' if kind is int else 'a number of seconds'} expected, got {row[column]!r}"
            continue
        if not math.isfinite(numbers[column]) or numbers[column] < (0 if column == "arrival" else 1):
            yield column, f"must be {'>= 0' if column == 'arrival' else '>= 1'}, got {row[column]!r}"
    tenant = tenants.get(row["tenant"])
    if tenant is None:
        yield "tenant", f"no tenant {row['tenant']!r} in the environment"
        return
    if row["class"] not in tenant_classes(tenant, env):
        yield "class", f"tenant {tenant.name} may not use priority class {row['class']!r} (it may: {', '.join(tenant_classes(tenant, env))})"
    quota = tenant.quota.get(row["resource"])
    if quota is None:
        yield "resource", f"tenant {tenant.name} has no quota of {row['resource']!r}"
        return
    cluster = row.get("cluster") or ""
    offering = _clusters_offering(tenant, env, row["resource"])
    if cluster and cluster not in offering:
        yield "cluster", f"tenant {tenant.name} has no {row['resource']} on cluster {cluster!r} (it has: {', '.join(offering) or 'none'})"
    if "units" in numbers and "pods" in numbers and numbers["units"] * numbers["pods"] > quota.burst:
        yield "units", (f"{int(numbers['units'] * numbers['pods'])} {row['resource']} in all ({row['units']} x {row['pods']} pods) is more than "
                        f"tenant {tenant.name}'s burst {quota.burst}: it could never be admitted")


def read_csv(path: Path, env: spec.Environment, window: float | None = None, display: str | None = None) -> Trace:
    """The jobs of a CSV trace, in arrival order (ties in file order), over `window` seconds (default:
    whole days up to the last arrival); a WhatifError with each bad row's place otherwise."""
    shown = display or str(path)
    if not path.is_file():
        raise WhatifError(f"{shown}: no such file (a CSV trace: {','.join(COLUMNS)})")
    if path.stat().st_size > MAX_BYTES:
        raise WhatifError(f"{shown}: {path.stat().st_size} bytes, more than a trace may hold ({MAX_BYTES})")
    problems: list[Problem] = []
    jobs: list[TraceJob] = []
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        header = [name.strip() for name in reader.fieldnames or []]
        missing = [c for c in COLUMNS if c not in header]
        unknown = [c for c in header if c not in COLUMNS + OPTIONAL]
        if missing or unknown:
            raise WhatifError(problems=[Problem(f"the header must name {','.join(COLUMNS)}[,cluster]"
                                                + (f"; missing: {', '.join(missing)}" if missing else "")
                                                + (f"; unknown: {', '.join(unknown)}" if unknown else ""), shown, 1)])
        reader.fieldnames = header
        for row in reader:
            line = reader.line_num
            if len(jobs) >= MAX_JOBS:
                raise WhatifError(problems=[Problem(f"more than {MAX_JOBS} jobs: split the trace", shown, line)])
            if None in row or any(v is None for v in row.values()):
                problems.append(Problem(f"{len(header)} columns expected", shown, line))
            else:
                clean = {k: v.strip() for k, v in row.items()}
                found = [Problem(message, shown, line, path=column) for column, message in row_problems(clean, env)]
                problems += found
                if not found:
                    jobs.append(_job(len(jobs), clean, env))
            if len(problems) >= MAX_PROBLEMS:
                break
    if problems:
        raise WhatifError(problems=problems)
    if not jobs:
        raise WhatifError(problems=[Problem("no jobs: a header and at least one row", shown, 1)])
    jobs.sort(key=lambda j: (j.arrival, j.index))
    last = max(j.arrival for j in jobs)
    span = window if window is not None else max(DAY, math.ceil((last + 1) / DAY) * DAY)
    return Trace(tuple(renumber(jobs)), span, shown)


def _job(index: int, row: dict[str, str], env: spec.Environment) -> TraceJob:
    tenant = next(t for t in env.tenants if t.name == row["tenant"])
    cluster = row.get("cluster") or _clusters_offering(tenant, env, row["resource"])[0]
    return TraceJob(index, float(row["arrival"]), tenant.name, row["class"], row["resource"], int(row["units"]), int(row["pods"]),
               float(row["duration"]), cluster)


def renumber(jobs: Sequence[TraceJob]) -> Iterator[TraceJob]:
    """The jobs numbered in the order given: a job's index is its place in arrival order."""
    for i, job in enumerate(jobs):
        yield TraceJob(i, job.arrival, job.tenant, job.priority_class, job.resource, job.units, job.pods, job.duration, job.cluster)


def write_csv(trace: Trace, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*COLUMNS, *OPTIONAL])
        for j in trace.jobs:
            writer.writerow([f"{j.arrival:.0f}", j.tenant, j.priority_class, j.resource, j.units, j.pods, f"{j.duration:.0f}", j.cluster])


# --- the generator ------------------------------------------------------------------------------


def shape() -> dict[str, Any]:
    """The PAI-shaped parameters, each with its source (fleetops/whatif/pai_shape.json)."""
    return json.loads(resources.files("fleetops.whatif").joinpath("pai_shape.json").read_text())


def _weighted(rng: random.Random, table: dict[str, float]) -> int:
    keys = list(table)
    return int(rng.choices(keys, weights=[table[k] for k in keys])[0])


def _arrival(rng: random.Random, days: int, hourly: list[float]) -> float:
    """A moment of the window, its hour of day drawn by the diurnal weights, uniform within the hour."""
    day = rng.randrange(days)
    hour = rng.choices(range(24), weights=hourly)[0]
    return day * DAY + hour * 3600 + rng.random() * 3600


def generate(env: spec.Environment, days: int, jobs: int, load: float, seed: int, clusters: Sequence[str] = ()) -> Trace:
    """`jobs` jobs over `days` days shaped after PAI's trace (`shape()`), on `clusters` (default: every cluster
    a tenant has a device quota on), their run times scaled per cluster and resource so that the device-time
    they ask within the window is `load` of the device-time there is: the offered load of each."""
    if days < 1 or jobs < 1 or not 0 < load <= 4:
        raise WhatifError(f"whatif: --days and --jobs must be >= 1 and --load in (0, 4], got {days}, {jobs}, {load}")
    unknown = sorted(set(clusters) - {c.name for c in env.clusters})
    if unknown:
        raise WhatifError(f"whatif: --cluster: no cluster {', '.join(unknown)} in {env.environment}")
    p = {k: v["value"] for k, v in shape().items() if isinstance(v, dict)}
    rng = random.Random(seed)

    def offering(tenant: spec.Tenant, resource: str) -> list[str]:
        return [c for c in _clusters_offering(tenant, env, resource) if not clusters or c in clusters]

    tenants = [t for t in sorted(env.tenants, key=lambda t: t.name) if any(offering(t, r) for r in t.quota)]
    if not tenants:
        raise WhatifError(f"whatif: no tenant of {env.environment} has a device quota there: nothing to generate")
    rng.shuffle(tenants)
    zipf = [1 / (rank + 1) ** p["tenant_zipf_exponent"] for rank in range(len(tenants))]
    median, sigma = p["runtime_seconds"]["median"], p["runtime_seconds"]["sigma"]
    made: list[TraceJob] = []
    for i in range(jobs):
        tenant = rng.choices(tenants, weights=zipf)[0]
        offered = sorted(r for r in tenant.quota if offering(tenant, r))
        resource = rng.choices(offered, weights=[max(1, tenant.quota[r].guaranteed) for r in offered])[0]
        cluster = rng.choice(offering(tenant, resource))
        units = 1 if rng.random() < p["fractional_share"] else _weighted(rng, p["whole_gpu_sizes"])
        pods = _weighted(rng, p["instances"])
        burst = tenant.quota[resource].burst
        units = max(1, min(units, burst))
        pods = max(1, min(pods, burst // units))
        runtime = min(max(rng.lognormvariate(math.log(median), sigma), p["runtime_seconds"]["min"]), p["runtime_seconds"]["max"])
        made.append(TraceJob(i, _arrival(rng, days, p["hourly_arrival_weight"]), tenant.name, rng.choice(tenant_classes(tenant, env)),
                        resource, units, pods, runtime, cluster))
    trace = Trace(tuple(made), days * DAY, "")
    for _ in range(4):  # what runs past the window is not offered within it: scaled again on what is
        scale = {key: load / value for key, value in trace.offered(env).items()}
        trace = Trace(tuple(TraceJob(j.index, j.arrival, j.tenant, j.priority_class, j.resource, j.units, j.pods,
                                max(60.0, round(j.duration * scale[(j.cluster, j.resource)])), j.cluster) for j in trace.jobs), trace.window, "")
    ordered = sorted(trace.jobs, key=lambda j: (j.arrival, j.index))
    return Trace(tuple(renumber(ordered)), trace.window,
                 f"generated: PAI-shaped, {jobs} jobs over {days} days, offered load {load}, seed {seed}")
