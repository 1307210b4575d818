"""Each component, through render: the objects and the fields that matter (the same parts `pulumi up` registers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetops import render, spec
from tests.helpers import ROOT, find, one, render_env, small_env, spot_env


def plugin_config(state: render.DesiredState, cluster: str, group: str) -> dict[str, Any]:
    """The NVIDIA plugin config the node label of `group` selects: its key in the plugin's ConfigMap."""
    return yaml.safe_load(one(state, cluster, "ConfigMap", f"nvidia-device-plugin-{group}", "kube-system")["data"][group])


def mig_parted(state: render.DesiredState, cluster: str, group: str) -> dict[str, Any]:
    return yaml.safe_load(one(state, cluster, "ConfigMap", f"nvidia-mig-manager-{group}", "kube-system")["data"]["config.yaml"])


def pod_of(state: render.DesiredState, cluster: str, name: str) -> dict[str, Any]:
    return one(state, cluster, "DaemonSet", name, "kube-system")["spec"]["template"]


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []) if c["name"] == name)


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from field>") for e in c.get("env", [])}


# --- device plugins -------------------------------------------------------------------------


def test_time_slicing_pool_gets_nvidia_config_with_replicas(small_state: render.DesiredState) -> None:
    config = plugin_config(small_state, "center-a", "a100-ts")
    assert config["version"] == "v1"
    assert config["flags"]["migStrategy"] == "none"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_the_config_the_node_label_selects_reaches_the_running_plugin(small_state: render.DesiredState) -> None:
    """NVIDIA's chart: config-manager links the ConfigMap key named by the node label to CONFIG_FILE and
    signals the plugin; the reconciler sets that label on every member node (spec.node_labels)."""
    pool = spec.Environment.model_validate(small_env()).clusters[0].pools[0]
    label_value = spec.node_labels(pool)["nvidia.com/device-plugin.config"]  # what the reconciler puts on the nodes
    pod = pod_of(small_state, "center-a", "nvidia-device-plugin-a100-ts")
    configs = one(small_state, "center-a", "ConfigMap", "nvidia-device-plugin-a100-ts", "kube-system")["data"]
    assert label_value in configs
    init, sidecar, plugin = (container(pod, n) for n in ("nvidia-device-plugin-init", "nvidia-device-plugin-sidecar", "nvidia-device-plugin-ctr"))
    for manager in (init, sidecar):
        assert manager["command"] == ["config-manager"]
        env = env_of(manager)
        assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config" and env["DEFAULT_CONFIG"] == "a100-ts"
        assert env["CONFIG_FILE_SRCDIR"] == "/available-configs" and env["CONFIG_FILE_DST"] == "/config/config.yaml"
    assert env_of(init)["ONESHOT"] == "true" and env_of(sidecar)["SEND_SIGNAL"] == "true"
    assert env_of(sidecar)["PROCESS_TO_SIGNAL"] == plugin["command"][0] == "nvidia-device-plugin"
    assert env_of(plugin)["CONFIG_FILE"] == "/config/config.yaml" and "NVIDIA_MIG_MONITOR_DEVICES" not in env_of(plugin)
    assert pod["spec"]["shareProcessNamespace"] is True
    assert {"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-a100-ts"}} in pod["spec"]["volumes"]
    # config-manager watches its node: the pod's account may read nodes, and nothing else.
    account = pod["spec"]["serviceAccountName"]
    binding = one(small_state, "center-a", "ClusterRoleBinding", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    role = one(small_state, "center-a", "ClusterRole", binding["roleRef"]["name"])
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_config_change_rolls_only_that_plugin(small_state: render.DesiredState, tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][0]["pools"][0]["sharing"]["replicas"] = 2
    changed = render_env(tmp_path, env)
    checksum = lambda state, name: pod_of(state, "center-a", name)["metadata"]["annotations"]["checksum/config"]  # noqa: E731
    assert checksum(small_state, "nvidia-device-plugin-a100-ts") != checksum(changed, "nvidia-device-plugin-a100-ts")
    assert checksum(small_state, "nvidia-device-plugin-h100-mig") == checksum(changed, "nvidia-device-plugin-h100-mig")


def test_mig_pool_gets_mig_strategy_monitoring_and_a_mig_manager_that_reads_its_layout(small_state: render.DesiredState) -> None:
    config = plugin_config(small_state, "center-a", "h100-mig")
    assert config["flags"]["migStrategy"] == "single" and "sharing" not in config
    plugin = container(pod_of(small_state, "center-a", "nvidia-device-plugin-h100-mig"), "nvidia-device-plugin-ctr")
    assert env_of(plugin)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert plugin["securityContext"]["capabilities"] == {"add": ["SYS_ADMIN"]}
    # mig-manager partitions each node labelled nvidia.com/mig.config=<config> with that config of its file.
    layout = mig_parted(small_state, "center-a", "h100-mig")
    assert layout["mig-configs"]["h100-mig"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    manager_pod = pod_of(small_state, "center-a", "nvidia-mig-manager-h100-mig")
    manager = container(manager_pod, "nvidia-mig-manager")
    assert env_of(manager)["CONFIG_FILE"] == "/mig-parted-config/config.yaml"
    assert {"name": "mig-parted-config", "configMap": {"name": "nvidia-mig-manager-h100-mig"}} in manager_pod["spec"]["volumes"]
    assert manager_pod["spec"]["nodeSelector"] == {"fleetops.io/pool": "h100-mig"}
    assert manager_pod["spec"]["hostPID"] and manager["securityContext"] == {"privileged": True}
    assert not find(small_state, "center-a", "DaemonSet", "nvidia-mig-manager-a100-ts")


def test_mixed_mig_strategy_reaches_the_plugin(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][0]["pools"][1]["sharing"]["mig"] = {"strategy": "mixed", "profiles": {"3g.40gb": 1, "2g.20gb": 2}}
    env["tenants"] = []
    state = render_env(tmp_path, env)
    assert plugin_config(state, "center-a", "h100-mig")["flags"]["migStrategy"] == "mixed"
    assert mig_parted(state, "center-a", "h100-mig")["mig-configs"]["h100-mig"][0]["mig-devices"] == {"2g.20gb": 2, "3g.40gb": 1}


def test_device_plugin_daemonset_is_pinned_to_its_pool_and_tolerates_its_taints(small_state: render.DesiredState) -> None:
    pod = pod_of(small_state, "center-a", "nvidia-device-plugin-a100-ts")["spec"]
    assert pod["nodeSelector"] == {"fleetops.io/pool": "a100-ts"}
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_every_pool_has_its_own_plugin_and_non_nvidia_pools_no_nvidia_config(small_state: render.DesiredState) -> None:
    names = {m["metadata"]["name"] for m in find(small_state, "center-a", "DaemonSet")}
    assert names == {"nvidia-device-plugin-a100-ts", "nvidia-device-plugin-h100-mig", "nvidia-mig-manager-h100-mig", "ascend-device-plugin-ascend"}
    ascend = pod_of(small_state, "center-a", "ascend-device-plugin-ascend")["spec"]
    assert ascend["nodeSelector"] == {"fleetops.io/pool": "ascend"}
    assert not find(small_state, "center-a", "ConfigMap", "nvidia-device-plugin-ascend")


def test_ascend_plugin_gets_what_its_upstream_manifest_gives_it(small_state: render.DesiredState) -> None:
    pod = pod_of(small_state, "center-a", "ascend-device-plugin-ascend")["spec"]
    plugin = pod["containers"][0]
    mounts = {m["mountPath"] for m in plugin["volumeMounts"]}
    assert {"/usr/local/Ascend/driver", "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/device-plugins"} <= mounts
    assert plugin["securityContext"]["privileged"] is True  # it opens the NPU devices of the driver
    role = one(small_state, "center-a", "ClusterRole", pod["serviceAccountName"])
    assert {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch", "update"]} in role["rules"]


def test_fpga_plugin_runs_in_region_mode_with_its_init_container(tmp_path: Path) -> None:
    state = render.render(ROOT / "environments" / "prod.yaml", revision="r")
    pod = pod_of(state, "center-sh", "fpga-device-plugin-fpga-arria10")["spec"]
    assert pod["containers"][0]["args"] == ["-mode=region"]
    assert pod["initContainers"][0]["image"].startswith("intel/intel-fpga-initcontainer:")


def test_the_reconciler_may_write_every_role_it_renders(small_state: render.DesiredState) -> None:
    """Kubernetes refuses a role from a writer that lacks its permissions: the reconciler holds them."""
    reconciler = one(small_state, "center-a", "ClusterRole", "fleetops-reconciler")["rules"]
    for role in find(small_state, "center-a", "ClusterRole"):
        for rule in role["rules"]:
            assert rule in reconciler or role["metadata"]["name"] == "fleetops-reconciler", (role["metadata"]["name"], rule)


# --- edge groups -------------------------------------------------------------------------------


def test_edge_group_plugin_tolerates_offline_nodes_for_the_grace_period(small_state: render.DesiredState) -> None:
    pod = one(small_state, "edge-b", "DaemonSet", "nvidia-device-plugin-jetson", "kube-system")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"fleetops.io/edge-group": "jetson"}
    offline = [t for t in pod["tolerations"] if t.get("effect") == "NoExecute"]
    assert sorted(t["key"] for t in offline) == ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
    assert all(t["tolerationSeconds"] == 240 and t["operator"] == "Exists" for t in offline)


def test_kubeedge_edge_group_becomes_a_node_group(small_state: render.DesiredState) -> None:
    group = one(small_state, "edge-b", "NodeGroup", "jetson")
    assert group["apiVersion"] == "apps.kubeedge.io/v1alpha1"
    assert group["spec"] == {"matchLabels": {"fleetops.io/edge-group": "jetson"}}
    # Nothing in KubeEdge reads fleetops' own settings: none is put where it would look like one.
    assert not [k for k in group["metadata"]["annotations"] if k.startswith("fleetops.io/")]


def test_the_old_autonomy_flag_reads_as_a_disconnect_policy(tmp_path: Path) -> None:
    # autonomy: false once left pods with the API server's default 300 s tolerations: it moves them after that.
    env = small_env()
    env["clusters"][1]["edge_groups"][0]["autonomy"] = False
    state = render_env(tmp_path, env)
    policy = one(state, "edge-b", "MutatingAdmissionPolicy", "fleetops-edge-disconnect-jetson")
    assert "tolerationSeconds: 300" in policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    env["clusters"][1]["edge_groups"][0]["disconnect"] = {"action": "stay"}
    with pytest.raises(spec.SpecError, match=r"autonomy is the old spelling of disconnect: keep disconnect only"):
        render_env(tmp_path, env)


def test_openyurt_edge_group_becomes_a_v1beta2_node_pool(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][1]["edge_runtime"] = "openyurt"
    env["clusters"][1]["edge_groups"][0]["taints"] = [{"key": "edge", "value": "true", "effect": "NoSchedule"}]
    state = render_env(tmp_path, env)
    pool = one(state, "edge-b", "NodePool", "jetson")
    assert pool["apiVersion"] == "apps.openyurt.io/v1beta2"
    assert pool["spec"]["type"] == "Edge"
    assert pool["spec"]["labels"]["fleetops.io/edge-group"] == "jetson"
    assert pool["spec"]["taints"] == [{"key": "edge", "value": "true", "effect": "NoSchedule"}]
    # yurt-manager copies the pool's annotations to its nodes, where its node lifecycle controller
    # reads the autonomy duration ("0": pods stay bound while the node is offline).
    assert pool["spec"]["annotations"] == {"node.openyurt.io/autonomy-duration": "0"}
    assert not [k for k in pool["metadata"]["annotations"] if k.startswith("fleetops.io/")]
    assert not find(state, "edge-b", "NodeGroup")
    # A group that moves its pods tells the pod binding controller the same seconds its pods get at admission.
    env["clusters"][1]["edge_groups"][0]["disconnect"] = {"action": "move", "after_seconds": 45}
    assert one(render_env(tmp_path, env), "edge-b", "NodePool", "jetson")["spec"]["annotations"] == {"node.openyurt.io/autonomy-duration": "45s"}


def test_pools_become_kueue_flavors_with_node_labels_and_taints(small_state: render.DesiredState) -> None:
    flavor = one(small_state, "center-a", "ResourceFlavor", "a100-ts")
    assert flavor["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert flavor["spec"]["nodeLabels"] == {"fleetops.io/pool": "a100-ts"}
    assert flavor["spec"]["nodeTaints"] == [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    assert one(small_state, "edge-b", "ResourceFlavor", "jetson")["spec"]["nodeLabels"] == {"fleetops.io/edge-group": "jetson"}


def test_a_flavor_tolerates_only_taints_keyed_by_its_own_device_resource(tmp_path: Path) -> None:
    # Kueue counts a flavor's tolerations as the workload's: one per taint would let anything in.
    env = small_env()
    env["clusters"][0]["pools"][2]["taints"] = [{"key": "huawei.com/Ascend910", "value": "present", "effect": "NoSchedule"},
                                                 {"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    state = render_env(tmp_path, env)
    assert "tolerations" not in one(state, "center-a", "ResourceFlavor", "a100-ts")["spec"]
    ascend = one(state, "center-a", "ResourceFlavor", "ascend")["spec"]
    assert len(ascend["nodeTaints"]) == 2
    assert ascend["tolerations"] == [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]


def test_each_cluster_tells_kueue_to_account_devices_only(small_state: render.DesiredState) -> None:
    config_map = one(small_state, "center-a", "ConfigMap", "kueue-manager-config", "kueue-system")
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert config["kind"] == "Configuration" and config["namespace"] == "kueue-system"
    # The tenant's LimitRange gives every container cpu and memory requests no ClusterQueue covers.
    assert {"cpu", "memory"} <= set(config["resources"]["excludeResourcePrefixes"])
    assert config["integrations"]["frameworks"] == ["batch/job"] and config["manageJobsWithoutQueueName"] is False
    assert one(small_state, "center-a", "Namespace", "kueue-system")


# --- tenants -------------------------------------------------------------------------------------


def test_tenant_gets_namespace_limit_range_and_one_quota_per_device_resource(small_state: render.DesiredState) -> None:
    assert one(small_state, "center-a", "Namespace", "vision")["metadata"]["labels"]["fleetops.io/tenant"] == "vision"
    quotas = {q["metadata"]["name"]: q["spec"]["hard"] for q in find(small_state, "center-a", "ResourceQuota", namespace="vision")}
    assert quotas == {
        "device-nvidia-com-gpu": {"requests.nvidia.com/gpu": "30"},
        "device-huawei-com-ascend910": {"requests.huawei.com/Ascend910": "8"},
        "priority-classes": {"pods": "0"},  # for pods outside the tenant's priority classes (tests/reconcile/test_real_kube.py)
    }
    assert one(small_state, "center-a", "LimitRange", "defaults", "vision")["spec"]["limits"][0]["type"] == "Container"


def test_tenant_namespace_denies_by_default_and_allows_dns(small_state: render.DesiredState) -> None:
    deny = one(small_state, "center-a", "NetworkPolicy", "default-deny", "vision")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    dns = one(small_state, "center-a", "NetworkPolicy", "allow-dns", "vision")["spec"]
    assert dns["policyTypes"] == ["Egress"]
    assert dns["egress"][0]["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


def test_tenant_lives_only_in_its_clusters(small_state: render.DesiredState) -> None:
    assert not find(small_state, "edge-b", "Namespace", "vision")
    assert not find(small_state, "center-a", "Namespace", "factory")


def quota_sums(queue: dict[str, Any], field: str) -> dict[str, int]:
    """resource -> the sum of `field` over every flavor of a ClusterQueue or Cohort."""
    sums: dict[str, int] = {}
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                sums[r["name"]] = sums.get(r["name"], 0) + r[field]
    return sums


def test_cluster_queue_splits_guaranteed_and_burst_over_the_pools(small_state: render.DesiredState) -> None:
    queue = one(small_state, "center-a", "ClusterQueue", "vision")
    cohort = one(small_state, "center-a", "Cohort", "center-a.vision")
    # The tenant's Cohort, in the cluster's, bounds what it borrows beyond its guarantee (burst).
    assert queue["spec"]["cohortName"] == "center-a.vision" and cohort["spec"]["parentName"] == "center-a"
    assert quota_sums(queue, "nominalQuota") == {"nvidia.com/gpu": 20, "huawei.com/Ascend910": 4}
    assert quota_sums(cohort, "borrowingLimit") == {"nvidia.com/gpu": 10, "huawei.com/Ascend910": 4}
    assert quota_sums(cohort, "nominalQuota") == {"nvidia.com/gpu": 0, "huawei.com/Ascend910": 0}
    flavors = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    assert len(flavors) == len(set(flavors)), "Kueue allows a flavor in one resource group only"
    gpu_group = next(g for g in queue["spec"]["resourceGroups"] if "nvidia.com/gpu" in g["coveredResources"])
    assert [f["name"] for f in gpu_group["flavors"]] == ["a100-ts", "h100-mig"]


def per_flavor(queue: dict[str, Any], field: str, resource: str) -> dict[str, int]:
    """flavor -> `field` of `resource` in a ClusterQueue or Cohort."""
    return {f["name"]: r[field] for g in queue["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"] if r["name"] == resource}


def test_a_guarantee_one_pool_has_room_for_is_held_whole_by_it(small_state: render.DesiredState) -> None:
    # center-a: a100-ts 32 units, h100-mig 56; vision guaranteed 20 nvidia.com/gpu. Split 7 + 13 by
    # capacity, a job of 20 borrowed and could be reclaimed although within the guarantee.
    queue = one(small_state, "center-a", "ClusterQueue", "vision")
    assert sorted(per_flavor(queue, "nominalQuota", "nvidia.com/gpu").values()) == [0, 20]
    # Kueue is told to look past a flavor where the job would borrow for the one that holds the guarantee.
    assert queue["spec"]["flavorFungibility"] == {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor", "preference": "PreemptionOverBorrowing"}


def test_a_guarantee_goes_to_a_pool_without_taints_before_a_tainted_one(small_state: render.DesiredState, tmp_path: Path) -> None:
    # center-a: a100-ts (32, tainted dedicated=inference: only jobs tolerating it land there) comes first in
    # the cluster; h100-mig (56) has no taint. vision's 20 went to a100-ts, where its training jobs could
    # not use it; on h100-mig every job of vision can.
    assert per_flavor(one(small_state, "center-a", "ClusterQueue", "vision"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 0, "h100-mig": 20}
    # Where no untainted pool has room left, the tainted one holds it.
    env = small_env()
    env["tenants"].append({"name": "speech", "clusters": ["center-a"], "workloads": ["inference"], "pools": ["h100-mig"],
                           "quota": {"nvidia.com/gpu": {"guaranteed": 50, "burst": 50}}})
    state = render_env(tmp_path, env)
    assert per_flavor(one(state, "center-a", "ClusterQueue", "vision"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 20, "h100-mig": 0}
    # A taint keyed by the pool's own device resource keeps out only pods without the device: the Ascend
    # pool counts as untainted (its flavor tolerates the taint for every pod requesting an NPU).
    ascend = env["clusters"][0]["pools"][2]
    ascend["taints"] = [{"key": "huawei.com/Ascend910", "value": "present", "effect": "NoSchedule"}]
    assert not spec.restricting_taints(spec.Pool.model_validate(ascend))
    assert [t.key for t in spec.restricting_taints(spec.Pool.model_validate(env["clusters"][0]["pools"][0]))] == ["dedicated"]


def test_guarantees_fill_untainted_pools_the_largest_first_whatever_the_order_of_tenants(tmp_path: Path) -> None:
    env = small_env()
    env["tenants"].append({"name": "speech", "clusters": ["center-a"], "workloads": ["inference"],
                           "quota": {"nvidia.com/gpu": {"guaranteed": 24, "burst": 24}}})
    state = render_env(tmp_path, env)
    # speech's 24 first (the larger), then vision's 20: both on h100-mig (56), untainted; a100-ts holds none.
    assert per_flavor(one(state, "center-a", "ClusterQueue", "speech"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 0, "h100-mig": 24}
    assert per_flavor(one(state, "center-a", "Cohort", "center-a"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 32, "h100-mig": 12}
    # The same tenants listed the other way round render the same Kueue objects: speech's 24 went to
    # a100-ts when it came first, to h100-mig when vision did.
    env["tenants"][0], env["tenants"][2] = env["tenants"][2], env["tenants"][0]
    assert kueue_objects(render_env(tmp_path, env)) == kueue_objects(state)


KUEUE_KINDS = {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"}


def kueue_objects(state: render.DesiredState) -> dict[tuple[str, str, str], str]:
    """(cluster, kind, name) -> the rendered Kueue object as canonical JSON."""
    return {(cluster, m["kind"], m["metadata"]["name"]): json.dumps(m, sort_keys=True)
            for cluster, objects in state.clusters.items() for m in objects if m["kind"] in KUEUE_KINDS}


def test_no_order_of_prods_tenants_moves_a_guarantee(tmp_path: Path) -> None:
    """Every permutation of prod's 7 tenants places every guarantee on the same pools, and a few of them,
    written to the file, render byte-identical Kueue objects."""
    import itertools
    import random

    env = spec.load_environment(ROOT / "environments" / "prod.yaml")

    def placed(tenants: list[spec.Tenant]) -> dict[str, Any]:
        moved = env.model_copy(update={"tenants": tenants})
        return {c.name: (spec.guarantee_placement(moved, c).held, spec.guarantee_placement(moved, c).refused) for c in env.clusters}

    first = placed(list(env.tenants))
    assert all(placed(list(order)) == first for order in itertools.permutations(env.tenants))
    data = yaml.safe_load((ROOT / "environments" / "prod.yaml").read_text())
    state = render_env(tmp_path, {**data, "environment": "prod"})
    for seed in range(3):
        shuffled = {**data, "tenants": random.Random(seed).sample(data["tenants"], len(data["tenants"]))}
        assert [t["name"] for t in shuffled["tenants"]] != [t["name"] for t in data["tenants"]]
        assert kueue_objects(render_env(tmp_path, shuffled)) == kueue_objects(state)


def test_a_declared_split_is_held_as_declared(tmp_path: Path) -> None:
    env = small_env()
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed_per_pool"] = {"a100-ts": 8, "h100-mig": 12}
    state = render_env(tmp_path, env)
    assert per_flavor(one(state, "center-a", "ClusterQueue", "vision"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 8, "h100-mig": 12}
    assert per_flavor(one(state, "center-a", "Cohort", "center-a"), "nominalQuota", "nvidia.com/gpu") == {"a100-ts": 24, "h100-mig": 44}


def test_the_cluster_cohort_holds_the_capacity_no_tenant_is_guaranteed(small_state: render.DesiredState) -> None:
    # center-a: a100-ts 2x4 GPUs time-sliced x4 (32) + h100-mig 1x8 GPUs x7 slices (56) = 88 units of
    # nvidia.com/gpu, vision guaranteed 20; ascend 8, vision guaranteed 4.
    cohort = one(small_state, "center-a", "Cohort", "center-a")
    assert "parentName" not in cohort["spec"]
    assert quota_sums(cohort, "nominalQuota") == {"nvidia.com/gpu": 88 - 20, "huawei.com/Ascend910": 8 - 4}


def test_mixed_mig_profiles_share_one_resource_group(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][0]["pools"][1]["sharing"]["mig"] = {"strategy": "mixed", "profiles": {"3g.40gb": 1, "2g.20gb": 2}}
    env["tenants"][0]["quota"] = {"nvidia.com/mig-3g.40gb": {"guaranteed": 4, "burst": 8}, "nvidia.com/mig-2g.20gb": {"guaranteed": 6, "burst": 10}}
    state = render_env(tmp_path, env)
    queue = one(state, "center-a", "ClusterQueue", "vision")
    assert quota_sums(queue, "nominalQuota") == {"nvidia.com/mig-2g.20gb": 6, "nvidia.com/mig-3g.40gb": 4}
    assert quota_sums(one(state, "center-a", "Cohort", "center-a.vision"), "borrowingLimit") == {"nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 4}
    flavors = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    assert flavors == ["h100-mig"]


def test_tenant_local_queue_points_at_its_cluster_queue(small_state: render.DesiredState) -> None:
    local = one(small_state, "center-a", "LocalQueue", "vision-queue", "vision")
    assert local["spec"] == {"clusterQueue": "vision"}
    assert not find(small_state, "center-a", "ClusterQueue", "vision-non-preempting")  # class high preempts


def test_a_non_preempting_class_gets_a_queue_that_never_preempts(tmp_path: Path) -> None:
    env = small_env()
    env["priority_classes"].append({"name": "batch", "value": 10, "workload": "batch", "preemption": "Never"})
    env["tenants"][0]["priority_classes"] = ["high", "batch"]
    state = render_env(tmp_path, env)
    never = one(state, "center-a", "ClusterQueue", "vision-non-preempting")["spec"]
    assert never["preemption"] == {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}
    # It borrows the tenant's guarantee from the preempting queue, which keeps the right to reclaim it.
    assert never["cohortName"] == "center-a.vision" and set(quota_sums({"spec": never}, "nominalQuota").values()) == {0}
    assert one(state, "center-a", "LocalQueue", "vision-non-preempting-queue", "vision")["spec"] == {"clusterQueue": "vision-non-preempting"}
    variables = {v["name"]: v["expression"] for v in one(state, "center-a", "ValidatingAdmissionPolicy", "fleetops-tenant-vision")["spec"]["variables"]}
    assert variables["queue"] == "variables.priorityClass in ['batch'] ? 'vision-non-preempting-queue' : 'vision-queue'"
    # A default class the tenant may not use: its jobs must name one, and it gets no such queue.
    env["priority_classes"][-1]["global_default"] = True
    env["tenants"][0]["priority_classes"] = ["high"]
    state = render_env(tmp_path, env)
    assert not find(state, "center-a", "ClusterQueue", "vision-non-preempting")
    messages = [v.get("message", "") for v in one(state, "center-a", "ValidatingAdmissionPolicy", "fleetops-tenant-vision")["spec"]["validations"]]
    assert "name a priority class: the default, batch, is not allowed for tenant vision (allowed: high)" in messages


def test_bundled_staging_runs_on_kueue() -> None:
    state = render.render(ROOT / "environments" / "staging.yaml", revision="rev-test")
    assert {m["metadata"]["name"] for m in find(state, "stg-center", "ClusterQueue")} == {"vision", "speech", "research", "research-non-preempting"}
    assert not [m for _, m in state.objects() if m["apiVersion"].startswith("scheduling.volcano.sh/")]


# --- priorities and monitoring ----------------------------------------------------------------


def test_priority_classes_in_every_cluster_for_pods_and_kueue(small_state: render.DesiredState) -> None:
    for cluster in ("center-a", "edge-b"):
        pc = one(small_state, cluster, "PriorityClass", "high")
        assert (pc["value"], pc["preemptionPolicy"], "globalDefault" in pc) == (1000, "PreemptLowerPriority", False)
        assert one(small_state, cluster, "WorkloadPriorityClass", "high")["value"] == 1000


def test_monitoring_rules_scrape_and_dashboard(small_state: render.DesiredState) -> None:
    rule = one(small_state, "edge-b", "PrometheusRule", "fleetops-fleet", "monitoring")
    groups = {g["name"]: g["rules"] for g in rule["spec"]["groups"]}
    assert set(groups) == {"fleetops.edge", "fleetops.quota", "fleetops.kueue"}  # Jetson only: no DCGM utilisation
    assert [(r["alert"], r["for"], r["labels"]["pool"]) for r in groups["fleetops.edge"]] == [("FleetopsEdgeNodeOffline", "240s", "jetson")]
    monitor = one(small_state, "center-a", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-monitoring"]}
    dashboards = one(small_state, "center-a", "ConfigMap", "fleetops-dashboards", "monitoring")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboards["data"]["fleetops-pools.json"])["title"] == "fleetops / pools"


# --- the metadata contract ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_object_carries_the_ownership_labels_and_one_field_manager(name: str) -> None:
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="rev-123")
    other = render.render(ROOT / "environments" / f"{name}.yaml", revision="rev-456")
    assert state.object_count > 0
    assert state.clusters == other.clusters  # a new commit that changes nothing changes no object
    for cluster, manifest in state.objects():
        meta = manifest["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "fleetops", meta["name"]
        assert meta["labels"]["fleetops.io/environment"] == name, meta["name"]
        assert meta["labels"]["fleetops.io/cluster"] == cluster, meta["name"]
        assert meta["annotations"]["pulumi.com/patchFieldManager"] == "fleetops", meta["name"]
        # Nothing holds `pulumi up` until pods run (an offline edge site would fail it).
        assert (meta["annotations"].get("pulumi.com/skipAwait") == "true") == (manifest["kind"] in ("DaemonSet", "Deployment", "Service"))


def test_tenants_get_an_admission_policy_and_a_priority_class_quota(small_state: render.DesiredState) -> None:
    policy = one(small_state, "center-a", "ValidatingAdmissionPolicy", "fleetops-tenant-vision")
    binding = one(small_state, "center-a", "ValidatingAdmissionPolicyBinding", "fleetops-tenant-vision")
    assert binding["spec"]["policyName"] == "fleetops-tenant-vision" and binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "vision"}}
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"] + policy["spec"]["variables"])
    assert "in ['high']" in expressions and "'vision-queue'" in expressions
    quota = one(small_state, "center-a", "ResourceQuota", "priority-classes", "vision")
    assert quota["spec"] == {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}]}}
    # A tenant that declares no priority classes is held to its queue only.
    factory = one(small_state, "edge-b", "ValidatingAdmissionPolicy", "fleetops-tenant-factory")
    assert len(factory["spec"]["validations"]) == 1 and not find(small_state, "edge-b", "ResourceQuota", "priority-classes")


# --- spot pools ----------------------------------------------------------------------------------


def flavor_quota(queue: dict[str, Any], flavor: str, field: str) -> int | None:
    """`field` of nvidia.com/gpu in one flavor of a ClusterQueue or Cohort; None when it lists no such flavor."""
    found = [r[field] for g in queue["spec"]["resourceGroups"] for f in g["flavors"] if f["name"] == flavor
             for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
    return found[0] if found else None


def test_a_spot_pool_is_tainted_holds_no_guarantee_and_opens_to_the_tenants_naming_it(tmp_path: Path) -> None:
    # tests/helpers.spot_env: a100-spot (2 x 8 GPUs, spot) named by vision; factory-like tenants naming no pools.
    env = spot_env()
    env["tenants"].append({"name": "batch", "clusters": ["center-a"], "workloads": ["batch"], "priority_classes": ["low"],
                           "quota": {"nvidia.com/gpu": {"guaranteed": 0, "burst": 8}}})
    state = render_env(tmp_path, env)
    spot = {"key": "fleetops.io/spot", "value": "true", "effect": "NoSchedule"}
    # Kueue admits there only pods that tolerate the taint: the flavor lends it no toleration.
    assert one(state, "center-a", "ResourceFlavor", "a100-spot")["spec"] == {"nodeLabels": {"fleetops.io/pool": "a100-spot"}, "nodeTaints": [spot]}
    # The device plugin still runs on its nodes.
    assert {"key": spot["key"], "operator": "Exists", "effect": "NoSchedule"} in pod_of(state, "center-a", "nvidia-device-plugin-a100-spot")["spec"]["tolerations"]
    # vision's guarantee of 20 stays on the other pools; it may borrow the spot pool, which the cluster's Cohort holds whole.
    queue = one(state, "center-a", "ClusterQueue", "vision")
    assert flavor_quota(queue, "a100-spot", "nominalQuota") == 0 and quota_sums(queue, "nominalQuota")["nvidia.com/gpu"] == 20
    assert flavor_quota(one(state, "center-a", "Cohort", "center-a.vision"), "a100-spot", "borrowingLimit") > 0
    assert flavor_quota(one(state, "center-a", "Cohort", "center-a"), "a100-spot", "nominalQuota") == 16
    # A tenant naming no pools gets every pool but the spot one, and no spot rule in its admission policy.
    assert flavor_quota(one(state, "center-a", "ClusterQueue", "batch"), "a100-spot", "nominalQuota") is None
    assert flavor_quota(one(state, "center-a", "ClusterQueue", "batch"), "a100-ts", "nominalQuota") == 0
    rules = {name: " ".join(v.get("messageExpression", "") for v in one(state, "center-a", "ValidatingAdmissionPolicy", f"fleetops-tenant-{name}")["spec"]["validations"])
             for name in ("vision", "batch")}
    assert "only work of low may tolerate the taint fleetops.io/spot of the spot pools of tenant vision (a100-spot)" in rules["vision"]
    assert "fleetops.io/spot" not in rules["batch"]


def test_a_tenant_s_admission_policy_lets_the_classes_it_accepts_preemption_for_tolerate_the_spot_taint(tmp_path: Path) -> None:
    # vision accepts preemption for its class high on its spot pool; speech, on the same pool with the
    # same classes, does not: only its preemptible class low may tolerate the spot taint there.
    env = spot_env()
    env["tenants"][0]["preemptible_classes"] = ["high"]
    env["tenants"].append({"name": "speech", "clusters": ["center-a"], "workloads": ["inference", "batch"], "priority_classes": ["high", "low"],
                           "pools": ["a100-ts", "a100-spot"], "quota": {"nvidia.com/gpu": {"guaranteed": 0, "burst": 8}}})
    state = render_env(tmp_path, env)
    spot = {name: next(v for v in one(state, "center-a", "ValidatingAdmissionPolicy", f"fleetops-tenant-{name}")["spec"]["validations"]
                        if "fleetops.io/spot" in v.get("messageExpression", "")) for name in ("vision", "speech")}
    assert spot["vision"]["expression"].startswith("variables.priorityClass in ['high', 'low'] || ")
    assert spot["speech"]["expression"].startswith("variables.priorityClass in ['low'] || ")
    assert "only work of high, low may tolerate the taint fleetops.io/spot of the spot pools of tenant vision (a100-spot)" in spot["vision"]["messageExpression"]
