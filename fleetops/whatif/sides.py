"""The configurations a trace is replayed on: base and head (two revisions, taken as `plan` takes them) and
two derived from the base's rendered objects so that a figure has a named baseline beside it:

- static: each tenant capped at its guarantee: no cohort above a tenant's own (nothing lent or borrowed
  between tenants; a tenant's non-preempting queue still borrows its own tenant's idle guarantee) and
  no ClusterQueue preempts;
- pooled: all capacity in one ClusterQueue (the sum of every ClusterQueue's and Cohort's quota per flavor),
  every LocalQueue pointing at it, none preempting: first come first served up to the fleet's capacity,
  the ceiling of what any quota layout can allocate.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from fleetops import kube, spec
from fleetops.errors import WhatifError
from fleetops.whatif.replay import GROUP, VERSION, Submission
from fleetops.whatif.trace import TraceJob

NEVER = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}
POOLED = "fleetops-whatif-pooled"


class SideKind(StrEnum):
    BASE = "base"
    HEAD = "head"
    STATIC = "static"
    POOLED = "pooled"


@dataclass(frozen=True)
class ReplaySide:
    """A configuration to replay on: each cluster's objects, and the model its jobs are submitted by."""

    kind: SideKind
    revision: str
    env: spec.Environment
    clusters: dict[str, list[dict[str, Any]]]
    queues: dict[tuple[str, str], str]  # (tenant, class) -> LocalQueue, read from the side's own objects

    def submission(self, job: TraceJob) -> Submission:
        objects = self.clusters[job.cluster]
        queue = self.queues.get((job.tenant, job.priority_class))
        if queue is None:
            raise WhatifError(f"whatif: side {self.kind}: tenant {job.tenant} has no LocalQueue on {job.cluster} for class {job.priority_class}")
        return Submission(queue, *_priority(objects, job.priority_class), tolerations=self._tolerations(job))

    def _tolerations(self, job: TraceJob) -> tuple[tuple[str, str, str], ...]:
        tenant = next(t for t in self.env.tenants if t.name == job.tenant)
        groups = [g for g in spec.eligible_groups(tenant, [spec.cluster_by_name(self.env, job.cluster)]) if job.resource in spec.group_capacity(g)]
        taints = [(t.key, t.value, t.effect) for g in groups for t in spec.restricting_taints(g)]
        if job.priority_class in spec.preemptible_classes(tenant, self.env) and any(spec.is_spot(g) for g in groups):
            taints.append((kube.SPOT_TAINT["key"], kube.SPOT_TAINT["value"], kube.SPOT_TAINT["effect"]))
        return tuple(dict.fromkeys(taints))


def _priority(objects: list[dict[str, Any]], name: str) -> tuple[int, dict[str, str]]:
    """The class's value and the reference a Workload carries, from its WorkloadPriorityClass (or PriorityClass)."""
    for kind, group in (("WorkloadPriorityClass", GROUP), ("PriorityClass", "scheduling.k8s.io")):
        found = next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)
        if found is not None:
            return int(found["value"]), {"group": group, "kind": kind, "name": name}
    raise WhatifError(f"whatif: no priority class {name!r} rendered")


