"""Monitoring of one cluster, as the exporters publish their series: scrapes, alert rules, dashboards.

What is scraped, and by what upstream publishes:
- NVIDIA data-center GPUs: DCGM exporter (GPU operator's `nvidia-dcgm-exporter` Service, port
  `gpu-metrics`), never on Jetson nodes (DCGM does not run on Tegra).
- Jetson: the jetson-stats based jetson_stats_node_exporter, scraped as pods (it ships no Kubernetes
  manifest: the site runs it as a DaemonSet with the labels below).
- Ascend NPUs: MindCluster's npu-exporter (DaemonSet `app: npu-exporter`, port 8082).
- Kueue: its controller-manager metrics Service (kubebuilder's `control-plane: controller-manager`,
  HTTPS port `https`, the scraper's service-account token), as Kueue's config/prometheus ships it.
- FPGAs: nothing. Intel's FPGA device plugin serves no metrics, and no exporter for these cards is published.

Every device series gets `cluster` (static) and `pool` (the node's fleetops.io/pool or
fleetops.io/edge-group label, read with attachMetadata.node), and `tenant` where the exporter maps
the device to a pod: its `namespace` is the tenant's. Targets on nodes of other groups are dropped.
Every PrometheusRule, ServiceMonitor and PodMonitor carries the environment's Prometheus selector labels.
Every alert carries a summary, a description of what it means for the fleet (naming what fired) and the
link of its runbook, a section of docs/runbooks.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleetops import kube, metrics, spec
from modules import dashboards
from modules.kube import Part, Target
from modules.scheduler import NAMESPACE as KUEUE_NAMESPACE

MONITORING_API = "monitoring.coreos.com/v1"
JETSON_MODEL_PREFIX = "Jetson"
SCRAPE_INTERVAL = "30s"
# Each alert's runbook is the section of this file headed with the alert's name, linked from the repository's
# root (GitHub's anchor of a heading is the heading lower-cased): the environment file has no field for it.
RUNBOOKS = "docs/runbooks.md"


class Exporter(StrEnum):
    DCGM = "dcgm"
    JETSON = "jetson"
    NPU = "npu"


@dataclass(frozen=True)
class Utilisation:
    """A device utilisation series (0-100 per device) as its exporter names it."""

    alert: str
    metric: str
    device: str


UTILISATION = {
    Exporter.DCGM: Utilisation("FleetopsGPUUtilisationLow", metrics.GPU_UTIL, "GPU"),
    Exporter.NPU: Utilisation("FleetopsNPUUtilisationLow", metrics.NPU_UTIL, "NPU"),
}


def exporter_of(group: spec.Group) -> Exporter | None:
    match spec.plugin_kind(group.device.resource):
        case "nvidia":
            return Exporter.JETSON if group.device.model.startswith(JETSON_MODEL_PREFIX) else Exporter.DCGM
        case "ascend":
            return Exporter.NPU
        case _:
            return None  # FPGA: no exporter publishes its devices


def groups_of(cluster: spec.Cluster, exporter: Exporter) -> list[str]:
    return [g.name for g in (*cluster.pools, *cluster.edge_groups) if exporter_of(g) is exporter]


def tenants_on(cluster: spec.Cluster, env: spec.Environment) -> list[str]:
    return [t.name for t in env.tenants if cluster.name in t.clusters]


def _alternation(names: list[str]) -> str:
    # Names are DNS labels: nothing in them is special to a regex but '.', which they cannot hold.
    return "|".join(names)


def _node_label(key: str) -> str:
    """The meta label Prometheus gives a node label with attachMetadata.node."""
    return "__meta_kubernetes_node_label_" + "".join(c if c.isalnum() else "_" for c in key)


def placement_relabelings(cluster: spec.Cluster, groups: list[str]) -> list[dict[str, Any]]:
    """Target relabelings: `pool` from the node's pool or edge-group label, only the given groups' nodes
    kept, `cluster` and `node` set, so every series of the target carries them."""
    return [
        # A node carries one of the two labels: their concatenation is its group's name.
        {"sourceLabels": [_node_label(kube.POOL_LABEL), _node_label(kube.EDGE_GROUP_LABEL)], "separator": "",
         "targetLabel": "pool", "action": "replace"},
        {"sourceLabels": ["pool"], "regex": _alternation(groups), "action": "keep"},
        {"targetLabel": "cluster", "replacement": cluster.name, "action": "replace"},
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"},
    ]


def tenant_relabelings(tenants: list[str]) -> list[dict[str, Any]]:
    """Series relabelings: `tenant` from the exporter's pod-mapping `namespace` (a tenant's namespace is its name)."""
    if not tenants:
        return []
    return [{"sourceLabels": ["namespace"], "regex": f"({_alternation(tenants)})", "targetLabel": "tenant",
             "replacement": "$1", "action": "replace"}]


def runbook_url(alert_name: str) -> str:
    return f"{RUNBOOKS}#{alert_name.lower()}"


def alert(name: str, expr: str, *, severity: str, summary: str, description: str, duration: str | None = None,
          labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An alerting rule as every one fleetops renders: a one-line summary, a description of what it means for
    the fleet with the labels that say what fired (Prometheus templating), and its runbook's link."""
    return {
        "alert": name,
        "expr": expr,
        **({"for": duration} if duration else {}),
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {"summary": summary, "description": description, "runbook_url": runbook_url(name)},
    }


