"""Device plugins that advertise accelerators to the kubelet, one per pool or edge group, pinned to it.

Each plugin is rendered the way its upstream project deploys it, for the same settings:

- NVIDIA (k8s-device-plugin v0.17.4, its Helm chart with a `config.map`): the pool's `version: v1`
  config file is one key of a ConfigMap, named after the pool; a `config-manager` init container
  and sidecar link the key selected by the node label `nvidia.com/device-plugin.config` (which the
  reconciler sets) to the plugin's CONFIG_FILE and signal the plugin when it changes; a checksum of
  the ConfigMap on the pod template rolls the DaemonSet when the config changes. MIG pools also get
  NVIDIA_MIG_MONITOR_DEVICES and SYS_ADMIN, as the chart gives them, and NVIDIA's mig-manager, which
  reads the pool's mig-parted layout and partitions the GPUs of every node labelled
  `nvidia.com/mig.config=<pool>`.
- Huawei Ascend (ascend-device-plugin, mind-cluster v7.3.2 `ascendplugin-910.yaml`).
- Intel FPGA (intel-device-plugins-for-kubernetes v0.36.0 `fpga_plugin`, region mode).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from fleetops import kube, spec
from modules.kube import Part, Target

NAMESPACE = "kube-system"
NVIDIA_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
MIG_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.3-ubuntu20.04"  # the GPU Operator's pairing with v0.17.4
ASCEND_IMAGE = "swr.cn-south-1.myhuaweicloud.com/ascendhub/ascend-k8sdeviceplugin:v7.3.2"
FPGA_IMAGE = "intel/intel-fpga-plugin:0.36.0"
FPGA_INIT_IMAGE = "intel/intel-fpga-initcontainer:0.36.0"
CONFIG_DIR = "/config"
AVAILABLE_CONFIGS = "/available-configs"


def nvidia_config(group: spec.Group) -> dict[str, Any]:
    """The NVIDIA device plugin config file (`version: v1`) for one pool or edge group."""
    sharing = group.sharing if isinstance(group, spec.Pool) else spec.Sharing()
    strategy = sharing.mig.strategy if sharing.mode == "mig" and sharing.mig else "none"
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy, "failOnInitError": True}}
    if sharing.mode == "time-slicing":
        config["sharing"] = {"timeSlicing": {"resources": [{"name": group.device.resource, "replicas": sharing.replicas}]}}
    return config


def mig_layout(pool: spec.Pool) -> dict[str, Any]:
    """mig-parted config: every GPU of the pool split into the declared profiles, under the pool's name."""
    assert pool.sharing.mig is not None
    return {
        "version": "v1",
        "mig-configs": {
            pool.name: [{"devices": "all", "mig-enabled": True, "mig-devices": dict(sorted(pool.sharing.mig.profiles.items()))}]
        },
    }


def is_mig(group: spec.Group) -> bool:
    return isinstance(group, spec.Pool) and group.sharing.mode == "mig"


def tolerations(group: spec.Group) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in spec.taints(group)]
    out.append({"key": "CriticalAddonsOnly", "operator": "Exists"})
    if isinstance(group, spec.EdgeGroup):
        # An edge node that loses its link keeps its device plugin for the declared grace period.
        out += [
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": group.offline_grace_seconds}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        ]
    return out


def _selector(group: spec.Group) -> dict[str, str]:
    return {(kube.POOL_LABEL if isinstance(group, spec.Pool) else kube.EDGE_GROUP_LABEL): group.name}


def _host(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, **({"type": kind} if kind else {})}}


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def daemonset(target: Target, name: str, group: spec.Group, app: str, pod: dict[str, Any],
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {kube.NAME_LABEL: app, kube.GROUP_LABEL: group.name}
    template: dict[str, Any] = {"labels": labels}
    if annotations:
        template["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": target.metadata(name, NAMESPACE, labels=labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": template,
                "spec": {"nodeSelector": _selector(group), "tolerations": tolerations(group),
                         "priorityClassName": "system-node-critical", **pod},
            },
        },
    }


