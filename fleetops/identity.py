"""Edge device identity: which edge nodes are the devices Git allows, proven by their kubelet's key.

A node cannot forge this. An edge node joins by asking for a kubelet client certificate
(CertificateSigningRequest, signer `kubernetes.io/kube-apiserver-client-kubelet`). In a cluster with
a device allow list fleetops decides every such request: it approves one only when it is a kubelet
client certificate to the letter of Kubernetes' rules (subject exactly O=system:nodes,
CN=system:node:<name>; usages digital signature and client auth, key encipherment allowed; no subject
alternative names), sent by a bootstrap token or by that node renewing (each known by its user name
and its group together), for a node name of exactly one
edge group, with a public key (`sha256:` of its DER SubjectPublicKeyInfo) in that group's allow list
and approved for no other node name; it denies everything else, with the reason. What it approved is
recorded in a ConfigMap of the reconciler's namespace, which nodes cannot write (unlike their own
annotations): a node whose recorded key is missing or no longer allowed is quarantined. Approved
requests are deleted by the API server after an hour; the record outlives them.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fleetops import spec
from fleetops.kube import DNS_SUBDOMAIN  # as the API server names nodes

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
RECORD_CONFIGMAP = "fleetops-edge-identity"
NODE_PREFIX = "system:node:"


def fingerprint_of_key(public_key: Any) -> str:
    """`sha256:<hex>` of a public key's DER SubjectPublicKeyInfo, the form environments list."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


# Kubernetes' own rule for the kubelet client signer (k8s.io/kubernetes pkg/apis/certificates
# ValidateKubeletClientCSR, which its csrapproving controller and signer apply): exactly these usages,
# key encipherment allowed (it is for RSA keys), no subject alternative name of any kind.
CLIENT_USAGES = (frozenset({"digital signature", "client auth"}), frozenset({"digital signature", "key encipherment", "client auth"}))
NODES_GROUP = "system:nodes"
BOOTSTRAP_GROUP = "system:bootstrappers"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"


@dataclass(frozen=True)
class Request:
    """A pending kubelet client certificate request, read and checked against Kubernetes' rules."""

    name: str  # of the CertificateSigningRequest
    node: str | None  # the node name its subject asks for (CN system:node:<name>, O system:nodes)
    fingerprint: str | None
    problem: str | None  # why it cannot be a kubelet client certificate of a node
    renewal: bool = False  # sent by that node itself (its current certificate), not a bootstrap token


