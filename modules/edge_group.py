"""An edge node group: KubeEdge NodeGroup or OpenYurt NodePool, with its autonomy settings."""

from __future__ import annotations

from typing import Any

import pulumi

from fleetops import spec
from modules.device_plugin import DevicePlugin
from modules.kube import Target, declare
from modules.node_pool import NodePool


def _settings(group: spec.EdgeGroup) -> dict[str, str]:
    # Read by the reconciler (offline grace, fingerprints) and by people looking at the cluster.
    return {
        "fleetops.io/heartbeat-seconds": str(group.heartbeat_seconds),
        "fleetops.io/offline-grace-seconds": str(group.offline_grace_seconds),
        "fleetops.io/latency-ms": str(group.latency_ms),
        "fleetops.io/autonomy": str(group.autonomy).lower(),
    }


def kubeedge_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kubeedge.io/v1alpha1",
        "kind": "NodeGroup",
        "metadata": target.metadata(group.name, annotations=_settings(group)),
        "spec": {"matchLabels": {spec.EDGE_GROUP_LABEL: group.name}},
    }


def openyurt_manifest(target: Target, group: spec.EdgeGroup) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "Edge",
        "hostNetwork": False,
        "interConnectivity": False,
        "labels": spec.node_labels(group),
    }
    if group.taints:
        body["taints"] = [t.model_dump() for t in group.taints]
    return {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": target.metadata(group.name, annotations=_settings(group)),
        "spec": body,
    }


class EdgeNodeGroup(pulumi.ComponentResource):
    def __init__(
        self,
        target: Target,
        cluster: spec.Cluster,
        group: spec.EdgeGroup,
        scheduler: spec.Scheduler,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("fleetops:fleet:EdgeNodeGroup", f"{target.cluster}/{group.name}", None, opts)
        manifest = kubeedge_manifest if cluster.edge_runtime == "kubeedge" else openyurt_manifest
        declare(self, target, manifest(target, group))
        child = pulumi.ResourceOptions(parent=self)
        NodePool(target, group, scheduler, opts=child)
        DevicePlugin(target, group, opts=child)
        self.register_outputs({"runtime": cluster.edge_runtime, "fingerprints": list(group.fingerprints)})