def _utilisation_alert(cluster: spec.Cluster, mon: spec.Monitoring, series: Utilisation) -> dict[str, Any]:
    low, minutes = mon.gpu_utilisation_low_percent, mon.gpu_utilisation_for_minutes
    return alert(
        series.alert,
        f'avg by (cluster, pool) ({series.metric}{{cluster="{cluster.name}"}}) < {low}',
        duration=f"{minutes}m",
        severity="warning",
        summary=f"{series.device} utilisation of pool {{{{ $labels.pool }}}} on {{{{ $labels.cluster }}}} under {low}% for {minutes} minutes",
        description=f"The {series.device}s of pool {{{{ $labels.pool }}}} on cluster {{{{ $labels.cluster }}}} have been busy under {low}% "
                    f"on average for {minutes} minutes (now {{{{ $value | humanize }}}}%): the fleet pays for them while they sit "
                    f"mostly idle, and the guarantees that hold them keep other tenants' work off them.",
    )


def _disconnect_effect(group: spec.EdgeGroup) -> str:
    """What the group's pods on an unreachable node do, as its `disconnect` says."""
    if group.disconnect.action == "move":
        return (f"its pods are evicted {group.disconnect.after_seconds}s after the node went unreachable and replaced on the "
                f"group's other nodes (disconnect: move), which must have room for them")
    return "its pods stay bound and the edge runtime runs them on offline (disconnect: stay); nothing they do reaches the fleet until it is back"


def _edge_offline(cluster: spec.Cluster, group: spec.EdgeGroup) -> dict[str, Any]:
    # The node-name glob as a regex; a backslash doubled for the PromQL string it is written into.
    glob = group.match.name_pattern or group.name + "-*"
    nodes = glob.replace(".", "\\\\.").replace("*", ".*").replace("?", ".").replace("[!", "[^")
    grace = group.offline_grace_seconds
    return alert(
        "FleetopsEdgeNodeOffline",
        f'{metrics.NODE_CONDITION}{{condition="Ready",status="true",node=~"{nodes}"}} == 0',
        duration=f"{grace}s",
        severity="critical",
        summary=f"Edge node {{{{ $labels.node }}}} of {group.name} on {cluster.name} offline longer than {grace}s",
        # $labels are the series' (kube-state-metrics': node, condition, status), not the rule's own labels.
        description=f"Node {{{{ $labels.node }}}} of edge group {group.name} on cluster {cluster.name} has not been "
                    f"Ready for longer than the group's offline grace ({grace}s): its devices no longer count in the group's "
                    f"capacity, and {_disconnect_effect(group)}.",
        labels={"cluster": cluster.name, "pool": group.name},
    )