def _bounded(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def read_request(csr: dict[str, Any]) -> Request:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    name = csr["metadata"]["name"]
    spec_ = csr.get("spec") or {}
    try:
        parsed = x509.load_pem_x509_csr(base64.b64decode(spec_["request"]))
        fingerprint = fingerprint_of_key(parsed.public_key())
        attributes = [(a.oid, a.value) for a in parsed.subject]
        sans = [ext.value for ext in parsed.extensions if isinstance(ext.value, x509.SubjectAlternativeName)]
        signed = parsed.is_signature_valid
    except (KeyError, ValueError, TypeError) as exc:
        return Request(name, None, None, f"unreadable request: {type(exc).__name__}")
    common = [v for oid, v in attributes if oid == NameOID.COMMON_NAME]
    node = str(common[0]).removeprefix(NODE_PREFIX) if len(common) == 1 and str(common[0]).startswith(NODE_PREFIX) else ""
    subject_ok = len(attributes) == 2 and [v for oid, v in attributes if oid == NameOID.ORGANIZATION_NAME] == [NODES_GROUP]
    if not subject_ok or not DNS_SUBDOMAIN.fullmatch(node):
        return Request(name, None, fingerprint, _bounded(f"subject {parsed.subject.rfc4514_string()!r} is not exactly "
                                                          f"O={NODES_GROUP}, CN={NODE_PREFIX}<name>"))
    usages = [str(u) for u in spec_.get("usages") or []]
    if frozenset(usages) not in CLIENT_USAGES:
        return Request(name, node, fingerprint, _bounded(f"usages {', '.join(usages) or 'none'}: a kubelet client certificate has "
                                                          "exactly digital signature and client auth (key encipherment allowed)"))
    if sans:
        kinds = sorted({type(general).__name__ for san in sans for general in san} or {"empty"})
        return Request(name, node, fingerprint, f"asks for subject alternative names ({', '.join(kinds)}): a kubelet client certificate has none")
    if not signed:
        return Request(name, node, fingerprint, "the request is not signed by the key it asks a certificate for")
    requester, groups = str(spec_.get("username", "")), [str(g) for g in spec_.get("groups") or []]
    if requester.startswith(NODE_PREFIX) and requester != f"{NODE_PREFIX}{node}":
        return Request(name, node, fingerprint, _bounded(f"{requester} asks for a certificate of another node, {node}"))
    # A requester is who the API server authenticated, by name and groups together: an authenticator
    # other than the bootstrap tokens' or the nodes' certificates (a webhook, OIDC, a client certificate
    # of another organisation) can give a name of either form without its group, or the group without the name.
    renewal = requester == f"{NODE_PREFIX}{node}" and NODES_GROUP in groups
    bootstrap = requester.startswith(BOOTSTRAP_USER_PREFIX) and BOOTSTRAP_GROUP in groups
    if not renewal and not bootstrap:
        return Request(name, node, fingerprint, _bounded(f"requested by {requester!r} in groups {', '.join(groups) or 'none'}: neither a "
                                                          f"bootstrap token ({BOOTSTRAP_USER_PREFIX}<id> in {BOOTSTRAP_GROUP}) nor node {node} "
                                                          f"({NODE_PREFIX}{node} in {NODES_GROUP}) renewing its own certificate"))
    return Request(name, node, fingerprint, None, renewal)


def pending(csr: dict[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    return csr["spec"].get("signerName") == KUBELET_CLIENT_SIGNER and not any(c.get("type") in ("Approved", "Denied") for c in conditions)


def guarded_groups(cluster: spec.Cluster, node: str) -> list[spec.EdgeGroup]:
    """The edge groups with an allow list whose name pattern covers `node`: a request shows only the
    name (validation makes every group with an allow list declare a name pattern, and refuses overlaps)."""
    return [g for g in cluster.edge_groups if g.fingerprints and g.match.name_pattern and fnmatch.fnmatchcase(node, g.match.name_pattern)]


def guarded(cluster: spec.Cluster) -> bool:
    return any(g.fingerprints for g in cluster.edge_groups)


@dataclass(frozen=True)
class CsrApproval:
    request: Request
    approve: bool
    reason: str


def judge(cluster: spec.Cluster, request: Request, record: dict[str, str]) -> CsrApproval | None:
    """Approve or deny a pending kubelet client request of a guarded cluster: fleetops is its signer's
    approver there, so every request a device could use to join is decided. The one left to
    Kubernetes' own approver (None) is a node outside every edge group renewing its own certificate
    (a control-plane or infrastructure node): denying it would cut that node off when its
    certificate expires, and admits no one new.

    `record` (node -> key fleetops approved) binds each key to one node name: a device's key cannot
    admit a second node, and a node name admitted with one key is not taken over with another
    (only that node, renewing with its current certificate, may move to another allowed key).
    """
    if request.problem or request.node is None:
        return CsrApproval(request, False, request.problem or "not a node's certificate")
    groups = guarded_groups(cluster, request.node)
    if not groups and request.renewal and request.node not in record:
        return None
    if len(groups) != 1:
        names = ", ".join(g.name for g in groups)
        why = f"matches several edge groups ({names})" if groups else f"matches no edge group with a device allow list in {cluster.name}"
        return CsrApproval(request, False, f"node name {request.node} {why}")
    group = groups[0]
    if request.fingerprint not in group.fingerprints:
        return CsrApproval(request, False, f"key {request.fingerprint} is not in the allow list of {group.name}")
    holder = next((node for node, key in sorted(record.items()) if key == request.fingerprint and node != request.node), None)
    if holder is not None:
        return CsrApproval(request, False, f"key {request.fingerprint} is already approved for node {holder}: one key per node name")
    if record.get(request.node, request.fingerprint) != request.fingerprint and not request.renewal:
        return CsrApproval(request, False, f"node {request.node} was admitted with key {record[request.node]}; "
                                       "only that node, renewing its certificate, may change its key")
    return CsrApproval(request, True, f"key {request.fingerprint} is in the allow list of {group.name}")


def approval(csr: dict[str, Any], verdict: CsrApproval) -> dict[str, Any]:
    """The CertificateSigningRequest with its Approved or Denied condition, for the approval subresource."""
    condition = {
        "type": "Approved" if verdict.approve else "Denied",
        "status": "True",
        "reason": "FleetopsDeviceAllowed" if verdict.approve else "FleetopsDenied",
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
