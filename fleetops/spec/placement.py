"""Which pools and edge groups a tenant may use, how Kueue groups them (resource groups and its
limits on them), the priority classes each tenant's queues take, and where each guarantee is held."""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from fleetops.spec.devices import group_capacity, is_spot
from fleetops.spec.fields import Cluster, EdgeGroup, Environment, Group, PriorityClass, Quota, Taint, Tenant, group_names, named_groups
from fleetops.spec.positions import Loc


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
# A job names its LocalQueue in a label (kueue.x-k8s.io/queue-name), whose value the API server takes up
# to 63 characters: a queue with a longer name is created, and no job can ever be submitted to it.
QUEUE_NAME_MAX = 63


def queue_names(tenant: Tenant) -> tuple[str, str]:
    """The LocalQueues of the tenant's preempting and non-preempting workloads (modules/tenant.py)."""
    return f"{tenant.name}-queue", f"{tenant.name}-{NON_PREEMPTING}-queue"


def offline_queue_name(group: EdgeGroup) -> str:
    """The ClusterQueue of an edge group's offline work, and its LocalQueue in each tenant's namespace."""
    return f"{group.name}-offline"


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
    """The classes of the tenant's workloads that accept preemption, the only ones on its spot pools:
    those declared preemptible, and those the tenant accepts preemption for (its `preemptible_classes`)."""
    accepted = set(tenant.preemptible_classes)
    return tenant_classes(tenant, env, lambda pc: pc.preemptible or pc.name in accepted)


def restricting_taints(group: Group) -> list[Taint]:
    """The group's declared taints that keep a job off it unless it tolerates them: NoSchedule and
    NoExecute, but not one keyed by a device resource the group offers, which every pod requesting that
    resource tolerates (Kubernetes' ExtendedResourceToleration; the group's Kueue flavor,
    modules/node_pool.py). A spot pool's own taint (nodes.taints) is left out: it holds no guarantee."""
    offered = group_capacity(group)
    return [t for t in group.taints if t.effect != "PreferNoSchedule" and t.key not in offered]


@dataclass(frozen=True)
class Placement:
    """Which pools and edge groups of one cluster hold each tenant's guarantee there."""

    held: dict[tuple[str, str], dict[str, int]]  # (tenant, resource) -> pool or edge group -> units
    refused: list[tuple[Loc, str]]  # where the file asks for a placement no pool can hold, and why
    shared: dict[tuple[str, str], int] = field(default_factory=dict)  # (flavor, resource) -> what anyone may borrow there

    def borrowable(self, tenant: str, resource: str, flavor: str, lend_fraction: float) -> int:
        """What `tenant` may borrow of `resource` on `flavor` on an idle cluster, beyond its own guarantee:
        the units no guarantee holds and what the other tenants lend (scheduler.lend_fraction). A tenant's
        borrowing allowance (burst - guaranteed) is split over its pools by this, never by their capacity:
        a share given to a pool whose units are all guaranteed to others could never be used, its burst
        would be unreachable and lowering it would not help (each share shrinks with it)."""
        own = self.held.get((tenant, resource), {}).get(flavor, 0)
        return max(self.shared.get((flavor, resource), 0) - lent(own, lend_fraction), 0)


class _Claim(NamedTuple):
    """One tenant's guarantee of one resource on one cluster, and the pools that may hold it."""

    index: int  # the tenant's place in env.tenants
    tenant: Tenant
    resource: str
    quota: Quota
    pools: list[Group]  # open to the tenant, offering the resource, not spot: in the cluster's order

    def at(self, *rest: str) -> Loc:
        return ("tenants", self.index, "quota", self.resource, *rest)


