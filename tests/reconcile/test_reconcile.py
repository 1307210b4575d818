"""One reconcile pass against in-memory clusters: converge, stay still, repair, prune, nodes, gate, faults."""

from __future__ import annotations

import copy
import functools
import json
import sys

import pytest

from fleetops import identity, reconcile, render, spec
from fleetops.errors import ApiError
from fleetops.kube import key_of
from tests.fakes import Faults, MemoryCluster
from tests.reconcile_support import ROOT, T0, Clock, Sleeps, allow, allowing, clusters, deny, dev, key_fingerprint, kubelet_csr, node, options

CSR = ("certificates.k8s.io/v1", "CertificateSigningRequest")

SELECTOR = "app.kubernetes.io/managed-by=fleetops,fleetops.io/environment=dev"
GATE = functools.partial(reconcile.default_gate, policies_dir=ROOT / "policies")  # the repository's own policies


def converged(backend) -> tuple:
    env, state = dev()
    apis = backend(env)
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert result.status == "applied", result.errors
    for api in apis.values():
        api.reset_counts()
    return env, state, apis


def desired(state, cluster: str, kind: str, namespace: str, name: str) -> dict:
    return next(m for m in state.clusters[cluster] if (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]) == (kind, namespace, name))


def test_converges_from_empty_then_a_second_pass_writes_nothing(backend) -> None:
    env, state = dev()
    apis = backend(env)
    first = reconcile.run_pass(env, state, apis, allow, options())
    assert first.status == "applied" and not first.errors and first.last_applied == "rev-1"
    for name, manifests in state.clusters.items():
        for m in manifests:
            assert apis[name].peek(m["apiVersion"], m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]) is not None
        apis[name].reset_counts()
    second = reconcile.run_pass(env, state, apis, allow, options())
    assert second.status == "clean" and second.drift == 0
    for name, api in apis.items():
        assert api.writes() == 0
        kinds = {m["kind"] for m in state.clusters[name]}
        guarded = identity.guarded(spec.cluster_by_name(env, name))  # an edge cluster with device allow lists
        assert {k for (verb, k), n in api.calls.items() if verb == "list"} == kinds | {"Node"} | ({"CertificateSigningRequest"} if guarded else set())
        assert all(n == 1 for (verb, _), n in api.calls.items() if verb == "list")  # one LIST per kind
        assert api.count("get") == 2 + guarded  # the status and inventory ConfigMaps (and the identity record), not one GET per object


def test_status_configmap_records_the_applied_revision(backend) -> None:
    env, state, apis = converged(backend)
    status = apis["dev-center"].peek("v1", "ConfigMap", "fleetops-system", "fleetops-status")
    assert status["data"]["revision"] == "rev-1" and status["data"]["result"] == "ok"
    assert "app.kubernetes.io/managed-by" not in status["metadata"]["labels"]  # never a prune candidate


