"""A trace from the fleet's own history: the Workloads Kueue keeps on a live cluster, each finished one a job
of the trace. When it was submitted is its arrival, its LocalQueue's ClusterQueue names its tenant, its
priority class is its class, what its pods asked is its size, and the time from its last quota reservation
to its Finished condition is its duration: the demand the fleet saw, to replay on another configuration.

Prometheus cannot give this: Kueue's metrics are counts and histograms per ClusterQueue
(`kueue_admitted_workloads_total`, `kueue_admission_wait_time_seconds`) with no job in them. A Workload
that has not finished has no known duration; it is left out and counted, with every other reason a
Workload is not a job of the trace, in the trace's source line (never replayed as a zero-length job).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter

from fleetops import spec
from fleetops.errors import WhatifError
from fleetops.whatif.trace import DAY, MAX_JOBS, Trace, TraceJob, renumber, row_problems
from fleetops.why.jobs import Job as Workload
from fleetops.why.jobs import State
from fleetops.why.live import Live


def trace(live: Live, env: spec.Environment, since: dt.datetime | None = None) -> Trace:
    """The finished Workloads of `live`'s cluster submitted at or after `since` (default: the first one kept),
    in arrival order, over whole days from the midnight (UTC) before the first arrival."""
    kept = [w for w in live.jobs if w.created is not None and (since is None or w.created >= since)]
    if not kept:
        raise WhatifError(f"{live.cluster}: no Workload {'since ' + since.isoformat() + ' ' if since else ''}to make a trace of")
    first = min(w.created for w in kept if w.created is not None)
    start = dt.datetime.combine(first.date(), dt.time(), dt.timezone.utc)
    jobs: list[TraceJob] = []
    left_out: Counter[str] = Counter()
    devices = spec.capacity(env).get(live.cluster, {})  # the cluster's device resources, once for every Workload
    for w in sorted(kept, key=lambda w: (w.created, w.namespace, w.workload)):
        made = _job(w, live, env, start, devices)
        if isinstance(made, str):
            left_out[made] += 1
        elif len(jobs) < MAX_JOBS:
            jobs.append(made)
        else:
            left_out[f"past the {MAX_JOBS:,} jobs a trace holds"] += 1
    if not jobs:
        raise WhatifError(f"{live.cluster}: none of its {len(kept)} Workloads is a finished job of a tenant ({_reasons(left_out)})")
    last = max(j.arrival for j in jobs)
    window = max(DAY, math.ceil((last + 1) / DAY) * DAY)
    source = f"{live.cluster}'s Workloads from {start:%Y-%m-%d}: {len(jobs)} finished job{'s' if len(jobs) != 1 else ''}" + (f" ({_reasons(left_out)} left out)" if left_out else "")
    return Trace(tuple(renumber(jobs)), window, source)


def _reasons(left_out: Counter[str]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in left_out.most_common())


def _job(w: Workload, live: Live, env: spec.Environment, start: dt.datetime, devices: dict[str, int]) -> TraceJob | str:
    """The job a Workload was, or why it is none."""
    if w.state is not State.FINISHED or w.reserved_at is None or w.since is None or w.created is None:
        return "not finished (duration unknown)"
    tenant = live.queue_tenant.get(live.local_queues.get((w.namespace, w.queue or ""), ""))
    if tenant is None:
        return "not in a tenant's queue"
    asked = {r: n for r, n in w.requests().items() if r in devices}
    if len(asked) != 1:
        return "asking no device resource" if not asked else "asking two device resources (a job of a trace asks one)"
    [(resource, total)] = asked.items()
    pods = sum(ps.count for ps in w.pod_sets if resource in ps.requests)
    if total % pods:
        return "with pods asking unequal units"
    row = {"arrival": str((w.created - start).total_seconds()), "tenant": tenant, "class": w.priority_class or "", "resource": resource,
           "units": str(total // pods), "pods": str(pods), "duration": str(max(1.0, (w.since - w.reserved_at).total_seconds())),  # condition times are whole seconds
           "cluster": live.cluster}
    problem = next(row_problems(row, env), None)
    if problem is not None:
        return f"outside the environment's rules ({problem[0]})"
    return TraceJob(0, float(row["arrival"]), tenant, row["class"], resource, total // pods, pods, float(row["duration"]), live.cluster)

