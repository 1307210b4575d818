"""The real metrics pipeline an HPA reads: a test exporter, Prometheus, and prometheus-adapter.

    exporter (127.0.0.1) <- Prometheus (host side of the test host) <- prometheus-adapter (in the test
    host, tests/netns.py) <- kube-apiserver's aggregator (custom.metrics.k8s.io, external.metrics.k8s.io)
    <- the HPA controller of kube-controller-manager

The exporter is a Python HTTP server whose values the test sets. Prometheus and prometheus-adapter are
built from their Go modules (tools/build.sh). The adapter
serves on the test host because the aggregator refuses loopback endpoints; it is registered as a
platform team registers it: a Service (selector-less here: no pod runs it) with an EndpointSlice
naming its address, and an APIService per group carrying its serving certificate's CA.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from tests import servers
from tests.netns import NetnsHost

ADAPTER_NAMESPACE = "monitoring"
ADAPTER_SERVICE = "prometheus-adapter"
# The API group prometheus-adapter serves for each section of its rules (it serves a group only when
# its section has rules).
METRICS_GROUPS = {"rules": "custom.metrics.k8s.io", "externalRules": "external.metrics.k8s.io"}
SCRAPE_INTERVAL = "1s"


# --- the exporter ---------------------------------------------------------------------------------


# A series' name, its labels, its value.
Sample = tuple[str, dict[str, str], float]


def exposition(samples: Iterable[Sample]) -> str:
    """Prometheus' text format (label values here are names: nothing to escape)."""
    lines = []
    for name, labels, value in samples:
        rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{rendered}}} {value}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def exporter(samples: Callable[[], Iterable[Sample]]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering each scrape with what `samples()` returns then; its host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = exposition(samples()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # a line a scrape: not worth a log
            pass

    with servers.serving(Handler) as address:
        yield address


# --- Prometheus -----------------------------------------------------------------------------------


@contextlib.contextmanager
def prometheus(directory: Path, address: str, target: str) -> Iterator[str]:
    """Prometheus on `address`, scraping `target` every second; its URL."""
    binary = str(servers.tool("prometheus"))
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        # honor_labels: the exporter speaks for the pods and namespaces it names, as a federated source does.
        "scrape_configs": [{"job_name": "exporter", "honor_labels": True, "static_configs": [{"targets": [target]}]}],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = servers.free_port()
    url = f"http://{address}:{port}"
    process = servers.Process("prometheus", [
        binary, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address={address}:{port}", "--log.level=warn",
    ], directory).start()
    try:
        servers.wait_until(lambda: servers.http_ok(f"{url}/-/ready"), "prometheus", process)
        yield url
    finally:
        process.stop()


# --- the aggregator and prometheus-adapter --------------------------------------------------------


def aggregation_flags(directory: Path) -> list[str]:
    """kube-apiserver flags for aggregated APIs, as kubeadm sets them: a front-proxy client certificate
    the aggregator presents to the adapter, the CA the adapter checks it against, the headers that carry
    the caller's identity; and endpoint routing (no kube-proxy here to route a ClusterIP)."""
    front_proxy = directory / "front-proxy"
    servers.tls_pair(front_proxy, subject="front-proxy-client", ips=())
    return [
        f"--proxy-client-cert-file={front_proxy / 'tls.crt'}", f"--proxy-client-key-file={front_proxy / 'tls.key'}",
        f"--requestheader-client-ca-file={front_proxy / 'ca.crt'}", "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-", "--enable-aggregator-routing=true",
    ]


class MetricsAdapter:
    """prometheus-adapter in the test host reading `config` (its config.yaml: the rules fleetops renders
    into its ConfigMap, which a pod would mount), registered with the API server."""

    def __init__(self, api: servers.ApiServer, host: NetnsHost, directory: Path, prometheus_url: str, config: str):
        self.api, self.host, self.directory, self.prometheus_url, self.config = api, host, directory, prometheus_url, config
        self.process: servers.Process | None = None

    def start(self) -> MetricsAdapter:
        binary = servers.tool("prometheus-adapter")
        d = self.directory
        dns = f"{ADAPTER_SERVICE}.{ADAPTER_NAMESPACE}.svc"  # the name the aggregator checks the certificate for
        ca = servers.tls_pair(d / "serving", subject=dns, ips=(self.host.address,), dns=(dns,))
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.yaml").write_text(self.config)
        kubeconfig = self.api.kubeconfig(d / "kubeconfig")
        port = servers.free_port()
        self.process = servers.Process("prometheus-adapter", self.host.command([
            str(binary), f"--bind-address={self.host.address}", f"--secure-port={port}",
            f"--tls-cert-file={d / 'serving' / 'tls.crt'}", f"--tls-private-key-file={d / 'serving' / 'tls.key'}",
            f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", f"--prometheus-url={self.prometheus_url}/",
            f"--config={d / 'config.yaml'}",
            # Series are listed every 2s (upstream's default: 1m) so a test's values are found at once.
            "--metrics-relist-interval=2s", "--metrics-max-age=1m", "--v=1",
        ]), d).start()
        self._register(port, ca)
        return self

    def _register(self, port: int, ca: bytes) -> None:
        apply = servers.applier(self.api)
        apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ADAPTER_NAMESPACE}})
        apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE},
               "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}})
        apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE,
                            "labels": {"kubernetes.io/service-name": ADAPTER_SERVICE}},
               "addressType": "IPv4", "endpoints": [{"addresses": [self.host.address], "conditions": {"ready": True}}],
               "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
        rules = yaml.safe_load(self.config)
        groups = [group for section, group in METRICS_GROUPS.items() if rules.get(section)]
        for group in groups:
            apply({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": f"v1beta1.{group}"},
                   "spec": {"group": group, "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                            "service": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE, "port": 443},
                            "caBundle": base64.b64encode(ca).decode()}})
        for group in groups:
            servers.wait_until(lambda: self._available(f"v1beta1.{group}"), f"APIService v1beta1.{group} available",
                               self.process, timeout=60)

    def _available(self, name: str) -> bool:
        from kubernetes import client

        status = client.ApiregistrationV1Api(self.api.client()).read_api_service_status(name).status
        return any(c.type == "Available" and c.status == "True" for c in (status.conditions or []))

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
