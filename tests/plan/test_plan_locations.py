"""Every deny and warn rule, fired by `fleetops plan` on one edited item, is located at that item's edited field.

The rules are read from the policies' METADATA, so a new rule without a case below fails
`test_every_rule_has_a_case`. A rule the environment file cannot fire (an object rule: what the
program renders) is fired the way it happens, by a change to `modules/`, and is located at the
first changed line of the program file; a policy change at the first changed line of the policy file.
A rule plan cannot fire at all is exempt, with the reason, and the reason is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetops import audit, isolate, plan, policy
from fleetops import usage
from tests.fake_prometheus import Answer, Fake, serve
from tests.plan.test_plan import ROOT, commit, make_repo, plan_json


@dataclass(frozen=True)
class EnvEdit:
    """Replace `old` by `new` in environments/prod.yaml (after the `also` replacements the same change
    needs to stay valid); the decision is at `key` on the line holding `line`."""

    old: str
    new: str
    line: str
    key: str
    also: tuple[tuple[str, str], ...] = ()
    prometheus: dict[str, Answer] | None = None  # what a Prometheus holds, for the rules over measured use
    work: dict | None = None  # what a trace replayed at base and head gives (plan --whatif), for the rules over the work


@dataclass(frozen=True)
class ProgramEdit:
    """Append to modules/fleet.py a wrapper of `manifests` whose `change(cluster, objects)` is `body`."""

    body: str


@dataclass(frozen=True)
class RemoveEnvironment:
    pass


@dataclass(frozen=True)
class PolicyEdit:
    """Append `text` to policies/`file`; the decision is at the first line added."""

    file: str
    text: str


@dataclass(frozen=True)
class Exempt:
    """A rule whose input plan never has (`input.live`): only the reconciler can fire it."""

    reason: str


Case = EnvEdit | ProgramEdit | RemoveEnvironment | PolicyEdit | Exempt

LABELS = '{"app.kubernetes.io/managed-by": "fleetops"}'


def added(kind: str, api: str, name: str, extra: str, namespace: str = "") -> ProgramEdit:
    """A program change that adds one object to center-bj."""
    meta = f'{{"name": "{name}", "labels": {LABELS}{f", {chr(34)}namespace{chr(34)}: {chr(34)}{namespace}{chr(34)}" if namespace else ""}}}'
    return ProgramEdit(f'return objects + ([{{"apiVersion": "{api}", "kind": "{kind}", "metadata": {meta}, {extra}}}] '
                       f'if cluster == "center-bj" else [])')


PRIVILEGED_POD = '"spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}'
RBAC = "rbac.authorization.k8s.io"

VISION_GPU = "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}"

# The 44 more on a100-infer (128 units): on h100-train they would over-commit it beside llm-pretrain's 48 (validate refuses that).
VISION_RAISED = VISION_GPU.replace("guaranteed: 96", "guaranteed: 140").replace("a100-infer: 48", "a100-infer: 92")
# A center-bj where vision and h100-train sat nearly idle over the window.
IDLE = {usage.DEVICES: [({"cluster": "center-bj", "pool": "h100-train", "tenant": "vision"}, 2.0)], usage.SPEND: []}

# vision's jobs of a trace wait 4 h longer at head (the figures `fleetops.whatif.report.impact` makes; replayed for real in
# tests/whatif/test_whatif_real.py).
VISION_WAITS = {"source": "jobs.csv", "jobs": 3, "window_hours": 24.0, "utilisation": 0.2, "utilisation_after": 0.15, "offered_load": 0.2,
                "offered_load_after": 0.2, "backlog_jobs": 0, "backlog_jobs_after": 0, "assumptions": [],
                "tenants": [{"tenant": "vision", "jobs": 3, "wait_p50_hours": 0.0, "wait_p50_hours_after": 2.0, "wait_p99_hours": 0.0,
                             "wait_p99_hours_after": 4.0, "device_hours": 48.0, "device_hours_after": 48.0, "never_admitted": 0,
                             "never_admitted_after": 0}]}

ASCEND_POOL = """      - name: ascend-910b
        device: {resource: huawei.com/Ascend910, model: Ascend910B, per_node: 8}
        nodes: 6
        taints: [{key: huawei.com/Ascend910, value: present, effect: NoSchedule}]
        match: {name_pattern: "bj-ascend-*", labels: {accelerator: huawei-Ascend910}}