def _kueue_alerts(cluster: spec.Cluster, mon: spec.Monitoring) -> list[dict[str, Any]]:
    minutes = mon.kueue_pending_minutes
    return [
        alert(
            "FleetopsKueueWorkloadsPending",
            f'sum by (cluster, cluster_queue) ({metrics.KUEUE_PENDING}) > 0',
            duration=f"{minutes}m",
            severity="warning",
            summary=f"ClusterQueue {{{{ $labels.cluster_queue }}}} on {{{{ $labels.cluster }}}} has had workloads pending for {minutes} minutes",
            description=f"{{{{ $value | humanize }}}} workloads wait in ClusterQueue {{{{ $labels.cluster_queue }}}} on cluster "
                        f"{{{{ $labels.cluster }}}}, and it has not been empty for {minutes} minutes: Kueue is not admitting the tenant's "
                        f"jobs there, so they do not start.",
        ),
        alert(
            "FleetopsKueueAdmissionSlow",
            f"histogram_quantile(0.9, sum by (cluster, cluster_queue, le) (rate({metrics.KUEUE_ADMISSION_WAIT}_bucket[30m])))"
            f" > {minutes * 60}",
            duration="15m",
            severity="warning",
            summary=f"90% of the workloads admitted by {{{{ $labels.cluster_queue }}}} on {{{{ $labels.cluster }}}} in the last 30 minutes "
                    f"waited up to {{{{ $value | humanizeDuration }}}} (over {minutes} minutes)",
            description=f"Workloads of ClusterQueue {{{{ $labels.cluster_queue }}}} on cluster {{{{ $labels.cluster }}}} start, but late: "
                        f"one in ten admitted in the last 30 minutes waited {{{{ $value | humanizeDuration }}}} or longer from creation "
                        f"to admission, over the {minutes} minutes the environment allows (monitoring.kueue_pending_minutes).",
        ),
    ]


def rule_groups(cluster: spec.Cluster, env: spec.Environment) -> list[dict[str, Any]]:
    mon = env.monitoring
    groups = []
    device_rules = [_utilisation_alert(cluster, mon, series) for exporter, series in UTILISATION.items() if groups_of(cluster, exporter)]
    if device_rules:
        groups.append({"name": "fleetops.devices", "rules": device_rules})
    if cluster.edge_groups:
        groups.append({"name": "fleetops.edge", "rules": [_edge_offline(cluster, g) for g in cluster.edge_groups]})
    if tenants_on(cluster, env):
        ratio = mon.quota_exhaustion_percent / 100
        groups.append(
            {
                "name": "fleetops.quota",
                "rules": [
                    alert(
                        "FleetopsQuotaExhausted",
                        f'{metrics.RESOURCE_QUOTA}{{type="used",resource=~"requests\\\\..*"}} / ignoring(type) '
                        f'{metrics.RESOURCE_QUOTA}{{type="hard",resource=~"requests\\\\..*"}} > {ratio}',
                        duration="15m",
                        severity="warning",
                        summary=f"{{{{ $labels.namespace }}}} uses more than {mon.quota_exhaustion_percent}% of its {{{{ $labels.resource }}}} quota",
                        description=f"Tenant namespace {{{{ $labels.namespace }}}} has held over {mon.quota_exhaustion_percent}% of its "
                                    f"{{{{ $labels.resource }}}} ResourceQuota for 15 minutes (now {{{{ $value | humanizePercentage }}}}): "
                                    f"once it is full, its pods asking for more are refused at creation, whatever the cluster has free.",
                    )
                ],
            }
        )
        if env.scheduler.backend == "kueue":
            groups.append({"name": "fleetops.kueue", "rules": _kueue_alerts(cluster, mon)})
    return groups


