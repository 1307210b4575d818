"""Which pools and edge groups a tenant may use, how Kueue groups them (resource groups and its
limits on them), the priority classes each tenant's queues take, and where each guarantee is held."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fleetops.spec.devices import group_capacity, is_spot
from fleetops.spec.fields import Cluster, Environment, Group, PriorityClass, Tenant, group_names, named_groups


def open_groups(tenant: Tenant, cluster: Cluster) -> int:
    """How many of the cluster's pools and edge groups the tenant may use, counted without listing them."""
    names = group_names(cluster)
    pools = len(cluster.pools) if tenant.pools is None else sum(len(names.pool.get(n, ())) for n in set(tenant.pools))
    return pools + sum(len(names.edge_group.get(n, ())) for n in set(tenant.edge_groups))


def eligible_groups(tenant: Tenant, clusters: Iterable[Cluster]) -> list[Group]:
    """The pools (and edge groups) a tenant's workloads may land on, in declaration order. A tenant that
    names no pools gets every pool but the spot ones: spot capacity is taken only by naming it."""
    out: list[Group] = []
    for cluster in clusters:
        names = group_names(cluster)
        out += [p for p in cluster.pools if p.spot is None] if tenant.pools is None else named_groups(names.pool, tenant.pools)
        out += named_groups(names.edge_group, tenant.edge_groups)
    return out


def bundles(resources: list[str], groups: list[Group]) -> list[tuple[list[str], list[str]]]:
    """(resources, flavors) of each Kueue resource group covering `resources` on `groups`.

    Kueue lets a flavor appear in only one resource group, so resources that share a pool (the MIG
    profiles of one GPU) are covered together; each flavor then lists every covered resource.
    """
    out: list[tuple[list[str], list[str]]] = []
    for resource in resources:
        flavors = {g.name for g in groups if resource in group_capacity(g)}
        joined = [b for b in out if set(b[1]) & flavors]
        covered = sorted({resource, *(r for b in joined for r in b[0])})
        names = {f for b in joined for f in b[1]} | flavors
        out = [b for b in out if b not in joined] + [(covered, [g.name for g in groups if g.name in names])]
    return out


@dataclass(frozen=True)
class KueueLimits:
    """What Kueue v0.17.0 holds in the resourceGroups of one ClusterQueue or Cohort: its CRDs' maxItems
    (apis/kueue/v1beta2/clusterqueue_types.go, cohort_types.go) and, for a ClusterQueue, its webhook's
    totals (pkg/webhooks/clusterqueue_webhook.go). Past them the API server refuses the object at apply."""

    groups: int = 16
    per_group: int = 64  # covered resources, and flavors, in one resource group
    total: int = 256  # covered resources, and flavors, over a ClusterQueue's resource groups
    combinations: int = 512  # flavors x covered resources in one resource group of a ClusterQueue


KUEUE = KueueLimits()


def kueue_limit_problem(groups: list[tuple[list[str], list[str]]]) -> str | None:
    """What in these resource groups (`bundles`) Kueue refuses, or None."""
    if len(groups) > KUEUE.groups:
        return f"{len(groups)} Kueue resource groups (device resources that share no pool), more than the {KUEUE.groups} Kueue holds"
    for resources, flavors in groups:
        what = f"{resources[0]}{f' and {len(resources) - 1} more resources sharing its pools' if len(resources) > 1 else ''}"
        if len(resources) > KUEUE.per_group:
            return f"{what}: {len(resources)} resources in one Kueue resource group, more than the {KUEUE.per_group} it covers"
        if len(flavors) > KUEUE.per_group:
            return f"{what}: {len(flavors)} pools and edge groups in one Kueue resource group, more than the {KUEUE.per_group} flavors it holds"
        if len(flavors) * len(resources) > KUEUE.combinations:
            return (f"{what}: {len(flavors)} pools x {len(resources)} resources in one Kueue resource group, more than the "
                    f"{KUEUE.combinations} flavor-resource combinations it holds")
    for kind, count in (("resources", sum(len(r) for r, _ in groups)), ("pools and edge groups", sum(len(f) for _, f in groups))):
        if count > KUEUE.total:
            return f"{count} {kind} over the Kueue resource groups, more than the {KUEUE.total} a ClusterQueue holds"
    return None


NON_PREEMPTING = "non-preempting"


def tenant_classes(tenant: Tenant, env: Environment, keep: Callable[[PriorityClass], bool]) -> list[str]:
    """The classes `keep` picks that the tenant's workloads may carry (all of them when it names none)."""
    allowed = set(tenant.priority_classes) or {pc.name for pc in env.priority_classes}
    return sorted(pc.name for pc in env.priority_classes if keep(pc) and pc.name in allowed)


def non_preempting_classes(tenant: Tenant, env: Environment) -> list[str]:
    """The classes declared never to preempt that the tenant's workloads may carry (a workload naming
    none carries the default, refused where the tenant may not use it: modules/tenant.admission_manifests);
    they go through a second ClusterQueue, `<tenant>-non-preempting`."""
    return tenant_classes(tenant, env, lambda pc: pc.preemption == "Never")


