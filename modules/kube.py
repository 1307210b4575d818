"""What every component declares: plain manifests stamped with the contract (`fleetops.kube`), a tree of fleet concepts.

Components build plain manifests (the same dicts `kubectl apply` takes) into a tree of `Part`s, one
per fleet concept. Two consumers walk the same tree: `modules.program` registers it with the Pulumi
SDK for `pulumi up`, and `modules.fleet.manifests` collects it directly for render, plan and the
reconciler. Nothing here imports Pulumi, so reading a fleet costs no SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fleetops import spec
from fleetops.kube import Key, FIELD_MANAGER_ANNOTATION, MANAGED_BY, MANAGER, SKIP_AWAIT_ANNOTATION, WAITS_FOR_PODS, CLUSTER_LABEL, ENVIRONMENT_LABEL


@dataclass(frozen=True)
class Target:
    """Where a component's objects land and how they are stamped."""

    cluster: str
    environment: str
    # (apiVersion, kind) of every object declared so far: the reconciler's RBAC is derived from it.
    declared: set[tuple[str, str]] = field(default_factory=set, compare=False, hash=False)
    # The rules of every Role and ClusterRole declared, by (kind, namespace, name): Kubernetes lets the
    # reconciler write a role only if it holds the role's permissions itself.
    grants: dict[tuple[str, str, str], list[dict[str, Any]]] = field(default_factory=dict, compare=False, hash=False)

    def labels(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {MANAGED_BY: MANAGER, ENVIRONMENT_LABEL: self.environment, CLUSTER_LABEL: self.cluster, **(extra or {})}

    def metadata(
        self,
        name: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        # No revision on the object: a value that changed with every commit would make every object
        # differ from its last apply, for Pulumi and the reconciler alike. The revision applied is
        # recorded where it is read: the reconciler's status ConfigMap and the stack's outputs.
        meta: dict[str, Any] = {
            "name": name,
            "labels": self.labels(labels),
            "annotations": {FIELD_MANAGER_ANNOTATION: MANAGER, **(annotations or {})},
        }
        if namespace is not None:
            meta["namespace"] = namespace
        return meta


    def stamp(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The last touches every declared object gets, and the record the reconciler's RBAC is built from."""
        meta = manifest["metadata"]
        if manifest["kind"] in WAITS_FOR_PODS:
            meta.setdefault("annotations", {})[SKIP_AWAIT_ANNOTATION] = "true"
        self.declared.add((manifest["apiVersion"], manifest["kind"]))
        if manifest["kind"] in ("Role", "ClusterRole"):
            self.grants[(manifest["kind"], meta.get("namespace", ""), meta["name"])] = manifest["rules"]
        return manifest


@dataclass
class Part:
    """One component of the fleet: a concept's Pulumi type and name, its objects, outputs and sub-parts.

    `objects` is called when a walk reaches the part, in tree order, and each object it yields is
    stamped before the next is made: the reconciler's ClusterRole is built from the kinds declared
    before it. A part with a `provider` is a cluster: it carries the arguments of its
    pulumi_kubernetes Provider, and every object below it lands in that cluster.
    """

    type: str
    name: str
    target: Target | None = None  # None only for a part that declares no object itself
    objects: Callable[[], Iterable[dict[str, Any]]] = tuple
    outputs: dict[str, Any] = field(default_factory=dict)
    parts: list[Part] = field(default_factory=list)
    provider: dict[str, Any] | None = None

    def build(self) -> list[dict[str, Any]]:
        return [self.target.stamp(m) for m in self.objects()] if self.target else []


# Kinds that run pods: they need the ServiceAccount and ConfigMaps their pod template names.
WORKLOADS = {"DaemonSet", "Deployment", "StatefulSet", "Job"}


def prerequisites(manifest: dict[str, Any]) -> list[Key]:
    """The objects that must exist before `manifest` is created, the one declaration of order: `pulumi up`
    (modules.program, as `depends_on`), render's and the reconciler's apply order (fleetops.kube.apply_order,
    proven to agree by tests/deploy/test_deploy_order.py) follow it.

    A namespaced object needs its Namespace (else: "namespaces X not found"); a workload its pod's
    ServiceAccount and ConfigMap volumes (else the pods fail to start). A custom resource needs its CRD
    served and a Kueue object Kueue's webhooks: those are installed before the fleet, not by it (the
    README's "Deploying with Pulumi"; `fleetops deploy` checks the CRDs are served before it runs).
    Only keys are returned: a prerequisite the fleet does not declare (kube-system) is the cluster's."""
    meta = manifest["metadata"]
    namespace = meta.get("namespace") or ""
    needed: list[Key] = [("v1", "Namespace", "", namespace)] if namespace else []
    if manifest["kind"] in WORKLOADS:
        pod = manifest["spec"]["template"]["spec"]
        if pod.get("serviceAccountName"):
            needed.append(("v1", "ServiceAccount", namespace, pod["serviceAccountName"]))
        needed += [("v1", "ConfigMap", namespace, v["configMap"]["name"]) for v in pod.get("volumes", []) if "configMap" in v]
    return needed


def quantity_name(resource: str) -> str:
    """A device resource as a DNS-1123 fragment: nvidia.com/gpu -> nvidia-com-gpu."""
    return re.sub(r"[^a-z0-9-]+", "-", resource.lower()).strip("-")


def cel_list(items: list[str]) -> str:
    """A CEL list literal of strings (names that need no escaping: DNS labels, label keys, class names)."""
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def flow_rule(flow: spec.Flow, ingress: bool) -> dict[str, Any]:
    """A NetworkPolicy rule of `flow`: from its source (ingress, at the destination) or to its destination
    (egress, at the source), on its ports. Both ends of a flow are rendered from the same flow, so a
    declared connection is opened where it leaves as where it arrives."""
    end = flow.source if ingress else flow.destination
    peer = {"podSelector": {}} if flow.source == flow.destination else end.peer()
    rule: dict[str, Any] = {} if peer is None else {"from" if ingress else "to": [peer]}
    if flow.ports:
        rule["ports"] = [{"port": p.number, "protocol": str(p.protocol)} for p in flow.ports]
    return rule


def merged(flows: Iterable[spec.Flow], ingress: bool) -> dict[str, Any]:
    """One rule of flows on the same ports: their peers together (a tenant's allowed tenants, its CIDRs)."""
    rules = [flow_rule(f, ingress) for f in flows]
    key = "from" if ingress else "to"
    return {**rules[0], key: [peer for rule in rules for peer in rule[key]]}
