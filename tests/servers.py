"""The real servers the suite runs against: OPA, etcd + kube-apiserver (with kube-controller-manager and
kube-scheduler where a test needs them), Kueue, and the Pulumi CLI.

`make tools` builds them from their pinned Go modules into `.tools/bin` (tools/build.sh). Every
server listens on 127.0.0.1 only (or, where a server in the test's network namespace must reach it,
on that test host's address: tests/netns.py), on a free port, with its own folder for data and logs,
and is stopped when its fixture ends. A test that needs a missing binary is skipped with the reason, except
when FLEETOPS_REAL_SERVERS=required (CI), where a missing binary fails the test instead.

The API servers are run the way controller-runtime's envtest runs them: no controllers, no
kubelet, RBAC on, a static admin token, service-account signing keys for TokenRequest, and no
webhook or APIService that would make the server dial a ClusterIP. A test that needs controllers or
the scheduler starts them (`start_controllers`, `start_scheduler`); `Kubelets` stands in for the
kubelets of its Node objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from fleetops.whatif import servers as product
# The servers' parts `fleetops whatif` runs too: one copy, the product's.
from fleetops.whatif.servers import Etcd, Process, http_ok, running, tls_pair, wait_until  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin"
CRD_DIR = ROOT / "fleetops" / "crds"
START_TIMEOUT = 90.0


def tool(name: str) -> Path:
    """A binary from .tools/bin; skip (or, in CI, fail) when `make tools` has not built it."""
    path = BIN / name
    if path.exists():
        return path
    missing(f"no {name} in .tools/bin: `make tools` builds the real servers")


def missing(reason: str) -> NoReturn:
    """Skip a test that lacks what it needs, or, in CI (FLEETOPS_REAL_SERVERS=required), fail it."""
    if os.environ.get("FLEETOPS_REAL_SERVERS") == "required":
        pytest.fail(reason)
    pytest.skip(reason)


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> Iterator[str]:
    """A test's own HTTP server on `host` (a free port), answering with `handler` from a thread; its host:port."""
    server = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_PORTS_FROM = 10000
# How many ports each pytest-xdist worker hands out in turn before it starts its block again.
_PORTS_PER_WORKER = 1000


def _handout() -> Iterator[int]:
    """Ports for the servers a test starts, below the kernel's ephemeral range and in a block per
    pytest-xdist worker. A port the kernel picked for a bind to port 0 and that was closed again could
    be taken by any outgoing connection (the kernel picks their ports from the same range) or handed to
    the other worker before the server bound it: Kueue once failed to start, `bind: address already in
    use`. Below that range only a listener takes a port, and each one is tried before it is handed out."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    blocks = max(1, (_ephemeral_low() - _PORTS_FROM) // _PORTS_PER_WORKER)
    first = _PORTS_FROM + (int(worker) if worker.isdigit() else 0) % blocks * _PORTS_PER_WORKER
    while True:
        yield from range(first, first + _PORTS_PER_WORKER)


_PORTS = _handout()


def free_port() -> int:
    """A loopback port no one listens on, that no other test and no outgoing connection is given."""
    for _ in range(_PORTS_PER_WORKER):
        port = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in this worker's block of {_PORTS_PER_WORKER} from {_PORTS_FROM}")


# --- OPA ------------------------------------------------------------------------------------------

# OPA's own example of token authorization (docs: "Authentication and Authorization"): the token the
# server was started with gets in; the health probe needs none.
OPA_AUTHZ = """package system.authz

default allow := false

allow if input.path == ["health"]

