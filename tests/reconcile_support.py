"""Shared helpers of the reconcile tests: a small fleet, its render, clusters, nodes, clock and gates."""

from __future__ import annotations

import datetime as dt
import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from fleetops import reconcile, render, spec
from tests.fakes import MemoryCluster

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "environments" / "dev.yaml"
T0 = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


@functools.cache
def dev() -> tuple[spec.Environment, render.DesiredState]:
    """The dev fleet, rendered once per test process (render takes seconds)."""
    return spec.load_environment(DEV), render.render(DEV, revision="rev-1")


def allow(env: Any, state: Any, live: Any) -> reconcile.GateResult:
    return reconcile.GateResult(False, [])


def deny(env: Any, state: Any, live: Any) -> reconcile.GateResult:
    return reconcile.GateResult(True, ["fleet.test: denied for the test"])


class Clock:
    def __init__(self, now: dt.datetime = T0):
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Sleeps(list):
    """A sleep that records instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def options(**kw: Any) -> reconcile.Options:
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("clock", Clock())
    return reconcile.Options(**kw)


def node(name: str, labels: dict[str, str] | None = None, ready: bool = True, since: dt.datetime = T0,
         allocatable: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {},
        "status": {
            "allocatable": allocatable or {"cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")}],
        },
    }


def clusters(env: spec.Environment, **kw: Any) -> dict[str, MemoryCluster]:
    return {c.name: MemoryCluster(c.name, **kw) for c in env.clusters}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit(repo: Path, text: str, message: str) -> str:
    (repo / "environments").mkdir(parents=True, exist_ok=True)
    (repo / "environments" / "dev.yaml").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


# --- edge device identity -----------------------------------------------------------------------


@functools.cache
def device_key(name: str) -> Any:
    """A device's kubelet key (one per name, made once per test process)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def key_fingerprint(name: str) -> str:
    from fleetops import identity

    return identity.fingerprint_of_key(device_key(name).public_key())


def kubelet_csr(name: str, node_name: str, key: str, username: str = "system:bootstrap:abcdef", *,
                usages: tuple[str, ...] = ("digital signature", "client auth"), organization: str = "system:nodes",
                common_name: str | None = None, sans: tuple[Any, ...] = (), groups: list[str] | None = None) -> dict[str, Any]:
    """A kubelet client certificate request as a joining node sends it (signed with the device's key);
    the keywords make the requests an attacker would send instead. `groups` as the API server sets
    them from the requester (a bootstrap token's group, or system:nodes for a node renewing)."""
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name or f"system:node:{node_name}")])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    pem = builder.sign(device_key(key), hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    if groups is None:
        groups = ["system:nodes" if username.startswith("system:node:") else "system:bootstrappers"]
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(pem).decode(), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": list(usages), "username": username, "groups": [*groups, "system:authenticated"]},
    }


def allowing(env: spec.Environment, *keys: str) -> spec.Environment:
    """The dev environment with the dev-jetson allow list holding these devices' keys."""
    edge = spec.cluster_by_name(env, "dev-edge")
    group = edge.edge_groups[0].model_copy(update={"fingerprints": [key_fingerprint(k) for k in keys]})
    clusters = [c if c.name != "dev-edge" else edge.model_copy(update={"edge_groups": [group]}) for c in env.clusters]
    return env.model_copy(update={"clusters": clusters})
