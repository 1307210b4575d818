"""Each component, through the real stack program under the Pulumi mocks: the objects and the fields that matter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetops import render
from tests.helpers import ROOT, find, one, render_env, small_env


def plugin_config(state: render.DesiredState, cluster: str, name: str) -> dict[str, Any]:
    return yaml.safe_load(one(state, cluster, "ConfigMap", name, "kube-system")["data"]["config.yaml"])


# --- device plugins -------------------------------------------------------------------------


def test_time_slicing_pool_gets_nvidia_config_with_replicas(small_state: render.DesiredState) -> None:
    config = plugin_config(small_state, "center-a", "nvidia-device-plugin-a100-ts")
    assert config["version"] == "v1"
    assert config["flags"]["migStrategy"] == "none"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_mig_pool_gets_mig_strategy_and_mig_parted_layout(small_state: render.DesiredState) -> None:
    config = plugin_config(small_state, "center-a", "nvidia-device-plugin-h100-mig")
    assert config["flags"]["migStrategy"] == "single"
    assert "sharing" not in config
    layout = plugin_config(small_state, "center-a", "mig-parted-h100-mig")
    assert layout["mig-configs"]["h100-mig"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]


def test_mixed_mig_strategy_reaches_the_plugin(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][0]["pools"][1]["sharing"]["mig"] = {"strategy": "mixed", "profiles": {"3g.40gb": 1, "2g.20gb": 2}}
    env["tenants"] = []
    state = render_env(tmp_path, env)
    assert plugin_config(state, "center-a", "nvidia-device-plugin-h100-mig")["flags"]["migStrategy"] == "mixed"
    layout = plugin_config(state, "center-a", "mig-parted-h100-mig")
    assert layout["mig-configs"]["h100-mig"][0]["mig-devices"] == {"2g.20gb": 2, "3g.40gb": 1}


def test_device_plugin_daemonset_is_pinned_to_its_pool_and_tolerates_its_taints(small_state: render.DesiredState) -> None:
    ds = one(small_state, "center-a", "DaemonSet", "nvidia-device-plugin-a100-ts", "kube-system")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"fleetops.io/pool": "a100-ts"}
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"name": "config", "configMap": {"name": "nvidia-device-plugin-a100-ts"}} in pod["volumes"]
    assert pod["containers"][0]["env"] == [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]


def test_every_pool_has_its_own_plugin_and_non_nvidia_pools_no_nvidia_config(small_state: render.DesiredState) -> None:
    names = {m["metadata"]["name"] for m in find(small_state, "center-a", "DaemonSet")}
    assert names == {"nvidia-device-plugin-a100-ts", "nvidia-device-plugin-h100-mig", "ascend-device-plugin-ascend"}
    ascend = one(small_state, "center-a", "DaemonSet", "ascend-device-plugin-ascend", "kube-system")
    assert ascend["spec"]["template"]["spec"]["nodeSelector"] == {"fleetops.io/pool": "ascend"}
    assert "env" not in ascend["spec"]["template"]["spec"]["containers"][0]
    assert not find(small_state, "center-a", "ConfigMap", "nvidia-device-plugin-ascend")


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
    assert group["metadata"]["annotations"]["fleetops.io/offline-grace-seconds"] == "240"


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
    assert not find(state, "edge-b", "NodeGroup")


def test_pools_become_kueue_flavors_with_node_labels_and_taints(small_state: render.DesiredState) -> None:
    flavor = one(small_state, "center-a", "ResourceFlavor", "a100-ts")
    assert flavor["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert flavor["spec"]["nodeLabels"] == {"fleetops.io/pool": "a100-ts"}
    assert flavor["spec"]["nodeTaints"] == [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    assert one(small_state, "edge-b", "ResourceFlavor", "jetson")["spec"]["nodeLabels"] == {"fleetops.io/edge-group": "jetson"}


# --- tenants -------------------------------------------------------------------------------------


def test_tenant_gets_namespace_limit_range_and_one_quota_per_device_resource(small_state: render.DesiredState) -> None:
    assert one(small_state, "center-a", "Namespace", "vision")["metadata"]["labels"]["fleetops.io/tenant"] == "vision"
    quotas = {q["metadata"]["name"]: q["spec"]["hard"] for q in find(small_state, "center-a", "ResourceQuota", namespace="vision")}
    assert quotas == {
        "device-nvidia-com-gpu": {"requests.nvidia.com/gpu": "30"},
        "device-huawei-com-ascend910": {"requests.huawei.com/Ascend910": "8"},
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


def cluster_queue_sums(queue: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """resource -> (sum of nominalQuota, sum of nominalQuota + borrowingLimit) over every flavor."""
    sums: dict[str, tuple[int, int]] = {}
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                nominal, burst = sums.get(r["name"], (0, 0))
                sums[r["name"]] = (nominal + r["nominalQuota"], burst + r["nominalQuota"] + r["borrowingLimit"])
    return sums


def test_cluster_queue_splits_guaranteed_and_burst_over_the_pools(small_state: render.DesiredState) -> None:
    queue = one(small_state, "center-a", "ClusterQueue", "vision")
    assert queue["spec"]["cohortName"] == "center-a"
    assert cluster_queue_sums(queue) == {"nvidia.com/gpu": (20, 30), "huawei.com/Ascend910": (4, 8)}
    flavors = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    assert len(flavors) == len(set(flavors)), "Kueue allows a flavor in one resource group only"
    gpu_group = next(g for g in queue["spec"]["resourceGroups"] if "nvidia.com/gpu" in g["coveredResources"])
    assert [f["name"] for f in gpu_group["flavors"]] == ["a100-ts", "h100-mig"]


def test_mixed_mig_profiles_share_one_resource_group(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][0]["pools"][1]["sharing"]["mig"] = {"strategy": "mixed", "profiles": {"3g.40gb": 1, "2g.20gb": 2}}
    env["tenants"][0]["quota"] = {"nvidia.com/mig-3g.40gb": {"guaranteed": 4, "burst": 8}, "nvidia.com/mig-2g.20gb": {"guaranteed": 6, "burst": 10}}
    queue = one(render_env(tmp_path, env), "center-a", "ClusterQueue", "vision")
    assert cluster_queue_sums(queue) == {"nvidia.com/mig-2g.20gb": (6, 10), "nvidia.com/mig-3g.40gb": (4, 8)}
    flavors = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    assert flavors == ["h100-mig"]


def test_tenant_local_queue_points_at_its_cluster_queue(small_state: render.DesiredState) -> None:
    local = one(small_state, "center-a", "LocalQueue", "vision-queue", "vision")
    assert local["spec"] == {"clusterQueue": "vision"}


def test_volcano_backend_gives_queues_instead_of_kueue_objects(tmp_path: Path) -> None:
    env = small_env()
    env["scheduler"] = {"backend": "volcano"}
    state = render_env(tmp_path, env)
    queue = one(state, "center-a", "Queue", "vision")
    assert queue["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert queue["spec"]["guarantee"] == {"resource": {"huawei.com/Ascend910": "4", "nvidia.com/gpu": "20"}}
    assert queue["spec"]["capability"] == {"huawei.com/Ascend910": "8", "nvidia.com/gpu": "30"}
    kinds = {m["kind"] for _, m in state.objects()}
    assert not kinds & {"ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass"}


def test_bundled_staging_runs_on_volcano() -> None:
    state = render.render(ROOT / "environments" / "staging.yaml", revision="rev-test")
    assert {m["metadata"]["name"] for m in find(state, "stg-center", "Queue")} == {"vision", "speech", "research"}
    assert not [m for _, m in state.objects() if m["kind"] == "ClusterQueue"]


# --- priorities and monitoring ----------------------------------------------------------------


def test_priority_classes_in_every_cluster_for_pods_and_kueue(small_state: render.DesiredState) -> None:
    for cluster in ("center-a", "edge-b"):
        pc = one(small_state, cluster, "PriorityClass", "high")
        assert (pc["value"], pc["preemptionPolicy"], "globalDefault" in pc) == (1000, "PreemptLowerPriority", False)
        assert one(small_state, cluster, "WorkloadPriorityClass", "high")["value"] == 1000


def test_monitoring_rules_scrape_and_dashboard(small_state: render.DesiredState) -> None:
    rule = one(small_state, "edge-b", "PrometheusRule", "fleetops-fleet", "monitoring")
    groups = {g["name"]: g["rules"] for g in rule["spec"]["groups"]}
    assert set(groups) == {"fleetops.gpu", "fleetops.edge", "fleetops.quota"}
    assert [(r["alert"], r["for"]) for r in groups["fleetops.edge"]] == [("FleetEdgeNodeOffline-jetson", "240s")]
    monitor = one(small_state, "center-a", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-monitoring"]}
    dashboard = one(small_state, "center-a", "ConfigMap", "fleetops-dashboard", "monitoring")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["fleetops.json"])["title"] == "fleetops / center-a"


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