def queue_map(env: spec.Environment, clusters: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """(tenant, class) -> the LocalQueue its admission policy sends that work to: the one whose ClusterQueue
    never preempts for a class declared never to preempt, the other for the rest."""
    out: dict[tuple[str, str], str] = {}
    for objects in clusters.values():
        never = {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue"
                 and all(o["spec"].get("preemption", {}).get(k, "Never") == "Never" for k in ("withinClusterQueue", "reclaimWithinCohort"))}
        for tenant in env.tenants:
            local = {o["metadata"]["name"]: o["spec"]["clusterQueue"] in never for o in objects
                     if o["kind"] == "LocalQueue" and o["metadata"].get("namespace") == tenant.name}
            if not local:
                continue
            quiet = spec.non_preempting_classes(tenant, env)
            for cls in list(tenant.priority_classes) or [pc.name for pc in env.priority_classes]:
                fitting = sorted(name for name, is_never in local.items() if is_never == (cls in quiet)) or sorted(local)
                out.setdefault((tenant.name, cls), fitting[0])
    return out


def static(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """No Cohort under another (each tenant alone with its own queues) and no ClusterQueue preempting."""
    out = []
    for o in objects:
        if o["kind"] == "Cohort" and "parentName" in o["spec"]:
            o = {**o, "spec": {k: v for k, v in o["spec"].items() if k != "parentName"}}
        elif o["kind"] == "ClusterQueue":
            o = {**o, "spec": {**o["spec"], "preemption": NEVER}}
        out.append(o)
    return out


def pooled(objects: list[dict[str, Any]], cluster: spec.Cluster, preemption: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The cluster's objects with one ClusterQueue in place of its Cohorts and ClusterQueues, holding the
    quota they hold together, and every LocalQueue pointing at it; `preemption` its policy (none: never)."""
    place = {g.name: i for i, g in enumerate((*cluster.pools, *cluster.edge_groups))}
    groups: dict[tuple[str, ...], dict[str, Counter[str]]] = {}
    for m in objects:
        if m["kind"] in ("ClusterQueue", "Cohort"):
            for group in m["spec"].get("resourceGroups", []):
                flavors = groups.setdefault(tuple(group["coveredResources"]), {})
                for flavor in group["flavors"]:
                    for r in flavor["resources"]:
                        flavors.setdefault(flavor["name"], Counter())[r["name"]] += int(r["nominalQuota"])
    queue_spec = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {"coveredResources": list(covered),
             "flavors": [{"name": name, "resources": [{"name": r, "nominalQuota": flavors[name][r]} for r in covered]}
                         for name in sorted(flavors, key=lambda name: place.get(name, len(place)))]}
            for covered, flavors in groups.items()
        ],
        "preemption": preemption or NEVER,
    }
    out = [m for m in objects if m["kind"] not in ("ClusterQueue", "Cohort", "LocalQueue")]
    out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": POOLED}, "spec": queue_spec})
    out += [{**m, "spec": {**m["spec"], "clusterQueue": POOLED}} for m in objects if m["kind"] == "LocalQueue"]
    return out


def side_of(kind: SideKind, revision: str, env: spec.Environment, clusters: dict[str, list[dict[str, Any]]]) -> ReplaySide:
    """A rendered environment as a side, its jobs sent to the queues its own objects give them."""
    return ReplaySide(kind, revision, env, clusters, queue_map(env, clusters))


def derived(base: ReplaySide, kind: SideKind) -> ReplaySide:
    """The static or pooled side of `base`'s environment; its jobs go to the queues they go to on base."""
    if kind is SideKind.STATIC:
        clusters = {name: static(objects) for name, objects in base.clusters.items()}
    else:
        clusters = {name: pooled(objects, spec.cluster_by_name(base.env, name)) for name, objects in base.clusters.items()}
    return replace(base, kind=kind, clusters=clusters)


@contextlib.contextmanager
def revisions(repo: Path, env_name: str, base_rev: str | None, head_rev: str | None) -> Iterator[tuple[ReplaySide, ReplaySide]]:
    """Base and head rendered as `plan` renders them: each revision out of Git, a side whose program is not
    the one running here rendered confined (fleetops.isolate) and read back as data."""
    from fleetops import plan, revisions as revs

    env_rel = spec.environment_path(env_name).as_posix()
    head = revs.resolve(repo, head_rev) if head_rev else revs.WORKTREE
    base = revs.resolve(repo, base_rev) if base_rev else revs.default_base(repo, "HEAD" if head == revs.WORKTREE else head)
    with contextlib.ExitStack() as stack:
        surveyed = [revs.survey(repo, rev, env_rel) for rev in (base, head)]
        trees = tuple(stack.enter_context(revs.checkout(repo, rev, s.needs)) for rev, s in zip((base, head), surveyed))
        both = stack.enter_context(plan.Sides(env_rel, (base, head), trees, (surveyed[0].runs_here, surveyed[1].runs_here)))  # type: ignore[arg-type]
        out = []
        for kind, side in ((SideKind.BASE, both.base()), (SideKind.HEAD, both.head())):
            if not side.exists or side.env is None:
                raise WhatifError(f"whatif: {env_rel} does not exist at {kind} {side.revision[:12]}")
            out.append(side_of(kind, side.revision, side.env, side.clusters))
        yield out[0], out[1]
