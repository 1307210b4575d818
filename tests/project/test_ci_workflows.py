"""The CI workflows work as copied: valid YAML, and every fleetops command and option they use exists."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.command import run
from tests.helpers import ROOT

WORKFLOWS = [ROOT / "docs" / "ci" / "github-actions.yml", ROOT / "docs" / "ci" / "gitlab-ci.yml"]
CALL = re.compile(r"\.venv/bin/fleetops ((?:[^\n\\]|\\\n)+)")
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")
# How a GitHub job may name a secret: `secrets.NAME`, or the environment's own `secrets[format('NAME_{0}', env.FLEETOPS_ENV)]`.
SECRET = re.compile(r"secrets(?:\.(\w+)|\[format\('(\w+)\{0\}', env\.FLEETOPS_ENV\)\])")


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


def deploy_jobs(flow: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The GitHub jobs that run `pulumi up`, as (job name, job) by the GitHub environment each runs under."""
    return {job.get("environment"): (name, job) for name, job in flow["jobs"].items()
            if any("pulumi up" in str(step.get("run", "")) for step in job["steps"])}


def secrets_read(what: Any, env: str) -> set[str]:
    """The secrets `what` (a job, a step, an env mapping) reads as GitHub resolves their names for environment
    `env` (in capitals: GitHub's secret names are case-insensitive)."""
    expressions = EXPRESSION.findall(json.dumps(what))
    named = [SECRET.findall(e) for e in expressions if "secrets" in e]
    assert all(len(n) == 1 for n in named), f"a secret read in a form this test does not resolve: {expressions}"
    return {(static or prefix + env).upper() for [(static, prefix)] in named}


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
    plan = flow["jobs"]["plan"]
    steps = "\n".join(str(s.get("run", "")) for s in plan["steps"])
    assert steps.count("fleetops plan") == 1 and plan["strategy"]["matrix"]["env"] == ["dev", "staging", "prod"]
    assert "fleetops approvals github" in steps and "--output github" in steps
    for env, (_, job) in deploy_jobs(flow).items():  # one deploy of each environment at a time, never cancelled half-way
        assert job["concurrency"] == {"group": f"fleetops-deploy-{env}", "cancel-in-progress": False}
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["pull_request_review"]["types"] == ["submitted", "dismissed"]


def test_github_deploys_each_environment_under_its_own_environment_and_secrets() -> None:
    # One matrix job deployed dev, staging and prod under the one GitHub environment `production` with one
    # KUBECONFIG and one Pulumi token: prod's reviewers gated dev, and dev's deploy held prod's credentials.
    flow = yaml.safe_load(WORKFLOWS[0].read_text())
    deploys = deploy_jobs(flow)
    assert list(deploys) == ["dev", "staging", "prod"]
    read = {env: secrets_read(job, env) for env, (_, job) in deploys.items()}
    for env, (name, job) in deploys.items():
        suffix = env.upper()
        assert job["env"]["FLEETOPS_ENV"] == env, name  # deployed under its own protection rules, reviewers and environment secrets
        assert read[env] == {f"FLEETOPS_KUBECONFIG_{suffix}", f"PULUMI_CONFIG_PASSPHRASE_{suffix}", f"PULUMI_ACCESS_TOKEN_{suffix}"}, name
        assert not secrets_read(job.get("env", {}), env), f"{name}: a secret in the job's env reaches every step"
        runs = {str(step.get("run", "")): step for step in job["steps"]}
        assert '.venv/bin/fleetops check --env "$FLEETOPS_ENV"' in runs
        for command in (f'pulumi preview --stack "$FLEETOPS_ENV"', f'pulumi up --yes --stack "$FLEETOPS_ENV"'):
            step = next(step for run, step in runs.items() if run.startswith(command))
            assert secrets_read(step["env"]["PULUMI_ACCESS_TOKEN"], env) == {f"PULUMI_ACCESS_TOKEN_{suffix}"}, (name, command)
        credentials = next(step for run, step in runs.items() if "KUBECONFIG=" in run and "PULUMI_CONFIG_PASSPHRASE_FILE=" in run)
        assert {secrets_read(value, env).pop() for value in credentials["env"].values()} == read[env], name
        assert "exit 1" in credentials["run"], f"{name}: a missing secret must stop the deploy"
    for a, b in itertools.combinations(read, 2):
        assert not read[a] & read[b], f"{a} and {b} share {read[a] & read[b]}"
    # prod only after staging deployed, staging only after dev.
    assert deploys["staging"][1]["needs"] == deploys["dev"][0] and deploys["prod"][1]["needs"] == deploys["staging"][0]


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


def gitlab_deploy_jobs(flow: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The GitLab jobs that run `pulumi up`, by the GitLab environment each runs under, `extends` resolved
    as GitLab merges it (mappings deeply, the rest replaced)."""
    def resolved(job: dict[str, Any]) -> dict[str, Any]:
        base = resolved(flow[job["extends"]]) if "extends" in job else {}
        return {**base, **job, "variables": {**base.get("variables", {}), **job.get("variables", {})}}

    jobs = {name: resolved(job) for name, job in flow.items() if not name.startswith(".") and isinstance(job, dict) and ({"script", "extends"} & set(job))}
    return {job.get("environment", {}).get("name"): (name, job) for name, job in jobs.items() if "pulumi up" in script_of(job)}


def test_gitlab_deploys_each_environment_with_its_own_kubeconfig(tmp_path: Path) -> None:
    # One matrix job deployed dev, staging and prod with the one KUBECONFIG variable: dev's deploy held prod's clusters.
    flow = yaml.safe_load(WORKFLOWS[1].read_text())
    deploys = gitlab_deploy_jobs(flow)
    assert list(deploys) == ["dev", "staging", "prod"]
    assert "KUBECONFIG" not in flow.get("variables", {})
    held = {env: {name: f"{name.lower()}-of-{env}" for name in ("KUBECONFIG", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_ACCESS_TOKEN")}
            for env in deploys}
    every = {f"{'FLEETOPS_' if name == 'KUBECONFIG' else ''}{name}_{env.upper()}": value for env, values in held.items() for name, value in values.items()}
    for env, (name, job) in deploys.items():
        assert job["variables"]["ENV"] == env and "KUBECONFIG" not in job["variables"], name
        assert job["resource_group"] == f"fleet-{env}", name  # one deploy of an environment at a time
        block = next(item for item in job["script"] if isinstance(item, str) and "KUBECONFIG=" in item)
        show = block + '\nprintf "%s|%s|%s" "$KUBECONFIG" "$PULUMI_CONFIG_PASSPHRASE" "$PULUMI_ACCESS_TOKEN"\n'
        # The job's shell, as the runner gives it every environment's variables a careless scope would leave.
        out = subprocess.run(["sh", "-c", show], env={"PATH": "/usr/bin:/bin", "ENV": env, **every}, capture_output=True, text=True, check=False)
        assert out.returncode == 0 and out.stdout.split("|") == list(held[env].values()), (name, out.stdout, out.stderr)
        mine = f"FLEETOPS_KUBECONFIG_{env.upper()}"
        missing = subprocess.run(["sh", "-c", show], env={"PATH": "/usr/bin:/bin", "ENV": env, **{k: v for k, v in every.items() if k != mine}},
                                 capture_output=True, text=True, check=False)
        assert missing.returncode == 1 and mine in missing.stdout, (name, missing.stdout)  # never another environment's
    assert deploys["staging"][1]["needs"] == [deploys["dev"][0]] and deploys["prod"][1]["needs"] == [deploys["staging"][0]]