def test_hand_drift_is_repaired_in_one_pass(backend) -> None:
    env, state, apis = converged(backend)
    center = apis["dev-center"]
    quota = copy.deepcopy(desired(state, "dev-center", "ResourceQuota", "platform-dev", "device-nvidia-com-gpu"))
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "999"
    center.put(quota)  # kubectl edit
    center.remove("networking.k8s.io/v1", "NetworkPolicy", "platform-dev", "default-deny")
    center.put(node("dev-a100-0"), manager="kubelet")  # joins without the pool labels
    namespace = center.peek("v1", "Namespace", "", "platform-dev")
    namespace["metadata"]["labels"]["fleetops.io/environment"] = "staging"  # kubectl label --overwrite: out of the LIST's selector
    center.put(namespace)
    result = reconcile.run_pass(env, state, apis, allow, options(force_conflicts=True))
    verbs = {(a.verb, a.target) for a in result.clusters["dev-center"].drift}
    assert ("update", "ResourceQuota platform-dev/device-nvidia-com-gpu") in verbs
    assert ("create", "NetworkPolicy platform-dev/default-deny") in verbs
    assert ("label", "Node dev-a100-0") in verbs
    # Found by its identity, not its labels: drift in the edited label, never a Namespace to create.
    relabelled = [a for a in result.clusters["dev-center"].drift if a.target == "Namespace platform-dev"]
    assert [a.verb for a in relabelled] == ["update"]
    assert [(c.path, c.old, c.new) for c in relabelled[0].detail] == [("/metadata/labels/fleetops.io~1environment", "staging", "dev")]
    assert not result.errors
    assert center.peek("v1", "Namespace", "", "platform-dev")["metadata"]["labels"]["fleetops.io/environment"] == "dev"
    assert center.peek("v1", "ResourceQuota", "platform-dev", "device-nvidia-com-gpu")["spec"]["hard"]["requests.nvidia.com/gpu"] == "32"
    assert center.peek("networking.k8s.io/v1", "NetworkPolicy", "platform-dev", "default-deny") is not None
    labels = center.peek("v1", "Node", "", "dev-a100-0")["metadata"]["labels"]
    assert labels["fleetops.io/pool"] == "dev-a100" and labels["nvidia.com/device-plugin.config"] == "dev-a100"
    for api in apis.values():
        api.reset_counts()
    assert reconcile.run_pass(env, state, apis, allow, options()).drift == 0
    assert sum(api.writes() for api in apis.values()) == 0
    assert sum(api.count("find") for api in apis.values()) == 0  # every object in its kind's LIST: no look-up by identity


def test_without_force_a_hand_edit_is_a_reported_conflict_and_the_rest_still_applies(backend) -> None:
    env, state, apis = converged(backend)
    center = apis["dev-center"]
    quota = copy.deepcopy(desired(state, "dev-center", "ResourceQuota", "platform-dev", "device-nvidia-com-gpu"))
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "999"
    center.put(quota)
    center.remove("networking.k8s.io/v1", "NetworkPolicy", "platform-dev", "default-deny")
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert result.status == "errors" and result.exit_code() == 1
    assert any("ResourceQuota platform-dev/device-nvidia-com-gpu" in e and "409" in e for e in result.errors)
    assert center.peek("networking.k8s.io/v1", "NetworkPolicy", "platform-dev", "default-deny") is not None


def _extra(name: str, labels: dict, annotations: dict | None = None, namespace: str = "platform-dev") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations or {}}, "data": {}}


MANAGED = {"app.kubernetes.io/managed-by": "fleetops", "fleetops.io/environment": "dev", "fleetops.io/cluster": "dev-center"}


def test_prune_deletes_only_what_fleetops_applied_never_forged_labels_or_protected_objects(backend) -> None:
    env, state = dev()
    apis = backend(env)
    center = apis["dev-center"]
    applied = [_extra("gone-from-git", MANAGED), _extra("kept-by-hand", MANAGED, {"fleetops.io/prune": "disabled"})]
    before = render.DesiredState(state.environment, state.revision, {**state.clusters, "dev-center": [*state.clusters["dev-center"], *applied]}, state.resources)
    assert reconcile.run_pass(env, before, apis, allow, options()).status == "applied"
    # Another manager labels its own objects as fleetops': in a namespace fleetops manages, and in one it does not.
    center.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}})
    center.seed(_extra("forged", MANAGED), _extra("forged-elsewhere", MANAGED, namespace="team-x"), _extra("not-ours", {"app": "other"}))
    center.reset_counts()
    off = reconcile.run_pass(env, state, apis, allow, options())
    found = {a.target: (a.verb, a.detail) for a in off.clusters["dev-center"].actions}
    assert found["ConfigMap platform-dev/gone-from-git"][0] == "orphan"
    assert found["ConfigMap platform-dev/kept-by-hand"][0] == "protected"
    for forged in ("ConfigMap platform-dev/forged", "ConfigMap team-x/forged-elsewhere"):
        assert found[forged][0] == "unowned" and "fleetops never applied it" in found[forged][1]
    assert "ConfigMap platform-dev/not-ours" not in found
    assert center.writes() == 0
    on = reconcile.run_pass(env, state, apis, allow, options(prune=True))
    assert [a.target for a in on.clusters["dev-center"].drift] == ["ConfigMap platform-dev/gone-from-git"]
    assert center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git") is None
    for namespace, name in (("platform-dev", "kept-by-hand"), ("platform-dev", "forged"), ("team-x", "forged-elsewhere"), ("platform-dev", "not-ours")):
        assert center.peek("v1", "ConfigMap", namespace, name) is not None, name
    # The inventory forgets what was pruned: a later object of the same name is not fleetops' either.
    center.seed(_extra("gone-from-git", MANAGED))
    later = reconcile.run_pass(env, state, apis, allow, options(prune=True))
    assert {a.target: a.verb for a in later.clusters["dev-center"].actions}["ConfigMap platform-dev/gone-from-git"] == "unowned"
    assert center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git") is not None


