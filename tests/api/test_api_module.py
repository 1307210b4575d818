"""The fleet API as fleetops renders it (modules/api.py): where it runs, from what image, with what rights.

That the real API server accepts these objects strictly is tests/reconcile/test_real_kube.py's check of every
object prod renders (prod declares `api:`).
"""

from __future__ import annotations

import functools

from fleetops import kube, render, schema, spec
from modules.api import NAME
from tests.command import run
from tests.reconcile_support import ROOT

PROD = ROOT / "environments" / "prod.yaml"


@functools.cache
def prod() -> render.DesiredState:
    return render.render(PROD, revision="rev-prod")


def api_objects(cluster: str) -> dict[str, dict]:
    return {m["kind"]: m for m in prod().clusters[cluster] if m["metadata"]["name"] == NAME}


def test_the_api_runs_on_its_declared_cluster_only_with_the_reconcilers_image() -> None:
    env = spec.load_environment(PROD)
    assert env.api is not None
    for cluster in prod().clusters:
        assert bool(api_objects(cluster)) == (cluster == env.api.cluster)
    objects = api_objects(env.api.cluster)
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "NetworkPolicy"}
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == env.reconciler.image
    assert container["args"][:3] == ["serve", "--env", "prod"] and "--in-cluster" in container["args"]
    assert {"--tls-cert", "--tls-key", "--tokens"} <= set(container["args"])
    assert container["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]} == {
        "cache": None, "tokens": env.api.tokens_secret, "tls": env.api.tls_secret}
    assert schema.validate_objects(prod().objects()) == []


def test_its_rights_are_to_read_the_reconcile_status_and_list_what_why_reads() -> None:
    objects = api_objects("center-bj")
    assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [kube.STATUS_CONFIGMAP], "verbs": ["get"]}]
    assert objects["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": objects["Role"]["metadata"]["namespace"]}]
    assert objects["ClusterRoleBinding"]["subjects"] == objects["RoleBinding"]["subjects"]
    # `why` and `standing` list Kueue's queues and Workloads, the nodes and their Leases: list, and no other verb
    cluster_rules = objects["ClusterRole"]["rules"]
    assert {v for r in cluster_rules for v in r["verbs"]} == {"list"}
    assert {(g, res) for r in cluster_rules for g in r["apiGroups"] for res in r["resources"]} == {
        *(("kueue.x-k8s.io", k) for k in ("workloads", "clusterqueues", "cohorts", "localqueues", "resourceflavors")),
        ("", "nodes"), ("coordination.k8s.io", "leases")}
    # the reconciler may write the API's roles only if it holds their rules: Kubernetes refuses an escalation
    reconciler_role = next(m for m in prod().clusters["center-bj"] if m["kind"] == "ClusterRole" and m["metadata"]["name"] == "fleetops-reconciler")
    held = {(g, res, v) for r in reconciler_role["rules"] for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    for rule in [objects["Role"]["rules"][0], *cluster_rules]:
        assert {(g, res, v) for g in rule["apiGroups"] for res in rule["resources"] for v in rule["verbs"]} <= held, rule


def test_only_the_declared_clients_may_connect() -> None:
    policy = api_objects("center-bj")["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"from": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 8443, "protocol": "TCP"}]}]


def test_an_api_on_an_undeclared_cluster_is_one_line_at_its_field(tmp_path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    text = PROD.read_text().replace("  cluster: center-bj\n  allow_from", "  cluster: center-nowhere\n  allow_from")
    (folder / "prod.yaml").write_text(text)
    line = text.splitlines().index("  cluster: center-nowhere") + 1
    result = run("validate", "--env", "prod", "--environments", folder)
    assert result.returncode == 2
    assert f"prod.yaml:{line}:" in result.stderr and "api.cluster" in result.stderr and "center-nowhere" in result.stderr


def test_the_api_reads_its_declared_prometheus_and_may_reach_it_only() -> None:
    env = spec.load_environment(PROD)
    assert env.api is not None and env.api.prometheus
    objects = api_objects(env.api.cluster)
    args = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--prometheus") + 1] == env.api.prometheus
    to_prometheus = [rule for rule in objects["NetworkPolicy"]["spec"]["egress"] if "to" in rule and rule["ports"][0]["port"] == 9090]
    assert to_prometheus == [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.monitoring.namespace}}}],
                              "ports": [{"port": 9090, "protocol": "TCP"}]}]


def test_without_a_prometheus_the_api_is_not_metered_and_reaches_no_monitoring(tmp_path) -> None:
    text = PROD.read_text()
    line = next(l for l in text.splitlines(True) if l.startswith("  prometheus: http://prometheus-operated"))
    (tmp_path / "prod.yaml").write_text(text.replace(line, ""))
    env = spec.load_environment(tmp_path / "prod.yaml")
    assert env.api is not None and env.api.prometheus is None
    objects = {m["kind"]: m for m in render.render(tmp_path / "prod.yaml", revision="r").clusters[env.api.cluster] if m["metadata"]["name"] == NAME}
    assert "--prometheus" not in objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert all(rule.get("to", [{}])[0].get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") != env.monitoring.namespace
               for rule in objects["NetworkPolicy"]["spec"]["egress"])
