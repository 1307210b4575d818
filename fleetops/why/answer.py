"""Why one job waits, in the environment file's terms, from one live read of its cluster (`live.Live`).

Kueue says "insufficient unused quota for nvidia.com/gpu in flavor dev-a100, 4 more needed"; the fleet
knows which line of which file that is. For each device resource a pod set asks, the answer walks what
Kueue walks, with the live queues' own arithmetic (`grants.tree`: what each queue may reach) and usage
(the ClusterQueues' status): no pool of the cluster has the device or the MIG profile; none open to the
tenant; no quota for it; more in one pool than the tenant may ever reach there (its burst); room only on
pools whose taints the job does not tolerate (a dedicated pool, a spot pool its class may not use); and
then, for a job that fits, what holds it back now: the tenant's own burst in use, or the pool full (with
who holds it, within guarantee or borrowed, and whether Kueue reclaims it or the job's class never
preempts). Node-level causes are read beside it: a pool whose nodes advertise less than declared,
missing, NotReady, cordoned or quarantined nodes, and nodes whose clocks are skewed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleetops import grants, inventory, spec
from fleetops.errors import Problem
from fleetops.kube import CORDON_ANNOTATION, QUARANTINE_TAINT
from fleetops.why.jobs import Job, PodSet, State
from fleetops.why.live import Live

MIG_PREFIX = "nvidia.com/mig-"
SKEW_SECONDS = 30.0  # a node's clock this far from the API server's breaks its leases and certificates
SHOWN = 5  # holders and jobs named in one line of an answer


class Cause(StrEnum):
    """Why a job waits: a closed set, each pointing at a line of the environment file."""

    NOT_A_TENANT = "not-a-tenant"
    NO_QUEUE = "no-queue"
    NO_DEVICE = "no-pool-has-device"
    NO_MIG_PROFILE = "no-pool-offers-mig-profile"
    NO_QUOTA = "no-quota"
    TOO_LARGE = "larger-than-burst"
    TAINT = "taint-not-tolerated"
    SPOT = "spot-not-accepted"
    TENANT_QUOTA = "tenant-quota"
    POOL_SIZE = "pool-size"
    CLASS_PREEMPTION = "class-never-preempts"
    NODES_SHORT = "nodes-advertise-less"
    NODES_MISSING = "nodes-missing"
    NODES_NOT_READY = "nodes-not-ready"
    NODES_CORDONED = "nodes-cordoned"
    NODES_QUARANTINED = "nodes-quarantined"
    CLOCK_SKEW = "clock-skew"


@dataclass(frozen=True)
class Finding:
    cause: Cause
    message: str
    at: Problem | None  # the environment file's line, as a problem carries it (file, line, column, path)
    ever: bool = True  # False: the job as asked can never be admitted until the file (or the job) changes

    def to_dict(self) -> dict[str, Any]:
        where = self.at.fields() if self.at else {"file": None, "line": None, "column": None, "path": None}
        return {"cause": self.cause.value, "message": self.message, "can_ever": self.ever, **{k: where[k] for k in ("file", "line", "column", "path")}}

    def text(self) -> str:
        return f"{self.cause.value}: {self.message}" + (f"\n      at {self.at.place}: {self.at.path}" if self.at and self.at.path else
                                                         f"\n      at {self.at.place}" if self.at else "")


@dataclass(frozen=True)
class Holding:
    """What one tenant holds of a pool now, and the jobs holding it."""

    tenant: str
    pool: str
    resource: str
    units: int
    borrowed: int  # of `units`, beyond its guarantee on the pool (Kueue may reclaim it)
    jobs: tuple[tuple[str, str, int], ...]  # (namespace/name, class, units), the most units first

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "pool": self.pool, "resource": self.resource, "units": self.units, "borrowed": self.borrowed,
                "within_guarantee": self.units - self.borrowed,
                "jobs": [{"job": j, "priority_class": c, "units": n} for j, c, n in self.jobs]}

    def text(self) -> str:
        jobs = ", ".join(f"{j} {n} ({c or 'no class'})" for j, c, n in self.jobs[:SHOWN]) + (f" and {len(self.jobs) - SHOWN} more" if len(self.jobs) > SHOWN else "")
        return (f"{self.tenant} holds {self.units} {self.resource} on {self.pool} ({self.units - self.borrowed} within its guarantee, "
                f"{self.borrowed} borrowed): {jobs or 'no job seen'}")


class RemedyKind(StrEnum):
    WAIT = "wait"
    FEWER = "fewer"
    TOLERATE = "tolerate"
    QUOTA_CHANGE = "quota-change"
    NODES = "nodes"


@dataclass(frozen=True)
class Remedy:
    kind: RemedyKind
    text: str
    quote: dict[str, Any] | None = None  # the fleet API's quote request of the change (POST /v1/quotes)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "text": self.text, "quote": self.quote}


@dataclass
class Answer:
    job: Job
    cluster: str
    tenant: str | None
    blockers: list[Finding] = field(default_factory=list)
    nodes: list[Finding] = field(default_factory=list)
    holders: list[Holding] = field(default_factory=list)
    preemption: str | None = None  # a reclaim or preemption under way, in words
    remedies: list[Remedy] = field(default_factory=list)

    @property
    def can_ever(self) -> bool:
        return all(f.ever for f in self.blockers)

    def to_dict(self) -> dict[str, Any]:
        job = self.job
        return {"job": job.key, "workload": job.workload, "cluster": self.cluster, "tenant": self.tenant, "state": job.state.value,
                "queue": job.queue, "priority_class": job.priority_class, "requests": job.requests(), "can_ever": self.can_ever,
                "blockers": [f.to_dict() for f in self.blockers], "nodes": [f.to_dict() for f in self.nodes],
                "holders": [h.to_dict() for h in self.holders], "preemption": self.preemption,
                "remedies": [r.to_dict() for r in self.remedies], "kueue_says": job.message}

    def text(self) -> str:
        job = self.job
        asks = ", ".join(f"{n} {r}" for r, n in job.requests().items()) or "no device"
        lines = [f"{job.key} on {self.cluster}: {job.state.value} (tenant {self.tenant or '-'}, class {job.priority_class or '-'}, "
                 f"queue {job.queue or '-'}, asks {asks})"]
        lines += [f"  blocked by {f.text()}" for f in self.blockers]
        lines += [f"  nodes: {f.text()}" for f in self.nodes]
        lines += [f"  holding: {h.text()}" for h in self.holders]
        if self.preemption:
            lines.append(f"  under way: {self.preemption}")
        if job.state is not State.ADMITTED:
            lines.append(f"  can it ever be admitted as asked: {'yes' if self.can_ever else 'no'}")
        lines += [f"  would let it in: {r.text}" for r in self.remedies]
        if job.message:
            lines.append(f"  Kueue says: {job.message}")
        return "\n".join(lines)


# --- the cluster, once per question -----------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A pool or edge group of the cluster, with its place in the file."""

    group: spec.Group
    loc: spec.Loc  # ("clusters", i, "pools" | "edge_groups", j)

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def edge(self) -> bool:
        return isinstance(self.group, spec.EdgeGroup)


