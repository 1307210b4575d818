"""The command line as people and CI use it: stable output, one file per cluster, help, usage errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.command import run
from tests.helpers import ROOT, small_env, write_env


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


def _commands() -> list[tuple[list[str], list[str]]]:
    """Every command's path and the option names it declares."""
    import typer

    from fleetops.cli import app

    out = []

    def walk(command: Any, path: list[str]) -> None:  # typer's own click
        out.append((path, [name for p in command.params if p.param_type_name == "option" for name in (*p.opts, *p.secondary_opts)]))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


@pytest.mark.parametrize("command,options", [pytest.param(c, o, id=" ".join(c) or "fleetops") for c, o in _commands()])
def test_help_at_80_columns_shows_every_option_name_whole(command: list[str], options: list[str]) -> None:
    # Rich's option panel cut `--only-on-change` to `--only-on-chan…` and env vars to `FLEETOPS_APPROV…`.
    done = run(*command, "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and max(len(line) for line in done.stdout.splitlines()) <= 80
    words = set(re.findall(r"[\w$./-]+", done.stdout))
    assert [o for o in options if o not in words] == []


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
    # Files are written as each cluster is rendered; schema validation comes after. Its
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
    assert done.returncode == 2 and done.stderr.splitlines() == [f"{tmp_path / 'dir.html'}: not a regular file; the report not written"]
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
    """`validate` runs in editors and pre-commit hooks: it checks what every command checks (the model,
    the render and each object's schema), and loads neither Pulumi, the policy engine, rich nor logging
    (each tens of ms), nor jsonschema (kubernetes-validate's schema files are read without importing
    it, whose import brings jsonschema: 45 ms), nor Grafana's SDK (the dashboards are read as written: 19 ms)."""
    import subprocess
    import sys

    heavy = ["pulumi", "pulumi_kubernetes", "fleetops.policy", "regorus", "rich", "logging", "kubernetes_validate", "jsonschema",
             "grafana_foundation_sdk"]
    probe = ("import sys; from fleetops import cli\n"
             "try: cli.app(['validate', '--env', 'dev'])\nexcept SystemExit as e: code = e.code\n"
             f"print(code, sorted(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr


# --- one validation for every command (issue 20, items 8, 9, 11) ---------------------------------

COMMANDS = [["validate"], ["render"], ["check"], ["audit", "-o", "report.html"]]


def env_dir(tmp_path: Path, env: dict) -> Path:
    envs = tmp_path / "environments"
    envs.mkdir(exist_ok=True)
    write_env(envs, env)
    return envs


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_name_ending_in_a_newline_is_refused_by_every_command_in_one_line(command: list[str], tmp_path: Path) -> None:
    # `^...$` let "ml-sandbox\n" through validate; render and check refused it only in their schema
    # check, in a line the newline broke in two; audit wrote a report for it.
    env = small_env()
    env["tenants"][0]["name"] = "ml-sandbox\n"
    envs = env_dir(tmp_path, env)
    done = run(*command, "--env", "test", "--environments", envs, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"{envs / 'test.yaml'}:57:3: tenants[0].name: must be a DNS-1123 label (lowercase letters, digits and '-', "
        "at most 63 characters), got 'ml-sandbox\\n'"]
    assert done.stdout == "" and not (tmp_path / "report.html").exists()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_what_only_the_schema_check_refuses_is_refused_by_every_command_alike(command: list[str], tmp_path: Path) -> None:
    # A Kueue ResourceFlavor takes at most 8 taints: the model accepts 9, the CRD (and the API server) not.
    env = small_env()
    env["clusters"][0]["pools"][0]["taints"] = [{"key": f"k{i}", "value": "v", "effect": "NoSchedule"} for i in range(9)]
    envs = env_dir(tmp_path, env)
    done = run(*command, "--env", "test", "--environments", envs, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(": [")[0] for line in lines] == [
        f"{envs / 'test.yaml'}: rendered object fails its schema: center-a: ResourceFlavor a100-ts: spec.nodeTaints"]
    assert all(line.endswith("has more than 8 items") for line in lines)
    assert done.stdout == "" and not (tmp_path / "report.html").exists()


@pytest.mark.parametrize("name", ["../outside", "/abs/outside", "sub/outside", "Outside", "outside\n"])
@pytest.mark.parametrize("command", [["validate", "--environments", "environments"], ["render", "--environments", "environments"],
                                     ["check", "--environments", "environments"], ["audit", "--environments", "environments"],
                                     ["plan"], ["reconcile", "--repo", ".", "--once"]], ids=lambda c: c[0])
def test_env_is_a_name_never_a_path(command: list[str], name: str, tmp_path: Path) -> None:
    # environments/../outside.yaml is a valid environment named `outside`: it was read and rendered.
    (tmp_path / "environments").mkdir()
    write_env(tmp_path, {**small_env(), "environment": "outside"})
    done = run(*command, "--env", name, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"--env: an environment name must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters), got {name!r}"]
    assert done.stdout == ""


def test_an_environment_linked_to_a_device_or_a_pipe_is_refused_without_reading_it(tmp_path: Path) -> None:
    # The size limit looked at the size the link's target reports: 0 for /dev/zero, which `validate`
    # (every file) then read until memory ran out; a named pipe made it wait for a writer forever.
    envs = tmp_path / "environments"
    envs.mkdir()
    (envs / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(envs / "pipe.yaml")
    (envs / "folder.yaml").mkdir()
    kinds = {"folder": "a folder", "pipe": "a named pipe", "zero": "a character device"}
    refused = [f"{envs / name}.yaml:1:1: is {kind}, not a regular file: an environment is read from a regular file only"
               for name, kind in kinds.items()]
    for command in (["validate"], ["audit"]):
        done = run(*command, "--environments", envs)
        assert done.returncode == 2 and done.stderr.splitlines() == refused, (command, done.stderr)
    for name, line in zip(kinds, refused):
        for command in (["validate"], ["render"], ["check"]):
            done = run(*command, "--env", name, "--environments", envs)
            assert done.returncode == 2 and done.stderr.splitlines() == [line], (command, done.stderr)


def _tenants(count: int) -> dict:
    env = small_env()
    env["tenants"] = [{"name": f"t{i}", "clusters": ["center-a"], "workloads": ["inference"]} for i in range(count)]
    return env


def _pools(count: int) -> dict:
    env = small_env()
    pool = env["clusters"][0]["pools"][2]
    env["clusters"][0]["pools"] += [{**pool, "name": f"p{i}"} for i in range(count - 4)]
    return env


def _clusters(count: int) -> dict:
    env = small_env()
    env["clusters"] += [{"name": f"c{i}", "role": "center", "context": f"c{i}"} for i in range(count - 2)]
    return env


def _placements(count: int) -> dict:
    # Each tenant may use every pool of its cluster: its ClusterQueue lists them all, tenants x pools.
    env = small_env()
    pool = env["clusters"][0]["pools"][2]
    env["clusters"][0]["pools"] = [{**pool, "name": f"p{i}"} for i in range(1000)]
    env["tenants"] = [{"name": f"t{i}", "clusters": ["center-a"], "workloads": ["inference"]} for i in range(count // 1000 + 1)]
    return env


def _quotas(count: int) -> dict:
    env = small_env()
    env["tenants"][0]["quota"] = {f"example.com/r{i}": {"guaranteed": 0, "burst": 0} for i in range(count)}
    return env


@pytest.mark.parametrize(("make", "limit", "line"), [
    (_tenants, 4_000, ":56:1: tenants: at most 4,000 items (fleetops.spec.LIMITS), got 4,001"),
    (_pools, 10_000, ":2:1: clusters: 10,001 pools and edge groups, more than the 10,000 one environment may hold (fleetops.spec.LIMITS)"),
    (_clusters, 500, ":2:1: clusters: at most 500 items (fleetops.spec.LIMITS), got 501"),
    (_placements, 200_000, ":3028:1: tenants: the tenants may use more than 200,000 pools and edge groups, counted in each of their "
                           "clusters (fleetops.spec.LIMITS): name fewer in their pools"),
    (_quotas, 256, ":65:3: tenants[vision].quota: at most 256 items (fleetops.spec.LIMITS), got 257"),
], ids=["tenants", "pools", "clusters", "placements", "quotas"])
def test_counts_over_the_documented_limits_are_one_line(make: Any, limit: int, line: str, tmp_path: Path) -> None:
    # 55,000 small tenants (an 8 MB file, under the byte limit) took `check` to 7.8 GB and a crash.
    envs = env_dir(tmp_path, make(limit + 1))
    for command in (["validate"], ["check"]):
        done = run(*command, "--env", "test", "--environments", envs)
        assert done.returncode == 2
        assert done.stderr.splitlines() == [f"{envs / 'test.yaml'}{line}"]


def test_a_problem_at_a_key_with_a_newline_is_one_line_and_one_path(tmp_path: Path) -> None:
    # The key was written raw into the path: the problem took two lines and lost its path in JSON.
    env = small_env()
    env["clusters"][0]["pools"][1]["sharing"]["mig"]["profiles"] = {"1g.10gb\n": 7}
    envs = env_dir(tmp_path, env)
    done = run("validate", "--env", "test", "--environments", envs)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    [problem] = json.loads(run("validate", "--env", "test", "--environments", envs, "--output", "json").stdout)["problems"]
    assert problem["path"] == 'clusters[center-a].pools[h100-mig].sharing.mig.profiles["1g.10gb\\n"]'
    assert problem["message"] == "must be a MIG profile like '1g.10gb' or '1g.10gb+me', got '1g.10gb\\n'"