allow if input.identity == data.token
"""


@dataclass
class Opa:
    url: str
    token: str
    process: Process


@contextlib.contextmanager
def opa_server(directory: Path) -> Iterator[Opa]:
    binary = tool("opa")
    token = secrets.token_urlsafe(24)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "authz.rego").write_text(OPA_AUTHZ)
    (directory / "token.json").write_text(json.dumps({"token": token}))
    port = free_port()
    process = Process("opa", [
        str(binary), "run", "--server", "--addr", f"127.0.0.1:{port}", "--skip-version-check",
        "--authentication=token", "--authorization=basic", "--log-level=error",
        str(directory / "authz.rego"), f"{directory / 'token.json'}",
    ], directory).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_ok(f"{url}/health"), "opa", process)
        yield Opa(url, token, process)
    finally:
        process.stop()


# --- etcd and kube-apiserver ----------------------------------------------------------------------


@contextlib.contextmanager
def etcd_server(directory: Path) -> Iterator[Etcd]:
    tool("etcd")
    with product.etcd_server(directory, ROOT, free_port) as etcd:
        yield etcd


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class ApiServer:
    """One kube-apiserver on its own etcd prefix: a fresh, empty cluster."""

    name: str
    directory: Path
    etcd: Etcd
    # A test host's address (tests/netns.py) when a server in a network namespace must call it.
    address: str = "127.0.0.1"
    extra_args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    prefix: str = field(default_factory=lambda: f"/registry-{uuid.uuid4().hex[:12]}")
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    process: Process | None = None
    controllers: Process | None = None
    scheduler: Process | None = None

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def ca_file(self) -> Path:
        # kube-apiserver writes a self-signed serving certificate and its CA into --cert-dir.
        return self.directory / "certs" / "apiserver.crt"

    def _prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        key = self.directory / "sa.key"
        if not key.exists():
            _openssl("genrsa", "-out", str(key), "2048")
            _openssl("rsa", "-in", str(key), "-pubout", "-out", str(self.directory / "sa.pub"))
        (self.directory / "tokens.csv").write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')

    def start(self) -> ApiServer:
        binary = tool("kube-apiserver")
        self._prepare()
        d = self.directory
        self.process = Process("kube-apiserver", [
            str(binary),
            f"--advertise-address={self.address}", f"--bind-address={self.address}", f"--secure-port={self.port}",
            f"--cert-dir={d / 'certs'}", f"--etcd-servers={self.etcd.url}", f"--etcd-prefix={self.prefix}",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--authorization-mode=RBAC", f"--token-auth-file={d / 'tokens.csv'}",
            f"--service-account-issuer={self.url}", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--endpoint-reconciler-type=none",  # its endpoints may not be loopback addresses
            "--v=0", *self.extra_args,
        ], d).start()
        wait_until(self.ready, f"kube-apiserver {self.name}", self.process)
        return self

    def ready(self) -> bool:
        return self.ca_file.exists() and http_ok(f"{self.url}/readyz", self.admin_token, self.ca_file)

    def start_controllers(self, *controllers: str, flags: tuple[str, ...] = ()) -> Process:
        """kube-controller-manager with only these controllers (e.g. resourcequota, which fills in
        ResourceQuota status: what `pulumi up` waits for), and `flags`. No serving port, no leader election."""
        binary = tool("kube-controller-manager")
        self.controllers = Process("kube-controller-manager", [
            str(binary), f"--kubeconfig={self.kubeconfig(self.directory / 'controllers.kubeconfig')}",
            f"--controllers={','.join(controllers)}", "--leader-elect=false", "--secure-port=0", "--v=0", *flags,
        ], self.directory).start()
        return self.controllers

    def start_scheduler(self) -> Process:
        """The real kube-scheduler (default profile) for this server; no serving port, no leader
        election. Started again after a stop, it rebuilds its view from the server alone."""
        binary = tool("kube-scheduler")
        self.scheduler = Process("kube-scheduler", [
            str(binary), f"--kubeconfig={self.kubeconfig(self.directory / 'scheduler.kubeconfig')}",
            "--leader-elect=false", "--secure-port=0", "--v=0",
        ], self.directory).start()
        return self.scheduler

    def stop(self) -> None:
        for process in (self.scheduler, self.controllers, self.process):
            if process is not None:
                process.stop()

    def kubeconfig(self, path: Path, context: str | None = None, token: str | None = None) -> Path:
        return write_kubeconfig(path, {context or self.name: (self, token or self.admin_token)})

    def client(self, token: str | None = None, impersonate: tuple[str, list[str]] | None = None) -> Any:
        """An API client as the admin (or `token`), optionally impersonating a user and its groups."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        api = client.ApiClient(cfg)
        if impersonate is not None:
            user, groups = impersonate
            api.set_default_header("Impersonate-User", user)
            for group in groups:  # one header per group; the client joins repeated names, so send the first
                api.set_default_header("Impersonate-Group", group)
        return api


