"""The fleet API (`fleetops serve`), declared by the environment's optional `api:` section.

It runs in the reconciler's namespace of one cluster, from the reconciler's image, reading the same
Git repository (Secret `fleetops-git`, key `url`). Its bearer tokens' hashes and its TLS certificate
come from Secrets whoever installs the fleet creates; neither belongs in Git. Its Kubernetes
permissions are reads: that cluster's reconcile status ConfigMap, and what `why` and `standing`
read live (fleetops.why.live: LISTs of Kueue's queues and Workloads, the nodes and their Leases).
Everything else it serves is Git's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fleetops import kube, spec
from modules.kube import Part, Target
from modules.reconciler import CACHE, CACHE_ENV, GIT_ENV, RESTRICTED_CONTAINER, deployment, network_policy, role_binding

NAME = spec.API
# What fleetops.why.live.read lists, cluster-wide, and nothing else: it never gets, watches or writes these.
WHY_READS = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "clusterqueues", "cohorts", "localqueues", "resourceflavors"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    # the nodes' clocks (kube-node-lease); cluster.ClusterAPI lists a kind across namespaces only
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
]
SELECTOR = {kube.NAME_LABEL: NAME}
TOKENS = "/etc/fleetops-api/tokens"
TLS = "/etc/fleetops-api/tls"


def manifests(target: Target, env: spec.Environment, api: spec.Api) -> list[dict[str, Any]]:
    ns = env.reconciler.namespace
    # It follows main as the reconciler does, at the reconciler's pace: a newer commit is served once loaded whole.
    args = ["serve", "--env", env.environment, "--rev", "main", "--refresh", f"{env.reconciler.interval_seconds}s",
            "--listen", f"0.0.0.0:{api.port}", "--in-cluster",
            "--tokens", f"{TOKENS}/tokens.json", "--tls-cert", f"{TLS}/tls.crt", "--tls-key", f"{TLS}/tls.key",
            "--cache-dir", f"{CACHE}/repos", *(["--prometheus", api.prometheus] if api.prometheus else [])]
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    container = {
        "name": "api",
        "image": env.reconciler.image,
        "args": args,
        "env": [GIT_ENV, *CACHE_ENV],  # the clone and the quotes' temporary files go to the cache volume
        "ports": [{"name": "https", "containerPort": api.port, "protocol": "TCP"}],
        "livenessProbe": {**probe, "periodSeconds": 20},
        # Ready once the revision is loaded whole: the server listens only then.
        "readinessProbe": {**probe, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "cache", "mountPath": CACHE}, {"name": "tokens", "mountPath": TOKENS, "readOnly": True},
                         {"name": "tls", "mountPath": TLS, "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": target.metadata(NAME, ns, labels=SELECTOR)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": target.metadata(NAME, ns, labels=SELECTOR),
            # The reconcile status of this cluster, and nothing else.
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [kube.STATUS_CONFIGMAP], "verbs": ["get"]}],
        },
        role_binding(target, "Role", NAME, ns),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": target.metadata(NAME, labels=SELECTOR), "rules": WHY_READS},
        role_binding(target, "ClusterRole", NAME, ns),
        deployment(target, NAME, ns, api.replicas, container, [
            {"name": "tokens", "secret": {"secretName": api.tokens_secret, "items": [{"key": "tokens.json", "path": "tokens.json"}]}},
            {"name": "tls", "secret": {"secretName": api.tls_secret}},
        ]),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": target.metadata(NAME, ns, labels=SELECTOR),
            "spec": {"selector": SELECTOR, "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]},
        },
        network_policy(target, env, NAME),
    ]


def api_part(target: Target, env: spec.Environment, api: spec.Api) -> Part:
    def objects() -> Iterator[dict[str, Any]]:
        yield from manifests(target, env, api)

    return Part("fleetops:fleet:Api", target.cluster, target, objects, outputs={"namespace": env.reconciler.namespace, "port": api.port})
