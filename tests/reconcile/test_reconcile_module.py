"""The reconciler deploys itself into every cluster, with RBAC cut to what that cluster renders."""

from __future__ import annotations

import functools

import pytest

from fleetops import identity, render, schema, spec
from modules.reconciler import IDENTITY_RULES, NAME, plural
from tests.reconcile_support import ROOT

PROD = ROOT / "environments" / "prod.yaml"


@functools.cache
def prod() -> render.DesiredState:
    return render.render(PROD, revision="rev-prod")


def find(cluster: str, kind: str, name: str = NAME) -> dict:
    return next(m for m in prod().clusters[cluster] if m["kind"] == kind and m["metadata"]["name"] == name)


def test_every_rendered_object_still_validates() -> None:
    assert schema.validate_objects(prod().objects()) == []


@pytest.mark.parametrize("cluster", [c.name for c in spec.load_environment(PROD).clusters])
def test_each_cluster_runs_its_own_reconciler(cluster: str) -> None:
    env = spec.load_environment(PROD)
    deploy = find(cluster, "Deployment")
    assert deploy["metadata"]["namespace"] == env.reconciler.namespace
    assert deploy["spec"]["replicas"] == env.reconciler.replicas
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == env.reconciler.image
    args = " ".join(container["args"])
    assert f"reconcile --env prod --cluster {cluster} --in-cluster --interval {env.reconciler.interval_seconds}s" in args
    for kind in ("Namespace", "ServiceAccount", "ClusterRoleBinding", "NetworkPolicy", "ServiceMonitor", "Service", "Role", "RoleBinding"):
        find(cluster, kind, env.reconciler.namespace if kind == "Namespace" else NAME)


@pytest.mark.parametrize("cluster", [c.name for c in spec.load_environment(PROD).clusters])
def test_cluster_role_grants_exactly_the_rendered_kinds_nodes_and_the_roles_it_writes(cluster: str) -> None:
    manifests = prod().clusters[cluster]
    rendered = {(m["apiVersion"].rsplit("/", 1)[0] if "/" in m["apiVersion"] else "", plural(m["kind"])) for m in manifests}
    delegated = [r for m in manifests if m["kind"] in ("ClusterRole", "Role") and m["metadata"]["name"] != NAME for r in m["rules"]]
    if identity.guarded(spec.cluster_by_name(spec.load_environment(PROD), cluster)):
        delegated += IDENTITY_RULES  # approving kubelet certificates of edge devices, for their signer only
    granted = set()
    for rule in find(cluster, "ClusterRole")["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and not {"escalate", "bind"} & set(rule["verbs"])
        if rule in delegated:
            continue  # Kubernetes lets it write another component's role only if it holds the role's rules
        if rule["resources"] == ["nodes"]:
            assert rule["verbs"] == ["get", "list", "watch", "patch"]
            continue
        assert rule["verbs"] == ["list", "create", "patch", "delete"]  # no get/watch/escalate/bind, no wildcards
        granted |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == rendered
    assert all(rule in find(cluster, "ClusterRole")["rules"] for rule in delegated)
    role = find(cluster, "Role")
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]} in role["rules"]


def test_plural_names() -> None:
    assert [plural(k) for k in ("NetworkPolicy", "PriorityClass", "Queue", "Namespace", "ResourceQuota")] == [
        "networkpolicies", "priorityclasses", "queues", "namespaces", "resourcequotas"]