class ClusterContext:
    """What every job of one cluster is explained against: the file, the live queues and their use, the nodes."""

    def __init__(self, document: spec.Document, cluster: spec.Cluster, live: Live, viewer: str | None = None):
        """`viewer`: the tenant asking (a tenant token of the fleet API): other tenants' names, jobs and use are not shown to it."""
        env = document.env
        self.document, self.env, self.cluster, self.live, self.viewer = document, env, cluster, live, viewer
        ci = next(i for i, c in enumerate(env.clusters) if c.name == cluster.name)
        self.groups = {g.name: Group(g, ("clusters", ci, "pools", j)) for j, g in enumerate(cluster.pools)}
        self.groups.update({g.name: Group(g, ("clusters", ci, "edge_groups", j)) for j, g in enumerate(cluster.edge_groups)})
        self.cluster_loc: spec.Loc = ("clusters", ci)
        self.tenant_index = {t.name: i for i, t in enumerate(env.tenants) if cluster.name in t.clusters}
        self.class_index = {pc.name: i for i, pc in enumerate(env.priority_classes)}
        self.nodes = {n.name: n for n in grants.tree(live.queues)}
        self.restricted = grants.flavor_restrictions(live.queues)
        self.used: dict[tuple[str, str], int] = {}  # (flavor, resource) -> units every queue holds
        self.tenant_used: dict[tuple[str, str, str], int] = {}  # (tenant, flavor, resource) -> units its queues hold
        for queue, usage in live.queue_usage.items():
            tenant = live.queue_tenant.get(queue)
            for fr, total in usage.items():
                self.used[fr] = self.used.get(fr, 0) + total
                if tenant is not None:
                    self.tenant_used[(tenant, *fr)] = self.tenant_used.get((tenant, *fr), 0) + total
        granted = grants.of_cluster(live.queues)
        self.granted = granted  # tenant -> resource -> flavor -> Grant
        self.holding: dict[str, list[Job]] = {}  # flavor -> jobs holding quota there
        for job in live.jobs:
            if job.holds:
                for flavor in job.assigned:
                    self.holding.setdefault(flavor, []).append(job)
        members: dict[str, list[inventory.NodeInfo]] = {}
        for node in live.nodes.nodes:
            matched = inventory.match_groups(cluster, node)
            if len(matched) == 1:
                members.setdefault(matched[0].name, []).append(node)
        self.members = members
        self.clocks = {c.node: c.skew_seconds for c in live.clocks}
        self.namespace_tenant = {t.name: t for t in env.tenants if cluster.name in t.clusters}
        # Work Kueue has evicted (preempted or reclaimed) and not admitted again: a preemption under way or done.
        self.evicted = [j for j in live.jobs if j.state is State.EVICTED and self.sees(j.namespace)]
        self._holders: dict[tuple[str, str], list[Holding]] = {}

    def holders(self, flavor: str, resource: str) -> list[Holding]:
        """Who holds the pool now, per tenant (within its guarantee or borrowed) with its jobs; once per pool and resource."""
        key = (flavor, resource)
        if key not in self._holders:
            per_tenant: dict[str, list[Job]] = {}
            for job in self.holding.get(flavor, []):
                if resource in job.assigned.get(flavor, {}):
                    per_tenant.setdefault(job.namespace, []).append(job)
            out = []
            for tenant, jobs in sorted(per_tenant.items()):
                held = tuple(sorted(((j.key, j.priority_class or "", j.assigned[flavor][resource]) for j in jobs), key=lambda x: (-x[2], x[0])))
                total = self.tenant_holds(tenant, flavor, resource) or sum(n for _, _, n in held)
                out.append(Holding(tenant, flavor, resource, total, max(0, total - self.tenant_guarantee(tenant, flavor, resource)), held))
            self._holders[key] = out
        return self._holders[key]

    def shown(self, tenant: str) -> str:
        return tenant if self.viewer is None or tenant == self.viewer else "another tenant"

    def sees(self, tenant: str) -> bool:
        return self.viewer is None or tenant == self.viewer

    def at(self, loc: spec.Loc) -> Problem:
        return self.document.positions.error(loc, "")

    def pool_units(self, flavor: str, resource: str) -> int:
        """The units of `resource` the pool (Kueue flavor) holds, as the file declares them (0: no such pool in the file)."""
        group = self.groups.get(flavor)
        return spec.group_capacity(group.group).get(resource, 0) if group else 0

    def tenant_holds(self, tenant: str, flavor: str, resource: str) -> int:
        return self.tenant_used.get((tenant, flavor, resource), 0)

    def borrowed(self, tenant: str, flavor: str, resource: str) -> int:
        """What the tenant holds on the pool beyond its guarantee there: what Kueue may reclaim from it."""
        return max(0, self.tenant_holds(tenant, flavor, resource) - self.tenant_guarantee(tenant, flavor, resource))

    def tenant_reach(self, tenant: str, flavor: str, resource: str) -> int:
        g = self.granted.get(tenant, {}).get(resource, {}).get(flavor)
        return g.reachable if g else 0

    def tenant_guarantee(self, tenant: str, flavor: str, resource: str) -> int:
        g = self.granted.get(tenant, {}).get(resource, {}).get(flavor)
        return g.guaranteed if g else 0


