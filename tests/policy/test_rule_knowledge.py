"""What a rule knows lives in its .rego file: where its decisions are in the environment file
(METADATA `custom.location`, or the decision's `resource.field`) and its fix (`custom.fix`, with the
decision's values), so a new rule is placed and fixed in the plan without a line of Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetops import policy
from fleetops.errors import PolicyError
from tests.plan.test_plan import ROOT, commit, edit, git, plan, plan_json, repo  # noqa: F401 - repo is the fixture

PROD = Path("environments") / "prod.yaml"

NEW_RULE = '''# METADATA
# title: Edge latency in single digits
# description: A rule written for this test only.
package fleet.extra

# METADATA
# title: Edge latency in single digits
# description: An edge group's latency_ms is at most 9.
# custom:
#   severity: low
#   control_id: FLEET-TEST-01
#   fix:
#     - "lower {name}'s latency_ms by {over} on {cluster}"
#     - "serve it from a center cluster"
#   location: {field: latency_ms}
deny contains d if {
	some c in input.spec.clusters
	some g in object.get(c, "edge_groups", [])
	g.latency_ms > 9
	d := {
		"rule": "extra.latency_single_digit",
		"severity": "low",
		"msg": sprintf("%s: edge group %s is %d ms away", [c.name, g.name, g.latency_ms]),
		"resource": {"cluster": c.name, "kind": "EdgeGroup", "name": g.name},
		"figures": {"over": g.latency_ms - 9},
	}
}
'''


def on_main(repo: Path, message: str) -> None:
    """Commit what is in the working tree on main (the base, whose policies judge the change) and
    bring the change branch to it."""
    git(repo, "checkout", "-q", "main")
    commit(repo, message)
    git(repo, "checkout", "-q", "change")
    git(repo, "merge", "-q", "--ff-only", "main")


def line_of(repo: Path, text: str) -> tuple[int, str]:
    lines = (repo / PROD).read_text().splitlines()
    number = next(i for i, t in enumerate(lines, 1) if text in t)
    return number, lines[number - 1]


def test_a_new_rule_with_a_location_and_a_fix_touches_only_policies(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    (repo / "policies" / "extra.rego").write_text(NEW_RULE)
    on_main(repo, "policies: a rule of our own, in policies/ alone")
    edit(repo, "latency_ms: 15", "latency_ms: 12")
    commit(repo, "edge: 12 ms")
    number, text = line_of(repo, "latency_ms: 12")
    code, result = plan_json(repo)
    assert code == 1
    mine = [d for d in result["decisions"] if d["rule"] == "extra.latency_single_digit" and d["location"]["line"] == number]
    assert len(mine) == 1, [d for d in result["decisions"] if d["rule"] == "extra.latency_single_digit"]
    group, cluster = mine[0]["subject"]["name"], mine[0]["subject"]["cluster"]
    assert mine[0]["location"] == {"file": "environments/prod.yaml", "line": number, "column": text.index("latency_ms") + 1}
    assert mine[0]["fix"] == f"lower {group}'s latency_ms by 3 on {cluster}, or serve it from a center cluster"
    comment = plan(repo, "--env", "prod").stdout
    assert f"`extra.latency_single_digit` {cluster}: edge group {group} is 12 ms away — `environments/prod.yaml:{number}`" in comment
    assert f"**Fix:** lower {group}'s latency_ms by 3 on {cluster}, or serve it from a center cluster" in comment


def test_a_fix_alternative_naming_a_value_the_decision_lacks_is_left_out(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    (repo / "policies" / "extra.rego").write_text(NEW_RULE.replace('"figures": {"over": g.latency_ms - 9},\n', ""))
    on_main(repo, "policies: a rule whose decisions give no figures")
    edit(repo, "latency_ms: 15", "latency_ms: 12")
    commit(repo, "edge: 12 ms")
    _, result = plan_json(repo)
    fixes = {d["fix"] for d in result["decisions"] if d["rule"] == "extra.latency_single_digit"}
    assert fixes == {"serve it from a center cluster"}


@pytest.mark.parametrize("location, said", [
    ("{feild: latency_ms}", "custom.location is {'feild': 'latency_ms'}, not a mapping of field and causes"),
    ("{field: [a.b, c.d]}", "custom.location.field is ['a.b', 'c.d'], not one dotted path"),
    ("{causes: 3}", "custom.location.causes is 3, not a text or a list of texts"),
])
def test_a_malformed_location_is_refused_at_the_rules_line(tmp_path: Path, location: str, said: str) -> None:
    # A misspelt key would leave the rule's decisions at the wrong line, unnoticed.
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "extra.rego").write_text(NEW_RULE.replace("{field: latency_ms}", location))
    with pytest.raises(PolicyError) as caught:
        policy.rule_metadata(policy.load_bundle(folder))
    assert f"extra.rego:16: METADATA {said}" in str(caught.value)


SPARE = """      - name: fpga-arria10
        device: {resource: fpga.intel.com/region-ce48969398f05f33946d560708be108a"""


def test_a_pool_no_tenant_may_use_is_warned_at_its_line_with_its_idle_cost_and_granted_to_no_one(repo: Path) -> None:
    edit(repo, SPARE, "      - name: a100-spare\n        device: {resource: nvidia.com/gpu, model: A100-SXM4-80GB, per_node: 8}\n"
                      "        nodes: 2\n        match: {name_pattern: \"sh-a100-s-*\"}\n" + SPARE)
    commit(repo, "center-sh: two spare A100 nodes no tenant names")
    number, text = line_of(repo, "- name: a100-spare")
    code, result = plan_json(repo)
    [unused] = [d for d in result["decisions"] if d["rule"] == "capacity.unused_group"]
    idle = round(16 * 1.8 * 730)  # 16 A100-SXM4-80GB at 1.8 USD per device-hour
    assert unused["status"] == "warn"
    assert unused["msg"] == f"center-sh: pool a100-spare (16 A100-SXM4-80GB) is one no tenant may use: {idle} USD a month idle"
    assert unused["location"] == {"file": "environments/prod.yaml", "line": number, "column": text.index("name") + 1}
    assert unused["fix"] == f"name a100-spare under the pools of a tenant on center-sh, or remove it ({idle} USD a month)"
    # Kueue admits no job onto a flavor no ClusterQueue lists: its 16 GPUs are in no one's grant.
    assert {"cluster": "center-sh", "resource": "nvidia.com/gpu", "quota": 64, "guaranteed": 56, "shared": 64} in result["grants"]["clusters"]
    comment = plan(repo, "--env", "prod").stdout
    [row] = [line for line in comment.splitlines() if "`capacity.unused_group`" in line]
    assert row.startswith("| new | warn | `capacity.unused_group` | medium | center-sh:Pool/a100-spare |") and row.endswith(f"| environments/prod.yaml:{number} |")
    assert "| center-sh | all tenants | `nvidia.com/gpu` | 56 | 64 | — | — | 64 |" in comment


def test_over_budget_says_by_how_much_at_the_lines_that_raised_the_cost(repo: Path) -> None:
    edit(repo, "nodes: 16", "nodes: 60")
    commit(repo, "center-bj: 44 more H100 nodes")
    number, text = line_of(repo, "nodes: 60")
    _, result = plan_json(repo, "--approvals", "2")
    [over] = [d for d in result["decisions"] if d["rule"] == "budget.over_budget"]
    cost, budget = over["figures"]["cost"], over["figures"]["budget"]
    assert budget == 600000 and over["figures"]["over"] == cost - budget > 0
    assert f"exceeds the budget of 600000 by {cost - budget} (" in over["msg"]
    # The change's nodes, not the budget line it left alone.
    assert over["location"] == {"file": "environments/prod.yaml", "line": number, "column": text.index("nodes") + 1}
    assert over["fix"].startswith(f"lower nodes or quota in this environment by {cost - budget} USD a month, or raise budget.monthly")


def test_a_burst_raise_in_block_yaml_is_located_at_burst(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    edit(repo, "      nvidia.com/gpu: {guaranteed: 120, burst: 200}", "      nvidia.com/gpu:\n        guaranteed: 120\n        burst: 200")
    on_main(repo, "speech: its quota in block style")
    edit(repo, "        guaranteed: 120\n        burst: 200", "        guaranteed: 110\n        burst: 240")
    commit(repo, "speech: less guaranteed, more burst")
    number, text = line_of(repo, "burst: 240")
    _, result = plan_json(repo)
    raised = [d for d in result["decisions"] if d["rule"] == "change.quota_raise_approvals"]
    assert [d["msg"] for d in raised] == ["center-bj: tenant speech nvidia.com/gpu burst raised 200 -> 240 needs 2 approvals, has 0"]
    assert raised[0]["location"] == {"file": "environments/prod.yaml", "line": number, "column": text.index("burst") + 1}
