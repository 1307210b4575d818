"""The monitoring fleetops renders, read by the real prometheus-operator and run by the real Prometheus (both from their
Go modules, tests/monitoring_stack.py), with stand-in exporters found the way a cluster publishes them.

For each cluster of the small environment, on its own kube-apiserver: the rendered ServiceMonitors, PodMonitors and
PrometheusRules (strict server-side apply against the operator's CRDs), and a Prometheus object selecting them by the
environment's `prometheus_selector`. The test writes what the cluster's other parts would have made: Nodes with the pool
labels fleetops puts on them, the exporters' Services, Endpoints and Pods (no controller or kubelet runs), and
kube-state-metrics' ServiceMonitor as kube-prometheus-stack ships it. Every exporter is a stand-in listening inside the
test's own network namespace (tests/netns.py: the pods' network; Endpoints refuse loopback) on its upstream's port,
serving the series its upstream names, in one of two states:

- quiet: every device busy, quotas under 90% used, nothing pending in Kueue and admissions within a minute, every
  Jetson Ready;
- alarming: devices idle, a quota full, workloads pending and admitted after an hour, a Jetson not Ready.

Checked: every rendered monitor is a scrape job whose targets are up with the labels its relabelings give (`cluster`,
and `pool` and `node` as the test's Nodes and Endpoints say); every alerting rule is inactive while quiet (every target
scraped twice, so rates have samples) and active once alarming, with its labels and its annotations expanded; every
recording rule records; and (center-a) every dashboard variable lists values and every panel returns series, asked as
Grafana's Prometheus data source asks. An alert's `for` is not waited out (4 to 30 minutes): promtool's unit tests of
the same rules prove it (tests/render/test_monitoring.py). The budget group runs every 5 minutes, so its first
evaluation may be that far away: it is loaded, and its first rule's expression is asked directly (the second sums the
first's records over the month: promtool's unit tests and the month in tests/metering/test_real_metering.py prove it).

No Grafana server can be had here (README): Grafana's queries are sent as its data source sends them."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleetops import kube, metrics, render
from fleetops.errors import WhatifError
from modules import dashboards
from tests import monitoring_stack, servers
from tests.conftest import ApiServers
from tests.helpers import render_env
from tests.metrics_pipeline import exposition
from tests.netns import NetnsHost, inside, netns_host
from tests.render.test_monitoring import monitored_env

pytestmark = pytest.mark.real

MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
# Two 30 s scrapes of every target and the evaluations after them, on a loaded machine.
ALERT_WAIT = 150.0
# Runs every 5 minutes: its first evaluation may be that far away (modules/metering.py).
BUDGET = "fleetops.budget"


# --- the stand-in exporters -----------------------------------------------------------------------


@dataclass
class Scenario:
    """Whether the stand-ins serve the quiet state or the alarming one."""

    alarming: bool = False


def _admission_wait(queue: str, alarming: bool) -> str:
    """Kueue's admission-wait histogram: a workload admitted within a minute every second all along (a counter that
    grows between scrapes, so the quiet rate is there to read), and once alarming a thousand more admitted after an
    hour (the 0.9 quantile of the increase is then past 30 minutes)."""
    soon, late = int(time.time()), 1000 if alarming else 0
    return exposition((f"{metrics.KUEUE_ADMISSION_WAIT}_bucket", {"cluster_queue": queue, "le": le}, count)
                      for le, count in (("60", soon), ("1800", soon), ("3600", soon + late), ("+Inf", soon + late)))


def center_a(s: Scenario) -> dict[str, str]:
    """What center-a's exporters serve: vision trains on the time-sliced A100 pool (node n1), runs inference on the
    Ascend pool (n2) and holds a whole MIG-cut H100 (n3)."""
    util = 10 if s.alarming else 90
    gpu = {"gpu": "0", "Hostname": "n1", "namespace": "vision", "pod": "train-0", "container": "main"}
    return {
        # GPU 1 is held by no pod: dcgm-exporter's pod mapping names no namespace, so no tenant
        "dcgm": exposition([(metrics.GPU_UTIL, gpu, util), (metrics.GPU_MEMORY_USED, gpu, 20000), (metrics.GPU_UTIL, {"gpu": "1", "Hostname": "n1"}, util)]),
        "npu": exposition([(metrics.NPU_UTIL, {"id": "0", "model_name": "Ascend910B", "namespace": "vision", "pod_name": "infer-0"}, util)]),
        "kueue": exposition([(metrics.KUEUE_PENDING, {"cluster_queue": "vision", "status": "active"}, 3 if s.alarming else 0)])
        + _admission_wait("vision", s.alarming),
        "reconciler": exposition([(metrics.CLUSTER_UP, {"cluster": "center-a"}, 1)]),
        "ksm": exposition([
            *[(metrics.NODE_LABELS, {"node": n, "label_fleetops_io_pool": p}, 1) for n, p in (("n1", "a100-ts"), ("n2", "ascend"), ("n3", "h100-mig"))],
            (metrics.NODE_ALLOCATABLE, {"node": "n1", "resource": "nvidia_com_gpu", "unit": "integer"}, 16),
            (metrics.NODE_ALLOCATABLE, {"node": "n2", "resource": "huawei_com_Ascend910", "unit": "integer"}, 8),
            (metrics.NODE_ALLOCATABLE, {"node": "n3", "resource": "nvidia_com_gpu", "unit": "integer"}, 56),
            (metrics.NAMESPACE_LABELS, {"namespace": "vision", "label_fleetops_io_tenant": "vision"}, 1),
            *[(metrics.POD_REQUESTS, {"namespace": "vision", "pod": pod, "container": "main", "node": node, "resource": resource, "unit": "integer"}, count)
              for pod, node, resource, count in (("train-0", "n1", "nvidia_com_gpu", 2), ("infer-0", "n2", "huawei_com_Ascend910", 1),
                                                 ("tune-0", "n3", "nvidia_com_gpu", 7))],
            *[(metrics.POD_PHASE, {"namespace": "vision", "pod": pod, "phase": "Running"}, 1) for pod in ("train-0", "infer-0", "tune-0")],
            (metrics.RESOURCE_QUOTA, {"namespace": "vision", "resourcequota": "fleetops-devices", "resource": "requests.nvidia.com/gpu", "type": "used"},
             8 if s.alarming else 4),
            (metrics.RESOURCE_QUOTA, {"namespace": "vision", "resourcequota": "fleetops-devices", "resource": "requests.nvidia.com/gpu", "type": "hard"}, 8),
        ]),
    }


def edge_b(s: Scenario) -> dict[str, str]:
    """What edge-b's exporters serve: factory's inference on Jetson jetson-0. No rule or panel reads the Jetson
    exporter's own series: it is scraped for its target alone."""
    return {
        "jetson": "# jetson_stats_node_exporter: no series fleetops reads\n",
        "kueue": exposition([(metrics.KUEUE_PENDING, {"cluster_queue": "factory", "status": "active"}, 2 if s.alarming else 0)])
        + _admission_wait("factory", s.alarming),
        "reconciler": exposition([(metrics.CLUSTER_UP, {"cluster": "edge-b"}, 1)]),
        "ksm": exposition([
            (metrics.NODE_LABELS, {"node": "jetson-0", "label_fleetops_io_edge_group": "jetson"}, 1),
            (metrics.NODE_ALLOCATABLE, {"node": "jetson-0", "resource": "nvidia_com_gpu", "unit": "integer"}, 1),
            (metrics.NODE_CONDITION, {"node": "jetson-0", "condition": "Ready", "status": "true"}, 0 if s.alarming else 1),
            (metrics.NAMESPACE_LABELS, {"namespace": "factory", "label_fleetops_io_tenant": "factory"}, 1),
            (metrics.POD_REQUESTS, {"namespace": "factory", "pod": "detect-0", "container": "main", "node": "jetson-0", "resource": "nvidia_com_gpu", "unit": "integer"}, 1),
            (metrics.POD_PHASE, {"namespace": "factory", "pod": "detect-0", "phase": "Running"}, 1),
            (metrics.RESOURCE_QUOTA, {"namespace": "factory", "resourcequota": "fleetops-devices", "resource": "requests.nvidia.com/gpu", "type": "used"},
             3 if s.alarming else 1),
            (metrics.RESOURCE_QUOTA, {"namespace": "factory", "resourcequota": "fleetops-devices", "resource": "requests.nvidia.com/gpu", "type": "hard"}, 3),
        ]),
    }


