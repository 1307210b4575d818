"""The real servers a replay runs on: etcd, a kube-apiserver per cluster and the real Kueue, on 127.0.0.1.

Each binary is found in the repository's `.tools/bin` (`make tools` builds them from their pinned Go
modules) or else on $PATH; one that is missing is one line naming it, exit 2, before anything starts.
Kueue's CRDs are the ones its build put beside it (tools/build.sh), so the API server serves exactly
what that Kueue reads. Every server listens on 127.0.0.1 only, keeps its data and log in the run's
folder, and is stopped (its whole process group) when the run ends, however it ends.

The API server runs as controller-runtime's envtest runs it: no controllers, no kubelet, a static admin
token. Kueue runs with the Configuration the side rendered, changed only where a Kueue outside a
cluster must be (`kueue_loopback_config`) and where its wall clock would otherwise reach into simulated
time (`replay_configuration`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetops.errors import WhatifError

START_TIMEOUT = 90.0
KUEUE_GROUP = "kueue.x-k8s.io"
# The kinds Kueue reads to admit work: nothing else of a cluster's objects changes a replay.
KUEUE_KINDS = ("Namespace", "PriorityClass", "WorkloadPriorityClass", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
KUEUE_CONFIG_MAP = ("kueue-system", "kueue-manager-config", "controller_manager_config.yaml")


def tool(name: str, root: Path | None = None) -> Path:
    """`name` from `root`/.tools/bin, else from $PATH; a WhatifError naming it when neither has it."""
    if root is not None and (root / ".tools" / "bin" / name).exists():
        return root / ".tools" / "bin" / name
    found = shutil.which(name)
    if found is None:
        raise WhatifError(f"whatif: no {name} in {(root or Path('.')) / '.tools' / 'bin'} or on $PATH: `make tools` builds the real servers")
    return Path(found)


def any_free_port() -> int:
    """A loopback port no one listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(ready: Callable[[], bool], what: str, process: Process | None = None, timeout: float = START_TIMEOUT) -> None:
    """Poll `ready` until it holds, or fail with the server's log when its process exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < deadline:
        if ready():
            return
        if process is not None and not process.alive:
            raise WhatifError(f"{what}: the process exited ({process.returncode}); log:\n{process.tail()}")
        time.sleep(delay)  # a readiness poll: it ends as soon as the server answers
        delay = min(delay * 2, 0.25)
    raise WhatifError(f"{what}: not ready within {timeout:.0f}s" + (f"; log:\n{process.tail()}" if process else ""))


class Process:
    """A server process in a session of its own, its output in a log file in its folder."""

    def __init__(self, name: str, argv: list[str], directory: Path, env: dict[str, str] | None = None):
        self.name, self.argv, self.directory, self.env = name, argv, directory, env
        self.log = directory / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **(self.env or {})}, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.alive:
            return
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def http_ok(url: str, token: str | None = None, ca_file: Path | None = None) -> bool:
    import requests

    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.get(url, timeout=1, headers=headers, verify=str(ca_file) if ca_file else True).ok
    except requests.RequestException:
        return False


@contextlib.contextmanager
def running(process: Process, ready: Callable[[], bool], what: str) -> Iterator[Process]:
    """`process` started, once `ready`; stopped after, however the block ends."""
    process.start()
    try:
        wait_until(ready, what, process)
        yield process
    finally:
        process.stop()


@dataclass
class Etcd:
    url: str
    process: Process


@contextlib.contextmanager
def etcd_server(directory: Path, root: Path | None = None, port: Callable[[], int] = any_free_port) -> Iterator[Etcd]:
    binary = tool("etcd", root)
    client, peer = port(), port()
    url = f"http://127.0.0.1:{client}"
    process = Process("etcd", [
        str(binary), "--name", "fleetops", "--data-dir", str(directory / "data"),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"fleetops=http://127.0.0.1:{peer}",
        "--unsafe-no-fsync", "--log-level", "error",  # as envtest: a throwaway store need not survive a power cut
    ], directory)
    with running(process, lambda: http_ok(f"{url}/health"), "etcd"):
        yield Etcd(url, process)


class ApiServer:
    """One kube-apiserver on its own etcd prefix: a fresh, empty cluster, its admin a static token."""

    def __init__(self, directory: Path, etcd: Etcd, root: Path | None = None, port: int | None = None):
        self.directory, self.etcd, self.root = directory, etcd, root
        self.url = f"https://127.0.0.1:{port or any_free_port()}"
        self.prefix = f"/registry-{uuid.uuid4().hex[:12]}"
        self.admin_token = secrets.token_urlsafe(24)
        # kube-apiserver writes a self-signed serving certificate and its CA into --cert-dir.
        self.ca_file = directory / "certs" / "apiserver.crt"
        self.process: Process | None = None

    def start(self) -> ApiServer:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        binary = tool("kube-apiserver", self.root)
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (d / "sa.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                                     serialization.NoEncryption()))
        (d / "sa.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        tokens = d / "tokens.csv"
        tokens.write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        self.process = Process("kube-apiserver", [
            str(binary), "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1", f"--secure-port={self.url.rsplit(':', 1)[1]}",
            f"--cert-dir={d / 'certs'}", f"--etcd-servers={self.etcd.url}", f"--etcd-prefix={self.prefix}",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC", f"--token-auth-file={tokens}",
            f"--service-account-issuer={self.url}", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}", "--endpoint-reconciler-type=none", "--v=0",
        ], d).start()
        wait_until(lambda: self.ca_file.exists() and http_ok(f"{self.url}/readyz", self.admin_token, self.ca_file),
                   "kube-apiserver", self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"authorization": f"Bearer {self.admin_token}"}
        return client.ApiClient(cfg)

    def kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "c", "user": {"token": self.admin_token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path


def tls_pair(directory: Path, subject: str = "127.0.0.1", ips: tuple[str, ...] = ("127.0.0.1",), dns: tuple[str, ...] = ()) -> bytes:
    """A CA (ca.crt) and a certificate for `subject`, valid for `ips` and `dns`, signed by it
    (tls.crt, tls.key), for a day; the CA's PEM."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    life = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def certificate(subject: str, key: Any, issuer: x509.Name, signer: Any, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(life[0]).not_valid_after(life[1])
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca and (ips or dns):  # a client certificate names no address
            names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(name) for name in dns]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetops test CA")])
    ca = certificate("fleetops test CA", ca_key, ca_name, ca_key, ca=True)
    serving = certificate(subject, key, ca_name, ca_key, ca=False)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.crt").write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return ca.public_bytes(serialization.Encoding.PEM)