"""

CASES: dict[str, Case] = {
    "quota.burst_unreachable": EnvEdit("lend_fraction: 1.0", "lend_fraction: 0.75", "{guaranteed: 48, burst: 64}", "burst"),
    "quota.guaranteed_over_capacity": EnvEdit(VISION_GPU, "nvidia.com/gpu: {guaranteed: 400, burst: 400}",
                                              "guaranteed: 400", "guaranteed"),
    "quota.burst_over_capacity": EnvEdit(VISION_GPU, VISION_GPU.replace("burst: 160", "burst: 900"),
                                         "burst: 900", "burst"),
    "quota.tenant_share": EnvEdit("nvidia.com/gpu: {guaranteed: 120, burst: 200}", "nvidia.com/gpu: {guaranteed: 250, burst: 250, guaranteed_per_pool: {h100-mig: 224, a100-infer: 26}}",
                                  "guaranteed: 250", "guaranteed"),
    "quota.missing_resourcequota": ProgramEdit('return [o for o in objects if o["kind"] != "ResourceQuota"]'),
    "priority.value_outside_band": EnvEdit("{name: training-high, value: 10000", "{name: training-high, value: 60000",
                                           "training-high, value: 60000", "value"),
    "priority.multiple_global_defaults": EnvEdit("{name: inference-standard, value: 50000, workload: inference}",
                                                 "{name: inference-standard, value: 50000, workload: inference, global_default: true}",
                                                 "inference-standard, value", "global_default"),
    "priority.batch_preempts": EnvEdit("preemption: Never", "preemption: PreemptLowerPriority", "PreemptLowerPriority", "preemption"),
    "priority.class_not_allowed": EnvEdit("priority_classes: [training-high, inference-critical]",
                                          "priority_classes: [training-high, inference-critical, batch-low]", "inference-critical, batch-low]", "priority_classes"),
    "devices.missing_plugin": ProgramEdit('return [o for o in objects if not (o["kind"] == "DaemonSet" and "fpga" in o["metadata"]["name"])]'),
    "devices.time_slicing_replicas": EnvEdit("sharing: {mode: time-slicing, replicas: 4}", "sharing: {mode: time-slicing, replicas: 8}",
                                             "replicas: 8", "replicas"),
    "devices.strict_on_time_slicing": EnvEdit("pools: [h100-train, a100-train]", "pools: [h100-train, a100-train, a100-infer]",
                                              "a100-train, a100-infer", "pools"),
    "network.missing_default_deny": EnvEdit("default_deny: true", "default_deny: false", "default_deny: false", "default_deny"),
    "network.egress_anywhere": EnvEdit("egress_cidrs: [10.30.0.0/16]", "egress_cidrs: [10.30.0.0/16, 0.0.0.0/0]", "0.0.0.0/0", "egress_cidrs"),
    "network.egress_translated": EnvEdit("egress_cidrs: [10.30.0.0/16]", 'egress_cidrs: [10.30.0.0/16, "64:ff9b::/96"]', "64:ff9b::/96", "egress_cidrs"),
    "network.edge_egress_not_allowed": EnvEdit("allow_to_endpoints: [mqtt-broker, telemetry]",
                                               "allow_to_endpoints: [mqtt-broker, telemetry]\n      egress_cidrs: [10.99.0.0/16]",
                                               "10.99.0.0/16", "egress_cidrs"),
    # vision's egress toward speech dropped: speech's ingress from vision left open at one end only.
    "network.flow_blocked": ProgramEdit('return [o for o in objects if (o["kind"], o["metadata"]["name"]) != ("NetworkPolicy", "allow-to-tenants")]'),
    "network.strict_tenant_opened": EnvEdit("      allow_to_endpoints: [model-registry]\n\n  - name: speech",
                                            "      allow_to_endpoints: [model-registry]\n      allow_from_tenants: [vision]\n\n  - name: speech",
                                            "allow_from_tenants: [vision]", "allow_from_tenants"),
    "network.tenant_opened": added("NetworkPolicy", "networking.k8s.io/v1", "open", '"spec": {"podSelector": {}, "ingress": [{}]}', "vision"),
    "rbac.unbounded_role": added("ClusterRole", f"{RBAC}/v1", "everything", '"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]'),
    "rbac.unjudged_binding": added("ClusterRoleBinding", f"{RBAC}/v1", "vision-admin",
                                   f'"roleRef": {{"apiGroup": "{RBAC}", "kind": "ClusterRole", "name": "cluster-admin"}}, '
                                   '"subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "vision"}]'),
    "rbac.broad_subject": added("ClusterRoleBinding", f"{RBAC}/v1", "everyone-admin",
                                f'"roleRef": {{"apiGroup": "{RBAC}", "kind": "ClusterRole", "name": "cluster-admin"}}, '
                                f'"subjects": [{{"apiGroup": "{RBAC}", "kind": "Group", "name": "system:authenticated"}}]'),
    "rbac.sensitive_permission": added("ClusterRole", f"{RBAC}/v1", "secret-reader",
                                       '"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]'),
    "rbac.system_role_binding": added("ClusterRoleBinding", f"{RBAC}/v1", "vision-reconciler",
                                      f'"roleRef": {{"apiGroup": "{RBAC}", "kind": "ClusterRole", "name": "fleetops-reconciler"}}, '
                                      '"subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "vision"}]'),
    "workloads.host_privilege": added("Pod", "v1", "debug", PRIVILEGED_POD, "vision"),
    "workloads.borrowed_service_account": added(
        "Pod", "v1", "borrower", '"spec": {"serviceAccountName": "fleetops-reconciler", "containers": [{"name": "c", "image": "busybox"}]}',
        "fleetops-system"),
    "workloads.tenant_pod_security": ProgramEdit(
        'return [o if o["kind"] != "Namespace" else {**o, "metadata": {**o["metadata"], "labels": '
        '{k: v for k, v in o["metadata"].get("labels", {}).items() if not k.startswith("pod-security")}}} for o in objects]'),
    "workloads.host_volume": added("PersistentVolume", "v1", "host-data",
                                   '"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}}'),
    "credentials.secret_rendered": added("Secret", "v1", "worker-kubeconfig", '"data": {"kubeconfig": "YXBpVmVyc2lvbjogdjE="}', "vision"),
    "admission.webhook": added("ValidatingWebhookConfiguration", "admissionregistration.k8s.io/v1", "watcher",
                               '"webhooks": [{"name": "w.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None", '
                               '"clientConfig": {"url": "https://example.com"}}]'),
    "edge.heartbeat_grace": EnvEdit("heartbeat_seconds: 10", "heartbeat_seconds: 200", "heartbeat_seconds: 200", "heartbeat_seconds"),
    "edge.latency": EnvEdit("latency_ms: 15", "latency_ms: 50", "latency_ms: 50", "latency_ms"),
    "edge.training_on_edge": EnvEdit("    workloads: [inference]\n    priority_classes: [inference-critical]\n    edge_groups",
                                     "    workloads: [inference, training]\n    priority_classes: [inference-critical]\n    edge_groups",
                                     "[inference, training]", "workloads"),
    "edge.missing_fingerprints": EnvEdit("        fingerprints:\n          - sha256:c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00\n",
                                         "        fingerprints: []\n", "fingerprints: []", "fingerprints"),
    "autoscaling.max_beyond_burst": EnvEdit("replicas: {min: 2, max: 12}", "replicas: {min: 2, max: 900}", "max: 900", "max"),
    "autoscaling.spend_over_budget": EnvEdit("replicas: {min: 2, max: 12}", "replicas: {min: 2, max: 100000}", "max: 100000", "max"),
    "edge.disconnect_blip": EnvEdit("after_seconds: 60}", "after_seconds: 20}", "after_seconds: 20", "after_seconds"),
    "edge.disconnect_after_cordon": EnvEdit("after_seconds: 60}", "after_seconds: 400}", "after_seconds: 400", "after_seconds"),
    "edge.offline_priority": EnvEdit("priority_classes: [batch-low], devices", "priority_classes: [inference-standard], devices",
                                     "[inference-standard], devices", "priority_classes"),
    "edge.cache_source": EnvEdit("source: https://models.prod", "source: http://models.prod", "source: http://", "source"),
    "budget.over_budget": EnvEdit("monthly: 600000", "monthly: 1000", "monthly: 1000", "monthly"),
    "change.quota_raise_approvals": EnvEdit(VISION_GPU, VISION_RAISED, "guaranteed: 140", "guaranteed"),
    "change.cost_increase_approvals": EnvEdit("nodes: 16", "nodes: 40", "nodes: 40", "nodes"),
    "usage.unmeasured": EnvEdit(VISION_GPU, VISION_RAISED, "guaranteed: 140", "guaranteed"),  # no Prometheus given
    "change.environment_removed_approvals": RemoveEnvironment(),
    "change.program_approvals": ProgramEdit("return objects"),
    "usage.guarantee_raise_underused": EnvEdit(VISION_GPU, VISION_RAISED, "guaranteed: 140", "guaranteed", prometheus=IDLE),
    "usage.pool_growth_idle": EnvEdit("nodes: 16", "nodes: 40", "nodes: 40", "nodes", prometheus=IDLE),
    "work.wait_worse": EnvEdit(VISION_GPU, VISION_GPU.replace("burst: 160", "burst: 120"), "burst: 120", "burst", work=VISION_WAITS),
    "change.price_below_reference_approvals": EnvEdit("model: H100-SXM-80GB, per_node: 8}\n        nodes: 16", "model: H100-SXM-80GB-B, per_node: 8}\n        nodes: 16",
                                                      "H100-SXM-80GB-B, per_node", "model", also=(("  H100-SXM-80GB: 2.9\n", "  H100-SXM-80GB: 2.9\n  H100-SXM-80GB-B: 2.5\n"),)),
    "change.price_decrease_approvals": EnvEdit("  H100-SXM-80GB: 2.9\n", "  H100-SXM-80GB: 2.5\n", "H100-SXM-80GB: 2.5", "H100-SXM-80GB"),
    # warn rules
    "quota.unbounded_device": EnvEdit("pools: [h100-train, a100-train]", "pools: [h100-train, a100-train, ascend-910b]",
                                      "a100-train, ascend-910b", "pools"),
    "edge.cache_headroom": EnvEdit("size_gb: 2\n", "size_gb: 250\n", "size_gb: 250", "size_gb"),
    "budget.alert_threshold": EnvEdit("alert_at: [0.8, 0.95]", "alert_at: [0.01, 0.95]", "alert_at: [0.01", "alert_at"),
    "change.group_removed": EnvEdit(  # the pool goes, and with it its tenant's references to it
        ASCEND_POOL, "", "    pools:", "pools",
        also=(("pools: [h100-train, a100-infer, ascend-910b]", "pools: [h100-train, a100-infer]"),
              ("      huawei.com/Ascend910: {guaranteed: 16, burst: 32}\n", ""))),
    "change.policy_files_changed": PolicyEdit("data.yaml", "# a reviewed comment\n"),
    "capacity.unused_group": EnvEdit("      - name: fpga-arria10\n", "      - name: a100-spare\n        device: {resource: nvidia.com/gpu, model: A100-SXM4-80GB, per_node: 8}\n"
                                     "        nodes: 2\n        match: {name_pattern: \"sh-a100-s-*\"}\n      - name: fpga-arria10\n",
                                     "- name: a100-spare", "name"),
    "capacity.live_below_guaranteed": Exempt("compares the live Ready nodes with the guarantees: the reconciler's, "
                                             "which reports it by cluster and resource (tests/reconcile/test_reconcile.py)"),
}

WRAPPER = '''
_manifests = manifests


def manifests(env, *args, **kwargs):
    collected = _manifests(env, *args, **kwargs)
    for cluster, objects in collected.clusters.items():
        for change in _changes:
            objects[:] = change(cluster, objects)
    return collected
'''


def program_change(edits: list[ProgramEdit]) -> str:
    """The code that wraps `manifests` with every edit's change, in order."""
    functions = "".join(f"\n\ndef _change_{i}(cluster, objects):\n    {e.body}\n" for i, e in enumerate(edits))
    return WRAPPER + functions + f"\n\n_changes = [{', '.join(f'_change_{i}' for i in range(len(edits)))}]\n"