@dataclass(frozen=True)
class Publication:
    """How a cluster publishes one exporter: its port (upstream's default), the Service (if any) whose Endpoints list
    it, its pods, the nodes they run on."""

    namespace: str
    labels: dict[str, str]
    port_name: str
    port: int
    nodes: tuple[str, ...] = ()
    service: str | None = None
    https: bool = False


PUBLISHED = {
    # the GPU operator's DCGM exporter DaemonSet and its Service; its pod on the Ascend node n2 (a site that runs the
    # DaemonSet everywhere) is a target the monitor must drop
    "dcgm": Publication("gpu-monitoring", {"app": "nvidia-dcgm-exporter"}, "gpu-metrics", 9400, ("n1", "n2"), "nvidia-dcgm-exporter"),
    # MindCluster's npu-exporter DaemonSet (no Service), scraped by port number
    "npu": Publication("npu-exporter", {"app": "npu-exporter"}, "http", 8082, ("n2",)),
    # the site's jetson_stats_node_exporter DaemonSet (no Service)
    "jetson": Publication("jetson-exporter", {"app.kubernetes.io/name": "jetson-stats-node-exporter"}, "metrics", 9100, ("jetson-0",)),
    # Kueue's config/prometheus: its controller-manager's metrics Service, HTTPS, the scraper's token
    "kueue": Publication("kueue-system", {"control-plane": "controller-manager"}, "https", 8443, service="kueue-controller-manager-metrics-service",
                         https=True),
    # fleetops' own reconciler: its rendered Service
    "reconciler": Publication("fleetops-system", {"app.kubernetes.io/name": "fleetops-reconciler"}, "metrics", 9090, service="fleetops-reconciler"),
    # kube-prometheus-stack's kube-state-metrics
    "ksm": Publication(monitoring_stack.NAMESPACE, {"app.kubernetes.io/name": "kube-state-metrics"}, "http", 8080, service="kube-state-metrics"),
}


