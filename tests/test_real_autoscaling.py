"""The real HPA controller scaling a real Deployment on the metrics fleetops renders.

A test exporter -> Prometheus -> prometheus-adapter (in the test's own network namespace, with the
rules fleetops renders) -> the API server's aggregator -> kube-controller-manager's HPA controller,
on the HorizontalPodAutoscaler fleetops renders, which scales a Deployment. No kubelet: the
Deployment's replicas are what the test reads, through a watch that sees every change. The metrics
are External with an AverageValue target: the controller divides their sum by the Deployment's
replica count, so pods need not run (a Pods metric counts only Running pods).

Timings (scale up, cap, scale down) are written to the test's log; run with `-s` to see them.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.utils import parse_quantity

from tests import servers
from tests.metrics_pipeline import MetricsAdapter, aggregation_flags, exporter, prometheus
from tests.netns import netns_host

pytestmark = pytest.mark.real

SYNC_PERIOD = 1  # seconds between the HPA controller's looks at each HPA (default 15)


@dataclass
class ReplicaLog:
    """Every value of a Deployment's spec.replicas, with when it was seen, from a watch."""

    apps: Any
    namespace: str
    name: str
    seen: list[tuple[float, int]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        version = None
        while not self.stopped.is_set():
            stream = watch.Watch()
            for event in stream.stream(self.apps.list_namespaced_deployment, self.namespace, timeout_seconds=10,
                                       field_selector=f"metadata.name={self.name}", resource_version=version):
                deployment = event["object"]
                version = deployment.metadata.resource_version
                with self.changed:
                    if not self.seen or self.seen[-1][1] != deployment.spec.replicas:
                        self.seen.append((time.monotonic(), deployment.spec.replicas))
                    self.changed.notify_all()
                if self.stopped.is_set():
                    stream.stop()

    def wait_for(self, holds: Callable[[int], bool], since: float, what: str, timeout: float) -> float:
        """When the replicas, set at or after `since` (monotonic), first held `holds`; waits at most `timeout` seconds."""
        def found() -> float | None:
            return next((t for t, n in self.seen if t >= since and holds(n)), None)

        with self.changed:
            if not self.changed.wait_for(lambda: found() is not None, timeout):
                raise TimeoutError(f"{what}: not within {timeout:.0f}s; replicas seen: {self.values}")
            return found()  # type: ignore[return-value]

    @property
    def values(self) -> list[int]:
        return [n for _, n in self.seen]


@contextlib.contextmanager
def replica_log(api: servers.ApiServer, namespace: str, name: str) -> Iterator[ReplicaLog]:
    log = ReplicaLog(client.AppsV1Api(api.client()), namespace, name)
    thread = threading.Thread(target=log.run, daemon=True)
    thread.start()
    try:
        yield log
    finally:
        log.stopped.set()
        thread.join(timeout=15)


# --- what fleetops renders ------------------------------------------------------------------------


def rendered() -> tuple[dict[str, Any], dict[str, Any]]:
    """The HPA of the test's service and the adapter's rules (placeholder until h-hpa's render lands)."""
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "asr", "namespace": "speech"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "asr"},
                 "minReplicas": 1, "maxReplicas": 4,
                 "metrics": [{"type": "External", "external": {"metric": {"name": "requests_waiting", "selector": {"matchLabels": {"service": "asr"}}},
                                                               "target": {"type": "AverageValue", "averageValue": "5"}}}],
                 "behavior": {"scaleDown": {"stabilizationWindowSeconds": 20}}},
    }
    rules = {"externalRules": [{"seriesQuery": 'vllm:num_requests_waiting{namespace!=""}',
                                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                                "name": {"matches": "^vllm:num_requests_waiting$", "as": "requests_waiting"},
                                "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>})"}]}
    return hpa, rules


def source_series(rules: dict[str, Any], metric: str) -> str:
    """The Prometheus series the adapter's rules serve as the external metric `metric`."""
    for rule in rules.get("externalRules", []):
        series = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", rule["seriesQuery"]).group(0)  # type: ignore[union-attr]
        name = rule.get("name", {})
        if re.sub(name.get("matches", "^(.*)$"), name.get("as", r"\1"), series) == metric:
            return series
    raise AssertionError(f"no rule of the adapter's configuration serves the external metric {metric}")


# --- the running pipeline -------------------------------------------------------------------------


