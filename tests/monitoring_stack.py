"""prometheus-operator and Prometheus as kube-prometheus-stack runs them, on a real kube-apiserver: the readers of the
ServiceMonitors, PodMonitors and PrometheusRules fleetops renders.

    rendered monitors and rules -> kube-apiserver <- prometheus-operator (in-cluster, upstream's RBAC)
      -> Secret prometheus-<name> (prometheus.yaml.gz), ConfigMaps prometheus-<name>-rulefiles-<n>
      -> Prometheus, with its pod's volumes: that configuration, those rule files, its service account's token
      -> Kubernetes discovery, in-cluster, of the Endpoints, Pods and Nodes the test writes
      -> stand-in exporters inside the test host's network namespace (tests/netns.py; Endpoints refuse loopback)

Both are built from their Go modules (tools/build.sh). No kubelet runs: the operator writes the configuration before
its StatefulSet has a pod, and the test plays the kubelet's part for that one pod. Each process runs in a mount
namespace of its own in which /run (and so /var/run) holds its service account's token, CA and namespace where every
pod has them: client-go's in-cluster configuration reads them there, and so does the `bearerTokenFile` of a monitor.
The configuration is what the operator wrote, with two changes the pod would see made for it: the config reloader's
$(POD_NAME) and $(SHARD) substitution, and /etc/prometheus/ (where its volumes are mounted) as a folder of the test.
Prometheus' own flags are the test's: a free loopback port and a storage folder.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import servers

NAMESPACE = "monitoring"
# The Prometheus object, and the one pod of its StatefulSet the configuration is for.
NAME = "fleet"
POD = f"prometheus-{NAME}-0"
SECRETS = Path("secrets/kubernetes.io/serviceaccount")  # under /run, where a pod's service account is mounted
GROUP, VERSION = "monitoring.coreos.com", "v1"


def operator_assets() -> Path:
    """The CRDs and upstream's RBAC beside the operator's binary (tools/build.sh copies them from its module)."""
    return servers.tool("prometheus-operator").resolve().parent / "crds"


def operator_crds() -> list[dict[str, Any]]:
    return servers.crds_in(operator_assets())


def prometheus_release() -> str:
    """The release of the Prometheus `make tools` built (`prometheus --version`'s first line names it)."""
    out = subprocess.run([str(servers.tool("prometheus")), "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    return "v" + out.split()[2]


def service_account(api: servers.ApiServer, name: str, role_file: str) -> str:
    """A ServiceAccount bound to upstream's ClusterRole for it; a token for it (TokenRequest), as the kubelet mounts one."""
    from kubernetes import client

    role = yaml.safe_load((operator_assets() / "rbac" / role_file).read_text())
    core, rbac = client.CoreV1Api(api.client()), client.RbacAuthorizationV1Api(api.client())
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": name}})
    rbac.create_cluster_role(role | {"metadata": {"name": f"{NAMESPACE}-{name}"}})
    rbac.create_cluster_role_binding({
        "metadata": {"name": f"{NAMESPACE}-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{NAMESPACE}-{name}"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
    })
    return core.create_namespaced_service_account_token(name, NAMESPACE, {"spec": {"expirationSeconds": 3600}}).status.token


def in_pod(api: servers.ApiServer, directory: Path, name: str, token: str, argv: list[str]) -> servers.Process:
    """`argv` as a pod's container runs it, as far as in-cluster clients look: the service account's files under
    /run/secrets/kubernetes.io/serviceaccount (a bind mount in a mount namespace of its own), the API server's address
    in KUBERNETES_SERVICE_HOST and _PORT, and no other variable of the test's: a KUBECONFIG left in this process (the
    deploy's inline Pulumi program sets one) would win over the in-cluster configuration."""
    run = directory / "run"
    account = run / SECRETS
    account.mkdir(parents=True, exist_ok=True)
    (account / "token").write_text(token)
    (account / "namespace").write_text(NAMESPACE)
    shutil.copyfile(api.ca_file, account / "ca.crt")
    for command in ("unshare", "mount"):
        if shutil.which(command) is None:
            servers.missing(f"no {command} (util-linux, mount): a pod's service account is mounted in a mount namespace")
    environment = ["env", "-i", f"PATH={os.environ['PATH']}", f"KUBERNETES_SERVICE_HOST={api.address}", f"KUBERNETES_SERVICE_PORT={api.port}"]
    mounted = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", 'mount --bind "$0" /run && exec "$@"', str(run)]
    return servers.Process(name, [*environment, *mounted, *argv], directory)


def prometheus_object(selector: dict[str, str]) -> dict[str, Any]:
    """The Prometheus object as kube-prometheus-stack makes it: monitors and rules chosen by the release's labels (the
    environment's `monitoring.prometheus_selector`) in every namespace. Rules are evaluated every second (the chart's
    30 s would make the test wait), where a group does not set its own interval."""
    chosen = {"matchLabels": selector}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Prometheus", "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "version": prometheus_release(), "serviceAccountName": "prometheus",
            "serviceMonitorSelector": chosen, "podMonitorSelector": chosen, "ruleSelector": chosen,
            "serviceMonitorNamespaceSelector": {}, "podMonitorNamespaceSelector": {}, "ruleNamespaceSelector": {},
            "evaluationInterval": "1s",
        },
    }


@dataclass(frozen=True)
class Generated:
    """What the operator wrote for the Prometheus object: its configuration as written, and its rule files by ConfigMap."""

    text: str
    rule_files: dict[str, dict[str, str]]

    @property
    def jobs(self) -> list[str]:
        return [job["job_name"] for job in yaml.safe_load(self.text).get("scrape_configs") or []]


def generated(api: servers.ApiServer) -> Generated | None:
    from kubernetes import client

    core = client.CoreV1Api(api.client())
    try:
        secret = core.read_namespaced_secret(f"prometheus-{NAME}", NAMESPACE)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    text = gzip.decompress(base64.b64decode(secret.data["prometheus.yaml.gz"])).decode()
    maps = core.list_namespaced_config_map(NAMESPACE, label_selector=f"prometheus-name={NAME}").items
    return Generated(text, {m.metadata.name: dict(m.data or {}) for m in maps})


def _as_mounted(text: str, root: Path) -> str:
    """The configuration as the pod reads it: the reloader's substitution, and its volumes' mount point in `root`."""
    return text.replace("$(POD_NAME)", POD).replace("$(SHARD)", "0").replace("/etc/prometheus/", f"{root}/etc/prometheus/")


@dataclass
class Stack:
    prometheus_url: str
    prometheus: servers.Process
    generated: Generated  # what it runs


@contextlib.contextmanager
def operator(api: servers.ApiServer, directory: Path) -> Iterator[servers.Process]:
    """prometheus-operator, in-cluster as its Deployment runs it (upstream's ClusterRole), on `api`; its CRDs installed
    and served before it starts."""
    from kubernetes import client

    servers.install_crds(api, operator_crds())
    client.CoreV1Api(api.client()).create_namespace({"metadata": {"name": NAMESPACE}})  # where the chart installs it
    token = service_account(api, "prometheus-operator", "prometheus-operator-cluster-role.yaml")
    process = in_pod(api, directory / "operator", "prometheus-operator", token,
                     [str(servers.tool("prometheus-operator")), "--log-level=warn", f"--web.listen-address=127.0.0.1:{servers.free_port()}"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def prometheus(api: servers.ApiServer, directory: Path, operator_process: servers.Process, wanted: Callable[[Generated], bool],
               token: str) -> Iterator[Stack]:
    """Prometheus running the configuration the operator generated, once `wanted(generated)` holds (the operator
    writes again as it sees more objects), as the pod of the service account `token` is for."""
    found: list[Generated] = []

    def written() -> bool:
        now = generated(api)
        found[:] = [now] if now is not None else []
        return now is not None and bool(wanted(now))

    servers.wait_until(written, "prometheus-operator's configuration for the monitors and rules", operator_process)
    config = found[0]
    root = directory / "pod"
    rules = root / "etc" / "prometheus" / "rules"
    for name, files in config.rule_files.items():
        (rules / name).mkdir(parents=True, exist_ok=True)
        for file, text in files.items():
            (rules / name / file).write_text(text)
    path = root / "prometheus.env.yaml"
    path.write_text(_as_mounted(config.text, root))
    port = servers.free_port()
    url = f"http://127.0.0.1:{port}"
    process = in_pod(api, root, "prometheus", token, [
        str(servers.tool("prometheus")), f"--config.file={path}", f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ])
    with servers.running(process, lambda: servers.http_ok(f"{url}/-/ready"), "prometheus"):
        yield Stack(url, process, config)
