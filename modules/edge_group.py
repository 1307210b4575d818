"""An edge node group: KubeEdge NodeGroup or OpenYurt NodePool, with the settings its runtime reads."""

from __future__ import annotations

from typing import Any

from fleetops import kube, spec
from modules.device_plugin import device_plugin
from modules.kube import Part, Target
from modules.node_pool import node_pool


# Read by OpenYurt's yurt-manager (node lifecycle and pod binding controllers, v1.6+) on each member
# node, where the NodePool controller copies its spec.annotations: "0" keeps pods bound while the node
# is offline, however long; fleetops itself cordons the node after its offline grace.
AUTONOMY_ANNOTATION = "node.openyurt.io/autonomy-duration"


def kubeedge_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    # KubeEdge reads nothing else here: edge autonomy is always on (edgecore's local store), and the
    # node status frequency (heartbeat_seconds) is edgecore's own configuration, set when a node joins.
    return {
        "apiVersion": "apps.kubeedge.io/v1alpha1",
        "kind": "NodeGroup",
        "metadata": target.metadata(group.name),
        "spec": {"matchLabels": {kube.EDGE_GROUP_LABEL: group.name}},
    }


def openyurt_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "Edge",
        "hostNetwork": False,
        "interConnectivity": False,
        "labels": spec.node_labels(group),
    }
    if group.autonomy:
        body["annotations"] = {AUTONOMY_ANNOTATION: "0"}
    if group.taints:
        body["taints"] = [t.model_dump() for t in group.taints]
    return {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": target.metadata(group.name),
        "spec": body,
    }


def edge_group(target: Target, cluster: spec.Cluster, group: spec.EdgeGroup) -> Part:
    manifest = kubeedge_manifest if cluster.edge_runtime == "kubeedge" else openyurt_manifest
    return Part(
        "fleetops:fleet:EdgeNodeGroup", f"{target.cluster}/{group.name}", target,
        lambda: [manifest(target, group)],
        outputs={"runtime": cluster.edge_runtime, "fingerprints": list(group.fingerprints)},
        parts=[node_pool(target, group), device_plugin(target, group)],
    )
