"""How long a tenant sat below its guarantee while other tenants borrowed: `standing`'s one figure of the past.

The live queues say only now. The past is metering's recording rule `fleetops:tenant_devices:physical{cluster,
pool, tenant, resource}` (modules/metering.py): the physical devices each tenant's running pods hold on each
pool. Converted back to the quota's units by each pool's sharing factor and summed per tenant over the cluster,
a minute counts when the tenant held less than its guarantee while some other tenant held more than its own.
What it depends on travels with it: the window, the step, the series and the Prometheus it came from, and the
guarantees as the environment file declares them now. Without a Prometheus the figure is unknown, never zero.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fleetops import spec
from fleetops.metrics import DEVICES
from fleetops.prometheus import Prometheus
# plan's own conversion of the series' physical devices to quota units, not a second one
from fleetops.usage import Window, _factor

STEP_SECONDS = 60  # the recording rule's own evaluation interval (modules/metering.py METERING_INTERVAL)
NO_HISTORY = "unknown (no history: give --prometheus)"


@dataclass(frozen=True)
class BelowGuarantee:
    """Minutes of the window the tenant held less than its guarantee of `resource` on `cluster` while another borrowed."""

    minutes: float | None  # None: unknown
    basis: str  # what the figure depends on, or why it is unknown

    def to_dict(self) -> dict[str, Any]:
        return {"below_guarantee_minutes": self.minutes, "below_guarantee_basis": self.basis}


UNKNOWN = BelowGuarantee(None, NO_HISTORY)


def held_units(series: list[Any], cluster: spec.Cluster, resource: str) -> dict[str, dict[float, float]]:
    """tenant -> step time -> quota units its running pods held on the cluster (every pool summed)."""
    groups = {g.name: g for g in (*cluster.pools, *cluster.edge_groups)}
    out: dict[str, dict[float, float]] = {}
    for s in series:
        group = groups.get(s.labels.get("pool", ""))
        tenant = s.labels.get("tenant")
        if group is None or tenant is None:
            continue  # a pool the file no longer declares: its units cannot be converted
        factor = _factor(group, resource)
        steps = out.setdefault(tenant, {})
        for at, value in s.points:
            steps[at] = steps.get(at, 0.0) + value * factor
    return out


def below_guarantee(held: dict[str, dict[float, float]], guarantees: dict[str, int], tenant: str, steps: list[float]) -> float:
    """Minutes of `steps` (each STEP_SECONDS long) the tenant held less than its guarantee while another held more than its own."""
    mine = held.get(tenant, {})
    count = 0
    for at in steps:
        below = mine.get(at, 0.0) < guarantees.get(tenant, 0)
        others = any(units.get(at, 0.0) > guarantees.get(other, 0) for other, units in held.items() if other != tenant)
        count += below and others
    return count * STEP_SECONDS / 60


def measure(source: Prometheus, env: spec.Environment, cluster: spec.Cluster, tenant: str, resource: str, window: Window,
            now: float | None = None) -> BelowGuarantee:
    """The figure for one tenant, cluster and resource over the window ending `now` (default: this moment)."""
    end = (now if now is not None else time.time()) // STEP_SECONDS * STEP_SECONDS
    start = end - window.seconds + STEP_SECONDS
    expr = f'sum by (pool, tenant) ({DEVICES}{{cluster="{cluster.name}", resource="{resource}"}})'
    held = held_units(source.query_range(expr, start, end, STEP_SECONDS), cluster, resource)
    guarantees = {t.name: t.quota[resource].guaranteed for t in env.tenants if cluster.name in t.clusters and resource in t.quota}
    steps = [start + i * STEP_SECONDS for i in range(window.seconds // STEP_SECONDS)]
    basis = (f"last {window.spoken()} at {STEP_SECONDS}s steps of {DEVICES} (running pods' devices) from {source.url}, "
             f"against the guarantees {env.environment} declares now; a step without samples counts as nothing held")
    return BelowGuarantee(below_guarantee(held, guarantees, tenant, steps), basis)