def write_kubeconfig(path: Path, contexts: dict[str, tuple[ApiServer, str]]) -> Path:
    """One kubeconfig with a context (and cluster and user of the same name) per entry."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": s.url, "certificate-authority": str(s.ca_file)}} for c, (s, _) in contexts.items()],
        "users": [{"name": c, "user": {"token": token}} for c, (_, token) in contexts.items()],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in contexts],
        "current-context": next(iter(contexts)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare `=` as its `value` type, which PyYAML does not construct; the operator's CRDs list `=` as an
    enum value (a relabelling action's alias of `replace`), as the string YAML 1.2 makes of it."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def crds_in(directory: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(directory.glob("*.yaml")) for doc in yaml.load_all(path.read_text(), Loader=_CrdLoader)
            if doc and doc.get("kind") == "CustomResourceDefinition"]


def shipped_crds() -> list[dict[str, Any]]:
    """The upstream CRDs fleetops ships and render checks against (fleetops/crds/)."""
    return crds_in(CRD_DIR)


def install_crds(server: ApiServer, crds: list[dict[str, Any]] | None = None) -> list[str]:
    """Create every CRD (default: the shipped ones) and wait until the server serves it (Established, storage ready)."""
    from kubernetes import client

    crds = shipped_crds() if crds is None else crds
    api = client.ApiextensionsV1Api(server.client())
    names = []
    for doc in crds:
        api.create_custom_resource_definition(doc)
        names.append(doc["metadata"]["name"])

    def established() -> bool:
        for name in names:
            conditions = api.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_until(established, "CRDs established")
    wait_crds_served(server, crds)
    return names


def wait_crds_served(server: ApiServer, crds: list[dict[str, Any]] | None = None) -> None:
    """Until every CRD's storage answers. Established is not yet usable, and neither is a restarted
    server: until a CRD's storage is (re)initialised the server answers "429 storage is
    (re)initializing", which made a first pass fail on a loaded CI machine."""
    from kubernetes import client

    objects = client.CustomObjectsApi(server.client())
    lists = [(d["spec"]["group"], next(v["name"] for v in d["spec"]["versions"] if v.get("storage")), d["spec"]["names"]["plural"])
             for d in (shipped_crds() if crds is None else crds)]

    def served() -> bool:
        try:
            for group, version, plural in lists:
                objects.list_cluster_custom_object(group, version, plural, limit=1)
        except client.ApiException as exc:
            if exc.status == 429:
                return False
            raise
        return True

    wait_until(served, "CRD storage ready")


# --- Kueue ---------------------------------------------------------------------------------------

KUEUE_GROUP = "kueue.x-k8s.io"
# The kinds whose webhooks the test cluster needs: Kueue's own, and the integrations fleetops turns
# on (modules/scheduler.py). Kueue serves the others only for frameworks it was told to manage.
KUEUE_WEBHOOK_TARGETS = {(KUEUE_GROUP, None), ("batch", "jobs")}


def kueue_assets() -> Path:
    """Where tools/build.sh put the Kueue binary with the CRDs and webhook configurations of its module."""
    return tool("kueue").resolve().parent