def test_an_object_whose_fleetops_labels_were_edited_by_hand_is_repaired_and_never_pruned(backend) -> None:
    env, state = dev()
    apis = backend(env)
    center = apis["dev-center"]
    before = render.DesiredState(state.environment, state.revision,
                                 {**state.clusters, "dev-center": [*state.clusters["dev-center"], _extra("gone-from-git", MANAGED)]}, state.resources)
    assert reconcile.run_pass(env, before, apis, allow, options()).status == "applied"
    # By hand: an object Git wants loses its managed-by label; one Git no longer wants loses all of fleetops' labels.
    limits = center.peek("v1", "LimitRange", "platform-dev", "defaults")
    del limits["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    center.put(limits)
    gone = center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git")
    gone["metadata"]["labels"] = {"app": "kept-by-a-person"}
    center.put(gone)
    result = reconcile.run_pass(env, state, apis, allow, options(prune=True, force_conflicts=True))
    found = {a.target: a for a in result.clusters["dev-center"].actions}
    repaired = found["LimitRange platform-dev/defaults"]
    assert repaired.verb == "update" and [(c.op, c.path) for c in repaired.detail] == [("add", "/metadata/labels/app.kubernetes.io~1managed-by")]
    kept = found["ConfigMap platform-dev/gone-from-git"]
    assert kept.verb == "orphan" and "labels no longer mark it fleetops'" in kept.detail and "never pruned" in kept.detail
    assert not result.errors and [a.verb for a in result.clusters["dev-center"].drift] == ["update"]
    assert center.peek("v1", "LimitRange", "platform-dev", "defaults")["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fleetops"
    assert center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git") is not None
    # The inventory kept it: once its labels say fleetops' again, --prune deletes it.
    gone = center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git")
    gone["metadata"]["labels"] = MANAGED
    center.put(gone)
    again = reconcile.run_pass(env, state, apis, allow, options(prune=True))
    assert [(a.verb, a.target) for a in again.clusters["dev-center"].drift] == [("prune", "ConfigMap platform-dev/gone-from-git")]
    assert center.peek("v1", "ConfigMap", "platform-dev", "gone-from-git") is None


def test_an_object_that_cannot_be_looked_up_is_unknown_applied_not_created() -> None:
    env, state, apis = converged(clusters)
    center = apis["dev-center"]
    namespace = center.peek("v1", "Namespace", "", "platform-dev")
    namespace["metadata"]["labels"]["fleetops.io/environment"] = "staging"
    center.put(namespace)
    center.faults.scripted.append(("find", "Namespace", 403))
    result = reconcile.run_pass(env, state, apis, allow, options(force_conflicts=True))
    assert any(e.startswith("dev-center: read Namespace platform-dev: 403") for e in result.errors), result.errors
    assert [a.verb for a in result.clusters["dev-center"].drift] == ["apply"]  # unknown, not absent: apply is idempotent
    assert center.peek("v1", "Namespace", "", "platform-dev")["metadata"]["labels"]["fleetops.io/environment"] == "dev"


def test_an_unreadable_inventory_prunes_nothing_and_is_kept() -> None:
    env, state, apis = converged(clusters)
    center = apis["dev-center"]
    record = center.peek("v1", "ConfigMap", "fleetops-system", reconcile.INVENTORY_CONFIGMAP)
    assert ("v1", "LimitRange", "platform-dev", "defaults") in reconcile.applied_keys(record)
    read = center.get

    def refused(api_version, kind, namespace, name):
        if name == reconcile.INVENTORY_CONFIGMAP:
            raise ApiError(403, "configmaps is forbidden")
        return read(api_version, kind, namespace, name)

    center.get = refused
    smaller = copy.copy(state)  # one LimitRange gone from Git, the kind still there
    smaller.clusters = {c: [m for m in ms if (m["kind"], m["metadata"].get("namespace")) != ("LimitRange", "platform-dev")] for c, ms in state.clusters.items()}
    result = reconcile.run_pass(env, smaller, apis, allow, options(prune=True))
    assert any("read inventory ConfigMap: 403" in e for e in result.errors)
    tenants = len([m for m in state.clusters["dev-center"] if m["kind"] == "LimitRange"])  # the one gone from Git among them
    assert not [a for a in result.clusters["dev-center"].actions if a.verb == "prune"] and len(center.objects("LimitRange")) == tenants
    assert [a.detail for a in result.clusters["dev-center"].actions if a.kind == "LimitRange"] == [
        "not in Git; the inventory could not be read: not pruned this pass"]
    assert center.peek("v1", "ConfigMap", "fleetops-system", reconcile.INVENTORY_CONFIGMAP) == record


def test_a_tenant_dropped_from_git_loses_its_managed_objects_but_not_its_namespace(backend) -> None:
    env, state, apis = converged(backend)
    center = apis["dev-center"]
    center.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "user-data", "namespace": "ml-sandbox"}, "data": {"k": "v"}})
    fewer = env.model_copy(update={"tenants": [t for t in env.tenants if t.name != "ml-sandbox"]})
    smaller = render.DesiredState(
        state.environment, state.revision,
        {c: [m for m in ms if m["metadata"].get("namespace") != "ml-sandbox" and m["metadata"]["name"] not in ("ml-sandbox", "ml-sandbox-queue")] for c, ms in state.clusters.items()},
        state.resources,
    )
    result = reconcile.run_pass(fewer, smaller, apis, allow, options(prune=True))
    verbs = {a.target: a.verb for a in result.clusters["dev-center"].actions}
    assert verbs["Namespace ml-sandbox"] == "orphan"
    assert verbs["NetworkPolicy ml-sandbox/default-deny"] == "prune"
    assert center.peek("v1", "Namespace", "", "ml-sandbox") is not None
    assert center.peek("v1", "ConfigMap", "ml-sandbox", "user-data") is not None
    assert center.peek("networking.k8s.io/v1", "NetworkPolicy", "ml-sandbox", "default-deny") is None


