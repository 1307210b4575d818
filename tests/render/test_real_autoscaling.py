"""The real HPA controller scaling a real Deployment on the metrics fleetops renders.

A test exporter -> Prometheus -> prometheus-adapter (in the test's own network namespace, with the
rules fleetops renders) -> the API server's aggregator -> kube-controller-manager's HPA controller,
on the HorizontalPodAutoscaler fleetops renders, which scales a Deployment. The Deployment's replicas
are what the test reads, through a watch that sees every change. fleetops renders Pods metrics (an
average over the service's pods), and the HPA controller counts no Pending pod: with no kubelet, the
test does a kubelet's part through the API (binds each pod, reports it Running and Ready, deletes it
when asked) and exports each running pod's values, as the pod's own exporters would.

Its timings (scale up, cap, scale down) are printed at the end of the run (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.utils import parse_quantity

from fleetops.spec import Server
from modules.autoscaling import GPU_UTILISATION, QUEUES, Metric
from tests import servers
from tests.helpers import one, render_env, small_env
from tests.metrics_pipeline import MetricsAdapter, Sample, aggregation_flags, exporter, prometheus
from tests.netns import netns_host

pytestmark = pytest.mark.real

SYNC_PERIOD = 1  # seconds between the HPA controller's looks at each HPA (default 15)


@contextlib.contextmanager
def watching(list_objects: Callable[..., Any], namespace: str, on_event: Callable[[str, Any], None], **selectors: str) -> Iterator[None]:
    """`on_event(type, object)` for every change of the namespace's objects, from a watch in a thread,
    until the block ends; an error in the thread is raised when it ends."""
    stopped = threading.Event()
    failed: list[BaseException] = []

    def follow() -> None:
        version = None
        try:
            while not stopped.is_set():  # each watch ends after 2s (so the block ends soon); the next resumes there
                for event in watch.Watch().stream(list_objects, namespace, timeout_seconds=2, resource_version=version, **selectors):
                    version = event["object"].metadata.resource_version
                    on_event(event["type"], event["object"])
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            failed.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopped.set()
        thread.join(timeout=15)
    if failed:
        raise RuntimeError(f"watching {namespace}") from failed[0]


@dataclass
class ReplicaLog:
    """Every value of a Deployment's spec.replicas, with when it was seen."""

    seen: list[tuple[float, int]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def observe(self, _: str, deployment: Any) -> None:
        with self.changed:
            if not self.seen or self.seen[-1][1] != deployment.spec.replicas:
                self.seen.append((time.monotonic(), deployment.spec.replicas))
            self.changed.notify_all()

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
    log = ReplicaLog()
    with watching(client.AppsV1Api(api.client()).list_namespaced_deployment, namespace, log.observe,
                  field_selector=f"metadata.name={name}"):
        yield log


# --- what fleetops renders ------------------------------------------------------------------------

# The service, with a stabilisation window short enough for a test.
SERVICE: dict[str, Any] = {
    "name": "asr", "tenant": "vision", "cluster": "center-a", "pools": ["a100-ts"],
    "devices": {"resource": "nvidia.com/gpu", "count": 1}, "replicas": {"min": 2, "max": 6}, "server": "vllm",
    "targets": {"gpu_utilisation_percent": 70, "requests_waiting_per_replica": 4}, "scale_down_stabilisation_seconds": 15,
}
# Per pod: busy GPUs and five times the queue a replica should hold, then idle ones and an empty queue.
HIGH = {GPU_UTILISATION: 100.0, QUEUES[Server.VLLM]: 20.0}
LOW = {GPU_UTILISATION: 5.0, QUEUES[Server.VLLM]: 0.0}


@dataclass(frozen=True)
class Rendered:
    hpa: dict[str, Any]
    adapter_config_map: dict[str, Any]


def rendered(directory: Path) -> Rendered:
    env = small_env()
    env["services"] = [SERVICE]
    state = render_env(directory, env)
    return Rendered(one(state, SERVICE["cluster"], "HorizontalPodAutoscaler", SERVICE["name"], SERVICE["tenant"]),
                    one(state, SERVICE["cluster"], "ConfigMap", "prometheus-adapter", "monitoring"))


# --- the pods: a kubelet's part, through the API --------------------------------------------------


@dataclass
class Pods:
    """What a kubelet and the service's exporters would do for the namespace's pods: each new pod is
    bound to a node and reported Running and Ready (the HPA controller counts no Pending pod); a pod
    being deleted goes at once; each running pod exports the per-pod values of the current load."""

    core: Any
    namespace: str
    load: dict[Metric, float]
    running: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def samples(self) -> list[Sample]:
        with self.lock:
            return [(metric.series, {"namespace": self.namespace, "pod": pod}, value)
                    for pod in sorted(self.running) for metric, value in self.load.items()]

    def set_load(self, load: dict[Metric, float]) -> None:
        with self.lock:
            self.load = load

    def handle(self, kind: str, pod: Any) -> None:
        try:
            self._act(kind, pod)
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # gone, or changed since this event: a later event says what to do
                raise

    def _act(self, kind: str, pod: Any) -> None:
        name = pod.metadata.name
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
            with self.lock:
                self.running.discard(name)
            if kind != "DELETED":
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            return
        if not pod.spec.node_name:
            # The server answers a binding with a Status, which the client cannot read as the Binding it
            # expects: the raw answer is read instead (which also frees the connection).
            self.core.create_namespaced_pod_binding(name, self.namespace, {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-0"}}, _preload_content=False).data
        elif pod.status.phase != "Running":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self.core.patch_namespaced_pod_status(name, self.namespace, {"status": {
                "phase": "Running", "startTime": now,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}})
        else:
            with self.lock:
                self.running.add(name)


# --- the running pipeline -------------------------------------------------------------------------


@dataclass
class Pipeline:
    api: servers.ApiServer
    hpa: dict[str, Any]
    pods: Pods

    def status(self) -> Any:
        return client.AutoscalingV2Api(self.api.client()).read_namespaced_horizontal_pod_autoscaler_status(
            self.hpa["metadata"]["name"], self.hpa["metadata"]["namespace"]).status

    def condition(self, kind: str) -> Any:
        return next((c for c in self.status().conditions or [] if c.type == kind), None)

    def current_metrics(self) -> dict[str, float]:
        """Each metric's per-pod average as the HPA controller last read it from the adapter."""
        return {m.pods.metric.name: float(parse_quantity(m.pods.current.average_value)) for m in self.status().current_metrics or []}


@pytest.fixture
def pipeline(etcd: servers.Etcd, tmp_path: Path) -> Iterator[Pipeline]:
    objects = rendered(tmp_path)
    hpa, namespace = objects.hpa, objects.hpa["metadata"]["namespace"]
    name = hpa["spec"]["scaleTargetRef"]["name"]
    with contextlib.ExitStack() as stack:  # whatever was started is stopped, last first
        host = stack.enter_context(netns_host())
        api = servers.ApiServer("autoscaling", tmp_path / "kube", etcd, address=host.host_address,
                                extra_args=aggregation_flags(tmp_path / "kube"))
        stack.callback(api.stop)
        api.start()
        pods = Pods(client.CoreV1Api(api.client()), namespace, LOW)
        target = stack.enter_context(exporter(pods.samples))
        url = stack.enter_context(prometheus(tmp_path / "prometheus", host.host_address, target))
        apply = servers.applier(api)
        for namespaced in ("monitoring", namespace):
            apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespaced}})
        apply(objects.adapter_config_map)
        adapter = MetricsAdapter(api, host, tmp_path / "adapter", url, objects.adapter_config_map["data"]["config.yaml"])
        stack.callback(adapter.stop)
        adapter.start()
        # The serviceaccount controller creates each namespace's `default` account, without which no pod is admitted.
        api.start_controllers("serviceaccount-controller", "deployment-controller", "replicaset-controller",
                              "horizontal-pod-autoscaler-controller", flags=(f"--horizontal-pod-autoscaler-sync-period={SYNC_PERIOD}s",))
        stack.enter_context(watching(pods.core.list_namespaced_pod, namespace, pods.handle))
        # The tenant's Deployment (fleetops renders only what bounds it): one replica's devices per pod.
        devices = {SERVICE["devices"]["resource"]: str(SERVICE["devices"]["count"])}
        apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
               "spec": {"replicas": hpa["spec"]["minReplicas"], "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                            {"name": "server", "image": "vllm/vllm-openai", "resources": {"limits": devices}}]}}}})
        apply(hpa)
        yield Pipeline(api, hpa, pods)


def test_load_scales_up_to_max_never_beyond_and_down_only_after_the_window(pipeline: Pipeline, record_property: Callable[[str, object], None]) -> None:
    # What the environment file declares, which the rendered HPA must carry to the controller.
    lowest, highest = SERVICE["replicas"]["min"], SERVICE["replicas"]["max"]
    window = SERVICE["scale_down_stabilisation_seconds"]
    with replica_log(pipeline.api, SERVICE["tenant"], SERVICE["name"]) as replicas:
        # The controller reads every metric of the rendered HPA, through the rendered rules, before the load rises.
        servers.wait_until(lambda: getattr(pipeline.condition("ScalingActive"), "status", None) == "True",
                           "the HPA reading its metrics", timeout=60)
        assert replicas.values == [lowest]

        high = time.monotonic()
        pipeline.pods.set_load(HIGH)
        at_max = replicas.wait_for(lambda n: n == highest, high, "scale up to the maximum", timeout=90)
        # The controller wants more than the maximum, and says it holds at the maximum.
        servers.wait_until(lambda: getattr(pipeline.condition("ScalingLimited"), "reason", None) == "TooManyReplicas",
                           "the HPA capped at its maximum", timeout=30)
        capped = time.monotonic()
        # What it scaled on is what the pods exported, through Prometheus and the rendered rules. One
        # metric high enough takes it to the maximum while another may still show its last reading
        # (scraped every second, listed again by the adapter every 2 s, kept at most a minute).
        exported = {metric.name: value for metric, value in HIGH.items()}
        read: dict[str, float] = {}

        def reads_exported() -> bool:
            read.clear()
            read.update(pipeline.current_metrics())
            return read == exported

        try:
            servers.wait_until(reads_exported, "the HPA reading what the pods export", timeout=60)
        except TimeoutError:
            raise AssertionError(f"the HPA reads {read}, the pods export {exported}") from None

        low = time.monotonic()
        pipeline.pods.set_load(LOW)
        at_min = replicas.wait_for(lambda n: n == lowest, low, "scale down to the minimum", timeout=window + 60)

    record_property("timings", f"up {lowest}->{highest} in {at_max - high:.1f}s (capped, said in {capped - high:.1f}s); "
                               f"down {highest}->{lowest} {at_min - low:.1f}s after the load fell (window {window}s); replicas seen {replicas.values}")
    assert max(replicas.values) == highest, f"replicas went beyond the maximum {highest}: {replicas.values}"
    # It scales down once every recommendation in the window is low; the last high one was at most one
    # sync before the load fell.
    assert at_min - low >= window - SYNC_PERIOD, f"scaled down {at_min - low:.1f}s after the load fell, inside the {window}s window"
    # It may step down (6 -> 5 -> 2: a recommendation in the window made while a pod had no metric yet),
    # but its first step below the maximum comes no earlier than the window either.
    left = next(t for t, n in replicas.seen if t > at_max and n < highest)
    assert left - low >= window - SYNC_PERIOD, f"it left the maximum {left - low:.1f}s after the load fell, inside the {window}s window: {replicas.values}"


def test_the_test_host_is_removed_even_when_the_test_inside_it_fails() -> None:
    def listed() -> tuple[str, str]:
        run = lambda *args: subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout  # noqa: E731
        return run("netns", "list"), run("-br", "addr")

    with pytest.raises(RuntimeError, match="inside"), netns_host() as host:
        namespaces, addresses = listed()
        assert host.namespace in namespaces.split() and f"{host.host_address}/30" in addresses.split()
        raise RuntimeError("a failure inside")
    namespaces, addresses = listed()
    assert host.namespace not in namespaces.split() and f"{host.host_address}/30" not in addresses.split()