def kueue_webhooks(url: str, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from its module, each webhook pointed at `url` with the test CA."""
    import base64

    out = []
    for doc in yaml.safe_load_all((kueue_assets() / "webhooks.yaml").read_text()):
        if not doc:
            continue
        hooks = [
            {**hook, "clientConfig": {"url": url + hook["clientConfig"]["service"]["path"], "caBundle": base64.b64encode(ca).decode()}}
            for hook in doc["webhooks"]
            if any((group, None) in KUEUE_WEBHOOK_TARGETS or (group, resource) in KUEUE_WEBHOOK_TARGETS
                   for rule in hook["rules"] for group in rule["apiGroups"] for resource in rule["resources"])
        ]
        out.append({**doc, "metadata": {"name": f"kueue-{doc['metadata']['name']}"}, "webhooks": hooks})
    return out


class KueueServer(product.Kueue):
    """The real Kueue controller for one API server, started with the Configuration fleetops renders.

    Internal certificate management off, Kueue still reads a metrics certificate from the fixed
    /etc/kueue/metrics/certs: it runs in a user and mount namespace of its own where /etc is an
    overlay holding that folder, so nothing is written outside the test's folder.
    """

    def __init__(self, api: ApiServer, directory: Path, configuration: dict[str, Any]):
        super().__init__(api, directory, configuration, tool("kueue"), free_port, args=("--zap-log-level=2",))

    def start(self) -> KueueServer:
        if shutil.which("unshare") is None:
            missing("no unshare (util-linux): Kueue needs a mount namespace for its fixed certificate path")
        super().start()
        self._register_webhooks(self.webhook_url, self.ca)
        return self

    def _register_webhooks(self, url: str, ca: bytes) -> None:
        from kubernetes import client, dynamic

        dyn = dynamic.DynamicClient(self.api.client())
        for doc in kueue_webhooks(url, ca):
            dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(body=doc)
        # The API server picks webhook configurations up from its watch: probe until Kueue's Job
        # webhook answers (it suspends a Job that names a queue).
        probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "probe-", "namespace": "default",
                 "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
                 "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
        jobs = client.BatchV1Api(self.api.client())
        wait_until(lambda: jobs.create_namespaced_job("default", probe, dry_run="All").spec.suspend is True,
                   "Kueue's webhooks in effect", self.process)


def kueue_crds() -> list[dict[str, Any]]:
    return crds_in(kueue_assets() / "crds")


def rendered_kueue_configuration(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The Kueue Configuration in a cluster's rendered objects (modules/scheduler.py), as Kueue reads it;
    where none is rendered, the one Kueue's own install ships (its ConfigMap is then left as installed)."""
    found = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "kueue-manager-config"
             and m["metadata"].get("namespace") == "kueue-system"]
    if not found:
        return yaml.safe_load((kueue_assets() / "controller_manager_config.yaml").read_text())
    return yaml.safe_load(found[0]["data"]["controller_manager_config.yaml"])


def applier(server: ApiServer) -> Callable[..., None]:
    """Server-side apply as the reconciler applies (field manager fleetops, strict field validation)."""
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(server.client())

    def apply(manifest: dict[str, Any], manager: str = "fleetops") -> None:
        resource = dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        resource.server_side_apply(body=manifest, namespace=manifest["metadata"].get("namespace"), field_manager=manager,
                                   force_conflicts=True, query_params=[("fieldValidation", "Strict")])

    return apply


def kueue_cluster(server: ApiServer, directory: Path, manifests: list[dict[str, Any]]) -> KueueServer:
    """One cluster's rendered objects on a started, empty kube-apiserver with the real Kueue.

    The API server gets Kueue's CRDs from its module (the version that runs) and the other shipped
    CRDs; the cluster's Namespaces are applied, Kueue started with the Configuration fleetops rendered
    for it and its webhooks registered, then every object is applied as the reconciler applies them.
    The caller stops the Kueue returned (and the API server).
    """
    from fleetops import kube

    install_crds(server, kueue_crds() + [c for c in shipped_crds() if c["spec"]["group"] != KUEUE_GROUP])
    ordered = sorted(manifests, key=kube.kind_rank)
    apply = applier(server)
    # Kueue's install creates its namespace (its leader election Lease lives there); fleetops' own
    # Namespace object for it, when rendered, is applied over it.
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}, manager="kueue-install")
    for manifest in ordered:
        if manifest["kind"] == "Namespace":
            apply(manifest)
    kueue = KueueServer(server, directory, rendered_kueue_configuration(manifests))
    kueue.start()
    try:
        for manifest in ordered:
            apply(manifest)
        # The API server loads admission policies from its watch: until each tenant's holds, a job
        # could slip past it (the probe names no queue, which every tenant's policy refuses).
        for tenant in sorted({m["metadata"]["namespace"] for m in manifests if m["kind"] == "LocalQueue"}):
            wait_until(lambda: refused_job(server, tenant), f"the admission policy of {tenant}", timeout=60)
    except BaseException:
        kueue.stop()
        raise
    return kueue


