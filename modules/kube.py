"""How every component declares a Kubernetes object: one metadata contract, one provider per cluster.

Components build plain manifests (the same dicts `kubectl apply` takes) and hand them to
`declare`, which picks the pulumi_kubernetes class for the kind. Keeping the manifest as plain
data is what lets render read back exactly what `pulumi up` would send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

MANAGED_BY = "app.kubernetes.io/managed-by"
ENVIRONMENT_LABEL = "fleetops.io/environment"
CLUSTER_LABEL = "fleetops.io/cluster"
PRUNE_ANNOTATION = "fleetops.io/prune"
MANAGER = "fleetops"
# Read by the Pulumi Kubernetes provider: its server-side apply uses this field manager, the one the
# reconciler uses, so `pulumi up` and `fleetops reconcile` own the same fields and never conflict.
FIELD_MANAGER_ANNOTATION = "pulumi.com/patchFieldManager"
# Read by the Pulumi Kubernetes provider: do not wait for pods to become ready (workloads) or to be
# selected (a Service). A device plugin on a pool whose hardware has not arrived, or on an offline
# edge site, must not fail the deploy of everything else; rollout health is watched by monitoring
# (PrometheusRule), as the reconciler, which never waits, also leaves it.
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
WAITS_FOR_PODS = {"DaemonSet", "Deployment", "Service"}

# Built-in kinds get their typed pulumi_kubernetes class (so `pulumi up` knows their schema);
# every other kind is a custom resource whose CRD is installed by its own operator.
_CORE: dict[tuple[str, str], type[pulumi.CustomResource]] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("v1", "LimitRange"): k8s.core.v1.LimitRange,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}


@dataclass(frozen=True)
class Target:
    """Where a component's objects land and how they are stamped."""

    cluster: str
    environment: str
    provider: k8s.Provider
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


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def declare(parent: pulumi.Resource | None, target: Target, manifest: dict[str, Any]) -> pulumi.CustomResource:
    """Register one Kubernetes object with the cluster's provider, as a child of `parent`."""
    meta = manifest["metadata"]
    if manifest["kind"] in WAITS_FOR_PODS:
        meta.setdefault("annotations", {})[SKIP_AWAIT_ANNOTATION] = "true"
    target.declared.add((manifest["apiVersion"], manifest["kind"]))
    if manifest["kind"] in ("Role", "ClusterRole"):
        target.grants[(manifest["kind"], meta.get("namespace", ""), meta["name"])] = manifest["rules"]
    name = f"{target.cluster}/{meta.get('namespace', '_')}/{meta['name']}"
    opts = pulumi.ResourceOptions(parent=parent, provider=target.provider)
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    cls = _CORE.get((manifest["apiVersion"], manifest["kind"]))
    if cls is None:
        return CustomObject(name, manifest, opts)
    return cls(name, opts=opts, **{_snake(k): v for k, v in body.items()})


class CustomObject(k8s.apiextensions.CustomResource):
    """A custom resource with whatever top-level fields its CRD has.

    pulumi_kubernetes' CustomResource constructor takes only `spec`, but some kinds carry their
    data elsewhere (WorkloadPriorityClass has a top-level `value`); the provider accepts any field.
    """

    def __init__(self, resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s_version()))
        pulumi.CustomResource.__init__(
            self, f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}", resource_name, dict(manifest), opts
        )


def k8s_version() -> str:
    from pulumi_kubernetes import _utilities

    return _utilities.get_version()


def quantity_name(resource: str) -> str:
    """A device resource as a DNS-1123 fragment: nvidia.com/gpu -> nvidia-com-gpu."""
    return re.sub(r"[^a-z0-9-]+", "-", resource.lower()).strip("-")