def kueue_loopback_config(rendered: dict[str, Any], directory: Path, webhook_port: int, health_port: int) -> dict[str, Any]:
    """The Configuration fleetops renders, with only what a Kueue outside a cluster, on 127.0.0.1, needs:
    its webhooks served with a certificate of its own (internal certificate management issues one for the
    in-cluster Service name, which a loopback URL never matches), probes on a free loopback port, no
    metrics or visibility server (both want certificates at fixed paths and fixed ports), and the
    namespace of its leader election Lease, which in a pod is the pod's own."""
    election = rendered.get("leaderElection", {})
    return {
        **rendered,
        "leaderElection": {**election, "resourceNamespace": election.get("resourceNamespace") or rendered.get("namespace", "kueue-system")},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(directory / "webhook-certs")},
        "internalCertManagement": {"enable": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "featureGates": {**rendered.get("featureGates", {}), "VisibilityOnDemand": False},
    }


def rendered_configuration(manifests: list[dict[str, Any]], shipped: Path) -> dict[str, Any]:
    """The Kueue Configuration in a cluster's rendered objects, as Kueue reads it; where none is rendered,
    the one Kueue's own install ships (`shipped`, beside its binary)."""
    namespace, name, key = KUEUE_CONFIG_MAP
    found = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == name and m["metadata"].get("namespace") == namespace]
    if not found:
        return yaml.safe_load(shipped.read_text())
    return yaml.safe_load(found[0]["data"][key])


def replay_configuration(rendered: dict[str, Any], side: str) -> dict[str, Any]:
    """The rendered Configuration with nothing in it that runs on Kueue's wall clock while the replay's
    clock is simulated.

    - waitForPodsReady is dropped: no pod runs, the harness plays the job controller, and its timeouts and
      requeue backoff (60 s x 2^n by default) would count wall seconds between simulated events;
    - leader election is off: one Kueue, and no Lease renewed every few wall seconds beside the replay;
    - fairSharing stays: Kueue v0.17's fair sharing weighs the usage admitted now, with no clock in it;
    - admissionFairSharing is refused: it decays each queue's past usage with a half-life in wall time,
      which no setting turns into simulated time (a half-life of 0 would be another policy, not this one).
    """
    if rendered.get("admissionFairSharing"):
        raise WhatifError(f"whatif: side {side}: Kueue's admissionFairSharing decays usage in wall-clock time (usageHalfLifeTime), "
                          "which a replay in simulated time cannot reproduce")
    out = {k: v for k, v in rendered.items() if k != "waitForPodsReady"}
    out["leaderElection"] = {**rendered.get("leaderElection", {}), "leaderElect": False}
    return out


