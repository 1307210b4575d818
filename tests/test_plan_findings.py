"""What `plan` says of the change itself, apart from what was there before it: the findings new in the
change, those already at base and those it resolves; a price edit's own cost; a removed field's line as
the base's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_plan import commit, edit, plan, plan_json, repo  # noqa: F401 - the fixture

HOURS = 730


def test_a_price_change_shows_its_own_cost_apart_from_the_capacity_it_adds(repo: Path) -> None:  # noqa: F811
    # The month's change was one figure: a price rise and eight more nodes in one change read alike.
    edit(repo, "H100-SXM-80GB: 2.9", "H100-SXM-80GB: 3.1")
    edit(repo, "        nodes: 16\n        sharing: {mode: exclusive}", "        nodes: 24\n        sharing: {mode: exclusive}")
    commit(repo, "H100 dearer, and 8 more H100 nodes")
    _, result = plan_json(repo)
    h100_after = (24 + 4) * 8  # h100-train and h100-mig, at head
    from_prices, from_capacity = 0.2 * h100_after * HOURS, 8 * 8 * 2.9 * HOURS
    cost = result["cost"]
    assert cost["from_prices"] == pytest.approx(from_prices) and cost["from_capacity"] == pytest.approx(from_capacity)
    assert cost["delta"] == pytest.approx(from_prices + from_capacity)
    # In fleet terms, each line says what it moves itself: the nodes at the base's price, the price on every H100 of head.
    texts = {c["subject"]: (c["text"], c["cost"]) for c in result["fleet_changes"]}
    assert texts["center-bj/h100-train"][1] == pytest.approx(from_capacity)
    assert texts["prices/H100-SXM-80GB"] == (f"price of H100-SXM-80GB: 2.9 → 3.1 USD/device-hour (+{from_prices:,.0f} USD/mo on {h100_after} devices)",
                                              pytest.approx(from_prices))
    md = plan(repo, "--env", "prod").stdout
    assert f"(**+{from_prices + from_capacity:,.0f}**: +{from_prices:,.0f} from price changes, +{from_capacity:,.0f} from capacity)" in md


def test_a_capacity_change_alone_has_no_price_share(repo: Path) -> None:  # noqa: F811
    edit(repo, "        nodes: 16\n        sharing: {mode: exclusive}", "        nodes: 24\n        sharing: {mode: exclusive}")
    commit(repo, "8 more H100 nodes")
    _, result = plan_json(repo)
    assert result["cost"]["from_prices"] == 0 and result["cost"]["from_capacity"] == result["cost"]["delta"] > 0
    assert "from price changes" not in plan(repo, "--env", "prod").stdout


def test_a_removed_fields_line_is_marked_as_the_bases(repo: Path) -> None:  # noqa: F811
    # A removed field showed the base's line number as if it were head's: a reviewer opened the wrong line.
    base_line = (repo / "environments" / "prod.yaml").read_text().splitlines().index("        sharing: {mode: exclusive}") + 1
    edit(repo, "        nodes: 16\n        sharing: {mode: exclusive}\n", "        nodes: 16\n")
    commit(repo, "h100-train: sharing left to its default")
    _, result = plan_json(repo)
    (removed,) = [c for c in result["spec_changes"] if c["path"] == "clusters[center-bj].pools[h100-train].sharing.mode"]
    assert (removed["side"], removed["line"], removed["place"]) == ("base", base_line, f"base:environments/prod.yaml:{base_line}")
    md = plan(repo, "--env", "prod").stdout
    assert f"`base:environments/prod.yaml:{base_line}`" in md