def test_detect_only_reports_drift_and_writes_nothing(backend) -> None:
    env, state = dev()
    apis = backend(env)
    # It compares and judges nothing: the gate judges writes (a denying gate is not asked).
    result = reconcile.run_pass(env, state, apis, deny, options(detect_only=True))
    assert result.status == "drift" and result.drift == state.object_count and result.exit_code() == 1
    assert sum(api.writes() for api in apis.values()) == 0
    dry = reconcile.run_pass(env, state, apis, allow, options(dry_run=True))
    assert dry.status == "planned" and dry.exit_code() == 0 and sum(api.writes() for api in apis.values()) == 0
    assert reconcile.run_pass(env, state, apis, deny, options(dry_run=True)).status == "denied"  # what a pass would do


def test_twenty_percent_api_errors_converge_within_five_passes() -> None:
    env, state = dev()
    apis = {c.name: MemoryCluster(c.name, faults=Faults(rate=0.2, seed=i + 11, retry_after=2)) for i, c in enumerate(env.clusters)}
    sleeps = Sleeps()
    statuses = []
    for _ in range(5):
        statuses.append(reconcile.run_pass(env, state, apis, allow, options(sleep=sleeps)).status)
        if statuses[-1] == "clean":
            break
    assert statuses[-1] == "clean", statuses
    assert sleeps and all(s == 2 for s in sleeps)  # Retry-After honoured, never a real sleep
    for name, manifests in state.clusters.items():
        apis[name].faults.rate = 0
        assert len(apis[name].list("v1", "Namespace", SELECTOR)) == sum(m["kind"] == "Namespace" for m in manifests)
    check = reconcile.run_pass(env, state, apis, allow, options(detect_only=True))
    assert check.drift == 0  # nothing lost, nothing half-applied