class Kueue:
    """The real Kueue controller for one API server, started with `configuration`.

    Internal certificate management off, Kueue still reads a metrics certificate from the fixed
    /etc/kueue/metrics/certs: it runs in a user and mount namespace of its own where /etc is an overlay
    holding that folder, so nothing is written outside the run's folder.
    """

    def __init__(self, api: Any, directory: Path, configuration: dict[str, Any], binary: Path,
                 port: Callable[[], int] = any_free_port, args: tuple[str, ...] = ()):
        self.api, self.directory, self.configuration, self.binary, self.port = api, directory, configuration, binary, port
        self.args = args
        self.process: Process | None = None
        self.webhook_url = ""
        self.ca = b""

    def start(self) -> Kueue:
        if shutil.which("unshare") is None:
            raise WhatifError("whatif: no unshare (util-linux): Kueue needs a mount namespace for its fixed certificate path")
        d = self.directory
        self.ca = tls_pair(d / "webhook-certs")
        upper = d / "etc-upper"
        shutil.copytree(d / "webhook-certs", upper / "kueue" / "metrics" / "certs", dirs_exist_ok=True)
        (d / "etc-work").mkdir(parents=True, exist_ok=True)
        webhook_port, health_port = self.port(), self.port()
        self.webhook_url = f"https://127.0.0.1:{webhook_port}"
        config = kueue_loopback_config(self.configuration, d, webhook_port, health_port)
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        kubeconfig = self.api.kubeconfig(d / "kubeconfig")
        overlay = f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={d / 'etc-work'} /etc"
        self.process = Process("kueue", [
            "unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c", f'{overlay} && exec "$0" "$@"',
            str(self.binary), f"--config={d / 'config.yaml'}", *self.args,
        ], d, env={"KUBECONFIG": str(kubeconfig)}).start()
        wait_until(lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"), "kueue", self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def crds(directory: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in the YAML files of `directory`."""
    return [doc for path in sorted(directory.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
            if doc and doc.get("kind") == "CustomResourceDefinition"]


def install_crds(api: ApiServer, definitions: list[dict[str, Any]]) -> None:
    """Create every CRD and wait until the server serves each (Established, and its storage answering)."""
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(api.client())
    objects = client.CustomObjectsApi(api.client())
    for doc in definitions:
        extensions.create_custom_resource_definition(doc)
    lists = [(d["spec"]["group"], next(v["name"] for v in d["spec"]["versions"] if v.get("storage")), d["spec"]["names"]["plural"])
             for d in definitions]

    def served() -> bool:
        try:
            for group, version, plural in lists:
                objects.list_cluster_custom_object(group, version, plural, limit=1)
            # and in discovery, where a controller's client looks kinds up when it starts
            found = {(g, v, r.name) for g, v in {(g, v) for g, v, _ in lists} for r in objects.get_api_resources(g, v).resources}
        except client.ApiException as exc:
            if exc.status in (404, 429, 503):  # not yet established, its storage still (re)initialising, discovery behind
                return False
            raise
        return set(lists) <= found

    wait_until(served, "Kueue's CRDs served")


def applier(api: ApiServer) -> Callable[[dict[str, Any]], None]:
    """Server-side apply as the reconciler applies (field manager fleetops, strict field validation)."""
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(api.client())

    def apply(manifest: dict[str, Any]) -> None:
        resource = dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        resource.server_side_apply(body=manifest, namespace=manifest["metadata"].get("namespace"), field_manager="fleetops",
                                   force_conflicts=True, query_params=[("fieldValidation", "Strict")])

    return apply


@contextlib.contextmanager
def kueue_cluster(etcd: Etcd, directory: Path, manifests: list[dict[str, Any]], side: str, root: Path | None = None,
                  port: Callable[[], int] = any_free_port) -> Iterator[ApiServer]:
    """A fresh kube-apiserver holding what Kueue reads of one cluster's objects (`KUEUE_KINDS`),
    with the real Kueue started on the side's Configuration made fit for a replay; both stopped after."""
    binary = tool("kueue", root)
    assets = binary.resolve().parent
    if not (assets / "crds").is_dir():
        raise WhatifError(f"whatif: no crds/ beside {binary.resolve()}: Kueue's CRDs come with its build (`make tools`)")
    configuration = replay_configuration(rendered_configuration(manifests, assets / "controller_manager_config.yaml"), side)
    kinds = {kind: rank for rank, kind in enumerate(KUEUE_KINDS)}
    ordered = sorted((m for m in manifests if m["kind"] in kinds), key=lambda m: kinds[m["kind"]])
    with contextlib.ExitStack() as stack:
        api = ApiServer(directory / "kube", etcd, root, port=port())
        stack.callback(api.stop)
        api.start()
        install_crds(api, crds(assets / "crds"))
        apply = applier(api)
        namespace = configuration.get("namespace", "kueue-system")
        apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        kueue = Kueue(api, directory / "kueue", configuration, binary, port)
        stack.callback(kueue.stop)
        kueue.start()
        for manifest in ordered:
            apply(manifest)
        yield api
