"""The Kubernetes contract fleetops keeps, in one place: the labels, annotations and taints it writes
and reads, the names Kubernetes accepts, how an object is keyed, and the order objects are applied in.

The components (`modules/`) stamp objects with this contract and the engine (render, plan, policy,
reconcile, inventory) reads it back: both import it from here, so neither imports the other for it.
It imports nothing of fleetops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# --- the label, annotation and taint contract ---------------------------------------------------

MANAGED_BY = "app.kubernetes.io/managed-by"
ENVIRONMENT_LABEL = "fleetops.io/environment"
CLUSTER_LABEL = "fleetops.io/cluster"
PRUNE_ANNOTATION = "fleetops.io/prune"
MANAGER = "fleetops"
PART_OF = "app.kubernetes.io/part-of"  # on the reconciler's own records, which are not managed-by (never pruned)
# The reconciler's record of its last pass in each cluster (fleetops.reconcile.status); the fleet API reads it.
STATUS_CONFIGMAP = "fleetops-status"
NAME_LABEL = "app.kubernetes.io/name"  # what a component's pods are selected by
# Read by the Pulumi Kubernetes provider: its server-side apply uses this field manager, the one the
# reconciler uses, so `pulumi up` and `fleetops reconcile` own the same fields and never conflict.
FIELD_MANAGER_ANNOTATION = "pulumi.com/patchFieldManager"
# Read by the Pulumi Kubernetes provider: do not wait for pods to become ready (workloads) or to be
# selected (a Service). A device plugin on a pool whose hardware has not arrived, or on an offline
# edge site, must not fail the deploy of everything else; rollout health is watched by monitoring
# (PrometheusRule), as the reconciler, which never waits, also leaves it.
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
WAITS_FOR_PODS = {"DaemonSet", "Deployment", "Service"}

# The pool contract: every member node of a pool or edge group carries its group's label.
POOL_LABEL = "fleetops.io/pool"
EDGE_GROUP_LABEL = "fleetops.io/edge-group"
NVIDIA_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"  # read by NVIDIA mig-manager

# What the components stamp on the objects of a tenant, a device group and a priority class
# (read back by the policies, policies/lib.rego, and by grants).
TENANT_LABEL = "fleetops.io/tenant"
ISOLATION_LABEL = "fleetops.io/isolation"
DEVICE_RESOURCE_LABEL = "fleetops.io/device-resource"
GROUP_LABEL = "fleetops.io/group"
WORKLOAD_LABEL = "fleetops.io/workload"
# On every node of a spot pool: only preemptible classes tolerate it (modules/tenant.py).
SPOT_TAINT = {"key": "fleetops.io/spot", "value": "true", "effect": "NoSchedule"}

# What the reconciler writes on live nodes.
FINGERPRINT_ANNOTATION = "fleetops.io/device-fingerprint"
QUARANTINE_TAINT = {"key": "fleetops.io/quarantine", "value": "unknown-device", "effect": "NoExecute"}
CORDON_ANNOTATION = "fleetops.io/cordoned"  # set when fleetops cordoned a node, so it only uncordons its own

# --- names Kubernetes accepts ---------------------------------------------------------------------

# Every pattern is matched against the whole value (`fullmatch`): `^...$` also accepts a value that
# ends in a newline (Python's `$` matches before a final newline), which the API server refuses.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # also how the API server names nodes
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # a label key's name, a resource's name
RESOURCE_NAME = re.compile(rf"{DNS_SUBDOMAIN.pattern}/{_NAME_PART}")
LABEL_KEY = re.compile(rf"({DNS_SUBDOMAIN.pattern}/)?{_NAME_PART}")
LABEL_VALUE = re.compile(rf"({_NAME_PART})?")

# --- object keys and apply order ----------------------------------------------------------------

Manifest = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name: an object within one cluster
ObjectKey = tuple[str, str, str, str, str]  # cluster, apiVersion, kind, namespace, name: an object of the fleet


def key_of(manifest: Mapping[str, Any]) -> Key:
    meta = manifest.get("metadata", {})
    return (manifest["apiVersion"], manifest["kind"], meta.get("namespace", "") or "", meta["name"])


def object_key(cluster: str, manifest: Mapping[str, Any]) -> ObjectKey:
    return (cluster, *key_of(manifest))


def describe(key: Key) -> str:
    _, kind, namespace, name = key
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def object_name(cluster: str, manifest: Mapping[str, Any]) -> str:
    """The Pulumi resource name of an object: unique per cluster, stable across renders."""
    meta = manifest["metadata"]
    return f"{cluster}/{meta.get('namespace', '_')}/{meta['name']}"


# Apply order, also used to sort output so that a reader meets namespaces before what lives in them.
KIND_ORDER = {
    "CustomResourceDefinition": 0,
    "Namespace": 1,
    "PriorityClass": 2,
    "ClusterRole": 2,
    "ClusterRoleBinding": 2,
    "ServiceAccount": 4,
    "ConfigMap": 4,
    "DaemonSet": 6,
    "Deployment": 6,
}
CLUSTER_SCOPED = {
    "Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "ResourceFlavor", "ClusterQueue", "WorkloadPriorityClass", "Cohort", "NodeGroup", "NodePool", "Queue",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CertificateSigningRequest",
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster",
}


def kind_rank(manifest: Mapping[str, Any]) -> int:
    kind = manifest["kind"]
    if kind in KIND_ORDER:
        return KIND_ORDER[kind]
    return 3 if kind in CLUSTER_SCOPED else 5


def apply_order(manifest: Mapping[str, Any]) -> tuple[int, str, str, str, str]:
    """The sort key of a cluster's objects: in apply order, then by key."""
    _, api_version, kind, namespace, name = object_key("", manifest)
    return (kind_rank(manifest), api_version, kind, namespace, name)
