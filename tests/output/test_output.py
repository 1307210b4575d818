"""One JSON shape: every command's --output json validates against the published, versioned schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from fleetops import __version__, envelope
from tests.command import run
from tests.helpers import ROOT
from tests.plan.test_plan import commit, edit, plan, repo  # noqa: F401 - repo is the fixture

VALIDATOR = jsonschema.Draft202012Validator(envelope.json_schema())


def conforms(document: dict, command: str) -> dict:
    errors = sorted(VALIDATOR.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert document["schema"] == "fleetops/v1" and document["command"] == command
    return document


def test_the_schema_itself_is_valid_and_published_by_the_cli() -> None:
    jsonschema.Draft202012Validator.check_schema(envelope.json_schema())
    printed = run("schema")
    assert printed.returncode == 0 and json.loads(printed.stdout) == envelope.json_schema()


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout == f"fleetops {__version__}\n"


def test_validate_problems_are_fields_with_file_line_column_and_path(tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "dev.yaml").write_text((ROOT / "environments" / "dev.yaml").read_text().replace("nodes: 2", "nodes: -2", 1))
    done = run("validate", "--environments", folder, "--output", "json")
    document = conforms(json.loads(done.stdout), "validate")
    assert done.returncode == 2 and document["ok"] is False and document["counts"] == {"problems": 1}
    (problem,) = document["problems"]
    assert problem["file"].endswith("dev.yaml") and problem["line"] > 1 and problem["column"] > 1
    assert problem["path"].endswith(".nodes") and problem["message"]
    fine = conforms(json.loads(run("validate", "--output", "json").stdout), "validate")
    assert fine["ok"] is True and fine["problems"] == []


def test_a_problem_keeps_its_place_in_a_folder_whose_name_has_a_colon(tmp_path: Path) -> None:
    # A problem travels as fields from where it is found: no line is parsed back, so a colon in a
    # folder's name (a checkout named after a time or a port) cannot take the place away.
    folder = tmp_path / "fleet:2026-12" / "environments"
    folder.mkdir(parents=True)
    (folder / "dev.yaml").write_text((ROOT / "environments" / "dev.yaml").read_text().replace("nodes: 2", "nodes: -2", 1))
    document = conforms(json.loads(run("validate", "--environments", folder, "--output", "json").stdout), "validate")
    (problem,) = document["problems"]
    assert problem["file"] == str(folder / "dev.yaml") and problem["line"] > 1 and problem["column"] > 1
    assert problem["path"].endswith(".nodes") and problem["message"] == "must be >= 0, got -2"
    table = run("validate", "--environments", folder)
    assert (table.returncode, table.stderr) == (2, f"{problem['file']}:{problem['line']}:{problem['column']}: {problem['path']}: {problem['message']}\n")


def test_check_output_conforms_with_its_decisions_and_counts() -> None:
    done = run("check", "--env", "prod", "--output", "json")
    document = conforms(json.loads(done.stdout), "check")
    assert done.returncode == 0 and document["ok"] is True
    assert document["counts"]["waived"] == 1 and document["counts"]["deny"] == 0
    waived = next(d for d in document["decisions"] if d["status"] == "waived")
    assert waived["resource"] == "center-sh:DeviceResource/nvidia.com/gpu" and waived["subject"]["cluster"] == "center-sh"


def test_plan_output_conforms(repo: Path) -> None:  # noqa: F811 - the fixture
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")
    commit(repo, "vision: a lot more GPUs")
    document = conforms(json.loads(plan(repo, "--env", "prod", "--output", "json").stdout), "plan")
    assert document["ok"] is False and document["verdict"] == "needs-approval" and document["counts"]["approval"] == 2


@pytest.mark.parametrize("form, artifact", [("markdown", "comment.md"), ("json", "plan.json"), ("junit", "plan-junit.xml"),
                                            ("github", "annotations.txt"), ("sarif", "plan.sarif"), ("tap", "plan.tap")])
def test_each_form_of_a_plan_is_one_function_for_output_and_artifacts(repo: Path, tmp_path: Path, form: str, artifact: str) -> None:  # noqa: F811
    # CI posts comment.md and uploads the rest: what it keeps must be what a person running --output sees.
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")
    commit(repo, "vision: a lot more GPUs")
    out = plan(repo, "--env", "prod", "--output", form, "--artifacts", tmp_path / "artifacts", "--max-chars", "6000")
    assert out.returncode == 1 and out.stdout == (tmp_path / "artifacts" / artifact).read_text()
    assert len((tmp_path / "artifacts" / "comment.md").read_text()) <= 6000 < len((tmp_path / "artifacts" / "plan.md").read_text())
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == [
        "annotations.txt", "comment.md", "plan-junit.xml", "plan.json", "plan.md", "plan.sarif", "plan.tap"]


def test_audit_output_conforms() -> None:
    done = run("audit", "--env", "dev", "--output", "json")
    document = conforms(json.loads(done.stdout), "audit")
    assert done.returncode == 0 and document["environments"][0]["name"] == "dev"
