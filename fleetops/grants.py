"""What the real Kueue will grant each tenant on an idle cluster, read from the cluster's RENDERED
Kueue objects (Cohorts, ClusterQueues, ResourceFlavors), never from the environment file: however
the modules split a quota over pools, this is what Kueue itself will see.

Kueue v0.17.0's quota arithmetic (pkg/cache/scheduler/resource_node.go), per flavor and resource:
- a node's subtree quota is its own nominalQuota plus what each child puts in it: the child's
  subtree less what the child's lendingLimit keeps back (`localQuota` = max(0, subtree - lendingLimit));
- on an idle cluster a node may hold `potentialAvailable`: at the root, its subtree; below it, what it
  keeps back plus what its parent may hold, capped at its subtree + borrowingLimit when it has one.
A ClusterQueue naming a ResourceFlavor that is not rendered is inactive and admits nothing, though
its quota still counts in its cohort (Kueue's cache keeps it there). A Cohort named but not rendered
is an implicit one without quota; nodes in a parent cycle admit nothing (Kueue skips them).

Each rule below names the Kueue v0.17.0 function it follows (file under sigs.k8s.io/kueue@v0.17.0/pkg/),
read in that release's source; a rule of fleetops's own says so. A Kueue release that moves one of them
moves this module: the real-Kueue scenarios check each case.
"""

from __future__ import annotations

import math

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fleetops import spec
from fleetops.errors import Problem
from fleetops.kube import TENANT_LABEL


FlavorResource = tuple[str, str]  # (flavor, resource), Kueue's resources.FlavorResource


class KueueKind(enum.Enum):
    COHORT = "Cohort"
    QUEUE = "ClusterQueue"


@dataclass(frozen=True)
class KueueQuota:
    """Kueue's ResourceQuota, one per (flavor, resource) of a queue's resourceGroups: createResourceQuotas
    (cache/scheduler/resource.go). A limit left out is no limit (nil)."""

    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None


@dataclass(eq=False)  # a node is itself: compared and hashed by identity
class Node:
    """A Cohort or ClusterQueue of Kueue's tree, with the subtree quota Kueue's cache computes for it
    (resourceNode.SubtreeQuota, cache/scheduler/resource_node.go)."""

    kind: KueueKind
    name: str
    parent_name: str | None
    tenant: str | None
    quotas: dict[FlavorResource, KueueQuota]
    active: bool = True
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    subtree: dict[FlavorResource, int] = field(default_factory=dict)
    reach: dict[FlavorResource, int] = field(default_factory=dict)  # Kueue's potentialAvailable, idle

    def local(self, fr: FlavorResource) -> int:
        """Kueue's localQuota: what the lending limit keeps from the parent. resourceNode.localQuota
        (cache/scheduler/resource_node.go): max(0, SubtreeQuota - LendingLimit), 0 without a lending limit."""
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - quota.lending_limit)

    def potential(self, fr: FlavorResource) -> int:
        """Kueue's potentialAvailable: the most this node may hold of `fr` with nothing else running
        (its parent's `reach` already computed). potentialAvailable (cache/scheduler/resource_node.go); the
        scheduler refuses a request above it as no fit: FlavorAssigner.fitsResourceQuota (scheduler/flavorassigner/flavorassigner.go)."""
        if self.parent is None:
            return self.subtree.get(fr, 0)
        reach = self.local(fr) + self.parent.reach.get(fr, 0)
        quota = self.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            reach = min(reach, self.subtree.get(fr, 0) + quota.borrowing_limit)
        return reach

    def lent(self, fr: FlavorResource) -> int:
        """What this node puts in its parent for the rest of the tree to borrow: what accumulateFromChild
        (cache/scheduler/resource_node.go) adds to the parent's SubtreeQuota, the subtree less its localQuota."""
        return self.subtree.get(fr, 0) - self.local(fr) if self.parent is not None else 0


class Grant(NamedTuple):
    guaranteed: int  # nominalQuota the tenant's own queues and cohort hold
    reachable: int  # the most its queues may hold on an idle cluster (guaranteed + what it may borrow)
    lends: int  # what it puts in the cluster's cohort for other tenants to borrow


