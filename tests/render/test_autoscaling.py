"""Inference autoscaling as declared in `services:`: refused where no autoscaler could honour it, rendered
as the HorizontalPodAutoscaler and prometheus-adapter rules a platform team runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetops import grants, spec
from fleetops.errors import SpecError
from modules.autoscaling import adapter_config
from tests.command import run
from tests.helpers import find, one, render_env, small_env, write_env
from tests.output.test_output import conforms
from tests.plan.test_plan import commit, edit, make_repo, plan, plan_json

SERVICE: dict[str, Any] = {
    "name": "asr",
    "tenant": "vision",
    "cluster": "center-a",
    "pools": ["a100-ts"],
    "devices": {"resource": "nvidia.com/gpu", "count": 1},
    "replicas": {"min": 2, "max": 12},
    "server": "vllm",
    "targets": {"gpu_utilisation_percent": 70, "requests_waiting_per_replica": 4},
    "scale_down_stabilisation_seconds": 240,
}


def with_service(**changes: Any) -> dict[str, Any]:
    env = small_env()
    env["services"] = [{**SERVICE, **changes}]
    return env


def test_each_service_is_rendered_as_an_autoscaler_of_its_deployment_in_the_tenants_namespace(tmp_path: Path) -> None:
    state = render_env(tmp_path, with_service())
    hpa = one(state, "center-a", "HorizontalPodAutoscaler", "asr", "vision")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "asr"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 12)
    assert hpa["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 240}}
    assert [(m["type"], m["pods"]["metric"]["name"], m["pods"]["target"]) for m in hpa["spec"]["metrics"]] == [
        ("Pods", "gpu_utilisation_percent", {"type": "AverageValue", "averageValue": "70"}),
        ("Pods", "vllm_requests_waiting", {"type": "AverageValue", "averageValue": "4"}),
    ]
    assert find(state, "edge-b", "HorizontalPodAutoscaler") == []  # only the service's own cluster


def test_the_adapter_serves_every_metric_an_autoscaler_asks_for_from_its_prometheus_series(tmp_path: Path) -> None:
    env = with_service()
    env["services"].append({**SERVICE, "name": "tts", "server": "triton"})
    state = render_env(tmp_path, env)
    config_map = one(state, "center-a", "ConfigMap", "prometheus-adapter", "monitoring")
    rules = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    assert rules == adapter_config(spec.load_environment(tmp_path / "test.yaml"))["rules"]
    served = {rule["name"]["as"]: rule["seriesQuery"] for rule in rules}
    asked = {name: [m["pods"]["metric"]["name"] for m in one(state, "center-a", "HorizontalPodAutoscaler", name)["spec"]["metrics"]]
             for name in ("asr", "tts")}
    assert asked == {"asr": ["gpu_utilisation_percent", "vllm_requests_waiting"], "tts": ["gpu_utilisation_percent", "triton_requests_pending"]}
    assert set(served) == {name for names in asked.values() for name in names}
    assert "DCGM_FI_DEV_GPU_UTIL" in served["gpu_utilisation_percent"]
    assert "nv_inference_pending_request_count" in served["triton_requests_pending"]
    assert "vllm:num_requests_waiting" in served["vllm_requests_waiting"]
    for rule in rules:  # per pod in its namespace: what a Pods metric of the custom metrics API is read by
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"] and "by (<<.GroupBy>>)" in rule["metricsQuery"]


def test_the_adapter_is_given_no_rule_for_a_series_no_autoscaler_reads(tmp_path: Path) -> None:
    env = spec.load_environment(write_env(tmp_path, with_service(server=None, targets={"gpu_utilisation_percent": 60})))
    assert [rule["name"]["as"] for rule in adapter_config(env)["rules"]] == ["gpu_utilisation_percent"]


def test_a_fleet_without_services_renders_no_autoscaling(tmp_path: Path) -> None:
    state = render_env(tmp_path, small_env())
    assert find(state, "center-a", "HorizontalPodAutoscaler") == []
    assert find(state, "center-a", "ConfigMap", "prometheus-adapter") == []


def test_a_gpu_target_alone_asks_for_no_queue_metric(tmp_path: Path) -> None:
    state = render_env(tmp_path, with_service(server=None, targets={"gpu_utilisation_percent": 60}))
    metrics = one(state, "center-a", "HorizontalPodAutoscaler", "asr")["spec"]["metrics"]
    assert [m["pods"]["metric"]["name"] for m in metrics] == ["gpu_utilisation_percent"]


REFUSED = {
    "unknown tenant": ({"tenant": "nobody"}, "tenant", "unknown tenant 'nobody'"),
    "tenant without inference": (None, "tenant", "tenant factory does not run inference"),
    "cluster not the tenant's": ({"cluster": "edge-b"}, "cluster", "'edge-b' is not a cluster of tenant vision"),
    "pool not open": ({"pools": ["jetson"]}, "pools[0]", "jetson is no pool of center-a open to tenant vision"),
    "pool without the device": ({"pools": ["ascend"]}, "pools[0]", "ascend offers no nvidia.com/gpu"),
    "no quota for the device": ({"devices": {"resource": "nvidia.com/mig-1g.10gb", "count": 1}, "pools": ["a100-ts"]},
                                "devices.resource", "tenant vision has no quota for nvidia.com/mig-1g.10gb"),
    "min above max": ({"replicas": {"min": 5, "max": 3}}, "replicas.min", "must be <= max (3), got 5"),
    "no target": ({"targets": {}}, "targets", "declare gpu_utilisation_percent or requests_waiting_per_replica"),
    "queue without server": ({"server": None}, "server", "requests_waiting_per_replica needs the inference server"),
    "unknown server": ({"server": "tgi"}, "server", "must be 'vllm' or 'triton'"),
    "zero replicas": ({"replicas": {"min": 0, "max": 3}}, "replicas.min", "must be >= 1"),
    "long stabilisation": ({"scale_down_stabilisation_seconds": 7200}, "scale_down_stabilisation_seconds", "must be <= 3600"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_service_no_autoscaler_could_honour_is_refused_at_its_line(case: str, tmp_path: Path) -> None:
    changes, field, message = REFUSED[case]
    env = with_service(**(changes or {}))
    if changes is None:  # factory runs inference only on its edge group; make it a training tenant of center-a
        env["tenants"][1].update(clusters=["center-a"], workloads=["training"], edge_groups=[])
        env["services"][0].update(tenant="factory", targets={"gpu_utilisation_percent": 50})
        env["tenants"][1]["quota"] = {"nvidia.com/gpu": {"guaranteed": 0, "burst": 3}}
    path = write_env(tmp_path, env)
    with pytest.raises(SpecError) as caught:
        spec.load_environment(path)
    line = next(p for p in caught.value.lines if f"services[asr].{field}" in p or f"services[0].{field}" in p)
    assert message in line
    written = path.read_text().splitlines()
    number = int(line.split(":")[1])
    # The line of the field, or of the list item, that is wrong.
    assert written[number - 1].strip().startswith((field.split(".")[-1] + ":", "- ")), (line, written[number - 1])
    assert field.endswith("]") == written[number - 1].strip().startswith("- ")


def test_validate_names_the_file_and_line_and_exits_2_without_a_traceback(tmp_path: Path) -> None:
    write_env(tmp_path, with_service(replicas={"min": 5, "max": 3}))
    result = run("validate", "--environments", tmp_path)
    assert result.returncode == 2
    assert "test.yaml:" in result.stderr + result.stdout and "services[asr].replicas.min: must be <= max (3), got 5" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_the_bundled_environments_declare_a_service_each() -> None:
    for name in ("dev", "prod"):
        env = spec.load_environment(Path(__file__).resolve().parents[2] / "environments" / f"{name}.yaml")
        assert env.services, name


def test_reachable_burst_counts_only_the_services_own_pools(tmp_path: Path) -> None:
    """What the policies judge a service's max against is its tenant's grant on the pools it names, not on all of them."""
    env = with_service(pools=["a100-ts"])
    state = render_env(tmp_path, env)
    granted = grants.facts(state.clusters)
    flavors = granted["center-a"]["vision"]["nvidia.com/gpu"]["flavors"]
    assert set(flavors) == {"a100-ts", "h100-mig"}  # vision may take nvidia.com/gpu on both
    loaded = spec.load_environment(tmp_path / "test.yaml")
    (row,) = grants.services(loaded, granted)
    assert row["reachable"] == flavors["a100-ts"]["reachable"] < granted["center-a"]["vision"]["nvidia.com/gpu"]["reachable"]
    # A time-sliced A100 unit is a quarter of the device: 12 replicas x 1 unit x 1.4/4 per hour x 730 hours.
    assert (row["at_max"], row["monthly_at_max"]) == (12, round(12 * 1.4 / 4 * 730, 2))


def test_plan_denies_a_max_beyond_burst_and_spend_beyond_budget_at_the_line_with_a_fix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    edit(repo, "replicas: {min: 2, max: 12}", "replicas: {min: 2, max: 100000}")
    commit(repo, "speech/asr: scale far")
    code, result = plan_json(repo, "--approvals", "2")
    conforms(result, "plan")  # the published schema holds each service's row
    assert code == 1 and result["verdict"] == "denied"
    line = next(i for i, t in enumerate((repo / "environments" / "prod.yaml").read_text().splitlines(), 1) if "max: 100000" in t)
    by_rule = {d["rule"]: d for d in result["decisions"] if d["rule"].startswith("autoscaling.")}
    assert set(by_rule) == {"autoscaling.max_beyond_burst", "autoscaling.spend_over_budget"}
    (row,) = result["services"]
    reach = row["reachable"]
    burst = by_rule["autoscaling.max_beyond_burst"]
    assert burst["location"]["file"] == "environments/prod.yaml" and burst["location"]["line"] == line
    assert burst["fix"] == f"lower speech/asr's replicas.max to {reach}, or raise speech's burst on center-bj"
    spend = by_rule["autoscaling.spend_over_budget"]
    assert spend["location"]["line"] == line
    fits = spend["figures"]["fits"]
    assert 12 <= fits < 100000 and spend["fix"] == f"lower speech/asr's replicas.max to {fits}, or raise budget.monthly in its own reviewed PR"
    # The fix holds: at the max it names, both sides of the budget are kept (the fleet's cost + the spend at that max).
    assert (spend["figures"]["spend"] - row["monthly_at_max"]) + fits * row["replica_monthly"] <= spend["figures"]["budget"]
    assert (spend["figures"]["spend"] - row["monthly_at_max"]) + (fits + 1) * row["replica_monthly"] > spend["figures"]["budget"]
    assert row["change"] == "changed" and row["text"] == (
        f"speech/asr: 2–100000 replicas × 1 nvidia.com/gpu; at max 100,000 of a reachable burst of {reach:,}; "
        f"{row['monthly_at_max_delta']:+,.0f} USD/mo at max")
    markdown = plan(repo, "--env", "prod", "--approvals", "2").stdout
    assert "**Inference autoscaling**" in markdown and row["text"] in markdown
    assert f"environments/prod.yaml:{line}" in markdown


def test_plan_says_an_added_service_in_fleet_terms(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    edit(repo, "    scale_down_stabilisation_seconds: 300\n",
         "    scale_down_stabilisation_seconds: 300\n  - name: tts\n    tenant: speech\n    cluster: center-bj\n    pools: [a100-infer]\n"
         "    devices: {resource: nvidia.com/gpu, count: 2}\n    replicas: {min: 1, max: 4}\n    targets: {gpu_utilisation_percent: 60}\n")
    commit(repo, "speech/tts: serve")
    code, result = plan_json(repo, "--approvals", "2")
    assert code == 0, [d["msg"] for d in result["decisions"] if d["status"] == "deny"]
    rows = {r["name"]: r for r in result["services"]}
    assert rows["asr"]["change"] == "unchanged" and rows["tts"]["change"] == "added"
    # 4 replicas x 2 quarter-A100 units = 2 A100s x 1.4 per hour x 730 hours.
    assert rows["tts"]["monthly_at_max_delta"] == rows["tts"]["monthly_at_max"] == 2044.0
    assert rows["tts"]["text"] == f"speech/tts: 1–4 replicas × 2 nvidia.com/gpu; at max 8 of a reachable burst of {rows['tts']['reachable']:,}; +2,044 USD/mo at max"
    assert any(o["kind"] == "HorizontalPodAutoscaler" and o["name"] == "tts" for o in result["objects"]["added"])


def test_gpu_series_reach_the_adapter_labelled_with_the_pod_using_the_gpu(tmp_path: Path) -> None:
    """The DCGM exporter's own namespace and pod would otherwise replace the workload's on its series
    (Prometheus renames the scraped ones exported_*), and no service's pod would have a GPU utilisation."""
    state = render_env(tmp_path, with_service())
    monitor = one(state, "center-a", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert [e.get("honorLabels") for e in monitor["spec"]["endpoints"]] == [True]
