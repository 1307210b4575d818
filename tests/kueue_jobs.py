"""The suspended Job a user submits into a tenant's Kueue queue: one builder for the real-Kueue scenarios
(tests/render/test_real_kueue.py) and the admission latency bench (benchmarks/kueue_bench.py), so that both
submit what a tenant may submit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleetops import spec
from modules.tenant import non_preempting_classes, queue_names

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def suspended_job(namespace: str, name: str, queue: str, devices: Mapping[str, int], priority: str | None = None,
                  tolerations: Iterable[Mapping[str, str]] = ()) -> dict[str, Any]:
    """A batch/v1 Job of one pod requesting `devices`, suspended (Kueue unsuspends it when it admits it),
    in LocalQueue `queue`. No class given: Kueue and Kubernetes give it the default one."""
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {r: str(n) for r, n in devices.items()}}}],
    }
    if priority:
        pod["priorityClassName"] = priority
    if tolerations := [dict(t) for t in tolerations]:
        pod["tolerations"] = tolerations
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "template": {"spec": pod}}}


def tolerating(taints: Iterable[spec.Taint]) -> list[dict[str, str]]:
    """The tolerations of exactly these taints (each once)."""
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in dict.fromkeys(taints)]


def queue_for(tenant: spec.Tenant, env: spec.Environment, priority: str) -> str:
    """The tenant's LocalQueue that its admission policy requires for work of `priority`
    (modules/tenant.py: a class that never preempts goes through the queue that never preempts)."""
    preempting, never = queue_names(tenant)
    return never if priority in non_preempting_classes(tenant, env) else preempting
