"""The metering rules fleetops renders, run by the real promtool on synthetic series.

Recording values are checked (devices and spend per tenant and pool), and every alert is shown to
fire when it should and to stay silent when it should not, across a month boundary. promtool's tests
start at 1970-01-01 00:00 UTC, so "31d" is 1 February.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, spec
from modules import metering
from tests.helpers import ROOT, small_env, write_env
from tests.promtool import check_rules, test_rules

PROD = ROOT / "environments" / "prod.yaml"


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_rendered_metering_rule_passes_promtool_check(name: str) -> None:
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="rev-test")
    rules = [m for _, m in state.objects() if m["kind"] == "PrometheusRule" and m["metadata"]["name"] == metering.RULE_NAME]
    env = spec.load_environment(ROOT / "environments" / f"{name}.yaml")
    assert len(rules) == len(env.clusters)  # one per cluster, in the monitoring namespace
    assert {r["metadata"]["namespace"] for r in rules} == {env.monitoring.namespace}
    for rule in rules:  # each is what one cluster's Prometheus loads
        check_rules([rule])


def ksm(namespace: str, pod: str, node: str, requests: dict[str, str], phase: str) -> list[dict[str, str]]:
    """kube-state-metrics series of one pod: a container per requested resource, and its Running phase."""
    series = [
        {"series": f'kube_pod_container_resource_requests{{namespace="{namespace}",pod="{pod}",container="c{i}",node="{node}",'
                   f'resource="{resource}",unit="integer",job="kube-state-metrics"}}', "values": values}
        for i, (resource, values) in enumerate(sorted(requests.items()))
    ]
    return series + [{"series": f'kube_pod_status_phase{{namespace="{namespace}",pod="{pod}",phase="Running",job="kube-state-metrics"}}', "values": phase}]


def node(name: str, pool: str) -> dict[str, str]:
    return {"series": f'kube_node_labels{{node="{name}",label_fleetops_io_pool="{pool}",job="kube-state-metrics"}}', "values": "1x60"}


def allocatable(name: str, units: dict[str, int]) -> list[dict[str, str]]:
    """kube-state-metrics' allocatable of one node: what its device plugins advertise, per resource."""
    return [{"series": f'kube_node_status_allocatable{{node="{name}",resource="{resource}",unit="integer",job="kube-state-metrics"}}',
             "values": f"{count}x60"} for resource, count in sorted(units.items())]


def namespace(name: str, tenant: bool = True) -> dict[str, str]:
    label = f',label_fleetops_io_tenant="{name}"' if tenant else ""
    return {"series": f'kube_namespace_labels{{namespace="{name}"{label},job="kube-state-metrics"}}', "values": "1x60"}


def sample(metric: str, value: float, **labels: str) -> dict[str, Any]:
    return {"labels": metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}", "value": value}


