"""The DCGM scrape fleetops renders, run by the real Prometheus (Debian's) against a stand-in exporter: the
series it stores carry cluster, pool and tenant, and a target on a Jetson node is not scraped at all.

Debian's Prometheus has no Kubernetes discovery, so the test gives each target the meta labels
prometheus-operator's endpoints discovery would (`__meta_kubernetes_node_label_*` with
attachMetadata.node, the pod's node name, the target's `namespace`), then applies the rendered
relabelling unchanged."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fleetops import render
from tests import servers
from tests.helpers import one, render_env
from tests.render.test_monitoring import monitored_env, scrape_config

pytestmark = pytest.mark.real

# What dcgm-exporter serves with its Kubernetes pod mapping: the GPU a pod holds names the pod's
# namespace; an idle GPU has none.
EXPOSITION = b"""# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1",namespace="vision",pod="train-0",container="main"} 12
DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n1"} 0
"""


@pytest.fixture
def exporter() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(EXPOSITION)

        def log_message(self, *args: Any) -> None:
            pass

    with servers.serving(Handler) as address:
        yield address


def query(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as answer:
        return json.loads(answer.read(1_000_000))["data"]["result"]


def test_dcgm_series_carry_cluster_pool_and_tenant_and_jetson_nodes_are_not_scraped(tmp_path: Path, exporter: str) -> None:
    state: render.DesiredState = render_env(tmp_path, monitored_env())
    job = scrape_config(one(state, "center-a", "ServiceMonitor", "dcgm-exporter", "monitoring"))
    node = "__meta_kubernetes_node_label_fleetops_io_"
    job |= {
        "job_name": "dcgm-exporter",
        "scrape_interval": "1s",
        "static_configs": [
            {"targets": [exporter], "labels": {f"{node}pool": "a100-ts", "__meta_kubernetes_pod_node_name": "n1", "namespace": "gpu-monitoring"}},
            # The same exporter seen on a Jetson node of the edge group: the relabelling drops it.
            {"targets": [exporter], "labels": {f"{node}edge_group": "jetson", "__meta_kubernetes_pod_node_name": "j1", "namespace": "gpu-monitoring"}},
        ],
    }
    with servers.prometheus_server(tmp_path / "prometheus", scrape_configs=[job]) as prometheus:
        servers.wait_until(lambda: len(query(prometheus.url, "DCGM_FI_DEV_GPU_UTIL")) == 2, "two GPU series scraped", prometheus.process)
        series = {r["metric"]["gpu"]: r["metric"] for r in query(prometheus.url, "DCGM_FI_DEV_GPU_UTIL")}
        targets = query(prometheus.url, 'up{job="dcgm-exporter"}')

    assert {k: series["0"].get(k) for k in ("cluster", "pool", "node", "namespace", "tenant")} == {
        "cluster": "center-a", "pool": "a100-ts", "node": "n1", "namespace": "vision", "tenant": "vision"}
    # An idle GPU: the exporter's target namespace, and no tenant.
    assert {k: series["1"].get(k) for k in ("cluster", "pool", "namespace", "tenant")} == {
        "cluster": "center-a", "pool": "a100-ts", "namespace": "gpu-monitoring", "tenant": None}
    assert [t["metric"].get("node") for t in targets] == ["n1"]  # the Jetson node's target was never scraped
