"""MIG layouts against NVIDIA's profile tables and placement rules (fleetops.mig)."""

from __future__ import annotations

import pytest

from fleetops import mig, spec

# NVIDIA's own layouts (mig-parted config-default.yaml, GPU Operator default-mig-parted-config).
NVIDIA_LAYOUTS = [
    ("A100-SXM4-40GB", {"1g.5gb": 7}), ("A100-SXM4-40GB", {"1g.10gb": 4}), ("A100-SXM4-40GB", {"2g.10gb": 3}),
    ("A100-SXM4-40GB", {"3g.20gb": 2}), ("A100-SXM4-40GB", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    ("A100-SXM4-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}), ("H100-SXM-80GB", {"3g.40gb": 1, "4g.40gb": 1}),
    ("H100-NVL", {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}), ("H200-SXM-141GB", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    ("B200", {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}), ("GB200", {"7g.186gb": 1}), ("A30-24GB", {"1g.6gb": 2, "2g.12gb": 1}),
    ("H100-SXM-80GB", {"1g.10gb": 7}), ("H100-SXM-80GB", {"1g.20gb": 4}), ("H100-SXM-80GB", {"7g.80gb": 1}),
]


@pytest.mark.parametrize(("model", "layout"), NVIDIA_LAYOUTS)
def test_nvidia_layouts_fit(model: str, layout: dict[str, int]) -> None:
    assert mig.layout_problem(model, layout) is None


@pytest.mark.parametrize(("model", "layout", "problem"), [
    ("H100-SXM-80GB", {"1g.10gb": 50}, "at most 7 1g.10gb"),
    ("H100-SXM-80GB", {"3g.40gb": 3}, "at most 2 3g.40gb"),
    ("H100-SXM-80GB", {"3g.40gb": 2, "1g.10gb": 1}, "9 memory slices"),
    ("H100-SXM-80GB", {"4g.40gb": 1, "2g.20gb": 2}, "8 compute slices"),
    ("H100-SXM-80GB", {"1g.10gb+me": 2}, "at most 1 1g.10gb+me"),
    ("A30-24GB", {"1g.6gb+me": 1, "2g.12gb+me": 1}, "one media engine"),
    ("A100-PCIE-40GB", {"1g.10gb": 7}, "at most 4 1g.10gb"),  # 1g.10gb takes two slices on the 40 GB A100
    ("H100-SXM-80GB", {"1g.5gb": 7}, "no MIG profile 1g.5gb"),
    ("L40S", {"1g.10gb": 1}, "has no MIG"),
])
def test_impossible_layouts_are_named(model: str, layout: dict[str, int], problem: str) -> None:
    assert problem in (mig.layout_problem(model, layout) or "")


def test_placement_is_checked_beyond_the_slice_counts() -> None:
    h100 = mig.FAMILIES["H100-80GB"]
    # 1g instances may not start at the last memory slice: seven fit, and a 3g leaves them four.
    assert mig._placeable(h100, {"3g.40gb": 1, "1g.10gb": 4})
    a30 = mig.FAMILIES["A30-24GB"]
    assert not mig._placeable(a30, {"2g.12gb": 1, "1g.6gb": 3})  # 2+3 slices of 4


@pytest.mark.parametrize(("model", "family"), [
    ("H100-SXM-80GB", "H100-80GB"), ("H800-SXM-80GB", "H100-80GB"), ("H100-NVL", "H100-94GB"), ("H100-PCIE-94GB", "H100-94GB"),
    ("A100-PCIE-40GB", "A100-40GB"), ("A100-SXM4-80GB", "A100-80GB"), ("GH200", "H100-96GB"), ("GB200", "GB200-186GB"),
    ("B200", "B200-180GB"), ("H200-SXM-141GB", "H200-141GB"), ("A30-24GB", "A30-24GB"),
])
def test_models_as_environments_write_them_find_their_family(model: str, family: str) -> None:
    assert mig.family_of(model).name == family


def test_capacity_counts_schedulable_instances_of_a_valid_layout() -> None:
    pool = spec.Pool.model_validate({
        "name": "p", "device": {"resource": "nvidia.com/gpu", "model": "H100-SXM-80GB", "per_node": 8}, "nodes": 2,
        "sharing": {"mode": "mig", "mig": {"strategy": "mixed", "profiles": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb+me": 1}}},
    })
    assert spec.group_capacity(pool) == {"nvidia.com/mig-3g.40gb": 16, "nvidia.com/mig-2g.20gb": 16, "nvidia.com/mig-1g.10gb.me": 16}