def refused_job(server: ApiServer, namespace: str) -> bool:
    """Whether the API server refuses (dry run) a Job that names no queue in `namespace`."""
    from kubernetes import client

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "probe-"},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
    try:
        client.BatchV1Api(server.client()).create_namespaced_job(namespace, job, dry_run="All")
    except client.ApiException as exc:
        return exc.status in (403, 422)
    return False


# --- nodes without kubelets -----------------------------------------------------------------------

NODE_LEASE_NAMESPACE = "kube-node-lease"


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets:
    """What kubelets do for Node objects that have none: register each node Ready with its Lease in
    kube-node-lease, and renew the Leases every `period` seconds, as a kubelet does (the node
    lifecycle controller reads a renewed Lease as the node's heartbeat). `disconnect` stops renewing
    one node's Lease, as a lost uplink does; the controller then marks it Unknown and taints it.
    Pods bound to these nodes never run: they stay Pending, which is all the scheduler and the
    eviction controllers read."""

    def __init__(self, server: ApiServer, period: float = 1.0):
        from kubernetes import client

        self.core = client.CoreV1Api(server.client())
        self.leases = client.CoordinationV1Api(server.client())
        self.period = period
        self.alive: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelets", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> Kubelets:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def register(self, name: str, allocatable: dict[str, str]) -> None:
        """A Node Ready now, with its Lease, renewed from here on (what a kubelet does when it joins)."""
        now = _now()
        self.core.create_node({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": allocatable, "allocatable": allocatable, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}]},
        })
        self.leases.create_namespaced_lease(NODE_LEASE_NAMESPACE, {
            "metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}})
        self.alive.add(name)

    def disconnect(self, name: str) -> None:
        self.alive.discard(name)

    def renew(self, name: str) -> None:
        self.leases.patch_namespaced_lease(name, NODE_LEASE_NAMESPACE, {"spec": {"renewTime": _now()}})

    def _run(self) -> None:
        while not self._stop.wait(self.period):  # a kubelet's renew interval, not a wait for an outcome
            for name in sorted(self.alive):
                try:
                    self.renew(name)
                except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the test reads the errors
                    self.errors.append(f"{name}: {exc}")


def condition(obj: Any, kind: str) -> Any:
    """The condition of `kind` on a Node or Pod read with the client, or None."""
    return next((c for c in (obj.status.conditions or []) if c.type == kind), None)


# --- Prometheus -------------------------------------------------------------------------------------

@dataclass
class Prometheus:
    url: str
    process: Process


def openmetrics_blocks(text: str, directory: Path, max_block_duration: str | None = None) -> Path:
    """TSDB blocks of `text` (OpenMetrics, ending in `# EOF`), made by the real `promtool tsdb create-blocks-from openmetrics`.
    A month in promtool's default 2h blocks is ~370 of them and minutes of CPU; `max_block_duration`
    (e.g. "768h") makes it a few blocks in about a second."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "series.om"
    source.write_text(text)
    blocks = directory / "blocks"
    longer = [f"--max-block-duration={max_block_duration}"] if max_block_duration else []
    subprocess.run([str(tool("promtool")), "tsdb", "create-blocks-from", "openmetrics", "--quiet", *longer,
                    str(source), str(blocks)], check=True, capture_output=True, timeout=600)
    source.unlink()
    return blocks


@contextlib.contextmanager
def prometheus_server(directory: Path, openmetrics: str, lookback: str = "5m", max_block_duration: str | None = None) -> Iterator[Prometheus]:
    """Prometheus (`make tools`) on a free loopback port over the TSDB blocks of `openmetrics`. Retention is ten years:
    backfilled history is kept whatever its age. `lookback` is how long a sample answers for (--query.lookback-delta)."""
    binary = tool("prometheus")
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    for block in openmetrics_blocks(openmetrics, directory / "import", max_block_duration).iterdir():
        if block.is_dir():
            shutil.move(str(block), data / block.name)
    config = directory / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": []}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = Process("prometheus", [
        str(binary), f"--config.file={config}", f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d", f"--query.lookback-delta={lookback}", "--log.level=warn",
    ], directory)
    with running(process, lambda: http_ok(f"{url}/-/ready"), "prometheus"):
        yield Prometheus(url, process)
