"""The whole declared fleet: every cluster with its pools, edge groups, tenants, priorities and monitoring.

`fleet(env)` composes the tree of parts once; `manifests(env)` collects its objects directly (render,
plan, the reconciler), and `modules.program.deploy(env)` registers the same tree with Pulumi.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetops import spec
from fleetops.errors import RenderError
from modules.autoscaling import autoscaling
from modules.api import api_part
from modules.device_plugin import device_plugin
from modules.edge_group import edge_group
from modules.kube import Part, Target
from modules.metering import metering
from modules.monitoring import monitoring
from modules.multikueue import multikueue
from modules.node_pool import node_pool
from modules.priorities import priorities
from modules.reconciler import reconciler
from modules.scheduler import scheduler
from modules.tenant import tenant_part

FLEET = "fleetops:fleet:Fleet"
CLUSTER = "fleetops:fleet:Cluster"


def cluster_part(cluster: spec.Cluster, env: spec.Environment) -> Part:
    target = Target(cluster=cluster.name, environment=env.environment)
    parts = [scheduler(target, env), priorities(target, env)]
    for pool in cluster.pools:
        parts += [node_pool(target, pool), device_plugin(target, pool)]
    parts += [edge_group(target, cluster, group) for group in cluster.edge_groups]
    parts += [tenant_part(target, tenant, env) for tenant in env.tenants if cluster.name in tenant.clusters]
    if (spill := multikueue(target, env)) is not None:
        parts.append(spill)
    parts.append(monitoring(target, cluster, env))
    parts.append(autoscaling(target, cluster, env))
    parts.append(metering(target, cluster, env))
    if env.api is not None and env.api.cluster == cluster.name:
        parts.append(api_part(target, env, env.api))
    parts.append(reconciler(target, env))  # last: its RBAC covers the kinds declared above
    return Part(
        CLUSTER, cluster.name, target,
        outputs={"context": cluster.context, "role": cluster.role},
        parts=parts,
        provider={"context": cluster.context, "kubeconfig": cluster.kubeconfig, "enable_server_side_apply": True},
    )


def fleet(env: spec.Environment) -> Part:
    return Part(FLEET, env.environment, outputs={"clusters": [c.name for c in env.clusters]},
                parts=[cluster_part(c, env) for c in env.clusters])


class CompositionError(RenderError):
    """The fleet declares something the Pulumi engine would refuse: two resources with one URN (render says
    where the components are)."""


@dataclass
class Collected:
    clusters: dict[str, list[dict[str, Any]]]
    resources: int  # components, providers and objects: what `pulumi up` registers


Done = Callable[[str, list[dict[str, Any]]], None]


def manifests(env: spec.Environment, done: Done = lambda cluster, objects: None) -> Collected:
    """Every object of the fleet by cluster, exactly as `pulumi up` would send them, without the SDK.
    `done(cluster, objects)` is called as each cluster is complete, before the next is built."""
    collected = Collected({c.name: [] for c in env.clusters}, 0)
    finished: set[str] = set()

    def finish(cluster: str, objects: list[dict[str, Any]]) -> None:
        finished.add(cluster)
        done(cluster, objects)

    _collect(fleet(env), (), collected, set(), finish)
    for cluster, objects in collected.clusters.items():  # objects outside any cluster's part: none in fleet()
        if cluster not in finished:
            done(cluster, objects)
    return collected


def _collect(part: Part, parents: tuple[str, ...], into: Collected, urns: set[tuple[str, ...]], done: Done) -> None:
    """Collect `part` and its subtree into `into`; a cluster's part, once complete, is `done`."""
    # A URN is the parent's type chain, the type and the name: the engine refuses a second one.
    # An object's URN holds its cluster, kind, namespace and name: a second one is an object
    # declared twice in a cluster, which render refuses for every walk.
    # (Not a recursive closure: that is a reference cycle, which would keep every manifest alive
    # until the cycle collector, paused while rendering, runs again.)
    urn = parents + (part.type, part.name)
    if urn in urns:
        raise CompositionError(f"two resources share the URN {'::'.join(urn)}")
    urns.add(urn)
    into.resources += 1 + (part.provider is not None)
    for manifest in part.build():
        into.clusters[part.target.cluster].append(manifest)
        into.resources += 1
    for sub in part.parts:
        _collect(sub, parents + (part.type,), into, urns, done)
    if part.provider is not None:
        done(part.target.cluster, into.clusters[part.target.cluster])
