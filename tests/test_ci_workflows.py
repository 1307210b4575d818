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


def script_of(job: dict) -> str:
    """A GitLab job's script as its runner reads it: nested lists (from YAML anchors) flattened."""
    flat = [line for item in job["script"] for line in (item if isinstance(item, list) else [item])]
    return "\n".join(flat)


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


def test_the_gate_runs_the_bases_fleetops_and_takes_the_head_as_data() -> None:
    flow = yaml.safe_load(WORKFLOWS[0].read_text())
    triggers, plan = flow[True], flow["jobs"]["plan"]
    assert "pull_request" not in triggers and "pull_request_target" in triggers  # the workflow file is the base's
    checkout = plan["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.base.sha }}" and checkout["with"]["persist-credentials"] is False
    runs = [str(s.get("run", "")) for s in plan["steps"]]
    assert not any("checkout" in r and "HEAD_SHA" in r for r in runs)  # the head is never checked out
    setup, planned = next(i for i, r in enumerate(runs) if "make setup" in r), next(i for i, r in enumerate(runs) if "fleetops plan" in r)
    assert setup < planned and "--require-base-program" in runs[planned] and '--head "$HEAD_SHA"' in runs[planned]
    gitlab = script_of(yaml.safe_load(WORKFLOWS[1].read_text())["fleetops-plan"])
    assert gitlab.index('git checkout --quiet --detach "$BASE_SHA"') < gitlab.index("make setup") < gitlab.index("--require-base-program")


def test_gitlab_uses_the_approvals_api_and_one_note_per_environment() -> None:
    flow = yaml.safe_load(WORKFLOWS[1].read_text())
    script = script_of(flow["fleetops-plan"])
    assert script.count("fleetops plan") == 1 and "fleetops approvals gitlab" in script and "fleetops note" in script
    assert flow["fleetops-deploy"]["resource_group"] == "fleet"