def _tolerated(pod_set: PodSet, taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The taints among `taints` the pod set does not tolerate."""
    tolerations = [t.as_dict() for t in pod_set.tolerations]
    return [t for t in taints if not any(grants.tolerates(tol, t) for tol in tolerations)]


def device_resources(env: spec.Environment) -> set[str]:
    """Every resource the fleet's pools, edge groups and quotas name: what a job asks that Kueue counts."""
    out = {r for c in env.clusters for g in (*c.pools, *c.edge_groups) for r in spec.group_capacity(g)}
    return out | {r for t in env.tenants for r in t.quota}


def _is_device(resource: str, devices: set[str]) -> bool:
    return resource in devices or resource.startswith(MIG_PREFIX)


# --- one job --------------------------------------------------------------------------------


def explain(ctx: ClusterContext, job: Job, devices: set[str]) -> Answer:
    """Why `job` waits (or, admitted, why its pods may not all start): `devices` are the resources Kueue counts (`device_resources`)."""
    tenant = ctx.namespace_tenant.get(job.namespace)
    answer = Answer(job, ctx.cluster.name, tenant.name if tenant else None)
    if tenant is None:
        answer.blockers.append(Finding(Cause.NOT_A_TENANT, f"namespace {job.namespace} is no tenant's on {ctx.cluster.name}: no tenant of "
                                       f"{ctx.env.environment} names this cluster with that name", ctx.at(("tenants",)), ever=False))
        return answer
    ti = ctx.tenant_index[tenant.name]
    if job.state is State.EVICTED:
        answer.preemption = f"Kueue evicted it ({job.reason or 'evicted'}) and it waits to be admitted again: {job.message}"
    queue = ctx.live.local_queues.get((job.namespace, job.queue or ""))
    node = ctx.nodes.get(queue or "")
    if job.state is State.FINISHED:
        return answer
    if node is None and job.state is not State.ADMITTED:
        answer.blockers.append(Finding(Cause.NO_QUEUE, f"its queue {job.queue!r} is no LocalQueue of {tenant.name} bound to a ClusterQueue "
                                       f"(the tenant's queues: {', '.join(q for ns, q in ctx.live.local_queues if ns == job.namespace) or 'none'})",
                                       ctx.at(("tenants", ti)), ever=False))
        return answer
    for pod_set in job.pod_sets:
        for resource, units in sorted(pod_set.requests.items()):
            if units and _is_device(resource, devices):
                _resource(ctx, answer, tenant, ti, node, pod_set, resource, units)
    if job.state is State.ADMITTED:
        answer.blockers = [f for f in answer.nodes if f.cause is not Cause.CLOCK_SKEW]
    answer.blockers = list(dict.fromkeys(answer.blockers))
    answer.nodes = list(dict.fromkeys(answer.nodes))
    answer.holders = [h for h in dict.fromkeys(answer.holders) if ctx.sees(h.tenant)]
    return answer


def _resource(ctx: ClusterContext, answer: Answer, tenant: spec.Tenant, ti: int, node: grants.Node | None, pod_set: PodSet,
              resource: str, units: int) -> None:
    job, cname = answer.job, ctx.cluster.name
    offering = [g for g in ctx.groups.values() if resource in spec.group_capacity(g.group)]
    open_names = {g.name for g in spec.eligible_groups(tenant, [ctx.cluster])}
    mine = [g for g in offering if g.name in open_names]
    if job.state is State.ADMITTED:
        for flavor in job.assigned:
            if flavor in ctx.groups and resource in job.assigned[flavor]:
                answer.nodes += _node_findings(ctx, ctx.groups[flavor], resource)
        return
    if not offering:
        if resource.startswith(MIG_PREFIX):
            offered = sorted({f"{r.removeprefix(MIG_PREFIX)} ({g.name})" for g in ctx.groups.values() for r in spec.group_capacity(g.group) if r.startswith(MIG_PREFIX)})
            answer.blockers.append(Finding(Cause.NO_MIG_PROFILE, f"asks MIG profile {resource.removeprefix(MIG_PREFIX)}, which no pool of {cname} offers "
                                           f"(offered: {', '.join(offered) or 'none: no pool shares by MIG with strategy mixed'})",
                                           ctx.at((*ctx.cluster_loc, "pools")), ever=False))
        else:
            answer.blockers.append(Finding(Cause.NO_DEVICE, f"asks {resource}, which no pool or edge group of {cname} has",
                                           ctx.at((*ctx.cluster_loc, "pools")), ever=False))
        return
    if not mine:
        loc = ("tenants", ti, "pools") if tenant.pools is not None else ("tenants", ti, "edge_groups") if tenant.edge_groups else ("tenants", ti)
        answer.blockers.append(Finding(Cause.NO_DEVICE, f"{resource} is on {', '.join(g.name for g in offering)} of {cname}, none of them open to "
                                       f"{tenant.name}" + (" (a spot pool is open only to a tenant that names it)" if any(spec.is_spot(g.group) for g in offering) else ""),
                                       ctx.at(loc), ever=False))
        return
    if resource not in tenant.quota:
        answer.blockers.append(Finding(Cause.NO_QUOTA, f"{tenant.name} has no quota for {resource} (its quota names {', '.join(sorted(tenant.quota)) or 'nothing'})",
                                       ctx.at(("tenants", ti, "quota")), ever=False))
        return
    assert node is not None
    quota_loc = ("tenants", ti, "quota", resource)
    reach = {g.name: node.reach.get((g.name, resource), 0) for g in mine}
    untolerated = {g.name: _tolerated(pod_set, ctx.restricted.get(g.name, [])) for g in mine}
    fits = [g for g in mine if reach[g.name] >= units]
    usable = [g for g in fits if not untolerated[g.name]]
    answer.holders += _holders(ctx, [g.name for g in (usable or fits or mine)], resource)
    for g in usable or fits or mine:
        answer.nodes += _node_findings(ctx, g, resource)
    if not fits:
        most = max(reach.values(), default=0)
        best = max(mine, key=lambda g: reach[g.name])
        burst = tenant.quota[resource].burst
        answer.blockers.append(Finding(Cause.TOO_LARGE, (
            f"asks {units} {resource} in one pool; Kueue admits a pod set in one pool, and the most {tenant.name} may hold of one on {cname} "
            f"is {most} ({best.name}), even with the cluster idle (burst {burst}, guaranteed {tenant.quota[resource].guaranteed})"),
            ctx.at((*quota_loc, "burst")), ever=False))
        if most:
            answer.remedies.append(Remedy(RemedyKind.FEWER, f"ask for at most {most} {resource} per pod set"))
        room = max(spec.group_capacity(g.group)[resource] for g in mine)
        if room >= units:
            extra = units - most
            answer.remedies.append(Remedy(RemedyKind.QUOTA_CHANGE, (
                f"raise {tenant.name}'s burst of {resource} on {cname} by about {_spread(ctx, tenant, resource, best.name, extra)} "
                f"({burst} -> {burst + _spread(ctx, tenant, resource, best.name, extra)}: the borrowing is spread over its pools by their size)"),
                {"changes": [{"op": "quota", "tenant": tenant.name, "resource": resource, "burst_delta": _spread(ctx, tenant, resource, best.name, extra)}]}))
        else:
            answer.remedies.append(Remedy(RemedyKind.NODES, f"no pool open to {tenant.name} holds {units} {resource} (the largest holds {room}): split the job, or grow a pool"))
        return
    if not usable:
        for g in fits:
            answer.blockers.append(_taint_finding(ctx, tenant, ti, job, g, untolerated[g.name]))
        missing = {grants.taint_text(t): t for g in fits for t in untolerated[g.name] if not _is_spot_taint(t)}
        if missing:
            answer.remedies.append(Remedy(RemedyKind.TOLERATE, "tolerate " + ", ".join(missing) + f" (the taints of {', '.join(g.name for g in fits if any(not _is_spot_taint(t) for t in untolerated[g.name]))})"))
        return
    _why_not_now(ctx, answer, tenant, ti, node, usable, resource, units)
    if answer.blockers:  # held back now: a pool it may not use that has the room is part of the answer
        for g in fits:
            if untolerated[g.name] and _room(ctx, tenant, g, resource) >= units:
                answer.blockers.append(_taint_finding(ctx, tenant, ti, job, g, untolerated[g.name], ever=True))


def _is_spot_taint(taint: dict[str, Any]) -> bool:
    return taint.get("key") == spec.SPOT_TAINT.key


def _room(ctx: ClusterContext, tenant: spec.Tenant, g: Group, resource: str) -> int:
    """What the tenant could be admitted with on the pool now: its own room there, bounded by the pool's free units."""
    used = ctx.tenant_holds(tenant.name, g.name, resource)
    free = ctx.pool_units(g.name, resource) - ctx.used.get((g.name, resource), 0)
    return min(ctx.tenant_reach(tenant.name, g.name, resource) - used, free)


def _taint_finding(ctx: ClusterContext, tenant: spec.Tenant, ti: int, job: Job, g: Group, taints: list[dict[str, Any]], ever: bool = False) -> Finding:
    """A pool with room the job may not use: its taint, or a spot pool the job's class may not go to. `ever`: another pool may
    still admit the job as asked (this one only has the room now)."""
    shown = ", ".join(grants.taint_text(t) for t in taints)
    if spec.is_spot(g.group) and all(_is_spot_taint(t) for t in taints):
        accepted = spec.preemptible_classes(tenant, ctx.env)
        cls = job.priority_class
        if cls not in accepted:
            loc = ("priority_classes", ctx.class_index[cls]) if cls in ctx.class_index else ("tenants", ti, "preemptible_classes")
            return Finding(Cause.SPOT, (f"{g.name} has room but is a spot pool: only preemptible work of {tenant.name} ({', '.join(accepted) or 'none'}) "
                                        f"may go there, and class {cls or '(default)'} is not preemptible (declare it `preemptible: true`, or list it in "
                                        f"{tenant.name}'s preemptible_classes)"), ctx.at(loc), ever=ever)
        return Finding(Cause.SPOT, f"{g.name} has room but is a spot pool: the job, of class {cls}, which may go there, does not tolerate {shown}",
                       ctx.at((*g.loc, "spot")), ever=ever)
    return Finding(Cause.TAINT, (f"{g.name} has room for it, but its nodes are tainted {shown}, which the job does not tolerate "
                                 f"(a dedicated pool: only jobs that tolerate its taint are admitted there)"), ctx.at((*g.loc, "taints")), ever=ever)


def _spread(ctx: ClusterContext, tenant: spec.Tenant, resource: str, flavor: str, extra: int) -> int:
    """How much more burst gives the tenant `extra` more on `flavor`: its borrowing is split over its pools in proportion to their units."""
    sizes = {g.name: spec.group_capacity(g.group).get(resource, 0) for g in ctx.groups.values()
             if g.name in {x.name for x in spec.eligible_groups(tenant, [ctx.cluster])}}
    share = sizes.get(flavor, 0)
    return math.ceil(extra * sum(sizes.values()) / share) if share else extra


def _why_not_now(ctx: ClusterContext, answer: Answer, tenant: spec.Tenant, ti: int, node: grants.Node, usable: list[Group], resource: str, units: int) -> None:
    """The job fits some pool it tolerates: what holds it back now (its tenant's burst in use, or the pool full)."""
    job = answer.job
    quota_loc = ("tenants", ti, "quota", resource)
    tenant_room, pool_room = {}, {}
    for g in usable:
        used = ctx.tenant_holds(tenant.name, g.name, resource)
        tenant_room[g.name] = ctx.tenant_reach(tenant.name, g.name, resource) - used
        pool_room[g.name] = ctx.pool_units(g.name, resource) - ctx.used.get((g.name, resource), 0)
    now = max((min(tenant_room[g.name], pool_room[g.name]) for g in usable), default=0)
    if all(tenant_room[g.name] < units for g in usable):
        held = sum(ctx.tenant_holds(tenant.name, g.name, resource) for g in ctx.groups.values())
        burst = tenant.quota[resource].burst
        answer.blockers.append(Finding(Cause.TENANT_QUOTA, (
            f"{tenant.name} holds {held} of its burst of {burst} {resource} on {ctx.cluster.name}; {units} more do not fit "
            f"({', '.join(f'{g.name}: {max(tenant_room[g.name], 0)} left' for g in usable)})"), ctx.at((*quota_loc, "burst"))))
        best = max(usable, key=lambda g: tenant_room[g.name])
        extra = units - max(tenant_room[best.name], 0)
        answer.remedies.append(Remedy(RemedyKind.WAIT, "wait for " + _named(ctx, [best.name], resource, lambda j: j.namespace == tenant.name)))
        answer.remedies.append(Remedy(RemedyKind.QUOTA_CHANGE, (
            f"raise {tenant.name}'s burst of {resource} by about {_spread(ctx, tenant, resource, best.name, extra)} "
            f"({burst} -> {burst + _spread(ctx, tenant, resource, best.name, extra)})"),
            {"changes": [{"op": "quota", "tenant": tenant.name, "resource": resource, "burst_delta": _spread(ctx, tenant, resource, best.name, extra)}]}))
    elif any(pool_room[g.name] < units for g in usable):
        within = [g for g in usable if tenant_room[g.name] >= units]
        g = max(within, key=lambda x: pool_room[x.name])
        size = ctx.pool_units(g.name, resource)
        answer.blockers.append(Finding(Cause.POOL_SIZE, (
            f"{g.name} holds {size} {resource}, {size - pool_room[g.name]} of them in use; {units} do not fit "
            f"({max(pool_room[g.name], 0)} free)"), ctx.at((*g.loc, "nodes"))))
        _reclaim(ctx, answer, tenant, node, g, resource, units)
        answer.remedies.append(Remedy(RemedyKind.WAIT, "wait for " + _named(ctx, [g.name], resource, lambda j: True)))
        per_node = spec.group_capacity(g.group)[resource] // max(g.group.nodes, 1)
        more = math.ceil((units - max(pool_room[g.name], 0)) / max(per_node, 1))
        answer.remedies.append(Remedy(RemedyKind.NODES, f"grow {g.name} by {more} node(s) ({g.group.nodes} -> {g.group.nodes + more})",
                                      {"changes": [{"op": "nodes", "cluster": ctx.cluster.name, "pool": g.name, "delta": more}]}))
    if 0 < now < units:
        answer.remedies.append(Remedy(RemedyKind.FEWER, f"ask for at most {now} {resource} to be admitted now"))
    if "Pending the preemption" in job.message and answer.preemption is None:
        answer.preemption = f"Kueue is preempting to admit it: {job.message}"


def _reclaim(ctx: ClusterContext, answer: Answer, tenant: spec.Tenant, node: grants.Node, g: Group, resource: str, units: int) -> None:
    """Whether Kueue takes the room back for the job (a reclaim of the tenant's guarantee, a preemption of lower
    classes) or the job's class never preempts."""
    job = answer.job
    used = ctx.tenant_holds(tenant.name, g.name, resource)
    guarantee = ctx.tenant_guarantee(tenant.name, g.name, resource)
    others = [h for h in ctx.holding.get(g.name, []) if h.namespace != tenant.name]
    borrowers = [h for h in _holders(ctx, [g.name], resource) if h.tenant != tenant.name and h.borrowed]
    # Kueue preempts by priority within the job's own ClusterQueue only (withinClusterQueue); across the cohort it reclaims.
    lower = [h for h in ctx.holding.get(g.name, []) if h.priority < job.priority and h.cluster_queue == node.name]
    preempts = _preempts(ctx, node)
    evicting = [e for e in ctx.evicted if e is not job]
    if used + units <= guarantee and borrowers and others:
        what = f"{tenant.name} is within its guarantee on {g.name} ({used} + {units} of {guarantee}) while " + \
               ", ".join(f"{ctx.shown(b.tenant)} borrows {b.borrowed}" for b in borrowers)
        if preempts and answer.preemption is None:
            answer.preemption = f"{what}: Kueue reclaims it" + (f" (evicting {', '.join(e.key for e in evicting[:SHOWN])})" if evicting else " at its next cycle")
        else:
            answer.blockers.append(_never(ctx, tenant, job, f"{what}, and the job's class never preempts: it waits for the borrowers to finish"))
    elif lower and not preempts:
        answer.blockers.append(_never(ctx, tenant, job, f"lower classes hold {g.name} ({', '.join(sorted({h.priority_class or '-' for h in lower}))}), "
                                                        "and the job's class never preempts: it waits for them to finish"))
    elif lower and preempts and evicting and answer.preemption is None:
        answer.preemption = f"Kueue preempts lower classes for it (evicting {', '.join(e.key for e in evicting[:SHOWN])})"


def _preempts(ctx: ClusterContext, node: grants.Node) -> bool:
    """Whether the job's ClusterQueue preempts at all (the tenant's non-preempting queue never does)."""
    queue = next((q for q in ctx.live.queues if q.get("kind") == "ClusterQueue" and q["metadata"]["name"] == node.name), None)
    preemption = ((queue or {}).get("spec") or {}).get("preemption") or {}
    return any(preemption.get(k) not in (None, "Never") for k in ("reclaimWithinCohort", "withinClusterQueue"))


def _never(ctx: ClusterContext, tenant: spec.Tenant, job: Job, message: str) -> Finding:
    cls = job.priority_class
    loc = ("priority_classes", ctx.class_index[cls], "preemption") if cls in ctx.class_index else ("tenants", ctx.tenant_index[tenant.name], "priority_classes")
    return Finding(Cause.CLASS_PREEMPTION, f"class {cls}: {message}", ctx.at(loc))


def _holders(ctx: ClusterContext, flavors: Iterable[str], resource: str) -> list[Holding]:
    """Who holds each of these pools now: per tenant, within its guarantee or borrowed, and its jobs."""
    return [h for flavor in flavors for h in ctx.holders(flavor, resource)]


def _named(ctx: ClusterContext, flavors: list[str], resource: str, whose: Any) -> str:
    """The work to wait for on these pools, borrowed work first (Kueue reclaims it first), the most units first."""
    rows = _holders(ctx, flavors, resource)
    jobs = sorted(((-(h.borrowed > 0), -n, j, h.tenant, n, c) for h in rows for j, c, n in h.jobs
                   if whose(next(x for x in ctx.holding[h.pool] if x.key == j))), key=lambda x: x[:3])
    hidden = [j for j in jobs if not ctx.sees(j[3])]
    jobs = [j for j in jobs if ctx.sees(j[3])]
    if not jobs and not hidden:
        return "work already finishing (none holds the pool now)"
    shown = ", ".join(f"{j} ({n} {resource}, {c or 'no class'}{', borrowed' if b else ''})" for b, _, j, _, n, c in jobs[:SHOWN])
    shown += f" and {len(jobs) - SHOWN} more" if len(jobs) > SHOWN else ""
    return ", ".join(p for p in (shown, "other tenants' work" if hidden else "") if p)


def _node_findings(ctx: ClusterContext, g: Group, resource: str) -> list[Finding]:
    """What the pool's live nodes lack against the file: missing, NotReady, cordoned, quarantined, advertising less, skewed clocks."""
    group = g.group
    nodes = ctx.members.get(g.name, [])
    declared = spec.group_capacity(group).get(resource, 0)
    per_node = declared // max(group.nodes, 1)
    out = []
    if len(nodes) < group.nodes:
        out.append(Finding(Cause.NODES_MISSING, f"{g.name} declares {group.nodes} nodes; {len(nodes)} registered", ctx.at((*g.loc, "nodes"))))
    down = [n.name for n in nodes if not n.ready]
    if down:
        what = "edge nodes" if g.edge else "nodes"
        out.append(Finding(Cause.NODES_NOT_READY, f"{what} of {g.name} NotReady: {', '.join(down[:SHOWN])}" + (f" and {len(down) - SHOWN} more" if len(down) > SHOWN else ""),
                           ctx.at((*g.loc, "offline_grace_seconds") if g.edge else g.loc)))
    cordoned = [n for n in nodes if n.unschedulable]
    if cordoned:
        ours = [n.name for n in cordoned if n.annotations.get(CORDON_ANNOTATION)]
        shown = ", ".join(n.name for n in cordoned[:SHOWN])
        why = f" (fleetops cordoned {', '.join(ours[:SHOWN])}: offline past the grace)" if ours else ""
        out.append(Finding(Cause.NODES_CORDONED, f"{g.name} nodes cordoned: {shown}{why}",
                           ctx.at((*g.loc, "offline_grace_seconds") if g.edge and ours else g.loc)))
    quarantined = [n.name for n in nodes if any(t["key"] == QUARANTINE_TAINT["key"] for t in n.taints)]
    if quarantined:
        loc = (*g.loc, "fingerprints") if g.edge and group.fingerprints else (*g.loc, "match")
        out.append(Finding(Cause.NODES_QUARANTINED, f"fleetops quarantined {', '.join(quarantined[:SHOWN])} of {g.name} "
                           f"({QUARANTINE_TAINT['key']}: an unknown device, or a node claiming a group it does not match)", ctx.at(loc)))
    ready = [n for n in nodes if inventory.schedulable(n)]
    short = [(n.name, int(n.allocatable.get(resource, 0))) for n in ready if int(n.allocatable.get(resource, 0)) < per_node]
    if short:
        physical = group.device.per_node
        sharing = group.sharing if isinstance(group, spec.Pool) else None
        unshared = sharing is not None and sharing.mode != "exclusive" and all(have == physical for _, have in short)
        shown = ", ".join(f"{name} {have}" for name, have in short[:SHOWN])
        if unshared:
            out.append(Finding(Cause.NODES_SHORT, (f"{g.name} nodes advertise {physical} {resource} each, not the {per_node} its sharing declares "
                                                   f"({shown}): the sharing config ({sharing.mode}) is not applied"), ctx.at((*g.loc, "sharing"))))
        else:
            out.append(Finding(Cause.NODES_SHORT, (f"{g.name} nodes advertise less {resource} than the {per_node} each declared ({shown}): "
                                                   "its device plugin is not running or not ready there"), ctx.at((*g.loc, "device"))))
    skewed = [(n.name, ctx.clocks[n.name]) for n in nodes if abs(ctx.clocks.get(n.name, 0.0)) > SKEW_SECONDS]
    if skewed:
        out.append(Finding(Cause.CLOCK_SKEW, "clocks skewed from the API server's: " + ", ".join(f"{name} {skew:+.0f}s" for name, skew in skewed[:SHOWN]),
                           ctx.at(g.loc)))
    return out


def explain_all(document: spec.Document, cluster: spec.Cluster, live: Live, jobs: list[Job], viewer: str | None = None) -> list[Answer]:
    ctx = ClusterContext(document, cluster, live, viewer)
    devices = device_resources(document.env)
    return [explain(ctx, job, devices) for job in jobs]
