"""The command line as people and CI use it: stable output, one file per cluster, help, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli import run
from tests.helpers import ROOT


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_render_is_byte_identical_from_run_to_run(fmt: str) -> None:
    first = run("render", "--env", "prod", "--output", fmt)
    second = run("render", "--env", "prod", "--output", fmt)
    assert first.returncode == 0, first.stderr
    assert len(first.stdout) > 10_000
    assert first.stdout.encode() == second.stdout.encode()


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_render_to_a_folder_writes_one_file_per_cluster(fmt: str, tmp_path: Path) -> None:
    done = run("render", "--env", "prod", "-o", tmp_path / "prod", "--output", fmt, "--revision", "rev-cli")
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in (tmp_path / "prod").iterdir())
    assert files == sorted(f"{c}.{fmt}" for c in ("center-bj", "center-sh", "edge-sh-factory", "edge-gz-gateway"))
    text = (tmp_path / "prod" / f"center-bj.{fmt}").read_text()
    manifests = json.loads(text) if fmt == "json" else list(yaml.safe_load_all(text))
    assert manifests and all(m["metadata"]["labels"]["fleetops.io/cluster"] == "center-bj" for m in manifests)
    assert {m["metadata"]["annotations"]["pulumi.com/patchFieldManager"] for m in manifests} == {"fleetops"}
    assert "wrote 4 file(s)" in done.stderr


def test_render_summary_never_lands_in_the_yaml_on_stdout() -> None:
    done = run("render", "--env", "staging", "--summary")
    assert done.returncode == 0, done.stderr
    manifests = [m for m in yaml.safe_load_all(done.stdout) if m is not None]
    assert len(manifests) > 90 and all("kind" in m for m in manifests)
    assert "staging: pools and edge groups" in done.stderr


def test_render_writes_multi_line_values_as_readable_blocks_and_both_engines_agree() -> None:
    direct = run("render", "--env", "staging", "--revision", "r")
    sdk = run("render", "--env", "staging", "--revision", "r", "--engine", "pulumi")
    assert direct.returncode == sdk.returncode == 0, direct.stderr + sdk.stderr
    assert direct.stdout == sdk.stdout
    assert "  stg-a100-infer: |\n    flags:\n      failOnInitError: true\n" in direct.stdout


def test_validate_accepts_every_bundled_environment() -> None:
    done = run("validate")
    assert done.returncode == 0, done.stderr
    assert "3 environment file(s) valid" in done.stdout


@pytest.mark.parametrize("command", [[], ["validate"], ["render"]])
def test_help_works_for_every_command(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout
    if command:
        assert "--env" in done.stdout


@pytest.mark.parametrize("command", [["validate"], ["render", "--env", "prod"]])
def test_an_unknown_flag_is_a_usage_error(command: list[str]) -> None:
    done = run(*command, "--no-such-flag")
    assert done.returncode == 2
    assert "No such option: --no-such-flag" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_an_unknown_environment_is_one_line(tmp_path: Path) -> None:
    done = run("render", "--env", "nope", "-o", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["environments/nope.yaml:1:1: no environment 'nope' (known: dev, prod, staging)"]
    assert not (tmp_path / "out").exists()


def test_render_to_a_path_that_is_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("mine\n")
    for out in (target, target / "sub"):
        done = run("render", "--env", "dev", "-o", out)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "cannot write rendered objects" in done.stderr
    assert target.read_text() == "mine\n"


def test_a_render_that_fails_after_files_were_started_leaves_nothing(tmp_path: Path) -> None:
    # Files are written by forks while rendering goes on; schema validation comes after. Its
    # failure (no CRDs to validate against) must leave the old files as they were, no new ones,
    # no temporary files and no folder of ours.
    (tmp_path / "no-crds").mkdir()
    old = tmp_path / "out" / "prod"
    old.mkdir(parents=True)
    (old / "center-bj.yaml").write_text("old\n")
    for out in (old, tmp_path / "out" / "new" / "deeper"):
        done = run("render", "--env", "prod", "-o", out, env={"FLEETOPS_CRD_DIR": str(tmp_path / "no-crds")})
        assert done.returncode == 2 and "rendered object fails its schema: " in done.stderr and "Traceback" not in done.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["no-crds", "out", "out/prod", "out/prod/center-bj.yaml"]
    assert (old / "center-bj.yaml").read_text() == "old\n"


def test_render_refuses_a_cluster_file_that_is_a_folder_and_writes_none(tmp_path: Path) -> None:
    (tmp_path / "prod" / "center-sh.yaml").mkdir(parents=True)
    done = run("render", "--env", "prod", "-o", tmp_path / "prod")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"{tmp_path / 'prod' / 'center-sh.yaml'}: not a regular file; rendered objects not written"]
    assert [p.name for p in (tmp_path / "prod").iterdir()] == ["center-sh.yaml"]


def test_audit_refuses_a_target_that_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "dir.html").mkdir()
    done = run("audit", "--env", "dev", "-o", tmp_path / "dir.html")
    assert done.returncode == 2 and "not a regular file" in done.stderr
    assert list((tmp_path / "dir.html").iterdir()) == []


def test_audit_of_an_invalid_environment_writes_no_report(tmp_path: Path) -> None:
    envs = tmp_path / "environments"
    envs.mkdir()
    (envs / "dev.yaml").write_text((ROOT / "environments" / "dev.yaml").read_text().replace("nodes: 2", "nodes: -2", 1))
    out = tmp_path / "audit.html"
    done = run("audit", "--environments", envs, "-o", out)
    assert done.returncode == 2 and "dev.yaml:" in done.stderr and not out.exists()


def test_the_module_runs_every_command_as_the_console_script_does() -> None:
    import subprocess
    import sys

    for module in ("fleetops.cli", "fleetops"):
        done = subprocess.run([sys.executable, "-m", module, "reconcile", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0 and "--detect-only" in done.stdout, done.stderr


def test_validate_starts_without_the_heavy_parts() -> None:
    """`validate` runs in editors and pre-commit hooks: it reads YAML and checks the model, and
    loads neither Pulumi, the policy engine, JSON Schema, rich nor logging (each tens of ms)."""
    import subprocess
    import sys

    heavy = ["pulumi", "pulumi_kubernetes", "fleetops.policy", "regorus", "jsonschema", "rich", "logging", "modules"]
    probe = ("import sys; from fleetops import cli\n"
             "try: cli.app(['validate', '--env', 'dev'])\nexcept SystemExit as e: code = e.code\n"
             f"print(code, sorted(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
