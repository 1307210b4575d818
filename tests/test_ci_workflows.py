"""The CI workflows work as copied: valid YAML, and every fleetops command and option they use exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.cli import run
from tests.helpers import ROOT

WORKFLOWS = [ROOT / "docs" / "ci" / "github-actions.yml", ROOT / "docs" / "ci" / "gitlab-ci.yml"]
CALL = re.compile(r"\.venv/bin/fleetops ((?:[^\n\\]|\\\n)+)")


def invocations(path: Path) -> list[tuple[str, list[str]]]:
    out = []
    for match in CALL.finditer(path.read_text()):
        words = match.group(1).replace("\\\n", " ").split()
        out.append((words[0], [w.split("=")[0] for w in words[1:] if w.startswith("--")]))
    return out


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_fleetops_call_in_the_workflow_exists(path: Path) -> None:
    yaml.safe_load(path.read_text())
    calls = invocations(path)
    assert {c for c, _ in calls} >= {"plan", "approvals", "check"}
    for command, options in calls:
        help_text = run(command, "--help", env={"COLUMNS": "300"}).stdout
        for option in options:
            assert option in help_text, f"{path.name}: fleetops {command} has no {option}"


def test_github_plans_once_per_environment_and_deploys_one_at_a_time() -> None:
    flow = yaml.safe_load(WORKFLOWS[0].read_text())
    plan, deploy = flow["jobs"]["plan"], flow["jobs"]["deploy"]
    steps = "\n".join(str(s.get("run", "")) for s in plan["steps"])
    assert steps.count("fleetops plan") == 1 and plan["strategy"]["matrix"]["env"] == ["dev", "staging", "prod"]
    assert "fleetops approvals github" in steps and "--output github" in steps
    assert deploy["concurrency"] == {"group": "fleetops-deploy", "cancel-in-progress": False}
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["pull_request_review"]["types"] == ["submitted", "dismissed"]


def test_gitlab_uses_the_approvals_api_and_one_note_per_environment() -> None:
    flow = yaml.safe_load(WORKFLOWS[1].read_text())
    script = "\n".join(flow["fleetops-plan"]["script"][1:])
    assert script.count("fleetops plan") == 1 and "fleetops approvals gitlab" in script and "fleetops note" in script
    assert flow["fleetops-deploy"]["resource_group"] == "fleet"
