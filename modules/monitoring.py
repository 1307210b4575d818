"""Monitoring of one cluster: alert rules, the DCGM exporter scrape and a Grafana dashboard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fleetops import spec
from modules.kube import Part, Target


def _alert(name: str, expr: str, duration: str, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def rule_groups(cluster: spec.Cluster, env: spec.Environment) -> list[dict[str, Any]]:
    mon = env.monitoring
    groups = []
    if any(spec.plugin_kind(g.device.resource) == "nvidia" for g in (*cluster.pools, *cluster.edge_groups)):
        groups.append(
            {
                "name": "fleetops.gpu",
                "rules": [
                    _alert(
                        "FleetGPUUtilisationLow",
                        f'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{{cluster="{cluster.name}"}}) < {mon.gpu_utilisation_low_percent}',
                        f"{mon.gpu_utilisation_for_minutes}m",
                        "warning",
                        f"GPU utilisation under {mon.gpu_utilisation_low_percent}% for {mon.gpu_utilisation_for_minutes} minutes on {{{{ $labels.Hostname }}}}",
                    )
                ],
            }
        )
    if cluster.edge_groups:
        groups.append(
            {
                "name": "fleetops.edge",
                "rules": [
                    _alert(
                        f"FleetEdgeNodeOffline-{group.name}",
                        f'kube_node_status_condition{{condition="Ready",status="true",node=~"{(group.match.name_pattern or group.name + "-*").replace("*", ".*")}"}} == 0',
                        f"{group.offline_grace_seconds}s",
                        "critical",
                        f"Edge node {{{{ $labels.node }}}} of {group.name} offline longer than {group.offline_grace_seconds}s",
                    )
                    for group in cluster.edge_groups
                ],
            }
        )
    if any(cluster.name in t.clusters for t in env.tenants):
        ratio = mon.quota_exhaustion_percent / 100
        groups.append(
            {
                "name": "fleetops.quota",
                "rules": [
                    _alert(
                        "FleetQuotaExhausted",
                        'kube_resourcequota{type="used",resource=~"requests\\\\..*"} / ignoring(type) '
                        f'kube_resourcequota{{type="hard",resource=~"requests\\\\..*"}} > {ratio}',
                        "15m",
                        "warning",
                        f"{{{{ $labels.namespace }}}} uses more than {mon.quota_exhaustion_percent}% of its {{{{ $labels.resource }}}} quota",
                    )
                ],
            }
        )
    return groups


def dashboard(cluster: spec.Cluster) -> dict[str, Any]:
    panels = [
        ("GPU utilisation by pool", "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"),
        ("Device quota used / hard", 'kube_resourcequota{type="used"} / ignoring(type) kube_resourcequota{type="hard"}'),
        ("Ready nodes", 'sum(kube_node_status_condition{condition="Ready",status="true"})'),
    ]
    return {
        "title": f"fleetops / {cluster.name}",
        "uid": f"fleetops-{cluster.name}"[:40],
        "schemaVersion": 39,
        "panels": [
            {"id": i + 1, "type": "timeseries", "title": title, "targets": [{"expr": expr}], "gridPos": {"x": 0, "y": 8 * i, "w": 24, "h": 8}}
            for i, (title, expr) in enumerate(panels)
        ],
    }


def monitoring(target: Target, cluster: spec.Cluster, env: spec.Environment) -> Part:
    ns = env.monitoring.namespace
    groups = rule_groups(cluster, env)

    def objects() -> Iterator[dict[str, Any]]:
        yield {"apiVersion": "v1", "kind": "Namespace", "metadata": target.metadata(ns)}
        if groups:
            yield {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": target.metadata("fleetops-fleet", ns),
                "spec": {"groups": groups},
            }
        if any(g["name"] == "fleetops.gpu" for g in groups):
            yield {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": target.metadata("dcgm-exporter", ns),
                "spec": {
                    "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                    "namespaceSelector": {"matchNames": [env.monitoring.dcgm_namespace]},
                    # The exporter labels each GPU's series with the namespace and pod using it: kept as
                    # scraped (not renamed exported_*), they are what prometheus-adapter maps to the pod
                    # whose autoscaler asks for its GPU utilisation (modules/autoscaling.py).
                    "endpoints": [{"port": "gpu-metrics", "interval": "30s", "path": "/metrics", "honorLabels": True}],
                },
            }
        yield {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": target.metadata("fleetops-dashboard", ns, labels={"grafana_dashboard": "1"}),
            "data": {"fleetops.json": json.dumps(dashboard(cluster), sort_keys=True, indent=2)},
        }

    return Part("fleetops:fleet:Monitoring", target.cluster, target, objects,
                outputs={"rule_groups": [g["name"] for g in groups]})