def test_devices_count_physical_devices_of_running_tenant_pods_and_spend_prices_them() -> None:
    env = spec.load_environment(PROD)
    center_sh = spec.cluster_by_name(env, "center-sh")
    series = [
        node("sh-m-1", "a100-mig"), node("sh-t-1", "a100-train"), node("sh-t-2", "a100-train"),
        # 8 A100s cut into one 3g.20gb and two 2g.10gb each, as the device plugin advertises them: 8 GPUs.
        *allocatable("sh-m-1", {"nvidia_com_mig_3g_20gb": 8, "nvidia_com_mig_2g_10gb": 16}),
        *allocatable("sh-t-1", {"nvidia_com_gpu": 8}), *allocatable("sh-t-2", {"nvidia_com_gpu": 8}),
        namespace("recsys"), namespace("research"), namespace("kube-system", tenant=False),
        # MIG mixed on A100-SXM4-40GB: a 3g.20gb instance is half a GPU, a 2g.10gb a quarter: 1/2 + 2/4 = 1 GPU.
        *ksm("recsys", "serve", "sh-m-1", {"nvidia_com_mig_3g_20gb": "1x60", "nvidia_com_mig_2g_10gb": "2x60"}, "1x60"),
        # 8 whole GPUs, running for 10 minutes, then Succeeded (Running 0): 0 from then on.
        *ksm("recsys", "train", "sh-t-1", {"nvidia_com_gpu": "8x60"}, "1x10 0x50"),
        # Pending all along: requests, but holds nothing.
        *ksm("research", "queued", "sh-t-1", {"nvidia_com_gpu": "4x60"}, "0x60"),
        # Not a tenant's namespace: not metered, and its GPU is idle capacity (no tenant's).
        *ksm("kube-system", "probe", "sh-t-2", {"nvidia_com_gpu": "1x60"}, "1x60"),
    ]
    where = {"cluster": "center-sh", "resource": "nvidia.com/gpu"}
    mig, train = {"cluster": "center-sh", "pool": "a100-mig"}, {"cluster": "center-sh", "pool": "a100-train"}
    usd = {"currency": "USD"}
    tests = {"tests": [{
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": metering.DEVICES, "eval_time": "5m", "exp_samples": [
                sample(metering.DEVICES, 1, pool="a100-mig", tenant="recsys", **where),
                sample(metering.DEVICES, 8, pool="a100-train", tenant="recsys", **where),
                sample(metering.DEVICES, 0, pool="a100-train", tenant="research", **where),
            ]},
            {"expr": metering.DEVICES, "eval_time": "20m", "exp_samples": [
                sample(metering.DEVICES, 1, pool="a100-mig", tenant="recsys", **where),
                sample(metering.DEVICES, 0, pool="a100-train", tenant="recsys", **where),
                sample(metering.DEVICES, 0, pool="a100-train", tenant="research", **where),
            ]},
            {"expr": f'{metering.SPEND}{{tenant="recsys"}}', "eval_time": "5m", "exp_samples": [
                sample(metering.SPEND, 1.5, cluster="center-sh", pool="a100-mig", tenant="recsys", currency="USD"),  # A100-SXM4-40GB: 1.5/h
                sample(metering.SPEND, 14.4, cluster="center-sh", pool="a100-train", tenant="recsys", currency="USD"),  # 8 x 1.8/h
            ]},
            # Capacity in physical GPUs, whatever the cut; what no tenant holds of it is idle, at the same price.
            {"expr": metering.POOL_DEVICES, "eval_time": "5m", "exp_samples": [
                sample(metering.POOL_DEVICES, 8, pool="a100-mig", **where), sample(metering.POOL_DEVICES, 16, pool="a100-train", **where)]},
            {"expr": metering.IDLE_DEVICES, "eval_time": "5m", "exp_samples": [
                sample(metering.IDLE_DEVICES, 7, **mig), sample(metering.IDLE_DEVICES, 8, **train)]},
            {"expr": metering.IDLE_DEVICES, "eval_time": "20m", "exp_samples": [
                sample(metering.IDLE_DEVICES, 7, **mig), sample(metering.IDLE_DEVICES, 16, **train)]},
            {"expr": metering.IDLE_SPEND, "eval_time": "5m", "exp_samples": [
                sample(metering.IDLE_SPEND, 10.5, **mig, **usd), sample(metering.IDLE_SPEND, 14.4, **train, **usd)]},
        ],
    }]}
    test_rules(metering.rule_groups(center_sh, env), tests)


def test_time_slicing_divides_by_its_replicas_and_a_pool_no_tenant_ran_on_is_idle_whole() -> None:
    env = spec.load_environment(PROD)
    center_bj = spec.cluster_by_name(env, "center-bj")
    series = [node("bj-a100-1", "a100-infer"), node("bj-h100-m-1", "h100-mig"), namespace("speech"),
              *allocatable("bj-a100-1", {"nvidia_com_gpu": 16}),  # 4 A100-PCIE, 4 replicas each
              *allocatable("bj-h100-m-1", {"nvidia_com_gpu": 56}),  # 8 GPUs, 7 1g.10gb each (strategy single)
              *ksm("speech", "asr", "bj-a100-1", {"nvidia_com_gpu": "6x60"}, "1x60")]  # 6 slices of 4 per GPU
    infer, h100_mig = {"cluster": "center-bj", "pool": "a100-infer"}, {"cluster": "center-bj", "pool": "h100-mig"}
    tests = {"tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": metering.DEVICES, "eval_time": "3m",
         "exp_samples": [sample(metering.DEVICES, 1.5, cluster="center-bj", pool="a100-infer", tenant="speech", resource="nvidia.com/gpu")]},
        {"expr": metering.IDLE_DEVICES, "eval_time": "3m",
         "exp_samples": [sample(metering.IDLE_DEVICES, 2.5, **infer), sample(metering.IDLE_DEVICES, 8, **h100_mig)]},
    ]}]}
    test_rules(metering.rule_groups(center_bj, env), tests)


DAY = 24 * 60  # minutes


def _budget_env(tmp_path: Path) -> spec.Environment:
    env = small_env()
    env["budget"] = {"monthly": 10000, "currency": "USD", "alert_at": [0.5, 0.95]}
    env["tenants"][0]["billing"] = {"mode": "prepaid", "low_balance_at": 9000, "top_ups": [
        {"date": datetime.date(1970, 1, 11), "amount": 10000}, {"date": datetime.date(1970, 1, 21), "amount": 5000}]}
    return spec.load_environment(write_env(tmp_path, env))


