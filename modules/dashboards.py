"""Grafana dashboards per pool and per tenant, built with Grafana's foundation SDK (not hand-written JSON).

Both pick their Prometheus with a `datasource` variable and filter with `cluster` and `pool` or `tenant`
variables over the labels the scrapes add (modules/monitoring.py). The tenant dashboard also reads the
metering recording rules (`fleetops:tenant_devices:physical`, `fleetops:tenant_spend:per_hour`), which
modules/metering.py renders.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as board
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str
    legend: str
    unit: str


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    scope: str  # the label the second variable filters on: pool or tenant
    panels: tuple[Panel, ...]


POOLS = Board(
    "fleetops-pools",
    "fleetops / pools",
    "pool",
    (
        Panel("GPU utilisation by pool", 'avg by (cluster, pool) (DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster", pool=~"$pool"})',
              "{{cluster}} / {{pool}}", "percent"),
        Panel("NPU utilisation by pool", 'avg by (cluster, pool) (npu_chip_info_utilization{cluster=~"$cluster", pool=~"$pool"})',
              "{{cluster}} / {{pool}}", "percent"),
        Panel("GPU memory used by pool", 'sum by (cluster, pool) (DCGM_FI_DEV_FB_USED{cluster=~"$cluster", pool=~"$pool"})',
              "{{cluster}} / {{pool}}", "decmbytes"),
        Panel("Physical devices held by tenants", 'sum by (cluster, pool) (fleetops:tenant_devices:physical{cluster=~"$cluster", pool=~"$pool"})',
              "{{cluster}} / {{pool}}", "short"),
    ),
)

TENANTS = Board(
    "fleetops-tenants",
    "fleetops / tenants",
    "tenant",
    (
        Panel("GPU utilisation by tenant", 'avg by (cluster, tenant) (DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster", tenant=~"$tenant"})',
              "{{cluster}} / {{tenant}}", "percent"),
        Panel("NPU utilisation by tenant", 'avg by (cluster, tenant) (npu_chip_info_utilization{cluster=~"$cluster", tenant=~"$tenant"})',
              "{{cluster}} / {{tenant}}", "percent"),
        Panel("Physical devices held", 'sum by (cluster, tenant, pool) (fleetops:tenant_devices:physical{cluster=~"$cluster", tenant=~"$tenant"})',
              "{{tenant}} on {{pool}}", "short"),
        Panel("Spend per hour", 'sum by (tenant, currency) (fleetops:tenant_spend:per_hour{cluster=~"$cluster", tenant=~"$tenant"})',
              "{{tenant}} ({{currency}})", "short"),
        Panel("Kueue workloads pending", 'sum by (cluster, cluster_queue) (kueue_pending_workloads{cluster=~"$cluster", tenant=~"$tenant"})',
              "{{cluster}} / {{cluster_queue}}", "short"),
        Panel("Device quota used / hard",
              'kube_resourcequota{type="used", namespace=~"$tenant"} / ignoring(type) kube_resourcequota{type="hard", namespace=~"$tenant"}',
              "{{namespace}} {{resource}}", "percentunit"),
    ),
)


def _variable(name: str, query: str) -> board.QueryVariable:
    return (
        board.QueryVariable(name)
        .label(name)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
    )


def build(spec: Board) -> dict[str, Any]:
    """The dashboard's JSON model, as Grafana's sidecar loads it."""
    builder = (
        board.Dashboard(spec.title)
        .uid(spec.uid)
        .tags(["fleetops"])
        .time("now-24h", "now")
        .refresh("1m")
        .with_variable(board.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(_variable("cluster", "label_values(up{cluster!=\"\"}, cluster)"))
        .with_variable(_variable(spec.scope, f'label_values({{cluster=~"$cluster", {spec.scope}!=""}}, {spec.scope})'))
    )
    for panel in spec.panels:
        builder = builder.with_panel(
            timeseries.Panel()
            .title(panel.title)
            .datasource(DATASOURCE)
            .unit(panel.unit)
            .span(12)
            .height(8)
            .with_target(prometheus.Dataquery().ref_id("A").expr(panel.expr).legend_format(panel.legend))
        )
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


@functools.cache
def configmap_data() -> dict[str, str]:
    """Each dashboard as a key of the ConfigMap the sidecar reads; the same for every cluster, built once."""
    return {f"{b.uid}.json": json.dumps(build(b), sort_keys=True, indent=2) for b in (POOLS, TENANTS)}