def access(target: Target, name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ServiceAccount in kube-system, a ClusterRole with `rules` and the binding between them."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": target.metadata(name, NAMESPACE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": target.metadata(name), "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": target.metadata(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    ]


def config_map(target: Target, name: str, app: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": target.metadata(name, NAMESPACE, labels={kube.NAME_LABEL: app})}


def yaml_text(data: dict[str, Any]) -> str:
    """A config file as the plugin reads it, written by libyaml where PyYAML has it (same text, ~5x faster)."""
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)


def checksum(data: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# --- NVIDIA ------------------------------------------------------------------------------------


def _config_manager(group: spec.Group, oneshot: bool) -> dict[str, Any]:
    """The chart's config-manager: picks the config named by the node label and links it into place."""
    # An empty value is sent as no value: the API server stores "" as absent, and live must equal Git.
    env = [
        {"name": "ONESHOT", "value": str(oneshot).lower()},
        {"name": "KUBECONFIG"},  # empty: the in-cluster service account
        _field("NODE_NAME", "spec.nodeName"),
        {"name": "NODE_LABEL", "value": kube.NVIDIA_CONFIG_LABEL},
        {"name": "CONFIG_FILE_SRCDIR", "value": AVAILABLE_CONFIGS},
        {"name": "CONFIG_FILE_DST", "value": f"{CONFIG_DIR}/config.yaml"},
        {"name": "DEFAULT_CONFIG", "value": group.name},  # a member node the reconciler has not labelled yet
        {"name": "FALLBACK_STRATEGIES", "value": "named,single"},
        {"name": "SEND_SIGNAL", "value": str(not oneshot).lower()},
        *([] if oneshot else [{"name": "SIGNAL", "value": "1"},  # SIGHUP: the plugin reloads its config
                              {"name": "PROCESS_TO_SIGNAL", "value": "nvidia-device-plugin"}]),
    ]
    return {
        "name": "nvidia-device-plugin-init" if oneshot else "nvidia-device-plugin-sidecar",
        "image": NVIDIA_IMAGE,
        "command": ["config-manager"],
        "env": env,
        "volumeMounts": [{"name": "available-configs", "mountPath": AVAILABLE_CONFIGS}, {"name": "config", "mountPath": CONFIG_DIR}],
    }


def _nvidia_security(group: spec.Group) -> dict[str, Any]:
    # MIG needs SYS_ADMIN to watch MIG devices (the chart's securityContext for a MIG strategy). The chart
    # also adds it for any config file, since it cannot see whether a file picks a volume-mount device
    # list; fleetops writes the file and never does, so other pools keep every capability dropped.
    if is_mig(group):
        return {"capabilities": {"add": ["SYS_ADMIN"]}}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def nvidia_objects(target: Target, group: spec.Group) -> list[dict[str, Any]]:
    name = f"nvidia-device-plugin-{group.name}"
    data = {group.name: yaml_text(nvidia_config(group))}
    sidecar = {**_config_manager(group, oneshot=False), "securityContext": _nvidia_security(group)}
    env = [{"name": "CONFIG_FILE", "value": f"{CONFIG_DIR}/config.yaml"}]
    if is_mig(group):
        env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
    env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
    plugin = {
        "name": "nvidia-device-plugin-ctr",
        "image": NVIDIA_IMAGE,
        "command": ["nvidia-device-plugin"],
        "env": env,
        "securityContext": _nvidia_security(group),
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [
            {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "available-configs", "mountPath": AVAILABLE_CONFIGS},
            {"name": "config", "mountPath": CONFIG_DIR},
        ],
    }
    pod = {
        "serviceAccountName": name,
        "shareProcessNamespace": True,  # the sidecar signals the plugin process
        "initContainers": [_config_manager(group, oneshot=True)],
        "containers": [sidecar, plugin],
        "volumes": [
            _host("device-plugins", "/var/lib/kubelet/device-plugins"),
            {"name": "available-configs", "configMap": {"name": name}},
            {"name": "config", "emptyDir": {}},
        ],
    }
    return [
        config_map(target, name, "nvidia-device-plugin", data),
        *access(target, name, [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
        daemonset(target, name, group, "nvidia-device-plugin", pod, {"checksum/config": checksum(data)}),
    ]


def mig_manager_objects(target: Target, pool: spec.Pool) -> list[dict[str, Any]]:
    """NVIDIA mig-manager for one MIG pool (mig-parted's standalone deployment): it partitions the GPUs
    of each node labelled `nvidia.com/mig.config=<pool>` into the pool's layout and reports
    `nvidia.com/mig.config.state`. Privileged with the host's PID and IPC namespaces, as upstream."""
    name = f"nvidia-mig-manager-{pool.name}"
    data = {"config.yaml": yaml_text(mig_layout(pool))}
    manager = {
        "name": "nvidia-mig-manager",
        "image": MIG_MANAGER_IMAGE,
        "env": [
            _field("NODE_NAME", "spec.nodeName"),
            {"name": "CONFIG_FILE", "value": "/mig-parted-config/config.yaml"},
            {"name": "HOST_ROOT_MOUNT", "value": "/host"},
            {"name": "HOST_NVIDIA_DIR", "value": "/usr/local/nvidia"},
            {"name": "HOST_KUBELET_SYSTEMD_SERVICE", "value": "kubelet.service"},
            {"name": "HOST_MIG_MANAGER_STATE_FILE", "value": "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf"},
            {"name": "DEFAULT_GPU_CLIENTS_NAMESPACE", "value": NAMESPACE},
            {"name": "WITH_REBOOT", "value": "false"},
        ],
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "host-root", "mountPath": "/host"},
            {"name": "host-sys", "mountPath": "/sys"},
            {"name": "mig-parted-config", "mountPath": "/mig-parted-config"},
        ],
    }
    pod = {
        "serviceAccountName": name,
        "hostPID": True,
        "hostIPC": True,
        "containers": [manager],
        "volumes": [_host("host-root", "/", "Directory"), _host("host-sys", "/sys", "Directory"),
                    {"name": "mig-parted-config", "configMap": {"name": name}}],
    }
    rules = [  # the GPU Operator's mig-manager role, cluster-wide
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    ]
    return [
        config_map(target, name, "nvidia-mig-manager", data),
        *access(target, name, rules),
        daemonset(target, name, pool, "nvidia-mig-manager", pod, {"checksum/config": checksum(data)}),
    ]


# --- Ascend and FPGA ---------------------------------------------------------------------------------


def ascend_objects(target: Target, group: spec.Group) -> list[dict[str, Any]]:
    name = f"ascend-device-plugin-{group.name}"
    log = "/var/log/mindx-dl/devicePlugin"
    container = {
        "name": "device-plugin",
        "image": ASCEND_IMAGE,
        "command": ["/bin/bash", "-c", "--"],
        "args": [f"device-plugin -useAscendDocker=true -volcanoType=false -logFile={log}/devicePlugin.log -logLevel=0"],
        "env": [_field("NODE_NAME", "spec.nodeName"), _field("HOST_IP", "status.hostIP")],
        "resources": {"requests": {"cpu": "500m", "memory": "500Mi"}, "limits": {"cpu": "500m", "memory": "500Mi"}},
        "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "pod-resource", "mountPath": "/var/lib/kubelet/pod-resources"},
            {"name": "hiai-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True},
            {"name": "log-path", "mountPath": log},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod = {
        "serviceAccountName": name,
        "containers": [container],
        "volumes": [
            _host("device-plugin", "/var/lib/kubelet/device-plugins"),
            _host("pod-resource", "/var/lib/kubelet/pod-resources"),
            _host("hiai-driver", "/usr/local/Ascend/driver"),
            _host("log-path", log, "DirectoryOrCreate"),
            _host("tmp", "/tmp"),
        ],
    }
    rules = [  # ascendplugin-910.yaml's role: it annotates pods and nodes with the NPUs it hands out
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "update", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    return [*access(target, name, rules), daemonset(target, name, group, "ascend-device-plugin", pod)]


def fpga_objects(target: Target, group: spec.Group) -> list[dict[str, Any]]:
    name = f"fpga-device-plugin-{group.name}"
    container = {
        "name": "intel-fpga-plugin",
        "image": FPGA_IMAGE,
        "args": ["-mode=region"],  # resources fpga.intel.com/region-<interface id>, as the pool declares
        "env": [_field("NODE_NAME", "spec.nodeName")],
        "resources": {"requests": {"cpu": "80m", "memory": "30Mi"}, "limits": {"cpu": "160m", "memory": "60Mi"}},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "seLinuxOptions": {"type": "container_device_plugin_t"}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            {"name": "devfs", "mountPath": "/dev", "readOnly": True},
            {"name": "sysfs", "mountPath": "/sys/class", "readOnly": True},
            {"name": "kubeletsockets", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "cdidir", "mountPath": "/var/run/cdi"},
        ],
    }
    init = {
        "name": "intel-fpga-initcontainer",
        "image": FPGA_INIT_IMAGE,
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "intel-fpga-sw", "mountPath": "/opt/intel/fpga-sw"}],
    }
    pod = {
        "serviceAccountName": name,
        "initContainers": [init],
        "containers": [container],
        "volumes": [
            _host("devfs", "/dev"), _host("sysfs", "/sys/class"), _host("kubeletsockets", "/var/lib/kubelet/device-plugins"),
            _host("intel-fpga-sw", "/opt/intel/fpga-sw", "DirectoryOrCreate"), _host("cdidir", "/var/run/cdi", "DirectoryOrCreate"),
        ],
    }
    # Upstream's node-getter role: the plugin reads the node's fpga.intel.com/device-plugin-mode override.
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    return [*access(target, name, rules), daemonset(target, name, group, "intel-fpga-plugin", pod)]


PLUGINS = {"nvidia": nvidia_objects, "ascend": ascend_objects, "fpga": fpga_objects}


def device_plugin(target: Target, group: spec.Group) -> Part:
    """The device plugin of one pool or edge group, pinned to its nodes (and, for MIG, what partitions them)."""
    kind = spec.plugin_kind(group.device.resource)
    assert kind is not None, "spec validation guarantees a known plugin"

    def objects() -> list[dict[str, Any]]:
        out = PLUGINS[kind](target, group)
        if isinstance(group, spec.Pool) and is_mig(group):
            out += mig_manager_objects(target, group)
        return out

    return Part("fleetops:fleet:DevicePlugin", f"{target.cluster}/{group.name}", target, objects,
                outputs={"plugin": kind, "resource": group.device.resource})
