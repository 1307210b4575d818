"""An edge node group: KubeEdge NodeGroup or OpenYurt NodePool, with the settings its runtime reads,
and what keeps it working through a lost uplink: the disconnect policy its pods get at admission, a
queue for offline batch work, and a node-local model cache."""

from __future__ import annotations

from typing import Any

from fleetops import kube, spec
from modules.device_plugin import device_plugin
from modules.kube import Part, Target, cel_list
from modules.node_pool import node_pool


# Read by OpenYurt's yurt-manager (node lifecycle and pod binding controllers, v1.6+) on each member
# node, where the NodePool controller copies its spec.annotations: "0" keeps pods bound while the node
# is offline, however long; a duration ("30s") is the tolerationSeconds its pod binding controller
# gives the pods on the node, the same the disconnect policy gives them at admission.
AUTONOMY_ANNOTATION = "node.openyurt.io/autonomy-duration"
# The NoExecute taints the node lifecycle controller puts on a node whose Ready condition is Unknown
# or False: taint-based eviction deletes a pod that does not tolerate them (for tolerationSeconds).
OFFLINE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
# Where every node of a group keeps its cached models: <path>/<model name>, read-only for workloads.
MODEL_CACHE_PATH = "/var/lib/fleetops/models"
# Pinned: the prefetch needs sh, wget and sha256sum (BusyBox has all three); pause holds the pod.
PREFETCH_IMAGE = "docker.io/library/busybox:1.37.0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
MODEL_CACHE_PREFIX = "fleetops-model-cache-"
DISCONNECT_PREFIX = "fleetops-edge-disconnect-"


def kubeedge_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    # KubeEdge reads nothing else here: edge autonomy is always on (edgecore's local store keeps pods
    # running while cloudcore is away), and the node status frequency (heartbeat_seconds) is edgecore's
    # own configuration, set when a node joins. Whether pods move is the tolerations' (disconnect policy).
    return {
        "apiVersion": "apps.kubeedge.io/v1alpha1",
        "kind": "NodeGroup",
        "metadata": target.metadata(group.name),
        "spec": {"matchLabels": {kube.EDGE_GROUP_LABEL: group.name}},
    }


def autonomy_duration(group: spec.EdgeGroup) -> str:
    return "0" if group.disconnect.after_seconds is None else f"{group.disconnect.after_seconds}s"


def openyurt_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "Edge",
        "hostNetwork": False,
        "interConnectivity": False,
        "labels": spec.node_labels(group),
        "annotations": {AUTONOMY_ANNOTATION: autonomy_duration(group)},
    }
    if group.taints:
        body["taints"] = [t.model_dump() for t in group.taints]
    return {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": target.metadata(group.name),
        "spec": body,
    }


def _tolerations(seconds: int | None) -> str:
    """The offline tolerations as a CEL list: without seconds the pod stays bound however long."""
    extra = "" if seconds is None else f", tolerationSeconds: {seconds}"
    return "[" + ", ".join(f"Object.spec.tolerations{{key: '{key}', operator: 'Exists', effect: 'NoExecute'{extra}}}"
                           for key in OFFLINE_TAINTS) + "]"


def disconnect_manifests(target: Target, group: spec.EdgeGroup) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, served by default since Kubernetes
    1.36) and its binding: every pod created for the group's nodes gets the group's offline tolerations.

    The API server's DefaultTolerationSeconds plugin runs before it and adds 300 s tolerations to a pod
    that has none: the policy replaces every toleration of the two offline taints with its own, so the
    group's wins whatever the pod or that plugin said. Offline work (offline_work.priority_classes)
    always stays bound: it is the work meant to run on while the node is away. DaemonSet pods are left
    alone: their controller gives them unbounded tolerations, and moving one is meaningless.
    A pod is the group's when its nodeSelector names the group, as Kueue's ResourceFlavor and every
    fleetops workload select it.
    """
    name = f"{DISCONNECT_PREFIX}{group.name}"
    key = kube.EDGE_GROUP_LABEL
    offline = group.offline_work.priority_classes if group.offline_work else []
    # The pod's other tolerations, rebuilt as typed values: the API server cannot write the ones it
    # read back into a JSON patch as they are (and Object types exist in mutations only, not variables).
    kept = ("(has(object.spec.tolerations) ? object.spec.tolerations.filter(t, !has(t.key) || !(t.key in "
            f"{cel_list(list(OFFLINE_TAINTS))})).map(t, Object.spec.tolerations{{"
            "?key: t.?key, ?operator: t.?operator, ?value: t.?value, ?effect: t.?effect, ?tolerationSeconds: t.?tolerationSeconds}) : [])")
    mine = _tolerations(group.disconnect.after_seconds)
    value = f"{kept} + {mine}"
    if offline and group.disconnect.after_seconds is not None:
        value = (f"{kept} + (has(object.spec.priorityClassName) && object.spec.priorityClassName in {cel_list(offline)}"
                 f" ? {_tolerations(None)} : {mine})")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": target.metadata(name, labels={key: group.name}),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [
                {"name": "on-the-group", "expression": f"has(object.spec.nodeSelector) && '{key}' in object.spec.nodeSelector && object.spec.nodeSelector['{key}'] == '{group.name}'"},
                {"name": "not-a-daemon", "expression": "!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, r.kind == 'DaemonSet')"},
            ],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                "expression": f"[JSONPatch{{op: 'add', path: '/spec/tolerations', value: {value}}}]"}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": target.metadata(name, labels={key: group.name}),
        "spec": {"policyName": name},
    }
    return [policy, binding]


# Each model lands in <cache>/<name> only when its sha256 matches: a partial or tampered download is
# removed, and the pod fails (and is retried) until every model is there. Arguments, never interpolated
# into the script: name, digest and URL of each model, in threes.
PREFETCH_SCRIPT = """set -eu
cd "$CACHE"
while [ "$#" -ge 3 ]; do
  name="$1"; digest="$2"; url="$3"; shift 3
  if [ -f "$name" ] && echo "$digest  $name" | sha256sum -c >/dev/null 2>&1; then continue; fi
  rm -f "$name.part"
  wget -q -O "$name.part" "$url"
  if ! echo "$digest  $name.part" | sha256sum -c >/dev/null 2>&1; then echo "$name: sha256 differs from $digest" >&2; rm -f "$name.part"; exit 1; fi
  mv "$name.part" "$name"
