"""`fleetops deploy` refuses what it cannot run with one line and exit 2, before Pulumi starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetops import render, spec
from tests.command import run
from tests.helpers import small_env, write_env

# A newcomer's shell without any Pulumi setting.
CLEAN = {k: "" for k in os.environ if k.startswith("PULUMI_")}


def deploy(tmp_path: Path, *args: str | Path, env: dict[str, str] | None = None):
    return run("deploy", "--env", "dev", "--state", tmp_path / "state", *args, env={**CLEAN, **(env or {})})


def test_no_pulumi_cli_is_named_with_where_to_get_one(tmp_path: Path) -> None:
    out = deploy(tmp_path, "--pulumi", tmp_path / "pulumi")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"{tmp_path / 'pulumi'}: no Pulumi CLI there: `make tools` builds one into .tools/bin, or pass --pulumi FILE"


def test_no_passphrase_is_bad_input_and_a_given_one_is_never_printed(tmp_path: Path) -> None:
    fake = tmp_path / "pulumi"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    out = deploy(tmp_path, "--pulumi", fake)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "no passphrase for the stack's secrets: set PULUMI_CONFIG_PASSPHRASE_FILE" in out.stderr
    # With a passphrase, the next thing missing (the provider beside the CLI) is said; the passphrase never is.
    out = deploy(tmp_path, "--pulumi", fake, env={"PULUMI_CONFIG_PASSPHRASE": "correct-horse-battery"})
    assert out.returncode == 2 and "no Kubernetes provider plugin there" in out.stderr
    assert "correct-horse-battery" not in out.stdout + out.stderr


def test_an_unknown_environment_or_kubeconfig_is_named(tmp_path: Path) -> None:
    out = run("deploy", "--env", "nowhere", "--state", tmp_path / "state", env=CLEAN)
    assert out.returncode == 2 and "nowhere" in out.stderr and "Traceback" not in out.stderr
    out = deploy(tmp_path, "--kubeconfig", tmp_path / "missing")
    assert out.returncode == 2 and out.stderr.strip() == f"{tmp_path / 'missing'}:1:1: no such kubeconfig file"
    assert not (tmp_path / "state").exists()  # nothing written before the input is known good


def test_what_render_refuses_is_refused_before_pulumi_starts(tmp_path: Path) -> None:
    # A Kueue ResourceFlavor takes at most 8 taints: the model accepts 9, the CRD (and the API server) not.
    # deploy ran Pulumi on it, and the API server refused the flavor halfway through the update.
    env = small_env()
    env["clusters"][0]["pools"][0]["taints"] = [{"key": f"k{i}", "value": "v", "effect": "NoSchedule"} for i in range(9)]
    envs = tmp_path / "environments"
    envs.mkdir()
    write_env(envs, {**env, "environment": "dev"})
    out = deploy(tmp_path, "--repo", tmp_path, "--pulumi", tmp_path / "pulumi")
    assert out.returncode == 2 and out.stdout == ""
    assert [line.split(": [")[0] for line in out.stderr.splitlines()] == [
        f"{envs / 'dev.yaml'}: rendered object fails its schema: center-a: ResourceFlavor a100-ts: spec.nodeTaints"]
    assert not (tmp_path / "state").exists()


def test_a_failed_up_counts_what_the_engine_did_not_no_changes() -> None:
    # An `up` that created 2 objects and failed 1 said "no changes; failed": the engine's events count.
    from pulumi.automation import events

    from fleetops.deploy import Tally

    def step(op: events.OpType, failed: bool = False, planning: bool | None = None) -> events.EngineEvent:
        meta = events.StepEventMetadata(op=op, urn="urn", type="t", provider="p")
        done = None if failed else events.ResOutputsEvent(metadata=meta, planning=planning)
        fail = events.ResOpFailedEvent(metadata=meta, status=1, steps=1) if failed else None
        return events.EngineEvent(sequence=0, timestamp=0, res_outputs_event=done, res_op_failed_event=fail)

    tally = Tally()
    for event in [step(events.OpType.CREATE), step(events.OpType.CREATE), step(events.OpType.SAME),
                  step(events.OpType.CREATE, planning=True), step(events.OpType.CREATE, failed=True)]:
        tally(event)
    assert tally.changes == {"create": 2, "failed": 1}


def test_a_diff_without_a_preview_is_bad_input(tmp_path: Path) -> None:
    out = run("deploy", "--env", "dev", "--diff", "--state", tmp_path / "state")
    assert out.returncode == 2
    assert out.stderr.strip() == "--diff shows what a preview would change: give --preview too"
    assert not (tmp_path / "state").exists()


def test_after_pulumi_up_reconcile_reads_the_revision_deployed_from_the_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    # `deploy` then `reconcile --detect-only` said "last applied: none": only the stack's outputs held the revision,
    # and the clusters (where a reconciler or anyone else reads) held nothing. Pulumi is stood in for: its `up`
    # puts the rendered objects into the clusters and answers the outputs the stack exports.
    from fleetops import cli, deploy as deploy_mod, reconcile
    from tests.fakes import MemoryCluster
    from tests.reconcile_support import DEV, allow, options
    from tests.reconcile.test_reconcile_operator import printed

    env, state = spec.load_environment(DEV), render.render(DEV, revision="rev-1")
    clusters = {c.name: MemoryCluster(c.name) for c in env.clusters}

    def up(repo: Path, environment: str, stack: str, operation: Any, state_dir: Path, **_: Any) -> deploy_mod.Result:
        for name, manifests in state.clusters.items():
            clusters[name].seed(*manifests, manager="pulumi-kubernetes")
        return deploy_mod.Result(stack, environment, operation, True, False, {"create": 1}, {"revision": "0123abc"}, str(state_dir), [])

    monkeypatch.setattr(deploy_mod, "run", up)
    monkeypatch.setattr(deploy_mod, "cluster_api", lambda cluster, kubeconfig: clusters[cluster.name])
    done = CliRunner().invoke(cli.app, ["deploy", "--env", "dev", "--repo", str(DEV.parent.parent)])
    assert done.exit_code == 0, done.output
    result = reconcile.run_pass(env, state, clusters, allow, options(detect_only=True))
    assert result.last_applied == "0123abc" and {c.last_applied for c in result.clusters.values()} == {"0123abc"}
    assert printed(result, monkeypatch)[0].rstrip().endswith("last applied: 0123abc")


def test_a_cluster_that_cannot_record_the_deploy_is_said_and_the_deploy_stands() -> None:
    from fleetops import reconcile
    from tests.fakes import Faults, MemoryCluster
    from tests.reconcile_support import DEV

    env = spec.load_environment(DEV)
    down = MemoryCluster("down", Faults(rate=1.0, statuses=(403,)))  # refused: never retried
    missed = reconcile.record_deploy(env, "0123abc", "dev", lambda cluster: down)
    assert len(missed) == len(env.clusters) and all("not recorded in its fleetops-status ConfigMap" in line for line in missed), missed