def _amount(value: Any) -> int:
    """A Kueue quota as whole units (rendered quotas are integers; a quantity string is parsed as Kueue would).
    A value that is no quantity counts 0: the schema check refuses its object before anything is applied.
    Kueue reads a device quantity with ResourceValue (resources/requests.go): Quantity.Value(), which
    rounds a fraction up, so a quota of 1500m grants 2 devices here too."""
    if isinstance(value, int):
        return value
    from kubernetes.utils.quantity import parse_quantity  # only for a string: the import costs validate 0.3 s

    try:
        return math.ceil(parse_quantity(str(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _items(value: Any) -> list[dict[str, Any]]:
    """The mappings of a list field (any other shape is the schema check's to refuse)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _quotas(body: dict[str, Any]) -> dict[FlavorResource, KueueQuota]:
    out = {}
    for group in _items(body.get("resourceGroups")):
        for flavor in _items(group.get("flavors")):
            for r in _items(flavor.get("resources")):
                limits = [None if r.get(k) is None else _amount(r[k]) for k in ("borrowingLimit", "lendingLimit")]
                out[(str(flavor.get("name")), str(r.get("name")))] = KueueQuota(_amount(r.get("nominalQuota", 0)), *limits)
    return out


def _node(kind: KueueKind, manifest: dict[str, Any], flavors: set[str]) -> Node:
    body = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    quotas = _quotas(body)
    parent = body.get("parentName" if kind is KueueKind.COHORT else "cohortName")
    labels = manifest["metadata"].get("labels")
    # A queue naming a flavor that does not exist is inactive: clusterQueue.updateLabelKeys records it in
    # missingFlavors and clusterQueue.updateQueueStatus (cache/scheduler/clusterqueue.go) turns the queue inactive.
    return Node(kind, manifest["metadata"]["name"], parent if isinstance(parent, str) else None,
                labels.get(TENANT_LABEL) if isinstance(labels, dict) else None, quotas,
                active=kind is KueueKind.COHORT or all(f in flavors for f, _ in quotas))


def tree(objects: Iterable[dict[str, Any]]) -> list[Node]:
    """The cluster's Cohorts and ClusterQueues, linked, with Kueue's subtree quotas."""
    objects = list(objects)
    flavors = {o["metadata"]["name"] for o in objects if o.get("kind") == "ResourceFlavor"}
    cohorts = {o["metadata"]["name"]: _node(KueueKind.COHORT, o, flavors) for o in objects if o.get("kind") == KueueKind.COHORT.value}
    queues = [_node(KueueKind.QUEUE, o, flavors) for o in objects if o.get("kind") == KueueKind.QUEUE.value]
    for node in [*cohorts.values(), *queues]:
        if node.parent_name:
            # An implicit Cohort, no quota of its own: Manager.getOrCreateCohort (cache/hierarchy/manager.go).
            if node.parent_name not in cohorts:
                cohorts[node.parent_name] = Node(KueueKind.COHORT, node.parent_name, None, None, {})
            node.parent = cohorts[node.parent_name]
            node.parent.children.append(node)
    # Cache.Snapshot (cache/scheduler/snapshot.go) leaves out a cohort in a cycle, as HasCycle
    # (cache/hierarchy/cycle.go) finds it, and counts the queues under it inactive.
    for node in _in_cycles(cohorts.values()):
        for child in node.children:
            child.active = False
        node.parent, node.children = None, []
    order = _top_down([c for c in cohorts.values() if c.parent is None] + [q for q in queues if q.parent is None])
    # Children first: updateCohortResourceNode, updateClusterQueueResourceNode and
    # accumulateFromChild (cache/scheduler/resource_node.go). Every child queue counts, an inactive one too: Cache.Snapshot
    # (cache/scheduler/snapshot.go) clones the cohort's ResourceNode with its quota in it.
    for node in reversed(order):
        node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        for child in node.children:
            for fr, amount in child.subtree.items():
                node.subtree[fr] = node.subtree.get(fr, 0) + amount - child.local(fr)
    for node in order:  # parents first
        node.reach = {fr: node.potential(fr) for fr in node.subtree}
    return [*cohorts.values(), *queues]


def _top_down(roots: list[Node]) -> list[Node]:
    """Every node under `roots`, each after its parent: loops, not recursion, however deep a program nests cohorts."""
    order = list(roots)
    for node in order:
        order.extend(node.children)
    return order


def _in_cycles(cohorts: Iterable[Node]) -> set[Node]:
    """Cohorts whose parent chain comes back to itself: each chain walked once, up to a cohort already judged."""
    judged: set[Node] = set()
    found: set[Node] = set()
    for start in cohorts:
        path: dict[Node, int] = {}
        node: Node | None = start
        while node is not None and node not in judged and node not in path:
            path[node] = len(path)
            node = node.parent
        if node is not None and node in path:
            found.update(list(path)[path[node]:])
        judged.update(path)
    return found


PerTenant = dict[str, dict[str, dict[str, Grant]]]  # tenant -> resource -> flavor -> grant


def of_cluster(objects: Iterable[dict[str, Any]]) -> PerTenant:
    """What Kueue grants each tenant of a cluster, per resource and flavor, on an idle cluster."""
    return _per_tenant(tree(objects))


def _per_tenant(nodes: list[Node]) -> PerTenant:
    """The tenant's queues share its cohort, so what one queue may hold is what the tenant may: the
    largest reach of its active queues. What it lends is what its topmost nodes put in their parents.
    fleetops's own rule (Kueue knows no tenant): a sum over the nodes its label marks."""
    out: dict[str, dict[str, dict[str, Grant]]] = {}
    for node in nodes:
        if node.tenant is None:
            continue
        top = node.parent is None or node.parent.tenant != node.tenant
        frs = set(node.quotas) | (set(node.subtree) if top else set())
        for fr in frs:
            flavor, resource = fr
            old = out.setdefault(node.tenant, {}).setdefault(resource, {}).get(flavor, Grant(0, 0, 0))
            quota = node.quotas.get(fr)
            reach = node.reach.get(fr, 0) if node.kind is KueueKind.QUEUE and node.active and quota is not None else 0
            out[node.tenant][resource][flavor] = Grant(old.guaranteed + (quota.nominal if quota else 0),
                                                       max(old.reachable, reach), old.lends + (node.lent(fr) if top else 0))
    return out


def total(per_flavor: dict[str, Grant]) -> Grant:
    """A tenant's grant of one resource over every flavor: jobs of one unit may spread over them all.
    fleetops's own sum: a pod set takes one flavor per resource in FlavorAssigner.findFlavorForPodSets, so
    one job's most is one flavor's reach (`review`'s largest_job)."""
    return Grant(*(sum(g[i] for g in per_flavor.values()) for i in range(3)))


def cluster_totals(nodes: list[Node]) -> dict[str, dict[str, int]]:
    """resource -> {quota: every unit of quota in the cluster's tree, shared: what its roots hold for
    anyone to borrow (capacity no tenant guarantees, and what tenants lend)}, on the flavors an active
    ClusterQueue lists: Kueue admits a job only onto a flavor of its queue, so a pool no tenant may use
    (policies' `capacity.unused_group`) is quota in the tree that no one is granted. The scheduler tries
    only the queue's resourceGroup.Flavors: FlavorAssigner.findFlavorForPodSets (scheduler/flavorassigner/flavorassigner.go)."""
    listed = {fr for node in nodes if node.kind is KueueKind.QUEUE and node.active for fr in node.quotas}
    out: dict[str, dict[str, int]] = {}
    for node in nodes:
        for (flavor, resource), quota in node.quotas.items():
            if (flavor, resource) in listed:
                out.setdefault(resource, {"quota": 0, "shared": 0})["quota"] += quota.nominal
        if node.parent is None and node.kind is KueueKind.COHORT:
            for (flavor, resource), amount in node.subtree.items():
                if (flavor, resource) in listed:
                    out.setdefault(resource, {"quota": 0, "shared": 0})["shared"] += amount
    return out


def facts(clusters: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """cluster -> tenant -> resource -> {guaranteed, reachable, lends, flavors: {flavor: {...}}}: the
    policy input's `facts.grants`, and plan's."""
    return {cluster: _as_facts(of_cluster(objects)) for cluster, objects in sorted(clusters.items())}


def _as_facts(granted: PerTenant) -> dict[str, Any]:
    return {tenant: {resource: {**total(per)._asdict(), "flavors": {f: g._asdict() for f, g in sorted(per.items())}}
                     for resource, per in sorted(resources.items())}
            for tenant, resources in sorted(granted.items())}


KINDS = {"ResourceFlavor", KueueKind.COHORT.value, KueueKind.QUEUE.value}


def of_entries(entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """`facts` of policy input resources (`{cluster, kind, manifest}`), reading only Kueue's kinds."""
    clusters: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry["kind"] in KINDS:
            clusters.setdefault(entry["cluster"], []).append(entry["manifest"])
    return facts(clusters)


@dataclass(frozen=True)
class Granted:
    """What Kueue grants on each cluster that renders its queues, read once from a rendered fleet: a plan
    hands it to the policy input (`facts`, as `of_entries` reads it), its `grants` (`review`) and its
    `services`, where each read the same objects again."""

    facts: dict[str, Any]  # `facts` of the clusters with Kueue's objects, as `of_entries` gives them
    totals: dict[str, dict[str, dict[str, int]]]  # cluster -> `cluster_totals`
    tainted: dict[str, dict[str, list[str]]]  # cluster -> `flavor_taints`


def of_fleet(clusters: dict[str, list[dict[str, Any]]]) -> Granted:
    """`Granted` of every cluster's rendered objects (cluster -> its objects)."""
    facts: dict[str, Any] = {}
    totals: dict[str, dict[str, dict[str, int]]] = {}
    tainted: dict[str, dict[str, list[str]]] = {}
    for cluster, objects in sorted(clusters.items()):
        kueue = [o for o in objects if o.get("kind") in KINDS]
        if kueue:  # as in the policy input: a cluster with none of Kueue's objects is not there
            nodes = tree(kueue)
            facts[cluster], totals[cluster], tainted[cluster] = _as_facts(_per_tenant(nodes)), cluster_totals(nodes), flavor_taints(kueue)
    return Granted(facts, totals, tainted)


class Shortfall(NamedTuple):
    """A declared guarantee or burst that Kueue will not grant on one cluster."""

    tenant: int  # index in env.tenants
    cluster: str
    resource: str
    bound: str  # "guaranteed" or "burst"
    declared: int
    granted: Grant


def shortfalls(env: spec.Environment, clusters: dict[str, list[dict[str, Any]]]) -> Iterator[Shortfall]:
    """Each tenant's promise, per cluster and resource, that the rendered queues cannot keep on an idle
    cluster. A tenant without Kueue queues there (another scheduler backend) is not judged here."""
    granted = facts(clusters)
    for ti, tenant in enumerate(env.tenants):
        for cluster in tenant.clusters:
            mine = granted.get(cluster, {}).get(tenant.name)
            if mine is None:
                continue
            for resource, quota in tenant.quota.items():
                got = mine.get(resource, {"guaranteed": 0, "reachable": 0, "lends": 0})
                grant = Grant(got["guaranteed"], got["reachable"], got["lends"])
                if grant.guaranteed < quota.guaranteed:
                    yield Shortfall(ti, cluster, resource, "guaranteed", quota.guaranteed, grant)
                if grant.reachable < quota.burst:
                    yield Shortfall(ti, cluster, resource, "burst", quota.burst, grant)


def problems(document: spec.Document, clusters: dict[str, list[dict[str, Any]]]) -> list[Problem]:
    """validate's line for each shortfall, at the tenant's `guaranteed:` or `burst:`, with the way out."""
    out = []
    for s in shortfalls(document.env, clusters):
        loc = ("tenants", s.tenant, "quota", s.resource, s.bound)
        if s.bound == "burst":
            msg = (f"Kueue grants at most {s.granted.reachable} on {s.cluster} even when it is idle, not the declared {s.declared} "
                   f"(guaranteed {s.granted.guaranteed}, the rest borrowed from what the cluster's cohort holds): lower burst to "
                   f"{s.granted.reachable}, or add {s.declared - s.granted.reachable} units no tenant guarantees to its pools, "
                   "or let the tenants lend more of their guarantee (scheduler.lend_fraction)")
        else:
            msg = (f"the rendered ClusterQueues hold {s.granted.guaranteed} on {s.cluster}, not the declared {s.declared}: "
                   "the program renders less than the file promises (check modules/tenant.py)")
        out.append(document.positions.error(loc, msg))
    return out


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' ToleratesTaint: an empty key with Exists tolerates every taint, an empty effect every effect.
    Kueue calls it through corev1helpers.FindMatchingUntoleratedTaint (k8s.io/component-helpers v0.35.3), whose
    Toleration.ToleratesTaint (k8s.io/api v0.35.3 core/v1/toleration.go) also has the Lt and Gt operators: not
    followed here, fleetops renders none."""
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    return toleration.get("key") == taint.get("key") and (toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", ""))


def flavor_restrictions(objects: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """ResourceFlavor -> its nodes' taints that a job must tolerate to be admitted there: Kueue checks a
    Workload's tolerations, with the flavor's own, against the flavor's nodeTaints of effect NoSchedule and
    NoExecute (PreferNoSchedule keeps no one off): FlavorAssigner.checkFlavorForPodSets (scheduler/flavorassigner/flavorassigner.go)."""
    out = {}
    for o in objects:
        body = o.get("spec") if o.get("kind") == "ResourceFlavor" and isinstance(o.get("spec"), dict) else None
        if body is None:
            continue
        own = _items(body.get("tolerations"))
        kept = [t for t in _items(body.get("nodeTaints"))
                if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in own)]
        if kept:
            out[str(o["metadata"]["name"])] = kept
    return out


def taint_text(taint: dict[str, Any]) -> str:
    """`key=value:Effect`, as kubectl writes a taint."""
    return f"{taint.get('key')}{'=' + str(taint['value']) if taint.get('value') else ''}:{taint.get('effect')}"


def flavor_taints(objects: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """`flavor_restrictions` as `key=value:Effect`."""
    return {flavor: [taint_text(t) for t in taints] for flavor, taints in flavor_restrictions(objects).items()}


@dataclass(frozen=True)
class TenantGrant:
    """What Kueue grants one tenant of one device resource on one cluster, beside its declared burst."""

    cluster: str
    tenant: str
    resource: str
    guaranteed: int
    reachable: int
    burst: int | None  # declared; None: not declared
    lends: int
    largest_job: int  # the most one job (one flavor) may hold
    flavors: dict[str, Any]  # per flavor, as `grants` computes it
    held_on_tainted: dict[str, list[str]]  # flavor -> the taints a job must tolerate to use the guarantee held there


@dataclass(frozen=True)
class ClusterGrant:
    """Every unit of quota a cluster's tree holds of one device resource, the guarantees, and what its cohort shares."""

    cluster: str
    resource: str
    quota: int
    guaranteed: int
    shared: int


@dataclass(frozen=True)
class Grants:
    """plan's `grants` (`review`): per tenant, and per cluster."""

    tenants: list[TenantGrant]
    clusters: list[ClusterGrant]


def review(env: spec.Environment | None, granted: Granted) -> Grants:
    """plan's `grants`, the most units first: per tenant, cluster and resource what Kueue grants beside the
    declared burst, the most one job (one flavor) may hold, and the flavors holding part of the guarantee
    whose taints a job must tolerate to use it (the placement puts a guarantee on a tainted pool only when
    no untainted one has room: a reviewer sees which jobs it serves); per cluster and resource every unit
    of quota its tree holds, the tenants' guarantees, and what its cohort holds for anyone to borrow."""
    declared = {(t.name, c, r): q.burst for t in env.tenants for c in t.clusters for r, q in t.quota.items()} if env else {}
    tenants: list[TenantGrant] = []
    totals: list[ClusterGrant] = []
    for cluster, per_tenant in granted.facts.items():
        tainted = granted.tainted[cluster]
        guaranteed: dict[str, int] = {}
        for tenant, resources in per_tenant.items():
            for resource, g in resources.items():
                guaranteed[resource] = guaranteed.get(resource, 0) + g["guaranteed"]
                tenants.append(TenantGrant(cluster, tenant, resource, g["guaranteed"], g["reachable"], declared.get((tenant, cluster, resource)),
                                           g["lends"], max((f["reachable"] for f in g["flavors"].values()), default=0), g["flavors"],
                                           {f: tainted[f] for f, held in g["flavors"].items() if held["guaranteed"] and f in tainted}))
        totals += [ClusterGrant(cluster, resource, t["quota"], guaranteed.get(resource, 0), t["shared"])
                   for resource, t in sorted(granted.totals[cluster].items())]
    return Grants(sorted(tenants, key=lambda r: (-r.reachable, r.cluster, r.tenant, r.resource)),
                  sorted(totals, key=lambda r: (-r.quota, r.cluster, r.resource)))


def services(env: spec.Environment, granted: dict[str, Any]) -> list[dict[str, Any]]:
    """Each service of `env` (in its order) in fleet terms: its replicas and devices, what Kueue grants its
    tenant of that device on the service's pools (`granted` is `facts`), and what its devices cost a month
    at max. The policy input's `facts.services` (policies/autoscaling.rego) and plan's `services`."""
    out = []
    for s in env.services:
        flavors = granted.get(s.cluster, {}).get(s.tenant, {}).get(s.devices.resource, {}).get("flavors", {})
        replica = spec.replica_monthly_cost(env, s)
        out.append({"tenant": s.tenant, "name": s.name, "cluster": s.cluster, "pools": s.pools, "resource": s.devices.resource,
                    "devices": s.devices.count, "min": s.replicas.min, "max": s.replicas.max, "at_max": s.devices.count * s.replicas.max,
                    "reachable": sum(flavors[p]["reachable"] for p in dict.fromkeys(s.pools) if p in flavors),
                    "replica_monthly": round(replica, 2), "monthly_at_max": round(replica * s.replicas.max, 2)})
    return out
