"""Synthetic large environments for benchmarks: valid, policy-clean fleets of a chosen size.

    python benchmarks/generate.py --scale 1 > /tmp/large.yaml     # 20 clusters, 200 pools, 1,000 tenants, 200 edge groups

`scale` multiplies tenants, pools and edge groups, so growth can be measured. Clusters stay at 20 up
to scale 1; past it the edge groups go to more edge clusters, at most 50 each, since Kueue holds at
most 64 flavors of one device resource in a cluster's Cohort (fleetops.spec.KUEUE). A fleet of more
tenants than an environment holds (fleetops.spec.LIMITS.tenants, as many as the policy input holds:
scale 4) is refused, exit 2: validate would refuse it.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from typing import Any

import yaml

from fleetops import spec

CENTER_CLUSTERS = 16
EDGE_CLUSTERS = 4
POOL_KINDS = [
    ({"resource": "nvidia.com/gpu", "model": "H100-SXM-80GB", "per_node": 8}, {"mode": "exclusive"}),
    ({"resource": "nvidia.com/gpu", "model": "A100-PCIE-40GB", "per_node": 4}, {"mode": "time-slicing", "replicas": 4}),
    ({"resource": "nvidia.com/gpu", "model": "A100-SXM4-80GB", "per_node": 8}, {"mode": "mig", "mig": {"strategy": "single", "profiles": {"1g.10gb": 7}}}),
    ({"resource": "huawei.com/Ascend910", "model": "Ascend910B", "per_node": 8}, {"mode": "exclusive"}),
    ({"resource": "fpga.intel.com/region-ce48969398f05f33946d560708be108a", "model": "Arria10-GX1150", "per_node": 2}, {"mode": "exclusive"}),
]
PRICES = {"H100-SXM-80GB": 2.9, "A100-PCIE-40GB": 1.4, "A100-SXM4-80GB": 1.8, "Ascend910B": 1.1, "Arria10-GX1150": 0.9, "Jetson-AGX-Orin": 0.05}


def _fingerprint(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _block(tenant: int, pools_per_cluster: int, centers: int) -> range:
    """The pools one tenant may use: a block of consecutive pools, one of each kind where there are enough."""
    blocks = max(1, pools_per_cluster // len(POOL_KINDS))
    start = (tenant // centers) % blocks * len(POOL_KINDS)
    return range(start, min(start + len(POOL_KINDS), pools_per_cluster))


def synthetic_environment(scale: float = 1.0, name: str = "large", *, center_clusters: int = CENTER_CLUSTERS,
                          edge_clusters: int | None = None, tenants: int | None = None, edge_groups: int | None = None,
                          nodes: int = 40) -> dict[str, Any]:
    """A fleet of `scale`; a shape may be given instead (clusters, tenants, edge groups over all edge clusters),
    e.g. a PAI-like one of 2 center and 2 edge clusters, 355 tenants and 60 edge groups; `nodes` per pool."""
    pools_per_cluster = max(1, round(12.5 * scale))
    edge_clusters = edge_clusters or EDGE_CLUSTERS * max(1, math.ceil(scale))
    groups_per_edge = max(1, round((edge_groups or 50 * scale * EDGE_CLUSTERS) / edge_clusters))
    tenants = tenants or max(1, round(1000 * scale))
    if tenants > spec.LIMITS.tenants:
        raise ValueError(f"{tenants:,} tenants: an environment holds at most {spec.LIMITS.tenants:,} (fleetops.spec.LIMITS.tenants, "
                         f"as many as its policy input of at most {spec.LIMITS.policy_input_bytes:,} bytes holds): "
                         f"--scale {spec.LIMITS.tenants / 1000:g} at most")
    clusters: list[dict[str, Any]] = []
    for c in range(center_clusters):
        pools = []
        for p in range(pools_per_cluster):
            device, sharing = POOL_KINDS[p % len(POOL_KINDS)]
            pools.append(
                {
                    "name": f"c{c}-pool{p}",
                    "device": device,
                    "nodes": nodes,
                    "sharing": sharing,
                    "match": {"name_pattern": f"c{c}-pool{p}-*"},
                }
            )
        clusters.append({"name": f"center-{c}", "role": "center", "context": f"center-{c}", "pools": pools})
    for e in range(edge_clusters):
        groups = [
            {
                "name": f"e{e}-group{g}",
                "device": {"resource": "nvidia.com/gpu", "model": "Jetson-AGX-Orin", "per_node": 1},
                "nodes": 20,
                "heartbeat_seconds": 10,
                "offline_grace_seconds": 300,
                "latency_ms": 15,
                "fingerprints": [_fingerprint(f"e{e}-group{g}")],
                "match": {"name_pattern": f"e{e}-group{g}-*"},
            }
            for g in range(groups_per_edge)
        ]
        clusters.append(
            {"name": f"edge-{e}", "role": "edge", "context": f"edge-{e}", "edge_runtime": "kubeedge" if e % 2 == 0 else "openyurt", "edge_groups": groups}
        )
    tenant_list = []
    for t in range(tenants):
        edge = t % 10 == 9
        if edge:
            e = t % edge_clusters
            tenant_list.append(
                {
                    "name": f"tenant-{t}",
                    "clusters": [f"edge-{e}"],
                    "workloads": ["inference"],
                    "priority_classes": ["inference-critical"],
                    "edge_groups": [f"e{e}-group{t % groups_per_edge}"],
                    "quota": {"nvidia.com/gpu": {"guaranteed": 1, "burst": 2}},
                    "network": {"allow_to_endpoints": ["model-registry"]},
                }
            )
            continue
        c = t % center_clusters
        resources = {"nvidia.com/gpu": {"guaranteed": 2, "burst": 8}}
        if t % 3 == 0 and pools_per_cluster > 3:  # small scales have no Ascend pool to draw from
            resources["huawei.com/Ascend910"] = {"guaranteed": 1, "burst": 4}
        tenant_list.append(
            {
                "name": f"tenant-{t}",
                "clusters": [f"center-{c}"],
                "workloads": ["training", "inference"],
                "priority_classes": ["training-standard", "inference-critical"],
                "quota": resources,
                # Only the pools of its quota's devices (a reachable pool without quota is a policy warning),
                # in one block of len(POOL_KINDS) pools: a tenant's reach does not grow with the fleet.
                "pools": [f"c{c}-pool{p}" for p in _block(t, pools_per_cluster, center_clusters) if POOL_KINDS[p % len(POOL_KINDS)][0]["resource"] in resources],
                "network": {"allow_to_endpoints": ["model-registry"]},
            }
        )
    return {
        "environment": name,
        "clusters": clusters,
        "tenants": tenant_list,
        "priority_classes": [
            {"name": "inference-critical", "value": 100000, "workload": "inference"},
            {"name": "training-standard", "value": 5000, "workload": "training"},
            {"name": "batch-low", "value": 100, "workload": "batch", "preemption": "Never", "global_default": True},
        ],
        "scheduler": {"backend": "kueue"},
        "network": {"center_endpoints": [{"name": "model-registry", "cidr": "10.20.0.0/24", "ports": [443]}]},
        "prices": PRICES,
        "budget": {"monthly": 1e9, "currency": "USD", "alert_at": [0.8, 0.95]},
    }


def synthetic_yaml(scale: float = 1.0, name: str = "large") -> str:
    return yaml.safe_dump(synthetic_environment(scale, name), sort_keys=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--name", default="large")
    args = parser.parse_args()
    try:
        text = synthetic_yaml(args.scale, args.name)
    except ValueError as exc:  # one line, nothing written
        sys.stderr.write(f"generate.py: --scale {args.scale:g}: {exc}\n")
        sys.exit(2)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
