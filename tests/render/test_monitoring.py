"""Monitoring as rendered: scrapes that label series the way the alerts and dashboards read them, objects the
environment's Prometheus and Grafana pick up, and every alert run by the real promtool on synthetic series."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, spec
from modules import dashboards
from tests import promtool
from tests.helpers import find, one, render_env, small_env

ROOT = Path(__file__).resolve().parents[2]
SELECTOR = {"release": "kps"}
MONITORS = ("PrometheusRule", "ServiceMonitor", "PodMonitor")


def monitored_env() -> dict[str, Any]:
    env = small_env()
    env["monitoring"] = {
        "prometheus_selector": SELECTOR,
        "grafana": {"label": "grafana_dashboard", "label_value": "yes", "folder_annotation": "k8s-sidecar-target-directory", "folder": "/tmp/dashboards/fleet"},
        "gpu_utilisation_low_percent": 30,
        "gpu_utilisation_for_minutes": 30,
        "quota_exhaustion_percent": 90,
        "kueue_pending_minutes": 30,
    }
    return env


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> render.DesiredState:
    return render_env(tmp_path_factory.mktemp("monitored"), monitored_env())


@pytest.fixture(scope="module")
def bundled() -> dict[str, render.DesiredState]:
    """Every environment the repository ships (environments/*.yaml), by name."""
    return {path.stem: render.render(path, revision="rev-test") for path in sorted((ROOT / "environments").glob("*.yaml"))}


def fleet_rules(state: render.DesiredState) -> dict[str, list[dict[str, Any]]]:
    """The rule groups of fleetops-fleet, by cluster."""
    return {c: m["spec"]["groups"] for c, m in state.objects() if m["kind"] == "PrometheusRule" and m["metadata"]["name"] == "fleetops-fleet"}


# --- what is scraped, and how Prometheus and Grafana pick it up ------------------------------------


def test_dcgm_is_scraped_on_data_center_gpu_pools_only_and_jetson_by_its_own_exporter(state: render.DesiredState) -> None:
    dcgm = one(state, "center-a", "ServiceMonitor", "dcgm-exporter", "monitoring")
    keep = next(r for r in dcgm["spec"]["endpoints"][0]["relabelings"] if r["action"] == "keep")
    assert keep == {"sourceLabels": ["pool"], "regex": "a100-ts|h100-mig", "action": "keep"}  # not the Ascend pool
    assert not find(state, "edge-b", "ServiceMonitor", "dcgm-exporter")  # DCGM does not run on Jetson
    jetson = one(state, "edge-b", "PodMonitor", "jetson-exporter", "monitoring")
    assert next(r for r in jetson["spec"]["podMetricsEndpoints"][0]["relabelings"] if r["action"] == "keep")["regex"] == "jetson"
    npu = one(state, "center-a", "PodMonitor", "npu-exporter", "monitoring")
    assert npu["spec"]["namespaceSelector"] == {"matchNames": ["npu-exporter"]}
    assert npu["spec"]["podMetricsEndpoints"][0]["portNumber"] == 8082


def test_device_series_carry_cluster_pool_and_tenant(state: render.DesiredState) -> None:
    endpoint = one(state, "center-a", "ServiceMonitor", "dcgm-exporter")["spec"]["endpoints"][0]
    assert one(state, "center-a", "ServiceMonitor", "dcgm-exporter")["spec"]["attachMetadata"] == {"node": True}
    relabel = {r.get("targetLabel"): r for r in endpoint["relabelings"]}
    assert relabel["pool"]["sourceLabels"] == ["__meta_kubernetes_node_label_fleetops_io_pool", "__meta_kubernetes_node_label_fleetops_io_edge_group"]
    assert relabel["cluster"]["replacement"] == "center-a"
    # The exporter's pod mapping says which namespace holds the GPU; a tenant's namespace is its name.
    assert endpoint["honorLabels"] is True
    assert endpoint["metricRelabelings"] == [
        {"sourceLabels": ["namespace"], "regex": "(vision)", "targetLabel": "tenant", "replacement": "$1", "action": "replace"}
    ]


def test_every_rule_and_monitor_carries_the_prometheus_selector(state: render.DesiredState, bundled: dict[str, render.DesiredState]) -> None:
    rendered = [m for _, m in state.objects() if m["kind"] in MONITORS]
    assert {m["kind"] for m in rendered} == set(MONITORS)
    assert all(m["metadata"]["labels"].items() >= SELECTOR.items() for m in rendered), [m["metadata"]["name"] for m in rendered]
    for name, bundle in bundled.items():
        objects = [m for _, m in bundle.objects() if m["kind"] in MONITORS]
        assert objects and all(m["metadata"]["labels"].get("release") == "kube-prometheus-stack" for m in objects), name



# --- what an alert tells the one it pages ---------------------------------------------------------

RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_PARTS = ("**What fired.**", "**Check first.**", "**What to do.**")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """docs/runbooks.md's second-level sections, by their GitHub anchor."""
    sections = re.split(r"^## ", RUNBOOKS.read_text(), flags=re.MULTILINE)[1:]
    return {github_anchor(s.split("\n", 1)[0]): s for s in sections}


def rendered_alerts(states: list[render.DesiredState]) -> list[dict[str, Any]]:
    """Every alerting rule of every PrometheusRule rendered (fleet monitoring and metering alike)."""
    return [rule for s in states for _, m in s.objects() if m["kind"] == "PrometheusRule"
            for group in m["spec"]["groups"] for rule in group["rules"] if "alert" in rule]


def test_every_alert_says_what_it_means_and_links_its_runbook(state: render.DesiredState, bundled: dict[str, render.DesiredState]) -> None:
    # Alerts carried a summary only: whoever was paged had no runbook and no word on what it meant for the fleet.
    alerts = rendered_alerts([state, *bundled.values()])
    assert {"FleetopsGPUUtilisationLow", "FleetopsEdgeNodeOffline", "FleetopsBudgetMonthToDate", "FleetopsPrepaidBalanceLow"} <= {a["alert"] for a in alerts}
    # One prefix, as kube-prometheus-stack's alerts share theirs: one Alertmanager route takes every fleetops alert.
    assert [a["alert"] for a in alerts if not a["alert"].startswith("Fleetops")] == []
    for alert in alerts:
        notes = alert.get("annotations", {})
        assert {"summary", "description", "runbook_url"} <= set(notes), (alert["alert"], notes)
        assert notes["description"].strip() and notes["description"] != notes["summary"], (alert["alert"], notes["description"])
    sections = runbook_sections()
    for alert in alerts:
        notes = alert["annotations"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/runbooks.md" and (ROOT / page).is_file(), notes["runbook_url"]
        assert anchor in sections, f"{alert['alert']}: no section #{anchor} in docs/runbooks.md"
        assert all(part in sections[anchor] for part in RUNBOOK_PARTS), f"docs/runbooks.md#{anchor} lacks one of {RUNBOOK_PARTS}"



def test_an_edge_alert_says_what_its_groups_disconnect_does_with_the_pods(bundled: dict[str, render.DesiredState]) -> None:
    said = set()
    for name, state in bundled.items():
        env = spec.load_environment(ROOT / "environments" / f"{name}.yaml")
        groups = {(c.name, g.name): g.disconnect for c in env.clusters for g in c.edge_groups}
        for alert in rendered_alerts([state]):
            if alert["alert"] == "FleetopsEdgeNodeOffline":
                disconnect = groups[alert["labels"]["cluster"], alert["labels"]["pool"]]
                description = alert["annotations"]["description"]
                assert f"(disconnect: {disconnect.action})" in description, description
                assert disconnect.action == "stay" or f"evicted {disconnect.after_seconds}s after the node went unreachable" in description
                said.add(disconnect.action)
    assert said == {"stay", "move"}  # the bundled environments have both

def test_dashboards_reach_the_grafana_sidecar_with_datasource_and_variables(state: render.DesiredState) -> None:
    configmap = one(state, "center-a", "ConfigMap", "fleetops-dashboards", "monitoring")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "yes"
    assert configmap["metadata"]["annotations"]["k8s-sidecar-target-directory"] == "/tmp/dashboards/fleet"
    boards = {key: json.loads(text) for key, text in configmap["data"].items()}
    assert set(boards) == {"fleetops-pools.json", "fleetops-tenants.json"}
    for key, scope in (("fleetops-pools.json", "pool"), ("fleetops-tenants.json", "tenant")):
        variables = {v["name"]: v for v in boards[key]["templating"]["list"]}
        assert set(variables) == {"datasource", "cluster", scope}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for panel in boards[key]["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"][0]["refId"] == "A"  # Grafana keys each query and its result by it
            assert f"{scope}=~\"${scope}\"" in panel["targets"][0]["expr"] or "namespace=~\"$tenant\"" in panel["targets"][0]["expr"], panel["title"]


def strict(tmp_path: Path, boards: dict[str, Any]) -> tuple[int, list[str]]:
    """grafana-foundation-sdk's Go types decoding each dashboard strictly (`make tools`): exit code, and its lines without the folder."""
    import subprocess

    from tests.servers import tool

    for name, board in boards.items():
        (tmp_path / name).write_text(json.dumps(board))
    done = subprocess.run([tool("dashboard-strict"), *sorted(boards)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.splitlines()


@pytest.mark.real
def test_every_dashboard_decodes_strictly_into_the_foundation_sdk_s_go_types(tmp_path: Path) -> None:
    """The dashboards the Python builders write, read by the SDK's Go types: no field they lack, no value of a wrong type,
    in the dashboard, its variables, its panels' options and field config, and their Prometheus queries."""
    boards = {name: json.loads(text) for name, text in dashboards.configmap_data().items()}
    assert strict(tmp_path, boards) == (0, [])


@pytest.mark.real
def test_a_field_grafana_does_not_have_is_refused_at_its_path(tmp_path: Path) -> None:
    board = json.loads(dashboards.configmap_data()["fleetops-pools.json"])
    board["panels"][0]["gridPoss"] = board["panels"][0]["gridPos"]  # a typo Grafana would drop without a word
    board["panels"][1]["targets"][0]["legendFormatt"] = "{{pool}}"
    board["refresh"] = 60  # a string in Grafana's schema
    code, lines = strict(tmp_path, {"pools.json": board})
    assert code == 1
    assert sorted(lines) == sorted(["pools.json: panels[0].Panel: unexpected field 'gridPoss'",
                                    "pools.json: panels[1].targets[0].Dataquery: unexpected field 'legendFormatt'",
                                    "pools.json: refresh: json: cannot unmarshal number into Go value of type string"]), lines


def test_the_shipped_dashboards_are_those_the_sdk_builds() -> None:
    # render reads them from modules/dashboards.json while it was written from modules/dashboards.py
    assert dashboards.SHIPPED.read_text() == dashboards.shipped_json(), "the dashboards changed: run `make generated`"


def test_dashboards_not_written_from_this_source_are_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An edit of modules/dashboards.py without `make generated`: render builds the edited dashboards, never the old ones.
    (tmp_path / "dashboards.json").write_text(json.dumps({"digest": "sha256:" + "0" * 64, "data": {"old.json": "{}"}}))
    monkeypatch.setattr(dashboards, "SHIPPED", tmp_path / "dashboards.json")
    dashboards.configmap_data.cache_clear()
    try:
        data = dashboards.configmap_data()
    finally:
        dashboards.configmap_data.cache_clear()
    assert sorted(data) == ["fleetops-pools.json", "fleetops-tenants.json"]
    assert json.loads(data["fleetops-pools.json"])["title"] == "fleetops / pools"


def test_kueue_is_scraped_with_tenant_from_its_cluster_queues(state: render.DesiredState) -> None:
    kueue = one(state, "center-a", "ServiceMonitor", "kueue-controller-manager", "monitoring")
    assert kueue["spec"]["namespaceSelector"] == {"matchNames": ["kueue-system"]}
    assert kueue["spec"]["endpoints"][0]["metricRelabelings"][0]["regex"] == "(vision)(-non-preempting)?"


# prometheus-operator's relabel fields, as Prometheus's own configuration names them.
RELABEL_FIELDS = {"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
                  "regex": "regex", "replacement": "replacement", "action": "action"}


def scrape_config(monitor: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor's or PodMonitor's scrape job as far as `promtool check config` checks it (relabel actions, regexes,
    target labels), for every bundled environment without an API server. What prometheus-operator itself makes of the
    monitors, and Prometheus of that, runs end to end in tests/render/test_real_prometheus_operator.py."""
    service = monitor["kind"] == "ServiceMonitor"
    endpoint = monitor["spec"]["endpoints" if service else "podMetricsEndpoints"][0]

    def relabel(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{RELABEL_FIELDS[k]: v.lower() if k == "action" else v for k, v in rule.items()} for rule in rules]

    return {
        "honor_labels": endpoint.get("honorLabels", False),
        # No API server to discover from: a static target stands in.
        "static_configs": [{"targets": ["127.0.0.1:9400"]}],
        "relabel_configs": relabel(endpoint.get("relabelings", [])),
        "metric_relabel_configs": relabel(endpoint.get("metricRelabelings", [])),
    }


def test_promtool_accepts_the_scrape_of_every_rendered_monitor(state: render.DesiredState, bundled: dict[str, render.DesiredState]) -> None:
    for s in (state, *bundled.values()):
        jobs = [{**scrape_config(m), "job_name": f"{cluster}/{m['kind']}/{m['metadata']['name']}"}
                for cluster, m in s.objects() if m["kind"] in ("ServiceMonitor", "PodMonitor")]
        assert jobs
        promtool.check_config({"scrape_configs": jobs})


# --- promtool: every rule checks; every alert fires when it should, and only then ---------------


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_promtool_checks_every_rendered_prometheus_rule(name: str, bundled: dict[str, render.DesiredState]) -> None:
    rules = [m for _, m in bundled[name].objects() if m["kind"] == "PrometheusRule"]
    assert rules
    promtool.check_rules(rules)


def _alert_case(eval_time: str, alertname: str, series: list[dict[str, str]], alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": series, "alert_rule_test": [{"eval_time": eval_time, "alertname": alertname, "exp_alerts": alerts}]}


def _notes(alert: str, summary: str, description: str) -> dict[str, str]:
    """An alert's annotations as promtool expands them: its runbook is docs/runbooks.md's section of its name."""
    return {"summary": summary, "description": description, "runbook_url": f"docs/runbooks.md#{alert.lower()}"}


def _utilisation_cases(alert: str, metric: str, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    low = {"series": f'{metric}{{cluster="center-a",pool="a100-ts",node="n1",id="0"}}', "values": "10x50"}
    busy = {"series": f'{metric}{{cluster="center-a",pool="h100-mig",node="n2",id="0"}}', "values": "90x50"}
    other = {"series": f'{metric}{{cluster="elsewhere",pool="a100-ts",node="n3",id="0"}}', "values": "5x50"}
    fired = [{"exp_labels": {"severity": "warning", "cluster": "center-a", "pool": "a100-ts"},
              "exp_annotations": _notes(alert, f"{device} utilisation of pool a100-ts on center-a under 30% for 30 minutes",
                                        f"The {device}s of pool a100-ts on cluster center-a have been busy under 30% on average for 30 minutes "
                                        "(now 10%): the fleet pays for them while they sit mostly idle, and the guarantees that hold them "
                                        "keep other tenants' work off them.")}]
    return ([_alert_case("35m", alert, [low, busy, other], fired)],
            [_alert_case("25m", alert, [low, busy, other], []),  # not yet 30 minutes
             _alert_case("45m", alert, [busy, other], [])])


def _edge_cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    def ready(node: str, values: str) -> dict[str, str]:
        return {"series": f'kube_node_status_condition{{condition="Ready",status="true",node="{node}"}}', "values": values}

    fired = [{"exp_labels": {"severity": "critical", "cluster": "edge-b", "pool": "jetson", "node": "jetson-1", "condition": "Ready", "status": "true"},
              "exp_annotations": _notes("FleetopsEdgeNodeOffline", "Edge node jetson-1 of jetson on edge-b offline longer than 240s",
                                        "Node jetson-1 of edge group jetson on cluster edge-b has not been Ready for longer than the group's "
                                        "offline grace (240s): its devices no longer count in the group's capacity, and its pods stay bound "
                                        "and the edge runtime runs them on offline (disconnect: stay); nothing they do reaches the fleet "
                                        "until it is back.")}]
    return ([_alert_case("6m", "FleetopsEdgeNodeOffline", [ready("jetson-1", "0x10"), ready("jetson-2", "1x10")], fired)],
            [_alert_case("3m", "FleetopsEdgeNodeOffline", [ready("jetson-1", "0x10")], []),  # within its grace
             _alert_case("6m", "FleetopsEdgeNodeOffline", [ready("gateway-1", "0x10"), ready("jetson-2", "1x10")], [])])


def _quota_cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    def quota(kind: str, values: str) -> dict[str, str]:
        return {"series": f'kube_resourcequota{{namespace="vision",resource="requests.nvidia.com/gpu",type="{kind}"}}', "values": values}

    fired = [{"exp_labels": {"severity": "warning", "namespace": "vision", "resource": "requests.nvidia.com/gpu"},
              "exp_annotations": _notes("FleetopsQuotaExhausted", "vision uses more than 90% of its requests.nvidia.com/gpu quota",
                                        "Tenant namespace vision has held over 90% of its requests.nvidia.com/gpu ResourceQuota for 15 "
                                        "minutes (now 95%): once it is full, its pods asking for more are refused at creation, whatever "
                                        "the cluster has free.")}]
    return ([_alert_case("20m", "FleetopsQuotaExhausted", [quota("used", "19x30"), quota("hard", "20x30")], fired)],
            [_alert_case("20m", "FleetopsQuotaExhausted", [quota("used", "17x30"), quota("hard", "20x30")], [])])


def _kueue_pending_cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pending = 'kueue_pending_workloads{cluster="center-a",cluster_queue="vision",status="%s"}'
    fired = [{"exp_labels": {"severity": "warning", "cluster": "center-a", "cluster_queue": "vision"},
              "exp_annotations": _notes("FleetopsKueueWorkloadsPending", "ClusterQueue vision on center-a has had workloads pending for 30 minutes",
                                        "2 workloads wait in ClusterQueue vision on cluster center-a, and it has not been empty for 30 "
                                        "minutes: Kueue is not admitting the tenant's jobs there, so they do not start.")}]
    return ([_alert_case("35m", "FleetopsKueueWorkloadsPending", [{"series": pending % "active", "values": "2x40"},
                                                               {"series": pending % "inadmissible", "values": "0x40"}], fired)],
            [_alert_case("35m", "FleetopsKueueWorkloadsPending", [{"series": pending % "active", "values": "2x10 0x30"},
                                                               {"series": pending % "inadmissible", "values": "0x40"}], [])])


def _kueue_wait_cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    def buckets(under_10m: str, under_1h: str) -> list[dict[str, str]]:
        name = 'kueue_admission_wait_time_seconds_bucket{cluster="center-a",cluster_queue="vision",le="%s"}'
        return [{"series": name % "600", "values": under_10m}, {"series": name % "3600", "values": under_1h},
                {"series": name % "+Inf", "values": under_1h}]

    # One workload admitted a minute, each after 10 to 60 minutes: the 90th percentile is 55 minutes.
    fired = [{"exp_labels": {"severity": "warning", "cluster": "center-a", "cluster_queue": "vision"},
              "exp_annotations": _notes("FleetopsKueueAdmissionSlow",
                                        "90% of the workloads admitted by vision on center-a in the last 30 minutes waited up to 55m 0s (over 30 minutes)",
                                        "Workloads of ClusterQueue vision on cluster center-a start, but late: one in ten admitted in the "
                                        "last 30 minutes waited 55m 0s or longer from creation to admission, over the 30 minutes the "
                                        "environment allows (monitoring.kueue_pending_minutes).")}]
    return ([_alert_case("60m", "FleetopsKueueAdmissionSlow", buckets("0x70", "0+1x70"), fired)],
            [_alert_case("60m", "FleetopsKueueAdmissionSlow", buckets("0+1x70", "0+1x70"), [])])


CASES = {
    "FleetopsGPUUtilisationLow": _utilisation_cases("FleetopsGPUUtilisationLow", "DCGM_FI_DEV_GPU_UTIL", "GPU"),
    "FleetopsNPUUtilisationLow": _utilisation_cases("FleetopsNPUUtilisationLow", "npu_chip_info_utilization", "NPU"),
    "FleetopsEdgeNodeOffline": _edge_cases(),
    "FleetopsQuotaExhausted": _quota_cases(),
    "FleetopsKueueWorkloadsPending": _kueue_pending_cases(),
    "FleetopsKueueAdmissionSlow": _kueue_wait_cases(),
}


@pytest.mark.parametrize("alert", sorted(CASES))
def test_promtool_alert_fires_when_it_should_and_stays_silent_otherwise(alert: str, state: render.DesiredState) -> None:
    rules = fleet_rules(state)
    cluster = "edge-b" if alert == "FleetopsEdgeNodeOffline" else "center-a"
    fires, silent = CASES[alert]
    assert fires and silent
    promtool.test_rules(rules[cluster], {"tests": fires + silent})


def test_every_rendered_alert_has_promtool_cases(state: render.DesiredState, bundled: dict[str, render.DesiredState]) -> None:
    rendered = {
        rule.get("alert") or rule.get("record")
        for s in (state, *bundled.values())
        for groups in fleet_rules(s).values()
        for group in groups
        for rule in group["rules"]
    }
    assert rendered == set(CASES)