RULES = policy.rule_metadata(policy.load_bundle(ROOT / "policies"))
HEADS = ("deny", "warn")


def rules() -> list[str]:
    return sorted(m.rule_id for m in RULES if m.rule in HEADS)


def test_every_rule_has_a_case() -> None:
    assert sorted(CASES) == rules()


@pytest.mark.parametrize("rule", [r for r, c in CASES.items() if isinstance(c, Exempt)])
def test_a_rule_plan_cannot_fire_reads_what_only_the_reconciler_has(rule: str) -> None:
    # The exemption holds only while the rule needs the live inventory: once a plan could fire it, it needs a case.
    meta = next(m for m in RULES if m.rule_id == rule)
    source = (ROOT / "policies" / Path(meta.file).name).read_text()
    assert audit.enforced_by(source, audit.rule_lines(source, meta.line)) == ["reconciler"]


def apply(repo: Path, case: EnvEdit | RemoveEnvironment | PolicyEdit) -> dict[str, int | str]:
    """Make the change of `case` in `repo`; the location its decision must carry."""
    if isinstance(case, PolicyEdit):
        path = repo / "policies" / case.file
        before = path.read_text()
        path.write_text(before + case.text)
        return {"file": f"policies/{case.file}", "line": before.count("\n") + 1, "column": 1}
    env_file = repo / "environments" / "prod.yaml"
    if isinstance(case, RemoveEnvironment):
        env_file.unlink()
        return {"file": "environments/prod.yaml", "line": 1, "column": 1}
    text = env_file.read_text()
    for old, new in ((case.old, case.new), *case.also):
        assert old in text, f"test setup: {old!r} not in prod.yaml"
        text = text.replace(old, new, 1)
    env_file.write_text(text)
    lines = text.splitlines()
    number = next(i for i, t in enumerate(lines, 1) if case.line in t)
    return {"file": "environments/prod.yaml", "line": number, "column": lines[number - 1].index(case.key + ":") + 1}


