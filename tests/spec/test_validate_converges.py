"""validate's own suggestions converge: applied verbatim, the file validates at the next run (issue 39).

A tenant's borrowing allowance (burst - guaranteed) was split over its pools by their capacity, so the
share given to a pool whose units were all guaranteed to others could never be used: validate proposed
"lower burst to N", and at N proposed N - 1, round after round."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.generate import synthetic_environment
from fleetops import errors
from fleetops.commands import base
from tests.helpers import ROOT

# The suggestions validate words as an edit of the line it points at.
LOWER = re.compile(r"lower (burst|guaranteed) to (\d+)")
SPLIT = re.compile(r"declare e\.g\. guaranteed_per_pool: \{([^}]*)\}")
PLACE = re.compile(r'tenants\[([^\]]+)\]\.quota\["([^"]+)"\]')


def validate(path: Path) -> list[errors.Problem]:
    return base.problems_of(path)


def apply(data: dict[str, Any], problems: list[errors.Problem]) -> None:
    """Each problem's first suggestion, applied verbatim to the tenant's quota it names."""
    tenants = {t["name"]: t for t in data["tenants"]}
    for problem in problems:
        place = PLACE.match(problem.path or "")
        assert place, f"no edit to apply for {problem}"
        quota = tenants[place[1]]["quota"][place[2]]
        if split := SPLIT.search(problem.message):
            quota["guaranteed_per_pool"] = {k.strip(): int(v) for k, v in (kv.split(":") for kv in split[1].split(","))}
        elif lower := LOWER.search(problem.message):
            quota[lower[1]] = int(lower[2])
            quota["burst"] = max(quota["burst"], quota["guaranteed"])
        else:
            raise AssertionError(f"no edit to apply for {problem}")


def converges_in_one_round(data: dict[str, Any], tmp_path: Path) -> list[errors.Problem]:
    """The problems of the first run; asserts the file with them applied validates."""
    path = tmp_path / "environments" / f"{data['environment']}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    first = validate(path)
    apply(data, first)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert [str(p) for p in validate(path)] == [], f"after applying {[str(p) for p in first]}"
    return first


def prod() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "environments" / "prod.yaml").read_text())


def test_halving_a_time_sliced_pools_replicas_on_prod_converges_in_one_round(tmp_path: Path) -> None:
    """prod's a100-infer time-sliced 4 ways, then 2: the file validates, or what validate asks for is
    accepted at once (before: six rounds of "lower burst to N", each refused at the next run)."""
    data = prod()
    pool = next(p for c in data["clusters"] for p in c.get("pools", []) if p["name"] == "a100-infer")
    assert pool["sharing"] == {"mode": "time-slicing", "replicas": 4}
    pool["sharing"]["replicas"] = 2
    converges_in_one_round(data, tmp_path)


def test_a_burst_lowered_as_suggested_is_reachable_at_once(tmp_path: Path) -> None:
    """prod with half of each guarantee kept from lending: every "lower burst to N" holds at N."""
    data = prod()
    data["scheduler"]["lend_fraction"] = 0.5
    first = converges_in_one_round(data, tmp_path)
    assert any("lower burst to" in p.message for p in first)


def test_lending_more_as_suggested_makes_the_burst_reachable(tmp_path: Path) -> None:
    """The other way out validate offers, scheduler.lend_fraction, changes what a tenant may reach."""
    data = prod()
    data["scheduler"]["lend_fraction"] = 0.5
    path = tmp_path / "environments" / "prod.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert any("scheduler.lend_fraction" in p.message for p in validate(path))
    data["scheduler"]["lend_fraction"] = 1.0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert [str(p) for p in validate(path)] == []


def pai_like(nodes: int) -> dict[str, Any]:
    """The outside fleet's shape: 4 clusters (2 center, 2 edge), 355 tenants, 60 edge groups."""
    data = synthetic_environment(1.0, "pai", center_clusters=2, edge_clusters=2, tenants=355, edge_groups=60, nodes=nodes)
    assert len(data["clusters"]) == 4 and len(data["tenants"]) == 355
    assert sum(len(c.get("edge_groups", [])) for c in data["clusters"]) == 60
    return data


@pytest.mark.parametrize("nodes", [40, 2])  # roomy pools, and pools the tenants' guarantees overfill
def test_a_pai_shaped_fleet_validates_or_says_in_one_round_what_makes_it(tmp_path: Path, nodes: int) -> None:
    converges_in_one_round(pai_like(nodes), tmp_path)
