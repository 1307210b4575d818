"""Inference autoscaling of one cluster: a HorizontalPodAutoscaler per declared service, and the rules
of the metrics adapter that answers it.

The pipeline is prometheus-adapter: the HorizontalPodAutoscaler controller reads the custom metrics
API (custom.metrics.k8s.io), which prometheus-adapter serves from Prometheus by the rules rendered
here. KEDA would put an operator of its own, and the HorizontalPodAutoscalers it generates, between
the environment file and the controller that scales.

Each service's Deployment is the tenant's own (its image and model are not fleetops's): fleetops
renders what bounds it, the autoscaler, in the tenant's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import yaml

from fleetops import metrics, spec
from modules.kube import Part, Target


class Metric(NamedTuple):
    """A Prometheus series and the name the custom metrics API serves it under, per pod."""

    series: str
    name: str
    aggregate: str  # how a pod's several series (one per GPU, per model) make its one value


# DCGM's exporter, with its Kubernetes mapping on, labels each GPU's series with the pod holding it.
GPU_UTILISATION = Metric(metrics.GPU_UTIL, "gpu_utilisation_percent", "avg")
# The requests queued in the server, not yet running: what more replicas would take.
QUEUES = {
    spec.Server.VLLM: Metric(metrics.VLLM_WAITING, "vllm_requests_waiting", "sum"),
    spec.Server.TRITON: Metric(metrics.TRITON_PENDING, "triton_requests_pending", "sum"),
}


def _rule(metric: Metric) -> dict[str, Any]:
    """One prometheus-adapter discovery rule (docs/config.md): the series of pods in a namespace, as `metric.name`."""
    return {
        "seriesQuery": f'{{__name__="{metric.series}",namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{metric.series}$", "as": metric.name},
        "metricsQuery": f"{metric.aggregate}(<<.Series>>{{<<.LabelMatchers>>}}) by (<<.GroupBy>>)",
    }


def adapter_config(env: spec.Environment) -> dict[str, Any]:
    """prometheus-adapter's `config.yaml`: a rule for each metric the environment's autoscalers ask for
    (each rule is a discovery query the adapter repeats: none for a series nothing reads)."""
    asked = {m["pods"]["metric"]["name"] for s in env.services for m in metrics(s)}
    return {"rules": [_rule(metric) for metric in (GPU_UTILISATION, *QUEUES.values()) if metric.name in asked]}


def _metric(name: str, per_replica: int) -> dict[str, Any]:
    return {"type": "Pods", "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": str(per_replica)}}}


def metrics(service: spec.Service) -> list[dict[str, Any]]:
    """The autoscaler's metrics: each an average over the service's pods (the HPA adds replicas until it is at target)."""
    out = []
    if service.targets.gpu_utilisation_percent is not None:
        out.append(_metric(GPU_UTILISATION.name, service.targets.gpu_utilisation_percent))
    if service.targets.requests_waiting_per_replica is not None and service.server is not None:
        out.append(_metric(QUEUES[service.server].name, service.targets.requests_waiting_per_replica))
    return out


def autoscaler(target: Target, service: spec.Service) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": target.metadata(service.name, service.tenant),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service.name},
            "minReplicas": service.replicas.min,
            "maxReplicas": service.replicas.max,
            "metrics": metrics(service),
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": service.scale_down_stabilisation_seconds}},
        },
    }


def autoscaling(target: Target, cluster: spec.Cluster, env: spec.Environment) -> Part:
    services = [s for s in env.services if s.cluster == cluster.name]

    def objects() -> Iterator[dict[str, Any]]:
        if not services:
            return
        yield {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": target.metadata(env.monitoring.adapter_config_map, env.monitoring.namespace),
            "data": {"config.yaml": yaml.safe_dump(adapter_config(env), sort_keys=False)},
        }
        yield from (autoscaler(target, s) for s in services)

    return Part("fleetops:fleet:Autoscaling", target.cluster, target, objects,
                outputs={"services": [f"{s.tenant}/{s.name}" for s in services]})