def guarantee_placement(env: Environment, cluster: Cluster) -> Placement:
    """Where each tenant's guarantee on `cluster` is held (Kueue's nominalQuota per flavor).

    Kueue gives each flavor its own quota and admits a job's pods in one flavor, so a guarantee split
    over pools cannot be used by one job, and a job larger than its pool's share borrows and can be
    reclaimed although it is within the guarantee. So a guarantee is held whole by one pool, and a
    split is only ever declared (`guaranteed_per_pool`, held first, as declared). The others are placed
    by what they are, never by where the file lists them (a reorder must move nothing): the hardest
    to place first (the fewest untainted pools that could hold it alone, then the fewest pools, then
    the largest, then by tenant name), each on the pool with the least room left that holds it, a pool
    without taints before a tainted one (a tainted pool's guarantee serves only the jobs that tolerate
    its taint). Refused (`refused`): a guarantee that fits no one pool's room while the tenant's pools
    have room for it together (declare the split), and a pool holding more guarantees than it has
    units while the cluster has room for them all (more than the cluster holds is the policies'
    `quota.guaranteed_over_capacity`, which a waiver may accept).
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
    claims: dict[str, list[_Claim]] = {name: [] for name in clusters}
    # (pool or edge group, resource) -> its units, once per cluster: not once per tenant that may use it.
    units = {name: {(g.name, r): n for g in (*c.pools, *c.edge_groups) for r, n in group_capacity(g).items()} for name, c in clusters.items()}
    for ti, tenant in enumerate(env.tenants):
        if not tenant.quota:
            continue
        for cname in dict.fromkeys(tenant.clusters):
            if cname not in clusters:
                continue
            # No guarantee is held on a spot pool, whose nodes the provider may take back: the tenant
            # borrows spot capacity within its burst from the cluster's Cohort (modules/scheduler.py).
            groups = [g for g in eligible_groups(tenant, [clusters[cname]]) if not is_spot(g)]
            claims[cname] += [_Claim(ti, tenant, resource, quota, [g for g in groups if (g.name, resource) in units[cname]])
                              for resource, quota in sorted(tenant.quota.items())]
    out = {}
    for name, cluster in clusters.items():
        placement = _place_on(cluster, claims[name], units[name])
        out[name] = (cluster, Placement(placement.held, placement.refused, _shared(cluster, placement.held, env.scheduler.lend_fraction)))
    return out


def _place_on(cluster: Cluster, claims: list[_Claim], units: dict[tuple[str, str], int]) -> Placement:
    groups = [*cluster.pools, *cluster.edge_groups]
    tainted = {g.name: bool(restricting_taints(g)) for g in groups}
    used: dict[tuple[str, str], int] = {}  # (pool or edge group, resource) -> units guaranteed
    holders: dict[tuple[str, str], list[tuple[_Claim, int]]] = {}
    placement = Placement({}, [])

    def hold(claim: _Claim, shares: dict[str, int]) -> None:
        placement.held[(claim.tenant.name, claim.resource)] = shares
        for name, share in shares.items():
            used[(name, claim.resource)] = used.get((name, claim.resource), 0) + share
            holders.setdefault((name, claim.resource), []).append((claim, share))

    def hardest_first(claim: _Claim) -> tuple[int, int, int, str, str, int]:
        whole = [g for g in claim.pools if units[(g.name, claim.resource)] >= claim.quota.guaranteed]
        return (sum(not tainted[g.name] for g in whole), len(whole), -claim.quota.guaranteed, claim.tenant.name, claim.resource, claim.index)

    for claim in claims:
        if claim.quota.guaranteed_per_pool is not None:
            open_to = {g.name for g in claim.pools}
            hold(claim, {name: share for name, share in claim.quota.guaranteed_per_pool.items() if name in open_to})
    squeezed: list[tuple[_Claim, dict[str, int]]] = []  # held where there was no room for it, and the room there was
    for claim in sorted((c for c in claims if c.quota.guaranteed_per_pool is None), key=hardest_first):
        guaranteed = claim.quota.guaranteed
        left = {g.name: units[(g.name, claim.resource)] - used.get((g.name, claim.resource), 0) for g in claim.pools}
        fits = [g for g in claim.pools if left[g.name] >= guaranteed]
        if guaranteed == 0 or not claim.pools:
            hold(claim, {})
        elif fits:
            hold(claim, {min(fits, key=lambda g: (tainted[g.name], left[g.name])).name: guaranteed})
        else:
            hold(claim, {max(claim.pools, key=lambda g: left[g.name]).name: guaranteed})
            split = _split_into(guaranteed, left, tainted)
            if split is None:
                squeezed.append((claim, left))
            else:
                placement.refused.append((claim.at("guaranteed"), (
                    f"{guaranteed} {claim.resource} on {cluster.name} fits no one pool's room ({_rooms(left)} left after the other "
                    f"tenants' guarantees), and Kueue admits a job in one pool: declare the split, e.g. guaranteed_per_pool: "
                    f"{_shares(split)}, so that a job within it is bounded by its pool's share, or lower guaranteed to {max(max(left.values()), 0)}")))
    placement.refused.extend(_over_committed(cluster, claims, units, used, holders, tainted, squeezed))
    placement.refused.sort(key=lambda problem: problem[0])
    return placement


def lent(units: int, lend_fraction: float) -> int:
    """What a tenant lends of `units` of guarantee on one pool to the cluster's Cohort (its Cohort's
    lendingLimit, modules/tenant.py): the rest it keeps back for itself."""
    return int(units * lend_fraction)


def unguaranteed(cluster: Cluster, held: dict[tuple[str, str], dict[str, int]]) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> the units of the pool that no guarantee `held` on the cluster holds (what the
    cluster's root Cohort holds, modules/scheduler.py; below 0 where guarantees pass the pool's units)."""
    free = {(g.name, r): units for g in (*cluster.pools, *cluster.edge_groups) for r, units in group_capacity(g).items()}
    for (_, resource), shares in held.items():
        for flavor, units in shares.items():
            free[(flavor, resource)] -= units
    for group in cluster.edge_groups:  # the group's offline ClusterQueue holds these outside every cohort
        if group.offline_work is not None:
            free[(group.name, group.device.resource)] -= group.offline_work.devices
    return free