def _spend(per_hour: int, minutes: int) -> dict[str, str]:
    # 12 per hour is 1 per 5-minute sample: the sums below are whole numbers.
    return {"series": f'{metering.SPEND}{{cluster="center-a",pool="a100-ts",tenant="vision",currency="USD"}}',
            "values": f"{per_hour}x{minutes // 5}"}


def _fired(alert: str, at: int, expected: list[dict[str, Any]]) -> dict[str, Any]:
    return {"alertname": alert, "eval_time": f"{at}m", "exp_alerts": expected}


def test_month_to_date_spend_resets_on_the_first_and_the_budget_alert_follows_it(tmp_path: Path) -> None:
    env = _budget_env(tmp_path)
    budget = metering.budget_rules(env)
    mtd = metering.MONTH_TO_DATE
    where = {"cluster": "center-a", "pool": "a100-ts", "tenant": "vision", "currency": "USD"}
    half = {"alertname": "FleetopsBudgetMonthToDate", "severity": "warning", "threshold": "0.5"}
    tests = {"evaluation_interval": f"{metering.BUDGET_MINUTES}m", "tests": [{
        "interval": "5m",
        "input_series": [_spend(12, 32 * DAY)],
        "promql_expr_test": [
            # The last sample of January: all 8928 five-minute samples since 1 January 00:00.
            {"expr": mtd, "eval_time": f"{31 * DAY - 5}m", "exp_samples": [sample(mtd, 8928, **where)]},
            # 1 February 00:00: January's samples no longer count.
            {"expr": mtd, "eval_time": f"{31 * DAY}m", "exp_samples": [sample(mtd, 1, **where)]},
            {"expr": mtd, "eval_time": f"{31 * DAY + 60}m", "exp_samples": [sample(mtd, 13, **where)]},
        ],
        "alert_rule_test": [
            _fired("FleetopsBudgetMonthToDate", 17 * DAY, []),  # 4897 of 5000: not yet
            _fired("FleetopsBudgetMonthToDate", 20 * DAY, [{"exp_labels": half, "exp_annotations": {
                "summary": "Month-to-date spend 5.761k USD passed 50% of the monthly budget (10000 USD)",
                "description": f"What environment {env.environment} has spent since the 1st (00:00 UTC), over every cluster, pool and "
                               "tenant, is 5.761k USD: past 50% of its monthly budget of 10000 USD (budget.alert_at). Spend goes on at "
                               "the rate the running pods hold devices until they finish or are stopped.",
                "runbook_url": "docs/runbooks.md#fleetopsbudgetmonthtodate"}}]),
            _fired("FleetopsBudgetMonthToDate", 31 * DAY + 60, []),  # a new month: silent again
        ],
    }]}
    test_rules([{"name": "fleetops.budget", "interval": f"{metering.BUDGET_MINUTES}m", "rules": budget}], tests)


def test_a_prepaid_balance_counts_top_ups_from_their_day_and_spend_since_the_first(tmp_path: Path) -> None:
    env = _budget_env(tmp_path)
    balance = metering.BALANCE
    low = {"alertname": "FleetopsPrepaidBalanceLow", "severity": "warning", "tenant": "vision", "currency": "USD"}
    tests = {"evaluation_interval": f"{metering.BUDGET_MINUTES}m", "tests": [{
        "interval": "5m",
        "input_series": [_spend(12, 25 * DAY)],
        "promql_expr_test": [
            # 15 January: 10,000 in on the 11th, 1153 samples of 1 spent since: the 10 days before do not count.
            {"expr": balance, "eval_time": f"{14 * DAY}m", "exp_samples": [sample(balance, 8847, tenant="vision", currency="USD")]},
            # 21 January: the second top-up of 5,000 counts from its day.
            {"expr": balance, "eval_time": f"{20 * DAY}m", "exp_samples": [sample(balance, 12119, tenant="vision", currency="USD")]},
        ],
        "alert_rule_test": [
            _fired("FleetopsPrepaidBalanceLow", 10 * DAY, []),  # 9999 left
            _fired("FleetopsPrepaidBalanceLow", 14 * DAY, [{"exp_labels": low, "exp_annotations": {
                "summary": "vision's prepaid balance is 8.847k USD, under 9000: top up",
                "description": "Tenant vision's top-ups to date, less what its pods have spent on every cluster since the first one, "
                               "leave 8.847k USD, under its low_balance_at of 9000: at zero its statement shows it overdrawn "
                               "(fleetops statements exits 1).",
                "runbook_url": "docs/runbooks.md#fleetopsprepaidbalancelow"}}]),
            _fired("FleetopsPrepaidBalanceLow", 20 * DAY, []),  # topped up
        ],
    }]}
    test_rules([{"name": "fleetops.budget", "interval": f"{metering.BUDGET_MINUTES}m", "rules": metering.budget_rules(env)}], tests)