def preemptible_classes(tenant: Tenant, env: Environment) -> list[str]:
    """The classes declared preemptible that the tenant's workloads may carry: the only ones on spot pools."""
    return tenant_classes(tenant, env, lambda pc: pc.preemptible)


@dataclass(frozen=True)
class Placement:
    """Which pools and edge groups of one cluster hold each tenant's guarantee there."""

    held: dict[tuple[str, str], dict[str, int]]  # (tenant, resource) -> pool or edge group -> units
    unsplit: list[tuple[int, str, str]]  # (tenant index, resource, why): no one pool holds it, no split declared


def guarantee_placement(env: Environment, cluster: Cluster) -> Placement:
    """Where each tenant's guarantee on `cluster` is held (Kueue's nominalQuota per flavor).

    Kueue gives each flavor its own quota and admits a job's pods in one flavor, so a guarantee split
    over pools cannot be used by one job, and a job larger than its pool's share borrows and can be
    reclaimed although it is within the guarantee. So a guarantee is held whole by one pool: the first
    open to the tenant (in the cluster's order) with room for it after the guarantees of the tenants
    declared above it. A split is only ever declared (`guaranteed_per_pool`); a guarantee that fits
    no one pool's room while the tenant's pools have room for it together is refused (`unsplit`).
    """
    cached = env.placement_cache.get(cluster.name)
    if cached is None or cached[0] is not env.tenants or cached[1] is not cluster:
        for name, (placed_on, placement) in _place(env).items():  # every cluster in one walk over the tenants
            env.placement_cache[name] = (env.tenants, placed_on, placement)
        cached = env.placement_cache.get(cluster.name)
        if cached is None or cached[1] is not cluster:  # a cluster not in env: no tenant placed there
            return Placement({}, [])
    return cached[2]


def _place(env: Environment) -> dict[str, tuple[Cluster, Placement]]:
    clusters: dict[str, Cluster] = {}
    for c in env.clusters:  # a duplicate name is reported by cross_checks; references resolve to the first
        clusters.setdefault(c.name, c)
    used: dict[tuple[str, str, str], int] = {}  # (cluster, pool or edge group, resource) -> units guaranteed
    out = {name: (cluster, Placement({}, [])) for name, cluster in clusters.items()}
    for ti, tenant in enumerate(env.tenants):
        if not tenant.quota:
            continue
        for cname in dict.fromkeys(tenant.clusters):
            if cname not in clusters:
                continue
            groups = eligible_groups(tenant, [clusters[cname]])
            placement = out[cname][1]
            for resource, quota in sorted(tenant.quota.items()):
                # No guarantee is held on a spot pool, whose nodes the provider may take back: the tenant
                # borrows spot capacity within its burst from the cluster's Cohort (modules/scheduler.py).
                room = {g.name: units - used.get((cname, g.name, resource), 0) for g in groups
                        if not is_spot(g) and (units := group_capacity(g).get(resource)) is not None}
                if quota.guaranteed_per_pool is not None:
                    shares = {name: units for name, units in quota.guaranteed_per_pool.items() if name in room}
                else:
                    shares, why = _one_pool(quota.guaranteed, room)
                    if why:
                        placement.unsplit.append((ti, resource, f"{quota.guaranteed} {resource} on {cname} {why}"))
                for name, units in shares.items():
                    used[(cname, name, resource)] = used.get((cname, name, resource), 0) + units
                placement.held[(tenant.name, resource)] = shares
    return out


def _one_pool(guaranteed: int, room: dict[str, int]) -> tuple[dict[str, int], str | None]:
    """The one pool that holds the guarantee, and why it cannot be held so, if it cannot."""
    if guaranteed == 0 or not room:
        return {}, None
    fits = next((name for name, left in room.items() if left >= guaranteed), None)
    if fits is not None:
        return {fits: guaranteed}, None
    most = max(room, key=lambda name: room[name])
    if sum(max(left, 0) for left in room.values()) < guaranteed:
        # More than the pools have room for, however split: the policies judge the cluster's
        # guarantees against its capacity (quota.guaranteed_over_capacity), and may waive it.
        return {most: guaranteed}, None
    split: dict[str, int] = {}
    rest = guaranteed
    for name, left in room.items():
        if rest and left > 0:
            split[name] = min(left, rest)
            rest -= split[name]
    return {most: guaranteed}, (
        f"fits no one pool's room ({', '.join(f'{n} {left}' for n, left in room.items())} left after the tenants above), and Kueue "
        f"admits a job in one pool: declare the split, e.g. guaranteed_per_pool: {{{', '.join(f'{n}: {u}' for n, u in split.items())}}}, "
        f"so that a job within it is bounded by its pool's share, or lower guaranteed to {max(room[most], 0)}")