done
"""
CACHE_MOUNT = "/cache"


def model_cache_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    """A DaemonSet on the group's nodes whose init container fills the node-local cache before its pod
    is Ready; workloads mount the hostPath read-only. It tolerates the group's taints and stays bound
    while the node is offline (the cache is only useful there)."""
    labels = {"app.kubernetes.io/name": "fleetops-model-cache", kube.EDGE_GROUP_LABEL: group.name}
    args = [part for m in group.model_cache for part in (m.name, m.digest.removeprefix("sha256:"), m.source)]
    tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in spec.taints(group)]
    volume = {"name": "cache", "hostPath": {"path": MODEL_CACHE_PATH, "type": "DirectoryOrCreate"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": target.metadata(f"{MODEL_CACHE_PREFIX}{group.name}", "kube-system", labels=labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {kube.EDGE_GROUP_LABEL: group.name},
                    "tolerations": tolerations,
                    "initContainers": [{
                        "name": "prefetch", "image": PREFETCH_IMAGE,
                        "command": ["sh", "-c", PREFETCH_SCRIPT, "prefetch", *args],
                        "env": [{"name": "CACHE", "value": CACHE_MOUNT}],
                        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}],
                    }],
                    "containers": [{"name": "hold", "image": PAUSE_IMAGE,
                                    "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "16Mi"}}}],
                    "volumes": [volume],
                },
            },
        },
    }


def offline_manifests(target: Target, group: spec.EdgeGroup) -> list[dict[str, Any]]:
    """A ClusterQueue of the group's own, outside every cohort (it neither lends nor borrows: offline,
    there is nobody to borrow from), over `devices` of the group's flavor, open to the listed tenants'
    namespaces, with a LocalQueue in each. The tenants' admission policy admits to it only the listed
    priority classes (modules/tenant.py)."""
    work = group.offline_work
    assert work is not None
    name = spec.offline_queue_name(group)
    labels = {kube.EDGE_GROUP_LABEL: group.name}
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": target.metadata(name, labels=labels),
        "spec": {
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(work.tenants)}]},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [group.device.resource], "flavors": [
                {"name": group.name, "resources": [{"name": group.device.resource, "nominalQuota": work.devices}]}]}],
        },
    }
    local = [{
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": target.metadata(name, tenant, labels=labels),
        "spec": {"clusterQueue": name},
    } for tenant in sorted(work.tenants)]
    return [queue, *local]


def edge_group(target: Target, cluster: spec.Cluster, group: spec.EdgeGroup) -> Part:
    runtime = kubeedge_manifest if cluster.edge_runtime == "kubeedge" else openyurt_manifest

    def objects() -> list[dict[str, Any]]:
        out = [runtime(target, group), *disconnect_manifests(target, group)]
        if group.model_cache:
            out.append(model_cache_manifest(target, group))
        if group.offline_work:
            out += offline_manifests(target, group)
        return out

    return Part(
        "fleetops:fleet:EdgeNodeGroup", f"{target.cluster}/{group.name}", target, objects,
        outputs={"runtime": cluster.edge_runtime, "fingerprints": list(group.fingerprints)},
        parts=[node_pool(target, group), device_plugin(target, group)],
    )