@dataclass
class Pipeline:
    api: servers.ApiServer
    adapter: MetricsAdapter
    hpa: dict[str, Any]
    rules: dict[str, Any]
    exporter: Any

    @property
    def namespace(self) -> str:
        return self.hpa["metadata"]["namespace"]

    @property
    def spec(self) -> dict[str, Any]:
        return self.hpa["spec"]

    def load(self, replicas_wanted: int) -> None:
        """Every metric of the HPA at what `replicas_wanted` replicas would serve at its target."""
        for metric in self.spec["metrics"]:
            external = metric["external"]
            target = float(parse_quantity(str(external["target"]["averageValue"])))
            labels = {"namespace": self.namespace, **external["metric"].get("selector", {}).get("matchLabels", {})}
            self.exporter.set(source_series(self.rules, external["metric"]["name"]), labels, target * replicas_wanted)

    def condition(self, kind: str) -> client.V2HorizontalPodAutoscalerCondition | None:
        hpa = client.AutoscalingV2Api(self.api.client()).read_namespaced_horizontal_pod_autoscaler(
            self.hpa["metadata"]["name"], self.namespace)
        return next((c for c in hpa.status.conditions or [] if c.type == kind), None)


@pytest.fixture
def pipeline(etcd: servers.Etcd, tmp_path: Path) -> Iterator[Pipeline]:
    hpa, rules = rendered()
    with netns_host() as host, exporter() as served, prometheus(tmp_path / "prometheus", host.host_address, served.target) as url:
        api = servers.ApiServer("autoscaling", tmp_path / "kube", etcd, address=host.host_address,
                                extra_args=aggregation_flags(tmp_path / "kube"))
        adapter = MetricsAdapter(api, host, tmp_path / "adapter", url, rules)
        try:
            api.start()
            adapter.start()
            api.start_controllers("deployment-controller", "replicaset-controller", "horizontal-pod-autoscaler-controller",
                                  flags=(f"--horizontal-pod-autoscaler-sync-period={SYNC_PERIOD}s",))
            ready = Pipeline(api, adapter, hpa, rules, served)
            ready.load(0)
            apply = servers.applier(api)
            name = hpa["spec"]["scaleTargetRef"]["name"]
            apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ready.namespace}})
            apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ready.namespace},
                   "spec": {"replicas": hpa["spec"].get("minReplicas", 1), "selector": {"matchLabels": {"app": name}},
                            "template": {"metadata": {"labels": {"app": name}},
                                         "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai"}]}}}})
            apply(hpa)
            yield ready
        finally:
            adapter.stop()
            api.stop()


def test_load_scales_up_to_max_never_beyond_and_down_only_after_the_window(pipeline: Pipeline) -> None:
    lowest, highest = pipeline.spec.get("minReplicas", 1), pipeline.spec["maxReplicas"]
    window = pipeline.spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    with replica_log(pipeline.api, pipeline.namespace, pipeline.spec["scaleTargetRef"]["name"]) as replicas:
        # The controller reads the metric before the load rises: the HPA holds its minimum.
        servers.wait_until(lambda: getattr(pipeline.condition("ScalingActive"), "status", None) == "True",
                           "the HPA reading its metrics", timeout=60)
        assert replicas.values == [lowest]

        high = time.monotonic()
        pipeline.load(highest * 3)  # three times what the maximum serves at target
        at_max = replicas.wait_for(lambda n: n == highest, high, "scale up to the maximum", timeout=90)
        # The controller wants more than the maximum and says it holds at the maximum.
        servers.wait_until(lambda: getattr(pipeline.condition("ScalingLimited"), "reason", None) == "TooManyReplicas",
                           "the HPA capped at its maximum", timeout=30)

        low = time.monotonic()
        pipeline.load(0)
        at_min = replicas.wait_for(lambda n: n == lowest, low, "scale down to the minimum", timeout=window + 60)

    print(f"\nautoscaling: up {replicas.values[0]}->{highest} in {at_max - high:.1f}s; "
          f"down {highest}->{lowest} {at_min - low:.1f}s after the load fell (window {window}s)")
    assert max(replicas.values) == highest, f"replicas went beyond the maximum {highest}: {replicas.values}"
    # Every recommendation in the window must be low before it scales down; the last high one can be
    # at most one sync before the load fell.
    assert at_min - low >= window - SYNC_PERIOD, f"scaled down {at_min - low:.1f}s after the load fell, inside the {window}s window"
    assert [n for t, n in replicas.seen if high <= t < at_min][-1] == highest
