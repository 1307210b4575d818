"""Synthetic kube-state-metrics series for an environment's tenants, and the device-hours they mean.

Used by the real-Prometheus statements test and the metering benchmark. The device-hours are computed
here from the generator's own pods (what each requests, when it runs, and this file's own reading of
the pools' sharing), never by fleetops code: the statements are checked against them.

One pod per tenant and pool it may use, on one node of the pool; it runs or not hour by hour. Samples
are hourly and the server answers a sample for an hour (--query.lookback-delta=1h): a month of the
bundled prod is ~60,000 samples, where 1-minute samples would be 60 times that for the same sums.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HOUR = 3600
# Physical devices per requested unit, as the test reads each sharing: a time-sliced GPU with 4
# replicas is 4 units; MIG 1g.10gb x7 is 7 units per GPU; on the A100-40GB cut into one 3g.20gb and
# two 2g.10gb, a 3g is half the GPU's memory slices and a 2g a quarter.
def per_unit(pool: dict[str, Any]) -> dict[str, float]:
    resource = pool["device"]["resource"]
    sharing = pool.get("sharing", {})
    if sharing.get("mode") == "time-slicing":
        return {resource: 1 / sharing["replicas"]}
    if sharing.get("mode") == "mig":
        profiles = sharing["mig"]["profiles"]
        if sharing["mig"].get("strategy", "single") == "single":
            (count,) = profiles.values()
            return {resource: 1 / count}
        slices = {"3g.20gb": 4, "2g.10gb": 2, "1g.5gb": 1, "3g.40gb": 4, "2g.20gb": 2, "1g.10gb": 1}  # memory slices of 8 per A100/H100
        total = sum(slices[p] * n for p, n in profiles.items())
        return {f"nvidia.com/mig-{p}": slices[p] / total for p in profiles}
    return {resource: 1.0}


def allocatable(group: dict[str, Any]) -> dict[str, int]:
    """What the device plugins of a group's nodes advertise, per resource, as the test reads the sharing: 4 units per
    GPU with 4 time-slicing replicas, 7 per GPU of MIG 1g.10gb x7, per profile its count per GPU for strategy mixed."""
    devices = group["nodes"] * group["device"]["per_node"]
    sharing = group.get("sharing", {})
    if sharing.get("mode") == "time-slicing":
        return {group["device"]["resource"]: devices * sharing["replicas"]}
    if sharing.get("mode") == "mig":
        profiles = sharing["mig"]["profiles"]
        if sharing["mig"].get("strategy", "single") == "single":
            return {group["device"]["resource"]: devices * sum(profiles.values())}
        return {f"nvidia.com/mig-{p}": devices * n for p, n in profiles.items()}
    return {group["device"]["resource"]: devices}


def ksm(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


@dataclass
class Pod:
    tenant: str
    cluster: str
    pool: str
    node_label: str  # label_fleetops_io_pool or label_fleetops_io_edge_group
    requests: dict[str, int]  # device resource -> units
    physical: float  # devices it holds while running
    running: list[bool]  # per hourly sample


def pods(env: dict[str, Any], start: int, end: int, seed: int = 22) -> list[Pod]:
    """A pod per tenant, cluster and pool (or edge group) it may use; hourly running flags from a seeded generator."""
    rng = random.Random(seed)
    samples = (end - start) // HOUR + 1
    groups = {(c["name"], g["name"]): (kind, g) for c in env["clusters"]
              for kind in ("pools", "edge_groups") for g in c.get(kind, [])}
    out = []
    for tenant in env["tenants"]:
        for cluster in tenant["clusters"]:
            for name in [*(tenant.get("pools") or []), *tenant.get("edge_groups", [])]:
                if (cluster, name) not in groups:
                    continue
                kind, group = groups[(cluster, name)]
                fractions = per_unit(group)
                requests = {r: rng.randint(1, 4) for r in fractions}
                share = rng.random()
                out.append(Pod(tenant["name"], cluster, name, "label_fleetops_io_pool" if kind == "pools" else "label_fleetops_io_edge_group",
                               requests, sum(n * fractions[r] for r, n in requests.items()),
                               [rng.random() < share for _ in range(samples)]))
    return out


def openmetrics(env: dict[str, Any], pod_list: list[Pod], start: int, end: int) -> str:
    """The kube-state-metrics series of the pods, their nodes and namespaces, hourly from start to end, plus a
    system pod holding a GPU (never a tenant's): OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.
    Each pool and edge group is one node, `POOL-0`, allocatable with the group's whole declared capacity."""
    times = range(start, end + 1, HOUR)

    def family(name: str, series: list[tuple[str, list[float] | float]]) -> Iterator[str]:
        yield f"# TYPE {name} gauge"
        for labels, values in series:
            for i, t in enumerate(times):
                value = values[i] if isinstance(values, list) else values
                yield f"{name}{{{labels}}} {value:g} {t}"

    nodes = sorted((g["name"], "label_fleetops_io_pool" if kind == "pools" else "label_fleetops_io_edge_group", allocatable(g))
                   for c in env["clusters"] for kind in ("pools", "edge_groups") for g in c.get(kind, []))
    some = pod_list[0]
    requests = [(f'namespace="{p.tenant}",pod="{p.tenant}-{p.pool}",container="c{i}",node="{p.pool}-0",resource="{ksm(r)}",unit="integer"', float(n))
                for p in pod_list for i, (r, n) in enumerate(sorted(p.requests.items()))]
    requests.append((f'namespace="kube-system",pod="probe",container="c0",node="{some.pool}-0",resource="{ksm(next(iter(some.requests)))}",unit="integer"', 1.0))
    phases = [(f'namespace="{p.tenant}",pod="{p.tenant}-{p.pool}",phase="Running"', [float(r) for r in p.running]) for p in pod_list]
    phases.append(('namespace="kube-system",pod="probe",phase="Running"', 1.0))
    lines = [
        *family("kube_node_labels", [(f'node="{pool}-0",{label}="{pool}"', 1.0) for pool, label, _ in nodes]),
        *family("kube_node_status_allocatable", [(f'node="{pool}-0",resource="{ksm(r)}",unit="integer"', float(n))
                                                 for pool, _, units in nodes for r, n in sorted(units.items())]),
        *family("kube_namespace_labels", [(f'namespace="{t}",label_fleetops_io_tenant="{t}"', 1.0) for t in sorted({p.tenant for p in pod_list})]
                + [('namespace="kube-system"', 1.0)]),
        *family("kube_pod_container_resource_requests", requests),
        *family("kube_pod_status_phase", phases),
        "# EOF",
    ]
    return "\n".join(lines) + "\n"


def device_hours(pod: Pod, start: int, a: int, b: int) -> float:
    """Device-hours the pod held in [a, b): minute by minute, each minute held as at the hourly sample
    at or before it (samples from `start` on)."""
    total = 0.0
    for minute in range(a, b, 60):
        if minute < start:
            continue
        index = (minute - start) // HOUR
        if index < len(pod.running) and pod.running[index]:
            total += pod.physical / 60
    return total


def unix(day: datetime.date) -> int:
    return int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc).timestamp())