def _shared(cluster: Cluster, held: dict[tuple[str, str], dict[str, int]], lend_fraction: float) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> what the cluster's Cohort holds for anyone to borrow on an idle cluster: the
    units no guarantee holds, and what every tenant lends of its guarantee."""
    room = {key: max(units, 0) for key, units in unguaranteed(cluster, held).items()}
    for (_, resource), shares in held.items():
        for flavor, units in shares.items():
            room[(flavor, resource)] = room.get((flavor, resource), 0) + lent(units, lend_fraction)
    return room


def _over_committed(cluster: Cluster, claims: list[_Claim], units: dict[tuple[str, str], int],
                    used: dict[tuple[str, str], int], holders: dict[tuple[str, str], list[tuple[_Claim, int]]],
                    tainted: dict[str, bool], squeezed: list[tuple[_Claim, dict[str, int]]]) -> Iterator[tuple[Loc, str]]:
    """Guarantees a pool cannot hold while the cluster has units for them all: declared shares adding up
    to more than their pool's units (at each share), and a guarantee its pools had no room left for (at
    its `guaranteed:`). More than the cluster holds is the policies' (quota.guaranteed_over_capacity)."""
    asked: dict[str, int] = {}
    for claim in claims:
        asked[claim.resource] = asked.get(claim.resource, 0) + claim.quota.guaranteed
    has: dict[str, int] = {}
    for (_, resource), n in units.items():
        has[resource] = has.get(resource, 0) + n
    for claim, left in squeezed:
        if asked[claim.resource] <= has[claim.resource]:
            yield claim.at("guaranteed"), (
                f"{claim.quota.guaranteed} {claim.resource} on {cluster.name} does not fit the pools open to this tenant ({_rooms(left)} "
                f"left after the other tenants' guarantees), though the cluster has room for it elsewhere: open another pool to the "
                f"tenant (pools), or lower guaranteed to {_total(left)}")
    for (name, resource), held_there in holders.items():
        declared = [(c, n) for c, n in held_there if c.quota.guaranteed_per_pool is not None]
        taken = sum(n for _, n in declared)
        if taken <= units[(name, resource)] or asked[resource] > has[resource]:
            continue
        for claim, share in declared:
            own = claim.quota.guaranteed_per_pool or {}
            # What the tenant's pools have left once every other tenant's guarantee is held.
            left = {g.name: units[(g.name, resource)] - used.get((g.name, resource), 0) + own.get(g.name, 0) for g in claim.pools}
            split = _split_into(claim.quota.guaranteed, left, tainted)
            others = ", ".join(f"{c.tenant.name} {n}" for c, n in declared if c is not claim)
            elsewhere = {pool: n for pool, n in own.items() if pool not in left}  # its shares on its other clusters stay
            fix = (f"declare e.g. guaranteed_per_pool: {_shares({**split, **elsewhere})}" if split is not None else
                   f"its pools have {_rooms(left)} left after the other tenants' guarantees: lower guaranteed to "
                   f"{_total(left)}, or move another tenant's share off {name}")
            yield claim.at("guaranteed_per_pool", name), (
                f"{share} of {name}'s {units[(name, resource)]} {resource}, but the shares declared on it add up to {taken}"
                f"{f' (with {others})' if others else ''}, while cluster {cluster.name} has room for every guarantee: {fix}")


def _split_into(guaranteed: int, left: dict[str, int], tainted: dict[str, bool]) -> dict[str, int] | None:
    """A split of `guaranteed` that fits the pools' room, untainted and roomiest first; None if none does."""
    split: dict[str, int] = {}
    rest = guaranteed
    for name in sorted(left, key=lambda n: (tainted[n], -left[n])):
        if rest and left[name] > 0:
            split[name] = min(left[name], rest)
            rest -= split[name]
    return split if rest == 0 else None


def _total(left: dict[str, int]) -> int:
    """The room of pools together (a pool already over-committed adds none)."""
    return sum(max(n, 0) for n in left.values())


def _rooms(left: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in left.items())


def _shares(split: dict[str, int]) -> str:
    return "{" + ", ".join(f"{name}: {n}" for name, n in split.items()) + "}"
