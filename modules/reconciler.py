"""The reconciler deployed into each cluster it keeps equal to Git.

Each cluster runs its own reconciler (`--cluster <name> --in-cluster`): it needs no credentials for
other clusters, an edge site keeps converging while its link to the center is down, and its RBAC
can be cut to exactly the kinds rendered for that cluster. Replicas elect a leader through a Lease
in the reconciler's namespace; only the leader writes.

The Git URL comes from the Secret `fleetops-git` (key `url`), created by whoever installs the
fleet: repository URLs often carry a token, which does not belong in Git.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fleetops import identity, kube, spec
from modules.kube import Part, Target, flow_rule

NAME = spec.RECONCILER
METRICS_PORT = spec.RECONCILER_METRICS_PORT
CACHE = "/var/cache/fleetops"
SELECTOR = {kube.NAME_LABEL: NAME}
# Writes through server-side apply are PATCH, and creating an object through apply also needs create.
OBJECT_VERBS = ["list", "create", "patch", "delete"]


# What fleetops's own workloads (the reconciler, the fleet API) share: the Git URL from the Secret
# `fleetops-git`, a cache volume for what a read-only root cannot hold, the restricted pod standard.
GIT_ENV = {"name": "FLEETOPS_REPO", "valueFrom": {"secretKeyRef": {"name": "fleetops-git", "key": "url"}}}
# The root filesystem is read-only: git, discovery caches and temp files go to the cache volume.
CACHE_ENV = [{"name": "HOME", "value": CACHE}, {"name": "TMPDIR", "value": CACHE}]
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
def role_binding(target: Target, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """Binds the role (or ClusterRole) `name` to the ServiceAccount of the same name."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": target.metadata(name, None if kind == "ClusterRole" else namespace, labels={kube.NAME_LABEL: name}),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def deployment(target: Target, name: str, namespace: str, replicas: int, container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """A Deployment of fleetops's own, pods selected by name, run as the ServiceAccount of that name."""
    labels = {kube.NAME_LABEL: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": target.metadata(name, namespace, labels=labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "cache", "emptyDir": {}}, *volumes],
                },
            },
        },
    }


def network_policy(target: Target, env: spec.Environment, name: str) -> dict[str, Any]:
    """The pods of `name`: in and out, the environment's flows into and out of them (spec.reach: DNS, the
    API server and the Git host, and what each workload adds), one rule per flow."""
    selector = {kube.NAME_LABEL: name}
    namespace = env.reconciler.namespace
    reach, me = spec.reach(env), spec.End(spec.Kind.WORKLOAD, name, namespace)
    ingress = [flow_rule(f, True) for f in reach.ingress(target.cluster, me)]
    egress = [flow_rule(f, False) for f in reach.egress(target.cluster, me)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": target.metadata(name, namespace, labels=selector),
        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": egress},
    }


def plural(kind: str) -> str:
    """The API resource name of a kind: NetworkPolicy -> networkpolicies, PriorityClass -> priorityclasses."""
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def rbac_rules(kinds: set[tuple[str, str]], delegated: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """One rule per API group for the kinds the reconciler owns, what it does to nodes, and every rule
    of the roles it writes (`delegated`): Kubernetes refuses a role from a writer that lacks its rules."""
    groups: dict[str, set[str]] = {}
    for api_version, kind in kinds:
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        groups.setdefault(group, set()).add(plural(kind))
    rules = [{"apiGroups": [g], "resources": sorted(r), "verbs": OBJECT_VERBS} for g, r in sorted(groups.items())]
    rules.append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]})
    for rule in delegated:
        if rule not in rules:
            rules.append(rule)
    return rules


def own_manifests(target: Target, env: spec.Environment, cluster: str) -> list[dict[str, Any]]:
    rc, ns = env.reconciler, env.reconciler.namespace
    labels = dict(SELECTOR)
    args = [
        "reconcile", "--env", env.environment, "--cluster", cluster, "--in-cluster",
        "--interval", f"{rc.interval_seconds}s", "--prune", "--force-conflicts",
        "--metrics-host", "0.0.0.0", "--metrics-port", str(METRICS_PORT), "--cache-dir", f"{CACHE}/repos", "--output", "json",
    ]
    container = {
        "name": "reconciler",
        "image": rc.image,
        "args": args,
        "env": [
            GIT_ENV,
            {"name": "FLEETOPS_IDENTITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *CACHE_ENV,
            # Read by fleetops.policy.decision_log_path: the gate's decision records, one line per pass.
            {"name": "FLEETOPS_DECISION_LOG", "value": f"{CACHE}/decisions.jsonl"},
        ],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 20},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "cache", "mountPath": CACHE}],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": target.metadata(ns, labels={"pod-security.kubernetes.io/enforce": "restricted"}),
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": target.metadata(NAME, ns, labels=labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": target.metadata(NAME, ns, labels=labels),
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
                # its status and the edge identity record
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
            ],
        },
        role_binding(target, "Role", NAME, ns),
        role_binding(target, "ClusterRole", NAME, ns),
        deployment(target, NAME, ns, rc.replicas, container, []),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": target.metadata(NAME, ns, labels=labels),
            "spec": {"selector": labels, "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]},
        },
        network_policy(target, env, NAME),
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            # The environment's Prometheus selects it by these labels (spec.Monitoring.prometheus_selector).
            "metadata": target.metadata(NAME, ns, labels={**labels, **env.monitoring.prometheus_selector}),
            "spec": {
                "selector": {"matchLabels": labels},
                "namespaceSelector": {"matchNames": [ns]},
                "endpoints": [{"port": "metrics", "interval": "30s", "path": "/metrics"}],
            },
        },
    ]


# Edge device identity (fleetops.identity): read kubelet certificate requests, decide them for the
# kubelet client signer only.
IDENTITY_RULES = [
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["list"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"], "resourceNames": [identity.KUBELET_CLIENT_SIGNER]},
]


def cluster_role_manifest(target: Target, cluster: spec.Cluster) -> dict[str, Any]:
    kinds = target.declared | {("rbac.authorization.k8s.io/v1", "ClusterRole")}
    # The rules of the roles it writes for others (device plugins, mig-manager), not of its own Role.
    delegated = [rule for (_, _, name), rules in sorted(target.grants.items()) if name != NAME for rule in rules]
    if identity.guarded(cluster):
        delegated += IDENTITY_RULES
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": target.metadata(NAME, labels=dict(SELECTOR)),
        "rules": rbac_rules(kinds, delegated),
    }


def reconciler(target: Target, env: spec.Environment) -> Part:
    """The reconciler of one cluster. Walk it last: its ClusterRole covers the kinds declared before it."""
    cluster = spec.cluster_by_name(env, target.cluster)

    def objects() -> Iterator[dict[str, Any]]:
        yield from own_manifests(target, env, target.cluster)
        yield cluster_role_manifest(target, cluster)  # made after the objects above are declared

    return Part(
        "fleetops:fleet:Reconciler", target.cluster, target, objects,
        outputs={"namespace": env.reconciler.namespace, "replicas": env.reconciler.replicas},
    )
