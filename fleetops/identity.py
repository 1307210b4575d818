"""Edge device identity: which edge nodes are the devices Git allows, proven by their kubelet's key.

A node cannot forge this. An edge node joins by asking for a kubelet client certificate
(CertificateSigningRequest, signer `kubernetes.io/kube-apiserver-client-kubelet`); the reconciler
approves the request only when the public key's fingerprint (`sha256:` of the key's DER
SubjectPublicKeyInfo) is in the allow list of the edge group whose name pattern the requested node
name matches, and denies it otherwise. What it approved is recorded in a ConfigMap of the
reconciler's namespace, which nodes cannot write (unlike their own annotations): a node whose
recorded key is missing or no longer allowed is quarantined. Approved requests are deleted by the
API server after an hour; the record outlives them.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fleetops import spec

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
RECORD_CONFIGMAP = "fleetops-edge-identity"
NODE_PREFIX = "system:node:"


def fingerprint_of_key(public_key: Any) -> str:
    """`sha256:<hex>` of a public key's DER SubjectPublicKeyInfo, the form environments list."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class Request:
    """A pending kubelet client certificate request, read and checked."""

    name: str  # of the CertificateSigningRequest
    node: str | None  # the node name its subject asks for (CN system:node:<name>, O system:nodes)
    fingerprint: str | None
    problem: str | None  # why it cannot be a kubelet client certificate of a node


def read_request(csr: dict[str, Any]) -> Request:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    name = csr["metadata"]["name"]
    try:
        parsed = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    except (KeyError, ValueError, TypeError) as exc:
        return Request(name, None, None, f"unreadable request: {type(exc).__name__}")
    common = [a.value for a in parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [a.value for a in parsed.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    fingerprint = fingerprint_of_key(parsed.public_key())
    if len(common) != 1 or not str(common[0]).startswith(NODE_PREFIX) or orgs != ["system:nodes"]:
        return Request(name, None, fingerprint, f"subject is not a node's (CN {common}, O {orgs})")
    node = str(common[0]).removeprefix(NODE_PREFIX)
    requester = csr["spec"].get("username", "")
    if requester.startswith(NODE_PREFIX) and requester != f"{NODE_PREFIX}{node}":
        return Request(name, node, fingerprint, f"{requester} asks for a certificate of another node, {node}")
    return Request(name, node, fingerprint, None)


def pending(csr: dict[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    return csr["spec"].get("signerName") == KUBELET_CLIENT_SIGNER and not any(c.get("type") in ("Approved", "Denied") for c in conditions)


def guarded_group(cluster: spec.Cluster, node: str) -> spec.EdgeGroup | None:
    """The edge group with an allow list whose name pattern covers `node`: a request shows only the
    name (validation makes every group with an allow list declare a name pattern)."""
    for group in cluster.edge_groups:
        if group.fingerprints and group.match.name_pattern and fnmatch.fnmatchcase(node, group.match.name_pattern):
            return group
    return None


def guarded(cluster: spec.Cluster) -> bool:
    return any(g.fingerprints for g in cluster.edge_groups)


@dataclass(frozen=True)
class Verdict:
    request: Request
    approve: bool
    reason: str


def judge(cluster: spec.Cluster, request: Request) -> Verdict | None:
    """Approve or deny a request for a node of a guarded edge group; None: not fleetops' to decide."""
    if request.node is None:
        return None  # not a node's certificate: another approver's business
    group = guarded_group(cluster, request.node)
    if group is None:
        return None
    if request.problem:
        return Verdict(request, False, request.problem)
    if request.fingerprint in group.fingerprints:
        return Verdict(request, True, f"key {request.fingerprint} is in the allow list of {group.name}")
    return Verdict(request, False, f"key {request.fingerprint} is not in the allow list of {group.name}")


def approval(csr: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The CertificateSigningRequest with its Approved or Denied condition, for the approval subresource."""
    condition = {
        "type": "Approved" if verdict.approve else "Denied",
        "status": "True",
        "reason": "FleetopsDeviceAllowed" if verdict.approve else "FleetopsDeviceUnknown",
        "message": f"fleetops: {verdict.reason}",
    }
    status = dict(csr.get("status") or {})
    status["conditions"] = [*(status.get("conditions") or []), condition]
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": csr["metadata"],
            "spec": csr["spec"], "status": status}


def read_record(configmap: dict[str, Any] | None) -> dict[str, str]:
    """node -> the key fingerprint fleetops approved for it; a hand-mangled record counts as empty."""
    try:
        data = json.loads(((configmap or {}).get("data") or {}).get("nodes", "{}"))
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except ValueError:
        return {}


def record_data(record: dict[str, str]) -> dict[str, str]:
    return {"nodes": json.dumps(dict(sorted(record.items())), indent=1)}