class Killed(BaseException):
    pass


class DiesAfter(MemoryCluster):
    """A cluster whose client process is killed after a number of applies."""

    def __init__(self, name: str, applies: int):
        super().__init__(name)
        self.left = applies

    def apply(self, manifest, field_manager, force=False):
        if self.left == 0:
            raise Killed()
        self.left -= 1
        return super().apply(manifest, field_manager, force)


def test_a_pass_killed_halfway_converges_on_the_next() -> None:
    env, state = dev()
    apis = {c.name: DiesAfter(c.name, 10) for c in env.clusters}
    with pytest.raises(Killed):
        reconcile.run_pass(env, state, apis, allow, options(workers=1))
    for api in apis.values():
        api.left = -1
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "applied"
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "clean"


def test_denied_revision_is_never_applied(backend) -> None:
    env, state = dev()
    apis = backend(env)
    result = reconcile.run_pass(env, state, apis, deny, options())
    assert result.status == "denied" and result.exit_code() == 1 and result.reasons == ["fleet.test: denied for the test"]
    assert sum(api.writes() for api in apis.values()) == 0
    for name, api in apis.items():  # the nodes (and kubelet certificate requests) for the gate's input; no objects
        assert api.count("list") == 1 + identity.guarded(spec.cluster_by_name(env, name))


