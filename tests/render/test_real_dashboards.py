"""The dashboards fleetops ships, asked as Grafana's Prometheus data source asks them, of a real Prometheus (Debian's)
that scrapes stand-in exporters through the rendered monitors and evaluates the rendered rules: every variable
lists values, and every panel's query returns series.

No Grafana server can be had here. What Grafana does is done as its data source does it: a variable's
`label_values(SELECTOR, LABEL)` is the label-values API with that selector as `match[]`; a multi-value variable
set to All (each dashboard's default) is every value it listed, regex-escaped and joined as `(a|b)`; a panel's
query is a range query over the dashboard's last minutes. The monitors become scrape jobs through the test's own
translation (tests/render/test_monitoring.py: a static target carrying the meta labels prometheus-operator's
discovery would), and the rule groups are loaded as rendered, evaluated every second."""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fleetops import render
from fleetops.errors import WhatifError
from modules import dashboards
from tests import servers
from tests.helpers import one, render_env
from tests.render.test_monitoring import monitored_env, scrape_config

pytestmark = pytest.mark.real

NODE = "__meta_kubernetes_node_label_fleetops_io_"
CLUSTER = "center-a"
# What each exporter serves while vision's pods run on center-a: a GPU of the time-sliced A100 pool and an
# Ascend NPU mapped to vision's pod, its Kueue queue with work pending, and kube-state-metrics' view of it all.
EXPOSITIONS = {
    "dcgm": """# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1",namespace="vision",pod="train-0",container="main"} 40
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",namespace="vision",pod="train-0",container="main"} 20000
""",
    "npu": """# TYPE npu_chip_info_utilization gauge
npu_chip_info_utilization{id="0",model_name="Ascend910B",namespace="vision",pod_name="infer-0"} 55
""",
    "kueue": """# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{cluster_queue="vision",status="active"} 3
kueue_pending_workloads{cluster_queue="vision",status="inadmissible"} 1
""",
    "ksm": """# TYPE kube_node_labels gauge
kube_node_labels{node="n1",label_fleetops_io_pool="a100-ts"} 1
# TYPE kube_node_status_allocatable gauge
kube_node_status_allocatable{node="n1",resource="nvidia_com_gpu",unit="integer"} 16
# TYPE kube_namespace_labels gauge
kube_namespace_labels{namespace="vision",label_fleetops_io_tenant="vision"} 1
# TYPE kube_pod_container_resource_requests gauge
kube_pod_container_resource_requests{namespace="vision",pod="train-0",container="main",node="n1",resource="nvidia_com_gpu",unit="integer"} 2
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{namespace="vision",pod="train-0",phase="Running"} 1
# TYPE kube_resourcequota gauge
kube_resourcequota{namespace="vision",resourcequota="fleetops-devices",resource="requests.nvidia.com/gpu",type="used"} 2
kube_resourcequota{namespace="vision",resourcequota="fleetops-devices",resource="requests.nvidia.com/gpu",type="hard"} 8
""",
}


@pytest.fixture
def exporters() -> Iterator[dict[str, str]]:
    """Each stand-in exporter on a loopback port of its own: name -> host:port."""
    addresses: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for name, text in EXPOSITIONS.items():
            body = text.encode()

            class Handler(BaseHTTPRequestHandler):
                served = body

                def do_GET(self) -> None:  # noqa: N802 - the http.server API
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.end_headers()
                    self.wfile.write(self.served)

                def log_message(self, *args: Any) -> None:
                    pass

            addresses[name] = stack.enter_context(servers.serving(Handler))
        yield addresses


