"""Test helpers: small environments written to tmp_path and rendered through the real stack program."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from fleetops import render

ROOT = Path(__file__).resolve().parent.parent
FINGERPRINT = "sha256:" + "ab" * 32

SMALL: dict[str, Any] = {
    "environment": "test",
    "clusters": [
        {
            "name": "center-a",
            "role": "center",
            "context": "ctx-a",
            "pools": [
                {
                    "name": "a100-ts",
                    "device": {"resource": "nvidia.com/gpu", "model": "A100-PCIE-40GB", "per_node": 4},
                    "nodes": 2,
                    "sharing": {"mode": "time-slicing", "replicas": 4},
                    "taints": [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}],
                },
                {
                    "name": "h100-mig",
                    "device": {"resource": "nvidia.com/gpu", "model": "H100-SXM-80GB", "per_node": 8},
                    "nodes": 1,
                    "sharing": {"mode": "mig", "mig": {"strategy": "single", "profiles": {"1g.10gb": 7}}},
                },
                {
                    "name": "ascend",
                    "device": {"resource": "huawei.com/Ascend910", "model": "Ascend910B", "per_node": 8},
                    "nodes": 1,
                },
            ],
        },
        {
            "name": "edge-b",
            "role": "edge",
            "context": "ctx-b",
            "edge_runtime": "kubeedge",
            "edge_groups": [
                {
                    "name": "jetson",
                    "device": {"resource": "nvidia.com/gpu", "model": "Jetson-AGX-Orin", "per_node": 1},
                    "nodes": 4,
                    "heartbeat_seconds": 10,
                    "offline_grace_seconds": 240,
                    "latency_ms": 20,
                    "fingerprints": [FINGERPRINT],
                    "match": {"name_pattern": "jetson-*"},
                }
            ],
        },
    ],
    "tenants": [
        {
            "name": "vision",
            "clusters": ["center-a"],
            "workloads": ["training", "inference"],
            "priority_classes": ["high"],
            "quota": {"nvidia.com/gpu": {"guaranteed": 20, "burst": 30}, "huawei.com/Ascend910": {"guaranteed": 4, "burst": 8}},
        },
        {
            "name": "factory",
            "clusters": ["edge-b"],
            "workloads": ["inference"],
            "edge_groups": ["jetson"],
            "quota": {"nvidia.com/gpu": {"guaranteed": 2, "burst": 3}},
        },
    ],
    "priority_classes": [{"name": "high", "value": 1000, "workload": "inference"}],
    "scheduler": {"backend": "kueue"},
    "prices": {"A100-PCIE-40GB": 1.4, "H100-SXM-80GB": 2.9, "Ascend910B": 1.1, "Jetson-AGX-Orin": 0.05},
    "budget": {"monthly": 100000, "currency": "USD"},
}


def small_env() -> dict[str, Any]:
    """A fresh, valid small environment to modify in a test."""
    return copy.deepcopy(SMALL)


def write_env(directory: Path, env: dict[str, Any]) -> Path:
    path = directory / f"{env['environment']}.yaml"
    path.write_text(yaml.safe_dump(env, sort_keys=False))
    return path


def render_env(directory: Path, env: dict[str, Any]) -> render.DesiredState:
    return render.render(write_env(directory, env), revision="rev-test")


def find(state: render.DesiredState, cluster: str, kind: str, name: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """The rendered objects of a kind in a cluster, optionally by name and namespace."""
    return [
        m
        for m in state.clusters[cluster]
        if m["kind"] == kind
        and (name is None or m["metadata"]["name"] == name)
        and (namespace is None or m["metadata"].get("namespace") == namespace)
    ]


def one(state: render.DesiredState, cluster: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    found = find(state, cluster, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name} in {cluster}, got {len(found)}"
    return found[0]


def spot_env() -> dict[str, Any]:
    """The small environment with a spot pool on center-a, priced by itself (its model is in no `prices`),
    that tenant vision names and may use through its preemptible class `low`."""
    env = small_env()
    env["clusters"][0]["pools"].append({"name": "a100-spot", "device": {"resource": "nvidia.com/gpu", "model": "A100-SXM4-80GB", "per_node": 8},
                                        "nodes": 2, "spot": {"price": 0.6}})
    env["priority_classes"].append({"name": "low", "value": 10, "workload": "batch", "preemptible": True})
    env["tenants"][0]["priority_classes"] = ["high", "low"]
    env["tenants"][0]["pools"] = ["a100-ts", "h100-mig", "ascend", "a100-spot"]
    return env
