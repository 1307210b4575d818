"""A node pool or edge group as the scheduler sees it: a Kueue ResourceFlavor and the node contract."""

from __future__ import annotations

from fleetops import kube, spec
from modules.kube import Part, Target


def flavor_manifest(target: Target, group: spec.Group) -> dict:
    labels = spec.node_labels(group)
    key = kube.POOL_LABEL if isinstance(group, spec.Pool) else kube.EDGE_GROUP_LABEL
    body: dict = {"nodeLabels": {key: labels[key]}}
    taints = spec.taints(group)
    if taints:
        # Kueue admits a Workload to a flavor only when its pods tolerate the flavor's nodeTaints, so a
        # pool's taint keeps out what it keeps out at scheduling (dedicated=training: training jobs only;
        # the spot taint: jobs of preemptible classes only, the only ones allowed to tolerate it).
        body["nodeTaints"] = [t.model_dump(exclude_defaults=False) for t in taints]
        # A flavor's tolerations count as the workload's when Kueue checks those taints, and are added
        # to every pod it admits there: one per taint would undo them all. Only a taint keyed by a device
        # resource of the pool is tolerated, for pods that request it, as Kubernetes' own
        # ExtendedResourceToleration admission does: it keeps pods without devices off, nothing else.
        offered = spec.group_capacity(group)
        tolerated = [t for t in group.taints if t.key in offered]
        if tolerated:
            body["tolerations"] = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in tolerated]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": target.metadata(group.name),
        "spec": body,
    }


def node_pool(target: Target, group: spec.Group) -> Part:
    """Kueue flavor for the pool, plus the labels and taints its nodes must carry (read by the reconciler)."""
    return Part(
        "fleetops:fleet:NodePool", f"{target.cluster}/{group.name}", target,
        lambda: [flavor_manifest(target, group)],
        outputs={
            "labels": spec.node_labels(group),
            "taints": [t.model_dump() for t in spec.taints(group)],
            "capacity": spec.group_capacity(group),
        },
    )
