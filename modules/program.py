"""The fleet as Pulumi resources: every `Part` a ComponentResource, every object a pulumi_kubernetes resource.

`stacks/__main__.py` runs this for `pulumi up`; `fleetops render --engine pulumi` runs it under the
SDK's mocks to prove that the direct render (`modules.fleet.manifests`) sends the same objects.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from fleetops import spec
from fleetops.kube import Key, apply_order, key_of, object_name
from modules.fleet import fleet
from modules.kube import Part, prerequisites

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
    ("autoscaling/v2", "HorizontalPodAutoscaler"): k8s.autoscaling.v2.HorizontalPodAutoscaler,
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


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def declare(name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """Register one Kubernetes object with the pulumi_kubernetes class of its kind."""
    cls = _CORE.get((manifest["apiVersion"], manifest["kind"]))
    if cls is None:
        return CustomObject(name, manifest, opts)
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    return cls(name, opts=opts, **{_snake(k): v for k, v in body.items()})


class CustomObject(k8s.apiextensions.CustomResource):
    """A custom resource with whatever top-level fields its CRD has.

    pulumi_kubernetes' CustomResource constructor takes only `spec`, but some kinds carry their
    data elsewhere (WorkloadPriorityClass has a top-level `value`); the provider accepts any field.
    """

    def __init__(self, resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=K8S_VERSION))
        pulumi.CustomResource.__init__(
            self, f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}", resource_name, dict(manifest), opts
        )


# The provider version every object's resource asks for, as pulumi-kubernetes's own resources ask:
# the installed package's version (its SDK's semver is that string for a release, as pinned), a fact
# of the installation, read when the program starts as the SDK reads its own.
K8S_VERSION = importlib.metadata.version("pulumi_kubernetes")


# An object waiting to be registered: the component it belongs to, its cluster's provider, the manifest.
Pending = list[tuple[pulumi.ComponentResource, k8s.Provider | None, dict[str, Any]]]


class Component(pulumi.ComponentResource):
    """One fleet concept (`Part.type`: fleetops:fleet:Tenant, ...) with its objects and sub-components.

    A cluster's objects are registered once its whole subtree is built, in apply order, each with
    `depends_on` its prerequisites (modules.kube.prerequisites): the engine creates objects in
    parallel, and without them created a tenant's objects before its Namespace at fleet scale
    (issue 42). The parent of each object, hence its URN, is its part's component as before."""

    def __init__(self, part: Part, provider: k8s.Provider | None = None, opts: pulumi.ResourceOptions | None = None,
                 pending: Pending | None = None):
        super().__init__(part.type, part.name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        pending = [] if pending is None else pending
        if part.provider is not None:
            provider = k8s.Provider(part.name, **part.provider, opts=child)
            pending = []  # this cluster's own
        pending += [(self, provider, manifest) for manifest in part.build()]
        for sub in part.parts:
            Component(sub, provider, opts=child, pending=pending)
        if part.provider is not None:
            register_cluster(part.target.cluster, pending)
        self.register_outputs(part.outputs)


def register_cluster(cluster: str, pending: Pending) -> None:
    """A cluster's objects in apply order, each depending on those of its prerequisites the fleet declares."""
    declared: dict[Key, pulumi.CustomResource] = {}
    for parent, provider, manifest in sorted(pending, key=lambda p: apply_order(p[2])):
        needs = [declared[k] for k in prerequisites(manifest) if k in declared]
        opts = pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=needs)
        declared[key_of(manifest)] = declare(object_name(cluster, manifest), manifest, opts)


def deploy(env: spec.Environment) -> Component:
    """The stack program's whole body: the environment's fleet as Pulumi resources."""
    return Component(fleet(env))