def jobs(state: render.DesiredState, at: dict[str, str]) -> list[dict[str, Any]]:
    """The rendered monitors of center-a as scrape jobs against the stand-ins, with the meta labels discovery would give;
    kube-state-metrics' job is kube-prometheus-stack's, not fleetops': a plain one labelled with the cluster."""
    def job(kind: str, name: str, target: str, meta: dict[str, str]) -> dict[str, Any]:
        return scrape_config(one(state, CLUSTER, kind, name, "monitoring")) | {
            "job_name": name, "scrape_interval": "1s", "static_configs": [{"targets": [target], "labels": meta}]}

    return [
        job("ServiceMonitor", "dcgm-exporter", at["dcgm"], {f"{NODE}pool": "a100-ts", "__meta_kubernetes_pod_node_name": "n1", "namespace": "gpu-monitoring"}),
        job("PodMonitor", "npu-exporter", at["npu"], {f"{NODE}pool": "ascend", "__meta_kubernetes_pod_node_name": "n2", "namespace": "npu-monitoring"}),
        job("ServiceMonitor", "kueue-controller-manager", at["kueue"], {"namespace": "kueue-system"}),
        {"job_name": "kube-state-metrics", "scrape_interval": "1s", "honor_labels": True,
         "static_configs": [{"targets": [at["ksm"]], "labels": {"cluster": CLUSTER}}]},
    ]


def rule_groups(state: render.DesiredState) -> list[dict[str, Any]]:
    """center-a's rendered rule groups, unchanged but for their interval: every second, not every minute."""
    rules = [m for c, m in state.objects() if c == CLUSTER and m["kind"] == "PrometheusRule"]
    return [group | {"interval": "1s"} for rule in rules for group in rule["spec"]["groups"]]


def get(url: str, path: str, params: dict[str, Any]) -> Any:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params, doseq=True)}", timeout=10) as answer:
        document = json.loads(answer.read(1_000_000))
    assert document["status"] == "success", document
    return document["data"]


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
    """Each query variable's values, in the dashboard's order (a later one's query reads the earlier ones, set to All)."""
    chosen: dict[str, str] = {}
    listed: dict[str, list[str]] = {}
    now = time.time()
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable["query"])
        assert match, f"{board['uid']}: variable {variable['name']}: not a label_values query Grafana sends as the label-values API"
        selector = interpolate(match["selector"], chosen)
        values = get(url, f"/api/v1/label/{match['label']}/values", {"match[]": selector, "start": now - 600, "end": now})
        listed[variable["name"]] = values
        if values:
            chosen[variable["name"]] = all_of(values)
    return listed


def panels(url: str, board: dict[str, Any], listed: dict[str, list[str]]) -> dict[str, int]:
    """Each panel's query with the variables set to All, asked over the last five minutes: how many series it returns."""
    chosen = {name: all_of(values) for name, values in listed.items() if values}
    now = time.time()
    return {panel["title"]: len(get(url, "/api/v1/query_range", {"query": interpolate(panel["targets"][0]["expr"], chosen),
                                                                 "start": now - 300, "end": now, "step": 15})["result"])
            for panel in board["panels"]}


def test_every_variable_lists_values_and_every_panel_returns_series(tmp_path: Path, exporters: dict[str, str]) -> None:
    state: render.DesiredState = render_env(tmp_path, monitored_env())
    boards = {name: json.loads(text) for name, text in dashboards.configmap_data().items()}
    with servers.prometheus_server(tmp_path / "prometheus", scrape_configs=jobs(state, exporters), rule_groups=rule_groups(state)) as prometheus:
        def answered() -> bool:
            return all(all(variables(prometheus.url, b).values()) and all(panels(prometheus.url, b, variables(prometheus.url, b)).values())
                       for b in boards.values())

        with contextlib.suppress(WhatifError):  # what did not answer in time is named below
            servers.wait_until(answered, "every variable and panel answered", prometheus.process)
        listed = {name: variables(prometheus.url, board) for name, board in boards.items()}
        answers = {name: panels(prometheus.url, board, listed[name]) for name, board in boards.items()}
    assert listed == {"fleetops-pools.json": {"cluster": [CLUSTER], "pool": ["a100-ts", "ascend"]},
                      "fleetops-tenants.json": {"cluster": [CLUSTER], "tenant": ["vision"]}}
    assert {name: list(board) for name, board in answers.items()} == {name: [p["title"] for p in board["panels"]] for name, board in boards.items()}
    assert [f"{name}: {title}" for name, board in answers.items() for title, count in board.items() if not count] == []  # none empty