def prometheus_rule(target: Target, name: str, env: spec.Environment, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """A PrometheusRule in the monitoring namespace, labelled so the environment's Prometheus loads it."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": target.metadata(name, env.monitoring.namespace, labels=dict(env.monitoring.prometheus_selector)),
        "spec": {"groups": groups},
    }


def _monitor(target: Target, env: spec.Environment, kind: str, name: str, namespace: str, selector: dict[str, str],
             endpoint: dict[str, Any], relabelings: list[dict[str, Any]], metric_relabelings: list[dict[str, Any]]) -> dict[str, Any]:
    endpoints_key = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    return {
        "apiVersion": MONITORING_API,
        "kind": kind,
        "metadata": target.metadata(name, env.monitoring.namespace, labels=dict(env.monitoring.prometheus_selector)),
        "spec": {
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [namespace]},
            # The node's labels (its pool) on every target: Prometheus >= 2.37 and list/watch on nodes.
            "attachMetadata": {"node": True},
            endpoints_key: [
                {
                    **endpoint,
                    "interval": SCRAPE_INTERVAL,
                    "path": "/metrics",
                    # The exporter's own `namespace`/`pod` name the workload's pod, not the exporter's.
                    "honorLabels": True,
                    "relabelings": relabelings,
                    **({"metricRelabelings": metric_relabelings} if metric_relabelings else {}),
                }
            ],
        },
    }


def device_monitors(target: Target, cluster: spec.Cluster, env: spec.Environment) -> list[dict[str, Any]]:
    """The scrape of every exporter whose devices the cluster has, limited to those groups' nodes."""
    mon = env.monitoring
    tenants = tenant_relabelings(tenants_on(cluster, env))
    # (kind, name, namespace, selector, endpoint): how each exporter's upstream deployment is found.
    scrapes = {
        Exporter.DCGM: ("ServiceMonitor", "dcgm-exporter", mon.dcgm_namespace, {"app": "nvidia-dcgm-exporter"}, {"port": "gpu-metrics"}),
        Exporter.NPU: ("PodMonitor", "npu-exporter", mon.npu_exporter_namespace, {"app": "npu-exporter"}, {"portNumber": 8082}),
        Exporter.JETSON: ("PodMonitor", "jetson-exporter", mon.jetson_exporter_namespace,
                          {"app.kubernetes.io/name": "jetson-stats-node-exporter"}, {"port": "metrics"}),
    }
    out = []
    for exporter, (kind, name, namespace, selector, endpoint) in scrapes.items():
        groups = groups_of(cluster, exporter)
        if groups:
            # Jetson's exporter maps nothing to pods (jetson-stats reads the whole board): no tenant.
            series = [] if exporter is Exporter.JETSON else tenants
            out.append(_monitor(target, env, kind, name, namespace, selector, endpoint, placement_relabelings(cluster, groups), series))
    return out


def kueue_monitor(target: Target, cluster: spec.Cluster, env: spec.Environment) -> dict[str, Any]:
    """Kueue's metrics Service, as Kueue's config/prometheus/monitor.yaml scrapes it, with `cluster` added."""
    tenants = tenants_on(cluster, env)
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": target.metadata("kueue-controller-manager", env.monitoring.namespace, labels=dict(env.monitoring.prometheus_selector)),
        "spec": {
            "selector": {"matchLabels": {"control-plane": "controller-manager"}},
            "namespaceSelector": {"matchNames": [KUEUE_NAMESPACE]},
            "endpoints": [
                {
                    "port": "https",
                    "scheme": "https",
                    "path": "/metrics",
                    "interval": SCRAPE_INTERVAL,
                    "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                    "tlsConfig": {"insecureSkipVerify": True},
                    "relabelings": [{"targetLabel": "cluster", "replacement": cluster.name, "action": "replace"}],
                    # A tenant's ClusterQueues are named after it (modules/tenant.py): `tenant` from `cluster_queue`.
                    **({"metricRelabelings": [{"sourceLabels": ["cluster_queue"], "regex": f"({_alternation(tenants)})(-{spec.NON_PREEMPTING})?",
                                                "targetLabel": "tenant", "replacement": "$1", "action": "replace"}]} if tenants else {}),
                }
            ],
        },
    }


def monitoring(target: Target, cluster: spec.Cluster, env: spec.Environment) -> Part:
    mon = env.monitoring
    groups = rule_groups(cluster, env)

    def objects() -> Iterator[dict[str, Any]]:
        yield {"apiVersion": "v1", "kind": "Namespace", "metadata": target.metadata(mon.namespace)}
        if groups:
            yield prometheus_rule(target, "fleetops-fleet", env, groups)
        yield from device_monitors(target, cluster, env)
        if any(g["name"] == "fleetops.kueue" for g in groups):
            yield kueue_monitor(target, cluster, env)
        yield {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": target.metadata(
                "fleetops-dashboards", mon.namespace,
                labels={mon.grafana.label: mon.grafana.label_value},
                annotations={mon.grafana.folder_annotation: mon.grafana.folder},
            ),
            "data": dict(dashboards.configmap_data()),
        }

    return Part("fleetops:fleet:Monitoring", target.cluster, target, objects,
                outputs={"rule_groups": [g["name"] for g in groups]})