@contextlib.contextmanager
def stand_ins(host: NetnsHost, serves: Callable[[], dict[str, str]], token: str, directory: Path) -> Iterator[None]:
    """Each stand-in listening inside the test host's namespace, as a pod's container would, on its upstream port,
    answering with what `serves()` says then; Kueue's over HTTPS and only to `token` (the Prometheus pod's own)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    servers.tls_pair(directory / "tls", host.address, (host.address,))
    context.load_cert_chain(directory / "tls" / "tls.crt", directory / "tls" / "tls.key")
    with contextlib.ExitStack() as stack:
        for name in serves():
            published = PUBLISHED[name]

            class Handler(BaseHTTPRequestHandler):
                exporter = name

                def do_GET(self) -> None:  # noqa: N802 - the http.server API
                    if PUBLISHED[self.exporter].https and self.headers.get("Authorization") != f"Bearer {token}":
                        self.send_response(401)
                        self.end_headers()
                        return
                    body = serves()[self.exporter].encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, *args: Any) -> None:
                    pass

            with inside(host.namespace):  # the listening socket is the namespace's
                server = ThreadingHTTPServer((host.address, published.port), Handler)
            if published.https:
                server.socket = context.wrap_socket(server.socket, server_side=True)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stack.callback(server.server_close)
            stack.callback(server.shutdown)
        yield


# Pod Security's `restricted` level, which fleetops' own namespace enforces (the reconciler's pod stands in there).
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def published_objects(address: str, names: list[str], nodes: dict[str, dict[str, str]], selector: dict[str, str]) -> list[dict[str, Any]]:
    """What the cluster's other parts would have made for the stand-ins: Nodes, the exporters' pods (their IP the test
    host's) and the Endpoints of their Services, and kube-prometheus-stack's ServiceMonitor of kube-state-metrics."""
    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}} for n, labels in nodes.items()]
    for name in names:
        p = PUBLISHED[name]
        port = p.port
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": p.namespace}})
        # what the serviceaccount controller would make, without which no pod is admitted
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": p.namespace}})
        pods = {f"{name}-{node or 0}": node for node in p.nodes or (None,)}
        objects.extend({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": p.namespace, "labels": p.labels},
                        "spec": {**({"nodeName": node} if node else {}),
                                 "automountServiceAccountToken": False, "securityContext": RESTRICTED_POD,
                                 "containers": [{"name": name, "image": "stand-in", "securityContext": RESTRICTED_CONTAINER,
                                                 "ports": [{"name": p.port_name, "containerPort": port}]}]},
                        "status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}} for pod, node in pods.items())
        if p.service:
            if name != "reconciler":  # the reconciler's Service is rendered
                objects.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": p.service, "namespace": p.namespace, "labels": p.labels},
                                "spec": {"selector": p.labels, "ports": [{"name": p.port_name, "port": port, "targetPort": port}]}})
            objects.append({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": p.service, "namespace": p.namespace, "labels": p.labels},
                            "subsets": [{"addresses": [{"ip": address, **({"nodeName": node} if node else {}),
                                                        "targetRef": {"kind": "Pod", "name": pod, "namespace": p.namespace}} for pod, node in pods.items()],
                                         "ports": [{"name": p.port_name, "port": port}]}]})
    objects.append({"apiVersion": f"{monitoring_stack.GROUP}/{monitoring_stack.VERSION}", "kind": "ServiceMonitor",
                    "metadata": {"name": "kube-state-metrics", "namespace": monitoring_stack.NAMESPACE, "labels": selector},
                    "spec": {"selector": {"matchLabels": PUBLISHED["ksm"].labels}, "namespaceSelector": {"matchNames": [monitoring_stack.NAMESPACE]},
                             "endpoints": [{"port": "http", "interval": "30s", "honorLabels": True}]}})
    return objects


def create(api: servers.ApiServer, objects: list[dict[str, Any]]) -> None:
    """Create each object, then write the status the kubelet would have written (a Pod's IP, its phase)."""
    from kubernetes import client, dynamic

    dyn = dynamic.DynamicClient(api.client())
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace")
        try:
            resource.create(body={k: v for k, v in obj.items() if k != "status"}, namespace=namespace)
        except client.ApiException as exc:
            if not (exc.status == 409 and obj["kind"] in ("Namespace", "ServiceAccount")):  # several exporters share one
                raise
        if "status" in obj:
            resource.status.patch(body={"status": obj["status"]}, name=obj["metadata"]["name"], namespace=namespace,
                                  content_type="application/merge-patch+json")


# --- asking Prometheus --------------------------------------------------------------------------


def get(url: str, path: str, params: dict[str, Any] | None = None) -> Any:
    query = f"?{urllib.parse.urlencode(params, doseq=True)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=10) as answer:
        document = json.loads(answer.read(5_000_000))
    assert document["status"] == "success", document
    return document["data"]


def targets(url: str) -> list[dict[str, Any]]:
    return get(url, "/api/v1/targets", {"state": "active"})["activeTargets"]


def rules(url: str) -> list[dict[str, Any]]:
    return [rule | {"group": group["name"]} for group in get(url, "/api/v1/rules")["groups"] for rule in group["rules"]]


def scraped(url: str, jobs: int, times: int) -> bool:
    """Every job has a target, every target is up and has been scraped `times` times (a rate needs two samples)."""
    found = targets(url)
    if len({t["scrapePool"] for t in found}) != jobs or any(t["health"] != "up" for t in found):
        return False
    counts = get(url, "/api/v1/query", {"query": f"count_over_time({metrics.UP}[10m])"})["result"]
    return len(counts) == len(found) and all(float(c["value"][1]) >= times for c in counts)


def evaluated_since(url: str, since: float) -> bool:
    """Every alerting rule evaluated after `since` (their groups run every second)."""
    return all(datetime.fromisoformat(r["lastEvaluation"]).timestamp() > since for r in rules(url) if r["type"] == "alerting")


# --- Grafana's queries ---------------------------------------------------------------------------


def regex_escape(value: str) -> str:
    """How Grafana's Prometheus data source escapes a value for a regex matcher (prometheusSpecialRegexEscape)."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\1", value)


def all_of(values: list[str]) -> str:
    """A multi-value variable set to All, without an allValue: every value it listed, as one regex."""
    escaped = [regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(expr: str, chosen: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: chosen.get(m.group(1), m.group(0)), expr)


LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def variables(url: str, board: dict[str, Any]) -> dict[str, list[str]]:
    """Each query variable's values, in the dashboard's order (a later one's query reads the earlier ones, set to All):
    `label_values(SELECTOR, LABEL)` is the label-values API with SELECTOR as `match[]`."""
    chosen: dict[str, str] = {}
    listed: dict[str, list[str]] = {}
    now = time.time()
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable["query"])
        assert match, f"{board['uid']}: variable {variable['name']}: not a label_values query Grafana sends as the label-values API"
        values = get(url, f"/api/v1/label/{match['label']}/values", {"match[]": interpolate(match["selector"], chosen), "start": now - 600, "end": now})
        listed[variable["name"]] = values
        if values:
            chosen[variable["name"]] = all_of(values)
    return listed


def panels(url: str, board: dict[str, Any], listed: dict[str, list[str]]) -> dict[str, int]:
    """Each panel's query with the variables set to All, a range query over the last five minutes: how many series."""
    chosen = {name: all_of(values) for name, values in listed.items() if values}
    now = time.time()
    return {panel["title"]: len(get(url, "/api/v1/query_range", {"query": interpolate(panel["targets"][0]["expr"], chosen),
                                                                 "start": now - 300, "end": now, "step": 15})["result"])
            for panel in board["panels"]}


# --- the scenario --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    serves: Callable[[Scenario], dict[str, str]]
    nodes: dict[str, dict[str, str]]  # name -> the labels fleetops puts on it
    alarms: dict[str, list[dict[str, str]]]  # alert -> labels its alerts carry once alarming (of those it has)


CLUSTERS = {
    "center-a": Cluster(center_a, {"n1": {kube.POOL_LABEL: "a100-ts"}, "n2": {kube.POOL_LABEL: "ascend"}, "n3": {kube.POOL_LABEL: "h100-mig"}}, {
        "FleetopsGPUUtilisationLow": [{"cluster": "center-a", "pool": "a100-ts"}],
        "FleetopsNPUUtilisationLow": [{"cluster": "center-a", "pool": "ascend"}],
        "FleetopsQuotaExhausted": [{"namespace": "vision", "resource": "requests.nvidia.com/gpu"}],
        "FleetopsKueueWorkloadsPending": [{"cluster": "center-a", "cluster_queue": "vision"}],
        "FleetopsKueueAdmissionSlow": [{"cluster": "center-a", "cluster_queue": "vision"}],
    }),
    "edge-b": Cluster(edge_b, {"jetson-0": {kube.EDGE_GROUP_LABEL: "jetson"}}, {
        "FleetopsEdgeNodeOffline": [{"cluster": "edge-b", "pool": "jetson", "node": "jetson-0"}],
        "FleetopsQuotaExhausted": [{"namespace": "factory", "resource": "requests.nvidia.com/gpu"}],
        "FleetopsKueueWorkloadsPending": [{"cluster": "edge-b", "cluster_queue": "factory"}],
        "FleetopsKueueAdmissionSlow": [{"cluster": "edge-b", "cluster_queue": "factory"}],
    }),
}


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> render.DesiredState:
    return render_env(tmp_path_factory.mktemp("monitored"), monitored_env())


def _selector(rule: dict[str, Any]) -> str:
    """A recording rule's own series: its name and the labels it sets."""
    return rule["name"] + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(rule.get("labels", {}).items())) + "}"


def _sets_cluster(monitor: dict[str, Any]) -> bool:
    endpoints = monitor["spec"].get("endpoints") or monitor["spec"].get("podMetricsEndpoints") or []
    return any(r.get("targetLabel") == "cluster" for e in endpoints for r in e.get("relabelings", []))


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_the_operator_reads_what_fleetops_renders_and_prometheus_runs_it(name: str, state: render.DesiredState, api_servers: ApiServers,
                                                                        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    cluster = CLUSTERS[name]
    selector = dict(monitored_env()["monitoring"]["prometheus_selector"])
    rendered = [m for c, m in state.objects() if c == name]
    monitors = [m for m in rendered if m["kind"] in ("ServiceMonitor", "PodMonitor")]
    prometheus_rules = [m for m in rendered if m["kind"] == "PrometheusRule"]
    alerting = {r["alert"] for m in prometheus_rules for g in m["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerting == set(cluster.alarms), "every alert the cluster renders has its alarming case here"
    scenario = Scenario()
    api = api_servers(name, crds=False)[name]
    started = time.monotonic()
    with netns_host() as host, monitoring_stack.operator(api, tmp_path) as operator:
        apply = servers.applier(api)
        for obj in rendered:
            if obj["kind"] == "Namespace" or obj["kind"] in MONITORING_KINDS or (obj["kind"] == "Service" and obj["metadata"]["name"] == "fleetops-reconciler"):
                apply(obj)
        # The Prometheus pod's service account first: Kueue's stand-in answers its token only.
        token = monitoring_stack.service_account(api, "prometheus", "prometheus-cluster-role.yaml")
        with stand_ins(host, lambda: cluster.serves(scenario), token, tmp_path):
            create(api, published_objects(host.address, list(cluster.serves(scenario)), cluster.nodes, selector))
            apply(monitoring_stack.prometheus_object(selector))
            jobs = len(monitors) + 1  # and kube-state-metrics'

            def complete(generated: monitoring_stack.Generated) -> bool:
                files = [f for files in generated.rule_files.values() for f in files]
                return len(generated.jobs) == jobs and len(files) == len(prometheus_rules)

            with monitoring_stack.prometheus(api, tmp_path, operator, complete, token) as stack:
                url = stack.prometheus_url
                servers.wait_until(lambda: scraped(url, jobs, 2), "every target up and scraped twice", stack.prometheus, timeout=ALERT_WAIT)
                quiet_since = time.time()
                servers.wait_until(lambda: evaluated_since(url, quiet_since), "alerting rules evaluated on the quiet series", stack.prometheus)
                quiet = {r["name"]: r["state"] for r in rules(url) if r["type"] == "alerting"}
                found_targets = targets(url)
                gpus = [g["metric"] for g in get(url, "/api/v1/query", {"query": metrics.GPU_UTIL})["result"]]

                scenario.alarming = True
                with contextlib.suppress(WhatifError):  # what did not go active is named below
                    servers.wait_until(lambda: all(r["state"] != "inactive" for r in rules(url) if r["type"] == "alerting"),
                                       "every alert active", stack.prometheus, timeout=ALERT_WAIT)
                alarmed = [r for r in rules(url) if r["type"] == "alerting"]

                def count(query: str) -> int:
                    return len(get(url, "/api/v1/query", {"query": query})["result"])

                def recorded() -> dict[str, bool]:
                    """Each recording rule: evaluated without error, its own expression answers now (several rules record
                    one name, each for its pool), and the name holds what it recorded."""
                    live = [r for r in rules(url) if r["type"] == "recording" and r["group"] != BUDGET]
                    return {f"{r['group']} #{i} {_selector(r)}": r["health"] == "ok" and count(r["query"]) > 0 and count(_selector(r)) > 0
                            for i, r in enumerate(live)}

                with contextlib.suppress(WhatifError):  # what recorded nothing is named below
                    servers.wait_until(lambda: all(recorded().values()), "every recording rule recorded", stack.prometheus, timeout=ALERT_WAIT)
                series = recorded()
                budget = [r for r in rules(url) if r["group"] == BUDGET]
                if budget:
                    series |= {f"{BUDGET} {budget[0]['name']} (its expression)": count(budget[0]["query"]) > 0}
                loaded = {(r["group"], r["name"]) for r in rules(url)}

                def asked() -> dict[str, tuple[dict[str, list[str]], dict[str, int]]]:
                    answers = {}
                    for board_name, text in (dashboards.configmap_data().items() if name == "center-a" else ()):
                        board = json.loads(text)
                        listed = variables(url, board)
                        answers[board_name] = (listed, panels(url, board, listed))
                    return answers

                with contextlib.suppress(WhatifError):  # what did not answer is named below
                    servers.wait_until(lambda: all(all(listed.values()) and all(counts.values()) for listed, counts in asked().values()),
                                       "every variable and panel answered", stack.prometheus)
                boards = asked()
                generated = stack.generated
    record_property("timings", f"{name}: {time.monotonic() - started:.0f} s, operator to alerts")

    # Every rendered monitor is a job of the operator's configuration, and its targets are up with its labels.
    for monitor in monitors:
        kind = "serviceMonitor" if monitor["kind"] == "ServiceMonitor" else "podMonitor"
        job = f"{kind}/{monitor['metadata']['namespace']}/{monitor['metadata']['name']}/0"
        assert job in generated.jobs, f"{job}: not in the configuration the operator wrote"
        up = [t for t in found_targets if t["scrapePool"] == job]
        assert up and all(t["health"] == "up" for t in up), f"{job}: {up}"
        for target in up:
            labels = target["labels"]
            if _sets_cluster(monitor):
                assert labels["cluster"] == name, f"{job}: {labels}"
            if monitor["spec"].get("attachMetadata"):  # pool and node: the labels of the Node its Endpoints or Pod name
                assert labels.get("node") in cluster.nodes and labels.get("pool") in cluster.nodes[labels["node"]].values(), f"{job}: {labels}"

    # DCGM's series carry the GPU's pool, node and cluster, and the tenant of the pod that holds it; its pod on a node of
    # another pool is no target.
    if name == "center-a":
        assert [t["labels"]["node"] for t in found_targets if t["scrapePool"] == "serviceMonitor/monitoring/dcgm-exporter/0"] == ["n1"]
        # honorLabels: the held GPU keeps the exporter's `namespace` (its pod's); the idle one gets the target's
        assert sorted((g["gpu"], g["pool"], g["node"], g["cluster"], g["namespace"], g.get("tenant")) for g in gpus) == [
            ("0", "a100-ts", "n1", "center-a", "vision", "vision"), ("1", "a100-ts", "n1", "center-a", "gpu-monitoring", None)]

    # Every alert stays silent while the stand-ins are quiet, and goes active once they alarm, with its labels and notes.
    assert set(quiet) == alerting and set(quiet.values()) == {"inactive"}, quiet
    assert {r["name"] for r in alarmed} == alerting
    assert [r["name"] for r in alarmed if r["state"] == "inactive"] == [], "alerts that stayed silent when they should fire"
    for rule in alarmed:
        got = [{k: v for k, v in a["labels"].items() if k in want} for a in rule["alerts"] for want in cluster.alarms[rule["name"]]]
        assert all(want in got for want in cluster.alarms[rule["name"]]), (rule["name"], [a["labels"] for a in rule["alerts"]])
        # Prometheus expands a label an alert lacks to "" (missingkey=zero): every label the notes name must be there.
        named = set(re.findall(r"\$labels\.(\w+)", " ".join(rule["annotations"].values())))
        for alert in rule["alerts"]:
            notes = alert["annotations"]
            assert named <= set(alert["labels"]), (rule["name"], named - set(alert["labels"]))
            assert notes["summary"] and notes["description"] and not any("<error expanding" in v or "{{" in v for v in notes.values()), notes
            assert notes["runbook_url"].endswith(f"#{rule['name'].lower()}")

    # Prometheus loaded every rule rendered for the cluster; every recording rule records, and the budget group's first
    # rule's expression answers (the second reads the first's records).
    assert loaded == {(g["name"], r.get("alert") or r["record"]) for m in prometheus_rules for g in m["spec"]["groups"] for r in g["rules"]}
    assert series and len(budget) in (0, 2) and [r for r, ok in series.items() if not ok] == [], series

    # The dashboards: every variable lists values and every panel returns series.
    if name == "center-a":
        assert {n: listed for n, (listed, _) in boards.items()} == {"fleetops-pools.json": {"cluster": ["center-a"], "pool": ["a100-ts", "ascend", "h100-mig"]},
                                                                     "fleetops-tenants.json": {"cluster": ["center-a"], "tenant": ["vision"]}}
        assert [f"{n}: {title}" for n, (_, answers) in boards.items() for title, count in answers.items() if not count] == []
