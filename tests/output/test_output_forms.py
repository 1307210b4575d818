"""The forms conftest users expect of `check` and `plan`: SARIF 2.1.0 (GitHub code scanning), validated against
the published schema (tests/schemas/SOURCES.md), and TAP 13; and the CLI kept to arguments and exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import ROOT
from tests.plan.test_plan import commit, edit, plan, repo  # noqa: F401 - repo is the fixture
from tests.policy.test_policy_cli import mutated_env_dir, run

SARIF = jsonschema.Draft4Validator(json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))
MORE_GPUS = ("nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}",
             "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")


def sarif(text: str) -> dict:
    log = json.loads(text)
    problems = sorted(SARIF.iter_errors(log), key=lambda e: list(e.path))
    assert not problems, [f"{list(e.path)}: {e.message}" for e in problems[:5]]
    return log


def test_check_sarif_is_valid_with_a_result_per_unwaived_deny_or_warning_and_the_rules_metadata(tmp_path: Path) -> None:
    environments = mutated_env_dir(tmp_path, lambda d: d["budget"].update(monthly=500000))
    decided = json.loads(run("check", "--env", "prod", "--environments", str(environments), "--output", "json", tmp_path=tmp_path).stdout)
    done = run("check", "--env", "prod", "--environments", str(environments), "--output", "sarif", tmp_path=tmp_path)
    assert done.returncode == 1, done.stderr  # the exit code is the verdict's, whatever the form
    (found,) = sarif(done.stdout)["runs"]
    flagged = [d for d in decided["decisions"] if d["status"] in ("deny", "warn")]
    assert [(r["ruleId"], r["level"]) for r in found["results"]] == [(d["rule"], "error" if d["status"] == "deny" else "warning") for d in flagged]
    assert ("budget.over_budget", "error") in [(r["ruleId"], r["level"]) for r in found["results"]]
    assert not any(r["ruleId"] == "quota.tenant_share" for r in found["results"])  # waived: not a finding
    rules = found["tool"]["driver"]["rules"]
    over = next(r for r in rules if r["id"] == "budget.over_budget")
    assert over["shortDescription"]["text"] and not over["shortDescription"]["text"].startswith("budget.")  # its METADATA title
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in found["results"])
    place = found["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert place == (environments / "prod.yaml").as_posix()  # a decision without a place of its own: on its environment file


def test_plan_sarif_puts_each_decision_at_its_line(repo: Path) -> None:  # noqa: F811 - the fixture
    edit(repo, *MORE_GPUS)
    commit(repo, "vision: a lot more GPUs")
    decided = json.loads(plan(repo, "--env", "prod", "--output", "json").stdout)
    done = plan(repo, "--env", "prod", "--output", "sarif")
    assert done.returncode == 1, done.stderr
    (found,) = sarif(done.stdout)["runs"]
    approvals = [d for d in decided["decisions"] if d["status"] == "approval"]
    assert len(approvals) == 2
    located = {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in found["results"]
               if "region" in r["locations"][0]["physicalLocation"]}
    assert {(d["rule"], d["location"]["line"]) for d in approvals} <= located
    # Each rule by the title of its METADATA in the base's policies, as `check` names it, not by its id alone.
    rules = {r["id"]: r for r in found["tool"]["driver"]["rules"]}
    for d in approvals:
        assert d["title"] and rules[d["rule"]]["shortDescription"]["text"] == d["title"] != d["rule"]


def test_check_tap_has_a_line_per_decision_not_ok_for_a_deny(tmp_path: Path) -> None:
    environments = mutated_env_dir(tmp_path, lambda d: d["budget"].update(monthly=500000))
    decided = json.loads(run("check", "--env", "prod", "--environments", str(environments), "--output", "json", tmp_path=tmp_path).stdout)
    done = run("check", "--env", "prod", "--environments", str(environments), "--output", "tap", tmp_path=tmp_path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[:2] == ["TAP version 13", f"1..{len(decided['decisions']) + 1}"]
    tests = [line for line in lines if re.match(r"(not )?ok \d+ - ", line)]
    assert len(tests) == len(decided["decisions"]) + 1
    assert [t.startswith("not ok") for t in tests[:-1]] == [d["status"] == "deny" for d in decided["decisions"]]
    assert any(t.startswith("not ok") and "budget.over_budget" in t for t in tests)
    assert any("quota.tenant_share" in t and "# SKIP waived" in t for t in tests)
    assert tests[-1].startswith("not ok") and "policy gate" in tests[-1]


def test_plan_tap_fails_on_a_missing_approval(repo: Path) -> None:  # noqa: F811 - the fixture
    edit(repo, *MORE_GPUS)
    commit(repo, "vision: a lot more GPUs")
    done = plan(repo, "--env", "prod", "--output", "tap")
    assert done.returncode == 1 and done.stdout.startswith("TAP version 13\n")
    assert sum(line.startswith("not ok") for line in done.stdout.splitlines()) == 3  # two approvals missing, and the gate


@pytest.mark.parametrize("form", ["sarif", "tap"])
def test_a_passing_check_exits_0_in_the_new_forms(tmp_path: Path, form: str) -> None:
    done = run("check", "--env", "prod", "--output", form, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    if form == "sarif":
        assert [r["level"] for r in sarif(done.stdout)["runs"][0]["results"]] == ["warning"]  # the budget's warning; the waived share is none
    else:
        assert not [line for line in done.stdout.splitlines() if line.startswith("not ok")]


def test_the_cli_module_is_arguments_and_exit_codes_only() -> None:
    # Issue 40: each command's arguments are in fleetops/commands/, its forms in fleetops/output/; cli.py registers them.
    assert len((ROOT / "fleetops" / "cli.py").read_text().splitlines()) < 400
