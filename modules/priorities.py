"""Priority classes of one cluster: Kubernetes PriorityClass and, with Kueue, WorkloadPriorityClass."""

from __future__ import annotations

from typing import Any

from fleetops import kube, spec
from modules.kube import Part, Target


def priority_class_manifest(target: Target, pc: spec.PriorityClass) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": target.metadata(pc.name, labels={kube.WORKLOAD_LABEL: pc.workload}),
        "value": pc.value,
        "preemptionPolicy": pc.preemption,
        # The API server omits a false globalDefault: send it only when true, or live never equals Git.
        # Dropping it later is still a change: server-side apply removes a field its manager stops sending.
        **({"globalDefault": True} if pc.global_default else {}),
        "description": pc.description or f"{pc.workload} workloads",
    }


def workload_priority_manifest(target: Target, pc: spec.PriorityClass) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": target.metadata(pc.name, labels={kube.WORKLOAD_LABEL: pc.workload}),
        "value": pc.value,
        "description": pc.description or f"{pc.workload} workloads",
    }


def priorities(target: Target, env: spec.Environment) -> Part:
    def objects() -> list[dict[str, Any]]:
        out = []
        for pc in env.priority_classes:
            out += [priority_class_manifest(target, pc), workload_priority_manifest(target, pc)]
        return out

    return Part("fleetops:fleet:Priorities", target.cluster, target, objects,
                outputs={"classes": [pc.name for pc in env.priority_classes]})