def fired(result: dict, rule: str) -> list[dict]:
    out = [d for d in result.get("decisions", []) if d["rule"] == rule and d["status"] in ("deny", "approval", "warn")]
    assert out, f"{rule} did not fire: {[d['rule'] for d in result.get('decisions', [])]} {result.get('problems')}"
    return out


@pytest.fixture(scope="module")
def program_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, int | str]]:
    """One change of modules/fleet.py holding every program case (a confined render is slow: one for all),
    and where its decisions must be: the first changed line of the program file."""
    if not isolate.available():
        pytest.skip("a changed program renders confined, which needs Landlock (Linux 5.13+)")
    repo = make_repo(tmp_path_factory.mktemp("program"))
    program = repo / "modules" / "fleet.py"
    before = program.read_text()
    program.write_text(before + program_change([c for c in CASES.values() if isinstance(c, ProgramEdit)]))
    commit(repo, "modules: every object rule's case")
    return plan_json(repo, "--approvals", "0")[1], {"file": "modules/fleet.py", "line": before.count("\n") + 1, "column": 1}


@pytest.mark.parametrize("rule", [r for r, c in CASES.items() if isinstance(c, EnvEdit | RemoveEnvironment | PolicyEdit)])
def test_each_rule_is_located_at_the_field_the_change_edited(rule: str, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    case = CASES[rule]
    expected = apply(repo, case)
    commit(repo, f"fire {rule}")
    if isinstance(case, EnvEdit) and case.prometheus is not None:
        with serve(Fake(case.prometheus)) as fake:
            _, result = plan_json(repo, "--approvals", "0", "--prometheus", fake.url)
    elif isinstance(case, EnvEdit) and case.work is not None:  # handed over as the CLI hands over a replay's figures
        figures = case.work
        result = plan.build(repo, "prod", None, None, 0, plan.Meter(work=lambda before, after: figures)).to_json()
    else:
        _, result = plan_json(repo, "--approvals", "0")
    decisions = fired(result, rule)
    assert [d.get("location") for d in decisions] == [expected] * len(decisions), [d["msg"] for d in decisions]


@pytest.mark.parametrize("rule", [r for r, c in CASES.items() if isinstance(c, ProgramEdit)])
def test_each_object_rule_a_program_change_fires_is_located_at_the_program_file(rule: str, program_plan) -> None:
    result, expected = program_plan
    decisions = fired(result, rule)
    assert [d.get("location") for d in decisions] == [expected] * len(decisions), [d["msg"] for d in decisions]


def test_a_removed_quota_is_located_at_the_quota_it_left(tmp_path: Path) -> None:
    # Nothing of the tenant is left to point at but the quota the resource needs again.
    repo = make_repo(tmp_path)
    expected = apply(repo, EnvEdit("      huawei.com/Ascend910: {guaranteed: 16, burst: 32}\n", "",
                                   "    quota:", "quota"))  # vision's, the first tenant
    commit(repo, "vision: no Ascend quota")
    _, result = plan_json(repo, "--approvals", "0")
    decisions = fired(result, "quota.unbounded_device")
    assert [d.get("location") for d in decisions] == [expected], [d["msg"] for d in decisions]
