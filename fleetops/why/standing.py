"""Where a tenant stands on a cluster now, per device resource: its guarantee (what Kueue's live queues
hold for it), what it holds, what of that it borrows, what of its guarantee others hold while it does not
use it (lent), its pending work, and from metering's history how long it sat below its guarantee while
others borrowed (`history`; unknown without it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetops.why.answer import ClusterContext, device_resources
from fleetops.why.history import UNKNOWN, BelowGuarantee
from fleetops.why.jobs import State


@dataclass(frozen=True)
class Standing:
    tenant: str
    cluster: str
    resource: str
    guaranteed: int
    reachable: int  # the most it may hold on an idle cluster (its burst as Kueue grants it)
    in_use: int
    borrowed: int
    lent: int  # of its guarantee, unused, held by others borrowing past the pool's unguaranteed units
    pending_jobs: int
    pending_units: int
    below: BelowGuarantee = UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "below"}, **self.below.to_dict()}


History = Callable[[str], BelowGuarantee]  # resource -> the tenant's minutes below its guarantee on the cluster


def standing(ctx: ClusterContext, tenant: str, history: History | None = None) -> list[Standing]:
    """The tenant's standing per device resource it has quota for (or asks for) on the cluster; `history` (metering's
    Prometheus) gives its minutes below guarantee while others borrowed, unknown without it."""
    granted = ctx.granted.get(tenant, {})
    devices = device_resources(ctx.env)
    pending: dict[str, list[int]] = {}
    for job in ctx.live.jobs:
        if job.namespace == tenant and job.state in (State.PENDING, State.EVICTED):
            for resource, units in job.requests().items():
                if resource in devices:
                    pending.setdefault(resource, []).append(units)
    out = []
    for resource in sorted(set(granted) | set(pending)):
        per_flavor = granted.get(resource, {})
        in_use = borrowed = lent = 0
        for flavor, grant in per_flavor.items():
            used = ctx.tenant_holds(tenant, flavor, resource)
            in_use, borrowed = in_use + used, borrowed + ctx.borrowed(tenant, flavor, resource)
            # Borrowers take the pool's unguaranteed units first: a guarantee is lent only past them.
            others = sum(ctx.borrowed(t, flavor, resource) for t in ctx.granted if t != tenant)
            guarantees = sum(g[resource][flavor].guaranteed for g in ctx.granted.values() if flavor in g.get(resource, {}))
            shared = ctx.pool_units(flavor, resource) - guarantees
            lent += min(max(0, grant.guaranteed - used), max(0, others - shared))
        units = pending.get(resource, [])
        out.append(Standing(tenant, ctx.cluster.name, resource, sum(g.guaranteed for g in per_flavor.values()),
                            max((g.reachable for g in per_flavor.values()), default=0), in_use, borrowed, lent, len(units), sum(units),
                            history(resource) if history else UNKNOWN))
    return out
