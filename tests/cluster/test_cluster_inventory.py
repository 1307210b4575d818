"""Live node data is untrusted: validated, normalised, and left out with a reason when malformed."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from fleetops import inventory, policy
from tests.reconcile_support import node


@pytest.mark.parametrize(("text", "value"), [("8", 8), ("500m", Decimal("0.5")), ("16Gi", 16 * 2**30), ("2k", 2000), ("1e3", 1000)])
def test_quantities(text: str, value: Decimal) -> None:
    assert inventory.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["eight", "8 GPUs", "", "1Q"])
def test_not_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        inventory.parse_quantity(text)


def test_a_good_node_is_normalised() -> None:
    info = inventory.read_node(node("gpu-1", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, allocatable={"nvidia.com/gpu": "8", "memory": "16Gi"}))
    assert info.ready and info.allocatable["nvidia.com/gpu"] == 8 and info.allocatable["memory"] == 16 * 2**30


def test_the_policies_see_a_read_node_as_its_live_node() -> None:
    # The policy input's node is a projection of the node read (`input.live.nodes`, policies/README.md):
    # whole counts as numbers, others as decimal text; a cordoned node's devices are not ready ones.
    cordoned = node("gpu-1", {"fleetops.io/pool": "a100"}, allocatable={"nvidia.com/gpu": "8", "cpu": "500m"})
    cordoned["spec"]["unschedulable"] = True
    live = inventory.LiveNode.of("c1", inventory.read_node(cordoned))
    quantities = {"cpu": "0.5", "nvidia.com/gpu": 8}
    assert live.model_dump(mode="json") == {"cluster": "c1", "name": "gpu-1", "labels": {"fleetops.io/pool": "a100"},
                                            "capacity": quantities, "allocatable": quantities, "ready": False}


def test_a_live_file_holds_the_nodes_the_reconciler_would_give_the_policies(tmp_path: Path) -> None:
    nodes = [inventory.LiveNode.of("c1", inventory.read_node(node(f"gpu-{i}", allocatable={"nvidia.com/gpu": "1e3", "memory": "16Gi"})))
             for i in range(2)]
    written = tmp_path / "live.json"
    written.write_text(json.dumps([n.model_dump(mode="json") for n in nodes]))
    assert policy.load_inventory(written).nodes == nodes


def _broken() -> list:
    bad_label = node("a")
    bad_label["metadata"]["labels"] = {"not a key!": "x"}
    bad_taint = node("b")
    bad_taint["spec"]["taints"] = [{"key": "k", "effect": "Sometimes"}]
    bad_time = node("c")
    bad_time["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    bad_status = node("d")
    bad_status["status"] = "ready"
    return [bad_label, bad_taint, bad_time, bad_status, {"metadata": {"name": "UPPER"}}, ["not", "a", "node"]]


def test_malformed_nodes_are_reported_and_left_out() -> None:
    inv = inventory.read_inventory("c1", [node("ok"), *_broken()])
    assert [n.name for n in inv.nodes] == ["ok"]
    assert len(inv.problems) == 6
    assert all(p.startswith("c1: node ") and "malformed, left out" in p for p in inv.problems)
    assert "effect" in inv.problems[1] and "yesterday" in inv.problems[2] and "#6" in inv.problems[5]


def test_a_node_broken_everywhere_is_one_bounded_line_naming_the_first_problems() -> None:
    broken = node("many")
    broken["spec"]["unschedulable"] = "true"  # a string is not a boolean: strict, as the API server's schema is
    broken["spec"]["taints"] = [{"key": "k", "effect": "Sometimes"}] * 200
    [problem] = inventory.read_inventory("c1", [broken]).problems
    assert problem.startswith("c1: node many: malformed, left out: spec.unschedulable: Input should be a valid boolean; spec.taints.0.effect: ")
    assert problem.endswith("; and 196 more") and len(problem) < 1000
