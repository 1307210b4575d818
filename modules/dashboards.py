"""Grafana dashboards per pool and per tenant, built with Grafana's foundation SDK (not hand-written JSON).

Both pick their Prometheus with a `datasource` variable and filter with `cluster` and `pool` or `tenant`
variables over the labels the scrapes add (modules/monitoring.py). Both also read the metering recording
rules modules/metering.py renders: `fleetops:tenant_devices:physical`, and the pools' idle devices or the
tenants' spend. Every series is named in fleetops/metrics.py.

Both are the same for every environment: `python -m modules.dashboards` (`make generated`) writes them
to `modules/dashboards.json` with the digest of this file, and render reads them from there while
the digest is this file's. Importing the SDK was 19 ms of every `validate` (benchmarks/README.md,
"Plan and validate"); after an edit here they are built with it until the file is written again.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetops import metrics

if TYPE_CHECKING:  # the SDK is imported where the dashboards are built
    from grafana_foundation_sdk.builders import dashboard as board
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

SHIPPED = Path(__file__).with_name("dashboards.json")


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
        Panel("GPU utilisation by pool", f'avg by (cluster, pool) ({metrics.GPU_UTIL}{{cluster=~"$cluster", pool=~"$pool"}})',
              "{{cluster}} / {{pool}}", "percent"),
        Panel("NPU utilisation by pool", f'avg by (cluster, pool) ({metrics.NPU_UTIL}{{cluster=~"$cluster", pool=~"$pool"}})',
              "{{cluster}} / {{pool}}", "percent"),
        Panel("GPU memory used by pool", f'sum by (cluster, pool) ({metrics.GPU_MEMORY_USED}{{cluster=~"$cluster", pool=~"$pool"}})',
              "{{cluster}} / {{pool}}", "decmbytes"),
        Panel("Physical devices held by tenants", f'sum by (cluster, pool) ({metrics.DEVICES}{{cluster=~"$cluster", pool=~"$pool"}})',
              "{{cluster}} / {{pool}}", "short"),
        Panel("Physical devices no tenant holds (idle)", f'sum by (cluster, pool) ({metrics.IDLE_DEVICES}{{cluster=~"$cluster", pool=~"$pool"}})',
              "{{cluster}} / {{pool}}", "short"),
    ),
)

TENANTS = Board(
    "fleetops-tenants",
    "fleetops / tenants",
    "tenant",
    (
        Panel("GPU utilisation by tenant", f'avg by (cluster, tenant) ({metrics.GPU_UTIL}{{cluster=~"$cluster", tenant=~"$tenant"}})',
              "{{cluster}} / {{tenant}}", "percent"),
        Panel("NPU utilisation by tenant", f'avg by (cluster, tenant) ({metrics.NPU_UTIL}{{cluster=~"$cluster", tenant=~"$tenant"}})',
              "{{cluster}} / {{tenant}}", "percent"),
        Panel("Physical devices held", f'sum by (cluster, tenant, pool) ({metrics.DEVICES}{{cluster=~"$cluster", tenant=~"$tenant"}})',
              "{{tenant}} on {{pool}}", "short"),
        Panel("Spend per hour", f'sum by (tenant, currency) ({metrics.SPEND}{{cluster=~"$cluster", tenant=~"$tenant"}})',
              "{{tenant}} ({{currency}})", "short"),
        Panel("Kueue workloads pending", f'sum by (cluster, cluster_queue) ({metrics.KUEUE_PENDING}{{cluster=~"$cluster", tenant=~"$tenant"}})',
              "{{cluster}} / {{cluster_queue}}", "short"),
        Panel("Device quota used / hard",
              f'{metrics.RESOURCE_QUOTA}{{type="used", namespace=~"$tenant"}} / ignoring(type) {metrics.RESOURCE_QUOTA}{{type="hard", namespace=~"$tenant"}}',
              "{{namespace}} {{resource}}", "percentunit"),
    ),
)


def _variable(name: str, query: str) -> board.QueryVariable:
    from grafana_foundation_sdk.builders import dashboard as board
    from grafana_foundation_sdk.models.dashboard import VariableRefresh

    return (
        board.QueryVariable(name)
        .label(name)
        .datasource(_datasource())
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
    )


def _datasource() -> DataSourceRef:
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    return DataSourceRef(type_val="prometheus", uid="${datasource}")


def build(spec: Board) -> dict[str, Any]:
    """The dashboard's JSON model, as Grafana's sidecar loads it."""
    from grafana_foundation_sdk.builders import dashboard as board
    from grafana_foundation_sdk.builders import prometheus, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    builder = (
        board.Dashboard(spec.title)
        .uid(spec.uid)
        .tags(["fleetops"])
        .time("now-24h", "now")
        .refresh("1m")
        .with_variable(board.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(_variable("cluster", f'label_values({metrics.UP}{{cluster!=""}}, cluster)'))
        .with_variable(_variable(spec.scope, f'label_values({{cluster=~"$cluster", {spec.scope}!=""}}, {spec.scope})'))
    )
    for panel in spec.panels:
        builder = builder.with_panel(
            timeseries.Panel()
            .title(panel.title)
            .datasource(_datasource())
            .unit(panel.unit)
            .span(12)
            .height(8)
            .with_target(prometheus.Dataquery().ref_id("A").datasource(_datasource()).expr(panel.expr).legend_format(panel.legend))
        )
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


def built() -> dict[str, str]:
    """Each dashboard as a key of the ConfigMap the sidecar reads, built with the SDK."""
    return {f"{b.uid}.json": json.dumps(build(b), sort_keys=True, indent=2) for b in (POOLS, TENANTS)}


def _digest() -> str:
    """Of this file and of the series names it reads: an edit of either builds the dashboards again."""
    names = Path(metrics.__file__).read_bytes()
    return f"sha256:{hashlib.sha256(Path(__file__).read_bytes() + names).hexdigest()}"


def shipped_json() -> str:
    """The text of `SHIPPED`."""
    return json.dumps({"digest": _digest(), "data": built()}, sort_keys=True, indent=1) + "\n"


@functools.cache
def configmap_data() -> dict[str, str]:
    """`built()`, read from `SHIPPED` while it was written from this file; the same for every cluster, made once."""
    shipped = json.loads(SHIPPED.read_bytes())
    return shipped["data"] if shipped["digest"] == _digest() else built()


if __name__ == "__main__":  # `make generated`
    SHIPPED.write_text(shipped_json())
