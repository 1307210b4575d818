"""Device plugins that advertise accelerators to the kubelet, one DaemonSet pinned to each pool.

NVIDIA pools get the plugin's v1 config file (exclusive, time-slicing or MIG strategy); MIG pools
also get a mig-parted layout, selected on the node by `nvidia.com/mig.config`.
"""

from __future__ import annotations

from typing import Any

import pulumi
import yaml

from fleetops import spec
from modules.kube import Target, declare

NAMESPACE = "kube-system"
IMAGES = {
    "nvidia": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
    "ascend": "ascendhub.huawei.com/public-ascendhub/ascend-k8sdeviceplugin:v6.0.0",
    "fpga": "intel/intel-fpga-plugin:0.32.0",
}
ARGS = {
    "nvidia": [],
    "ascend": ["device-plugin", "-useAscendDocker=true", "-volcanoType=false", "-logLevel=0"],
    "fpga": ["-mode", "region"],
}


def nvidia_config(pool: spec.Group) -> dict[str, Any]:
    """The NVIDIA device plugin config file (`version: v1`) for one pool."""
    sharing = pool.sharing if isinstance(pool, spec.Pool) else spec.Sharing()
    strategy = sharing.mig.strategy if sharing.mode == "mig" and sharing.mig else "none"
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy, "failOnInitError": True}}
    if sharing.mode == "time-slicing":
        config["sharing"] = {
            "timeSlicing": {"resources": [{"name": pool.device.resource, "replicas": sharing.replicas}]}
        }
    return config


def mig_layout(pool: spec.Pool) -> dict[str, Any]:
    """mig-parted config: every GPU of the pool split into the declared profiles."""
    assert pool.sharing.mig is not None
    return {
        "version": "v1",
        "mig-configs": {
            pool.name: [{"devices": "all", "mig-enabled": True, "mig-devices": dict(sorted(pool.sharing.mig.profiles.items()))}]
        },
    }


def _tolerations(group: spec.Group) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in group.taints]
    tolerations.append({"key": "CriticalAddonsOnly", "operator": "Exists"})
    if isinstance(group, spec.EdgeGroup):
        # An edge node that loses its link keeps its device plugin for the declared grace period.
        tolerations += [
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": group.offline_grace_seconds}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        ]
    return tolerations


def daemonset_manifest(target: Target, group: spec.Group, kind: str, config_map: str | None) -> dict[str, Any]:
    name = f"{kind}-device-plugin-{group.name}"
    selector = {"app.kubernetes.io/name": f"{kind}-device-plugin", "fleetops.io/group": group.name}
    key = spec.POOL_LABEL if isinstance(group, spec.Pool) else spec.EDGE_GROUP_LABEL
    container: dict[str, Any] = {
        "name": "device-plugin",
        "image": IMAGES[kind],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    if ARGS[kind]:  # the API server drops an empty list; sending none keeps live equal to Git
        container["args"] = ARGS[kind]
    volumes: list[dict[str, Any]] = [{"name": "device-plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]
    if config_map is not None:
        container["env"] = [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]
        container["volumeMounts"].append({"name": "config", "mountPath": "/config", "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": config_map}})
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": target.metadata(name, NAMESPACE, labels=selector),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "nodeSelector": {key: group.name},
                    "tolerations": _tolerations(group),
                    "priorityClassName": "system-node-critical",
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def config_map_manifest(target: Target, name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": target.metadata(name, NAMESPACE),
        "data": {"config.yaml": yaml.safe_dump(data, sort_keys=True)},
    }


class DevicePlugin(pulumi.ComponentResource):
    """The device plugin of one pool or edge group, pinned to its nodes."""

    def __init__(self, target: Target, group: spec.Group, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fleetops:fleet:DevicePlugin", f"{target.cluster}/{group.name}", None, opts)
        kind = spec.plugin_kind(group.device.resource)
        assert kind is not None, "spec validation guarantees a known plugin"
        config_map = None
        if kind == "nvidia":
            config_map = f"nvidia-device-plugin-{group.name}"
            declare(self, target, config_map_manifest(target, config_map, nvidia_config(group)))
            if isinstance(group, spec.Pool) and group.sharing.mode == "mig":
                declare(self, target, config_map_manifest(target, f"mig-parted-{group.name}", mig_layout(group)))
        declare(self, target, daemonset_manifest(target, group, kind, config_map))
        self.register_outputs({"plugin": kind, "resource": group.device.resource})
