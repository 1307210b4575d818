"""Edge identity to the letter of Kubernetes' kubelet client rules, on the twin and a real kube-apiserver:
the requests an attacker would send are denied with a reason (never left pending), nodes that claim a
group they do not match are quarantined, and overlapping group matches never pass validate."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from fleetops import reconcile, spec
from tests.command import run
from tests.reconcile_support import DEV, allow, allowing, dev, kubelet_csr, node, options

CSR = ("certificates.k8s.io/v1", "CertificateSigningRequest")
QUARANTINE = {"key": "fleetops.io/quarantine", "value": "unknown-device", "effect": "NoExecute"}

# name -> (request, what the reason says). Every device key below is in dev-jetson's allow list.
ATTACKS = {
    "csr-server-auth": (dict(node_name="dev-orin-3", key="orin-3", usages=("digital signature", "client auth", "server auth")), "usages"),
    "csr-cert-sign": (dict(node_name="dev-orin-4", key="orin-4", usages=("digital signature", "client auth", "cert sign")), "usages"),
    "csr-dns-san": (dict(node_name="dev-orin-5", key="orin-5", sans=(x509.DNSName("api.example.com"),)), "subject alternative names (DNSName)"),
    "csr-ip-san": (dict(node_name="dev-orin-6", key="orin-6", sans=(x509.IPAddress(ipaddress.ip_address("10.0.0.1")),)), "IPAddress"),
    "csr-email-san": (dict(node_name="dev-orin-7", key="orin-7", sans=(x509.RFC822Name("a@example.com"),)), "RFC822Name"),
    "csr-uri-san": (dict(node_name="dev-orin-8", key="orin-8", sans=(x509.UniformResourceIdentifier("spiffe://x/y"),)), "UniformResourceIdentifier"),
    "csr-masters": (dict(node_name="dev-orin-9", key="orin-9", organization="system:masters"), "is not exactly O=system:nodes"),
    "csr-not-bootstrap": (dict(node_name="dev-orin-10", key="orin-10", username="mallory", groups=["developers"]), "neither a bootstrap token"),
    "csr-other-node": (dict(node_name="dev-orin-11", key="orin-11", username="system:node:dev-orin-1"), "another node"),
    "csr-reused-key": (dict(node_name="dev-orin-12", key="orin-1"), "already approved for node dev-orin-1"),
    "csr-outside-groups": (dict(node_name="login-0", key="orin-13"), "matches no edge group"),
    "csr-not-a-node-name": (dict(node_name="dev-orin-X\n", key="orin-14"), "is not exactly O=system:nodes"),
    # A requester is its user name and its group together: either alone is anyone an authenticator names so.
    "csr-bootstrap-name-only": (dict(node_name="dev-orin-15", key="orin-15", groups=["developers"]), "neither a bootstrap token"),
    "csr-bootstrap-group-only": (dict(node_name="dev-orin-16", key="orin-16", username="mallory", groups=["system:bootstrappers"]), "neither a bootstrap token"),
    "csr-node-name-only": (dict(node_name="dev-orin-17", key="orin-17", username="system:node:dev-orin-17", groups=["developers"]), "neither a bootstrap token"),
}
KEYS = ("orin-1", "orin-2", *(f"orin-{i}" for i in range(3, 18)))


def test_kubelet_requests_are_approved_only_to_the_letter_of_kubernetes_rules(backend) -> None:
    env, state = dev()
    env = allowing(env, *KEYS)
    apis = backend(env)
    edge = apis["dev-edge"]
    # The honest ones: a device joining with a bootstrap token (key encipherment is allowed too), and
    # a node renewing its own certificate.
    edge.seed(kubelet_csr("csr-a-join", "dev-orin-1", key="orin-1", usages=("digital signature", "key encipherment", "client auth")),
              kubelet_csr("csr-a-renew", "dev-orin-2", key="orin-2", username="system:node:dev-orin-2"))
    edge.seed(*(kubelet_csr(name, **request) for name, (request, _) in ATTACKS.items()))
    result = reconcile.run_pass(env, state, apis, allow, options())
    decided = {a.target.removeprefix("CertificateSigningRequest "): a for a in result.clusters["dev-edge"].actions if a.kind == "CertificateSigningRequest"}
    assert decided["csr-a-join"].verb == "approve" and decided["csr-a-renew"].verb == "approve"
    for name, (_, why) in ATTACKS.items():
        assert decided[name].verb == "deny" and why in decided[name].detail, (name, decided[name].detail)
    assert not result.errors
    for name in decided:  # decided on the server, none left pending
        conditions = [c["type"] for c in edge.peek(*CSR, "", name)["status"]["conditions"]]
        assert conditions == (["Approved"] if name.startswith("csr-a-") else ["Denied"]), name
    record = edge.peek("v1", "ConfigMap", "fleetops-system", "fleetops-edge-identity")["data"]["nodes"]
    assert "dev-orin-12" not in record and "dev-orin-1" in record


def test_a_node_outside_every_edge_group_renewing_its_own_certificate_is_left_to_kubernetes(backend) -> None:
    # A control-plane node of a guarded cluster: denying its renewal would cut it off when its
    # certificate expires. A bootstrap token asking for the same name is still denied.
    env, state = dev()
    apis = backend(allowing(env, "orin-1"))
    edge = apis["dev-edge"]
    edge.seed(kubelet_csr("csr-cp-renew", "control-plane-0", key="orin-13", username="system:node:control-plane-0"),
              kubelet_csr("csr-cp-join", "control-plane-1", key="orin-14"))
    result = reconcile.run_pass(allowing(env, "orin-1"), state, apis, allow, options())
    decided = {a.target.removeprefix("CertificateSigningRequest "): a.verb for a in result.clusters["dev-edge"].actions
               if a.kind == "CertificateSigningRequest"}
    assert decided == {"csr-cp-join": "deny"}
    assert "conditions" not in (edge.peek(*CSR, "", "csr-cp-renew").get("status") or {})


def test_a_node_name_admitted_with_one_key_is_not_taken_over_with_another(backend) -> None:
    env, state = dev()
    env = allowing(env, "orin-1", "orin-2")
    apis = backend(env)
    edge = apis["dev-edge"]
    edge.seed(kubelet_csr("csr-first", "dev-orin-1", key="orin-1"))
    reconcile.run_pass(env, state, apis, allow, options())
    edge.seed(kubelet_csr("csr-takeover", "dev-orin-1", key="orin-2"))  # another allowed device, with a bootstrap token
    result = reconcile.run_pass(env, state, apis, allow, options())
    (takeover,) = [a for a in result.clusters["dev-edge"].actions if a.kind == "CertificateSigningRequest"]
    assert takeover.verb == "deny" and "was admitted with key" in takeover.detail


def test_nodes_that_claim_a_group_they_do_not_match_are_quarantined(backend) -> None:
    env, state = dev()
    apis = backend(env)
    center, edge = apis["dev-center"], apis["dev-edge"]
    center.seed(node("login-0", labels={"fleetops.io/pool": "dev-a100"}), node("dev-ascend-0", labels={"fleetops.io/pool": "dev-a100"}))
    edge.seed(node("gateway-0", labels={"fleetops.io/edge-group": "dev-jetson"}))
    result = reconcile.run_pass(env, state, apis, allow, options())
    verbs = {a.target: (a.verb, a.detail) for r in result.clusters.values() for a in r.actions if a.kind == "Node"}
    for cluster, name, group in (("dev-center", "login-0", "dev-a100"), ("dev-center", "dev-ascend-0", "dev-a100"), ("dev-edge", "gateway-0", "dev-jetson")):
        verb, detail = verbs[f"Node {name}"]
        assert verb == "quarantine" and f"carries the label of {group}" in detail
        assert QUARANTINE in apis[cluster].peek("v1", "Node", "", name)["spec"]["taints"]
    again = reconcile.run_pass(env, state, apis, allow, options())
    assert {a.verb for r in again.clusters.values() for a in r.actions if a.kind == "Node"} == {"quarantined"}
    # Its wrong label taken away by hand, dev-ascend-0 is dev-ascend's member: labelled and released.
    fixed = center.peek("v1", "Node", "", "dev-ascend-0")
    fixed["metadata"]["labels"] = {}
    center.put(fixed)
    healed = reconcile.run_pass(env, state, apis, allow, options())
    assert [a.verb for a in healed.clusters["dev-center"].actions if a.target == "Node dev-ascend-0"] == ["label", "release"]
    node_now = center.peek("v1", "Node", "", "dev-ascend-0")
    assert node_now["metadata"]["labels"]["fleetops.io/pool"] == "dev-ascend" and QUARANTINE not in (node_now["spec"].get("taints") or [])


def test_a_node_two_groups_match_is_quarantined() -> None:
    # Twin only, and built past validate (which refuses overlapping matches, below).
    from tests.fakes import MemoryCluster

    env, state = dev()
    center = spec.cluster_by_name(env, "dev-center")
    pools = [center.pools[0], center.pools[1].model_copy(update={"match": spec.NodeMatch(name_pattern="dev-*")})]
    env = env.model_copy(update={"clusters": [center.model_copy(update={"pools": pools}), spec.cluster_by_name(env, "dev-edge")]})
    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    apis["dev-center"].seed(node("dev-a100-0"))
    result = reconcile.run_pass(env, state, apis, allow, options())
    (action,) = [a for a in result.clusters["dev-center"].actions if a.kind == "Node"]
    assert action.verb == "quarantine" and "matches several groups (dev-a100, dev-ascend)" in action.detail
    assert QUARANTINE in apis["dev-center"].peek("v1", "Node", "", "dev-a100-0")["spec"]["taints"]


@pytest.mark.parametrize(("pattern", "example"), [
    ('"dev-a100-*"', "'dev-a100-'"),  # identical
    ('"dev-*"', "'dev-a100-'"),  # one covers the other
    ('"*-0"', "'dev-a100-0'"),  # neither covers the other, yet one name matches both
    ('"dev-a1[0-9]0-?"', "'dev-a100-0'"),
])
def test_validate_refuses_groups_whose_matches_overlap(tmp_path: Path, pattern: str, example: str) -> None:
    text = DEV.read_text().replace('match: {name_pattern: "dev-ascend-*"}', f"match: {{name_pattern: {pattern}}}")
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "dev.yaml").write_text(text)
    line = DEV.read_text().splitlines().index('        match: {name_pattern: "dev-ascend-*"}') + 1
    done = run("validate", "--env", "dev", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    # (a wide pattern may overlap dev-spot too, declared after it: that problem is dev-spot's to report)
    problems = [p for p in (done.stdout + done.stderr).splitlines() if "overlaps" in p and "pools[dev-spot]" not in p]
    assert len(problems) == 1 and problems[0].startswith(f"environments/dev.yaml:{line}:"), problems
    assert "clusters[dev-center].pools[dev-ascend].match" in problems[0] and "overlaps the match of dev-a100" in problems[0] and example in problems[0]


@pytest.mark.parametrize("pattern", ['"dev-ascend-*"', '"dev-a10-*"', '"dev-a100"', '"dev-a100-[!a-z0-9.-]*"'])
def test_validate_takes_disjoint_matches(tmp_path: Path, pattern: str) -> None:
    text = DEV.read_text().replace('match: {name_pattern: "dev-ascend-*"}', f"match: {{name_pattern: {pattern}}}")
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "dev.yaml").write_text(text)
    done = run("validate", "--env", "dev", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_labels_that_disagree_keep_two_matches_apart() -> None:
    from fleetops import nodematch

    assert nodematch.overlap("bj-*", {"gpu": "a100"}, "bj-*", {"gpu": "h100"}) is None
    assert nodematch.overlap("bj-*", {"gpu": "a100"}, None, {"zone": "1"}) == "bj-"
    assert nodematch.overlap(None, {}, "bj-*", {}) is None  # a match of nothing matches no node


def test_labels_never_keep_a_pool_apart_from_a_device_allow_list(tmp_path: Path) -> None:
    # A node writes its own labels: were labels enough, a device quarantined in dev-jetson would
    # relabel itself into a pool of the same names and be released there.
    text = DEV.read_text().replace('match: {name_pattern: "dev-orin-*"}', 'match: {name_pattern: "dev-orin-*", labels: {zone: a}}')
    text = text.replace("    edge_groups:\n", """    edge_groups:
      - name: dev-orin-pool
        device: {resource: nvidia.com/gpu, model: Jetson-AGX-Orin, per_node: 1}
        nodes: 1
        heartbeat_seconds: 10
        offline_grace_seconds: 120
        latency_ms: 10
        match: {name_pattern: "dev-orin-*", labels: {zone: b}}
""")
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "dev.yaml").write_text(text)
    done = run("validate", "--env", "dev", cwd=tmp_path)
    assert done.returncode == 2 and "overlaps the match of dev-orin-pool" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_request_not_signed_by_its_own_key_or_unreadable_is_denied() -> None:
    # Twin and unit only: a real API server refuses both at create.
    import base64

    from cryptography.hazmat.primitives import serialization

    from fleetops import identity

    env, _ = dev()
    cluster = spec.cluster_by_name(allowing(env, "orin-1"), "dev-edge")
    csr = kubelet_csr("csr-forged", "dev-orin-1", key="orin-1")
    parsed = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    der = bytearray(parsed.public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01  # the last byte of the signature
    csr["spec"]["request"] = base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der))
                                              + b"-----END CERTIFICATE REQUEST-----\n").decode()
    verdict = identity.judge(cluster, identity.read_request(csr), {})
    assert not verdict.approve and "not signed by the key" in verdict.reason
    csr["spec"]["request"] = base64.b64encode(b"not a request").decode()
    verdict = identity.judge(cluster, identity.read_request(csr), {})
    assert not verdict.approve and verdict.reason.startswith("unreadable request")
