"""What `plan` says of the change itself, apart from what was there before it: the findings new in the
change, those already at base and those it resolves; a price edit's own cost; a removed field's line as
the base's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plan.test_plan import commit, edit, plan, plan_json, repo  # noqa: F401 - the fixture

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


VISION = "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}"
VISION_MORE = "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}"


def _by_rule(decisions: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in decisions:
        out.setdefault(d["rule"], set()).add(d["finding"])
    return out


def test_findings_already_at_base_are_told_apart_from_those_the_change_makes_and_resolves(repo: Path) -> None:  # noqa: F811
    # Every pull request had prod's waived share and budget warning annotated on it as if it made them.
    edit(repo, VISION, VISION_MORE)
    edit(repo, "budget: {monthly: 600000,", "budget: {monthly: 700000,")  # 540k of 700k: under the 80% alert
    commit(repo, "vision: a lot more GPUs; a larger budget")
    code, result = plan_json(repo)
    rules = _by_rule(result["decisions"])
    assert rules["quota.tenant_share"] == {"pre-existing"}  # the bundled waiver's, untouched
    assert all(f == {"new"} for rule, f in rules.items() if rule.startswith("change.")), rules
    assert [d["rule"] for d in result["resolved"]] == ["budget.alert_threshold"] and result["resolved"][0]["finding"] == "resolved"
    made = sum(f == {"new"} for f in rules.values())
    assert result["findings"] == {"new": len(result["decisions"]) - 1, "pre-existing": 1, "resolved": 1} and made
    assert code == 1 and result["verdict"] == "needs-approval"  # judged as before: only how loud a finding is changed
    annotations = plan(repo, "--env", "prod", "--output", "github").stdout.splitlines()
    assert not any("quota.tenant_share" in a for a in annotations), annotations
    assert any(a.startswith("::notice file=environments/prod.yaml,line=1,title=pre-existing findings::1 warning(s) or waived") for a in annotations)
    assert any("title=resolved findings::1 decision(s) at base resolved" in a for a in annotations)
    assert sum("title=approval%3A change." in a for a in annotations) == sum(d["status"] == "approval" for d in result["decisions"])
    md = plan(repo, "--env", "prod").stdout
    assert f"({result['findings']['new']} new, 1 pre-existing, 1 resolved)" in md
    assert "<details><summary>Resolved by this change (1)</summary>" in md


def test_a_deny_already_at_base_still_denies_the_change_and_says_so_folded(repo: Path) -> None:  # noqa: F811
    from tests.plan.test_plan import git

    git(repo, "checkout", "-q", "main")
    edit(repo, "budget: {monthly: 600000,", "budget: {monthly: 500000,")  # the fleet's 540k/mo: over it
    commit(repo, "a budget prod is already over")
    git(repo, "checkout", "-q", "-B", "change")
    edit(repo, "  interval_seconds: 60", "  interval_seconds: 90")
    commit(repo, "reconcile every 90 s")
    code, result = plan_json(repo)
    over = [d for d in result["decisions"] if d["rule"] == "budget.over_budget"]
    assert [(d["status"], d["finding"]) for d in over] == [("deny", "pre-existing")]
    assert code == 1 and result["verdict"] == "denied"  # fail closed: a deny the change did not make still denies
    annotations = plan(repo, "--env", "prod", "--output", "github").stdout.splitlines()
    (blocks,) = [a for a in annotations if a.startswith("::error")]
    assert "title=1 pre-existing decision(s) block::" in blocks and "budget.over_budget" in blocks
    md = plan(repo, "--env", "prod").stdout
    assert "**Denied by** (1 decision(s))" in md
    assert "<details><summary>1 pre-existing: already at base, not made by this change, and still blocking it</summary>" in md