def test_default_gate_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    env, state = dev()
    monkeypatch.setitem(sys.modules, "fleetops.policy", None)  # the engine cannot be imported
    verdict = GATE(env, state, {})
    assert verdict.denied and verdict.reasons[0].startswith("policy engine unavailable")
    monkeypatch.undo()
    from fleetops import policy

    monkeypatch.setattr(policy, "evaluate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("rego crashed")))
    verdict = GATE(env, state, {"clusters": {}})
    assert verdict.denied and "rego crashed" in verdict.reasons[0]
    apis = clusters(env)
    assert reconcile.run_pass(env, state, apis, GATE, options()).status == "denied"
    assert sum(api.writes() for api in apis.values()) == 0


def test_default_gate_judges_with_the_real_policies_and_the_live_inventory(backend, decision_log) -> None:
    env, state = dev()
    apis = backend(env)
    # One of dev-a100's two nodes is live: 16 of the 32 time-sliced units, under the 24 guaranteed.
    apis["dev-center"].seed(node("dev-a100-0", allocatable={"nvidia.com/gpu": "16"}))
    result = reconcile.run_pass(env, state, apis, GATE, options())
    assert result.status == "applied"
    assert any(w.startswith("capacity.live_below_guaranteed: dev-center: Ready nodes offer 16 nvidia.com/gpu") for w in result.warnings), result.warnings
    assert result.to_dict()["warnings"] == result.warnings
    record = json.loads(decision_log.read_text().splitlines()[-1])  # the record plan, check and the pack also write
    assert (record["source"], record["environment"], record["verdict"]) == ("reconcile", "dev", "allowed")


def test_default_gate_denies_what_the_policies_deny() -> None:
    env, state = dev()
    broken = env.model_copy(update={"budget": env.budget.model_copy(update={"monthly": 10.0})})
    apis = clusters(env)
    result = reconcile.run_pass(broken, state, apis, GATE, options())
    assert result.status == "denied" and any(r.startswith("budget.over_budget:") for r in result.reasons)
    assert sum(api.writes() for api in apis.values()) == 0


def test_capacity_below_guaranteed_quota_is_a_warning_in_the_gate_input_not_an_action() -> None:
    env, state = dev()
    apis = clusters(env)
    apis["dev-center"].seed(node("dev-a100-0", allocatable={"nvidia.com/gpu": "16"}))  # 1 of 2 nodes, 16 of 32 units
    seen = {}

    def gate(env, state, live):
        seen.update(live)
        return reconcile.GateResult(False, [])

    result = reconcile.run_pass(env, state, apis, gate, options())
    short = {s["resource"]: s for s in seen["clusters"]["dev-center"]["shortfalls"]}
    assert short["nvidia.com/gpu"]["allocatable"] == 16 and short["nvidia.com/gpu"]["guaranteed"] == 24
    assert "huawei.com/Ascend910" in short  # no Ascend node at all
    assert any("below the guaranteed quota" in r for r in result.reasons)
    rows = {(r.group, r.resource): r for r in result.clusters["dev-center"].capacity}
    assert rows[("dev-a100", "nvidia.com/gpu")].declared == 32 and rows[("dev-a100", "nvidia.com/gpu")].ready_nodes == 1


def test_edge_devices_are_admitted_by_their_kubelet_key_and_unknown_ones_quarantined(backend) -> None:
    env, state = dev()
    env = allowing(env, "orin-2")
    apis = backend(env)
    edge = apis["dev-edge"]
    edge.seed(kubelet_csr("csr-orin-1", "dev-orin-1", key="stranger"), kubelet_csr("csr-orin-2", "dev-orin-2", key="orin-2"),
              kubelet_csr("csr-login", "login-0", key="stranger"))  # no edge group's node: fleetops is this signer's approver here
    result = reconcile.run_pass(env, state, apis, allow, options())
    verbs = {(a.verb, a.target): a for a in result.clusters["dev-edge"].actions}
    assert ("approve", "CertificateSigningRequest csr-orin-2") in verbs and ("deny", "CertificateSigningRequest csr-orin-1") in verbs
    assert "matches no edge group" in verbs[("deny", "CertificateSigningRequest csr-login")].detail
    conditions = lambda name: [c["type"] for c in edge.peek(*CSR, "", name).get("status", {}).get("conditions") or []]  # noqa: E731
    assert conditions("csr-orin-2") == ["Approved"] and conditions("csr-orin-1") == ["Denied"] and conditions("csr-login") == ["Denied"]
    # The nodes join; a node's own annotations prove nothing, the record of approved keys does.
    edge.seed(node("dev-orin-1", annotations={"fleetops.io/device-fingerprint": key_fingerprint("orin-2")}), node("dev-orin-2"))
    joined = reconcile.run_pass(env, state, apis, allow, options())
    nodes = {(a.verb, a.target) for a in joined.clusters["dev-edge"].actions if a.kind == "Node"}
    assert ("quarantine", "Node dev-orin-1") in nodes and not any(t == "Node dev-orin-2" and v == "quarantine" for v, t in nodes)
    assert {"key": "fleetops.io/quarantine", "value": "unknown-device", "effect": "NoExecute"} in edge.peek("v1", "Node", "", "dev-orin-1")["spec"]["taints"]
    again = reconcile.run_pass(env, state, apis, allow, options())
    assert [a.verb for a in again.clusters["dev-edge"].actions if a.target == "Node dev-orin-1"] == ["quarantined"]
    # A key dropped from Git quarantines the node it admitted.
    revoked = reconcile.run_pass(allowing(env, "another-device"), state, apis, allow, options())
    assert ("quarantine", "Node dev-orin-2") in {(a.verb, a.target) for a in revoked.clusters["dev-edge"].actions}


def test_a_node_cannot_ask_for_another_nodes_certificate(backend) -> None:
    env, state = dev()
    env = allowing(env, "orin-2")
    apis = backend(env)
    apis["dev-edge"].seed(kubelet_csr("csr-spoof", "dev-orin-9", key="orin-2", username="system:node:dev-orin-2"))
    result = reconcile.run_pass(env, state, apis, allow, options())
    (decided,) = [a for a in result.clusters["dev-edge"].actions if a.kind == "CertificateSigningRequest"]
    assert decided.verb == "deny" and "another node" in decided.detail


def test_offline_edge_node_is_cordoned_only_after_its_grace(backend) -> None:
    env, state = dev()
    apis = backend(env)
    edge = apis["dev-edge"]
    edge.seed(kubelet_csr("csr-orin-1", "dev-orin-1", key="orin-1"))
    env = allowing(env, "orin-1")
    reconcile.run_pass(env, state, apis, allow, options())  # admits the device
    edge.seed(node("dev-orin-1", ready=False, since=T0))
    clock = Clock(T0)
    clock.advance(100)  # dev-jetson grace is 120 s
    early = reconcile.run_pass(env, state, apis, allow, options(clock=clock))
    assert [a.verb for a in early.clusters["dev-edge"].actions if a.kind == "Node"] == ["label", "offline"]
    assert not edge.peek("v1", "Node", "", "dev-orin-1")["spec"].get("unschedulable")
    clock.advance(60)
    late = reconcile.run_pass(env, state, apis, allow, options(clock=clock))
    assert [a.verb for a in late.clusters["dev-edge"].actions if a.kind == "Node"] == ["cordon"]
    assert edge.peek("v1", "Node", "", "dev-orin-1")["spec"]["unschedulable"] is True
    back = edge.peek("v1", "Node", "", "dev-orin-1")
    back["status"]["conditions"][0]["status"] = "True"
    edge.put(back, manager="kubelet")
    healed = reconcile.run_pass(env, state, apis, allow, options(clock=clock))
    assert [a.verb for a in healed.clusters["dev-edge"].actions if a.kind == "Node"] == ["uncordon"]
    assert not edge.peek("v1", "Node", "", "dev-orin-1")["spec"].get("unschedulable")  # the server omits false


def test_pool_labels_are_ensured_and_unmatched_or_malformed_nodes_left_alone(backend) -> None:
    env, state = dev()
    apis = backend(env)
    center = apis["dev-center"]
    # A kubelet may report a condition status the reconciler cannot read; the API server stores it.
    bad = node("dev-ascend-0", allocatable={"huawei.com/Ascend910": "8"})
    bad["status"]["conditions"][0]["status"] = "Maybe"
    center.seed(node("login-0"), bad, node("dev-ascend-1", allocatable={"huawei.com/Ascend910": "8"}))
    result = reconcile.run_pass(env, state, apis, allow, options())
    actions = {a.target: a.verb for a in result.clusters["dev-center"].actions if a.kind == "Node"}
    assert actions["Node login-0"] == "unmatched" and actions["Node dev-ascend-1"] == "label"
    assert "Node dev-ascend-0" not in actions
    assert any("dev-ascend-0" in p and "malformed" in p for p in result.clusters["dev-center"].problems)
    assert not center.peek("v1", "Node", "", "login-0")["metadata"].get("labels")
    assert not center.peek("v1", "Node", "", "dev-ascend-0")["metadata"].get("labels")
    assert center.peek("v1", "Node", "", "dev-ascend-1")["metadata"]["labels"]["fleetops.io/pool"] == "dev-ascend"


def test_a_node_quantity_that_is_no_quantity_is_malformed() -> None:
    # Twin only: a real API server refuses such a node, but a --live inventory file may carry one.
    env, state = dev()
    apis = clusters(env)
    apis["dev-center"].seed(node("dev-ascend-0", allocatable={"huawei.com/Ascend910": "eight"}))
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert not [a for a in result.clusters["dev-center"].actions if a.target == "Node dev-ascend-0"]
    assert any("dev-ascend-0" in p and "malformed" in p for p in result.clusters["dev-center"].problems)


def test_retries_honour_retry_after_and_stop_on_errors_that_will_not_heal() -> None:
    sleeps = Sleeps()
    opts = options(sleep=sleeps)
    c = MemoryCluster(faults=Faults(scripted=[("list", "ConfigMap", 429), ("list", "ConfigMap", 503)], retry_after=7))
    assert reconcile.call(opts, c.list, "v1", "ConfigMap") == []
    assert sleeps == [7, 7] and c.count("list") == 3
    c = MemoryCluster(faults=Faults(scripted=[("list", "ConfigMap", 403)]))
    with pytest.raises(ApiError):
        reconcile.call(opts, c.list, "v1", "ConfigMap")
    assert c.count("list") == 1


def without(state, kind: str):
    smaller = copy.copy(state)
    smaller.clusters = {c: [m for m in ms if m["kind"] != kind] for c, ms in state.clusters.items()}
    return smaller


def test_a_kind_git_dropped_entirely_is_still_found_and_pruned_later(backend) -> None:
    env, state, apis = converged(backend)
    smaller = without(state, "LimitRange")
    kept = reconcile.run_pass(env, smaller, apis, allow, options())  # prune off: reported, remembered
    assert {a.verb for a in kept.clusters["dev-center"].actions if a.kind == "LimitRange"} == {"orphan"}
    reconcile.run_pass(env, smaller, apis, allow, options())
    pruned = reconcile.run_pass(env, smaller, apis, allow, options(prune=True))
    assert {a.verb for a in pruned.clusters["dev-center"].drift} == {"prune"}
    assert apis["dev-center"].objects("LimitRange") == []
    for api in apis.values():
        api.reset_counts()
    reconcile.run_pass(env, smaller, apis, allow, options(prune=True))
    assert apis["dev-center"].count("list", "LimitRange") == 0  # forgotten once gone


def test_a_failed_node_read_is_unknown_capacity_not_a_shortfall() -> None:
    env, state = dev()
    apis = {c.name: MemoryCluster(c.name, faults=Faults(scripted=[("list", "Node", 403)])) for c in env.clusters}
    seen = {}

    def gate(env, state, live):
        seen.update(live)
        return reconcile.GateResult(False, [])

    result = reconcile.run_pass(env, state, apis, gate, options())
    assert seen["warnings"] == [] and seen["clusters"]["dev-center"]["nodes_read"] is False
    assert any("list nodes" in e for e in result.errors) and result.status == "errors"


def test_a_remembered_kind_the_server_no_longer_serves_is_forgotten() -> None:
    env, state, apis = converged(clusters)
    smaller = without(state, "LimitRange")
    reconcile.run_pass(env, smaller, apis, allow, options())  # LimitRange objects remain: remembered
    apis["dev-center"].faults.scripted.append(("list", "LimitRange", 404))  # its type is gone
    result = reconcile.run_pass(env, smaller, apis, allow, options())
    assert not result.clusters["dev-center"].errors
    assert ("v1", "LimitRange") not in result.clusters["dev-center"].kinds


def test_a_revision_without_policies_is_denied(tmp_path) -> None:
    env, state = dev()
    apis = clusters(env)
    gate = functools.partial(reconcile.default_gate, policies_dir=tmp_path / "policies")
    result = reconcile.run_pass(env, state, apis, gate, options())
    assert result.status == "denied" and "no policies/ folder" in result.reasons[0]
    assert sum(api.writes() for api in apis.values()) == 0


def test_the_inventory_of_the_largest_generated_cluster_fits_a_configmap_many_times_over(tmp_path) -> None:
    from benchmarks.generate import synthetic_yaml

    (tmp_path / "environments").mkdir()
    path = tmp_path / "environments" / "large.yaml"
    path.write_text(synthetic_yaml(1.0))
    state = render.render(path, revision="r")
    largest = max(state.clusters.values(), key=len)
    keys = {key_of(m) for m in largest}
    content = reconcile.inventory_content(keys)
    assert len(largest) > 900 and len(content["binaryData"][reconcile.INVENTORY_KEY]) < 8 * 1024  # of the 1 MiB a ConfigMap holds
    assert reconcile.applied_keys(content) == keys


def test_a_node_of_a_spot_pool_is_tainted_so_only_tolerating_pods_land_there(backend) -> None:
    # environments/dev.yaml: dev-spot is `spot: {price: 0.5}`; its node joins with neither label nor taint.
    env, state, apis = converged(backend)
    center = apis["dev-center"]
    center.put(node("dev-spot-0"), manager="kubelet")
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert ("taint", "Node dev-spot-0") in {(a.verb, a.target) for a in result.clusters["dev-center"].drift}
    joined = center.peek("v1", "Node", "", "dev-spot-0")
    assert joined["metadata"]["labels"]["fleetops.io/pool"] == "dev-spot"
    assert {"key": "fleetops.io/spot", "value": "true", "effect": "NoSchedule"} in joined["spec"]["taints"]
