"""Every command's output forms, one module per form, as conftest's outputters: `table` (what a person reads
on a terminal), `json` (the one envelope every command prints), `junit` (CI test tabs), `sarif` (GitHub code
scanning), `tap` (TAP 13), `github` (check annotations on the lines), `markdown` (the plan's pull-request
comment, the audit report), `html` (the audit report), `text` and `csv` (statements). A command picks its
form by its `--output` enum, defined here beside the forms; `plan --artifacts` writes each of the plan's by
the same functions (`forms`).

The modules are imported when a form is asked for: `validate` and the other quick commands load none of them.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetops import policy
    from fleetops.plan_result import PlanResult


class PlanFormat(StrEnum):
    markdown = "markdown"
    json = "json"
    junit = "junit"
    github = "github"
    sarif = "sarif"
    tap = "tap"


class CheckFormat(str, Enum):
    table = "table"
    json = "json"
    junit = "junit"
    sarif = "sarif"
    tap = "tap"


class TableFormat(str, Enum):
    """A person's table, or the JSON envelope a machine reads."""

    table = "table"
    json = "json"


class ObjectFormat(str, Enum):
    """The rendered objects, as `pulumi up` would send them."""

    yaml = "yaml"
    json = "json"


class AuditFormat(str, Enum):
    html = "html"
    markdown = "markdown"
    json = "json"


class StatementFormat(str, Enum):
    text = "text"
    json = "json"
    csv = "csv"


def dump(manifests: list[dict[str, Any]], fmt: ObjectFormat) -> str:
    """A cluster's manifests as text in `fmt`: on stdout, and in the files of `render -o`."""
    from fleetops import emit

    return emit.documents(manifests) if fmt is ObjectFormat.yaml else emit.json_text(manifests)


def verdict_form(verdict: policy.Verdict, form: CheckFormat, file: Path, policies: Path) -> str:
    """`check`'s verdict in a machine's `form` (the table is printed, `table.check`): SARIF's rules are those of `policies`."""
    from fleetops.output import json, junit, sarif, tap

    if form is CheckFormat.sarif:
        from fleetops import policy

        return sarif.render(policy.report_rows(verdict), file.as_posix(), policy.rule_metadata(policy.load_bundle(policies)))
    return {CheckFormat.json: json.check, CheckFormat.junit: junit.check, CheckFormat.tap: tap.check}[form](verdict)


ARTIFACTS = {PlanFormat.markdown: "comment.md", PlanFormat.json: "plan.json", PlanFormat.junit: "plan-junit.xml",
             PlanFormat.github: "annotations.txt", PlanFormat.sarif: "plan.sarif", PlanFormat.tap: "plan.tap"}  # --artifacts' file of each form


def render(plan: PlanResult, form: PlanFormat, max_chars: int, artifacts: str = "") -> str:
    """The plan in `form`; markdown is the comment, at most `max_chars`, pointing to the full plan at `artifacts`."""
    from fleetops.output import github, json, junit, markdown, sarif, tap

    if form is PlanFormat.markdown:
        return markdown.comment(plan, max_chars, artifacts)
    if form is PlanFormat.sarif:
        return sarif.render(plan.decision_rows(), _environment_file(plan.environment))
    if form is PlanFormat.tap:
        return tap.render(plan.decision_rows())
    return {PlanFormat.json: json.render, PlanFormat.junit: junit.render, PlanFormat.github: github.render}[form](plan)


def _environment_file(environment: str) -> str:
    from fleetops import spec

    return spec.environment_path(environment).as_posix()


def forms(plan: PlanResult, folder: Path, max_chars: int, artifacts: str = "") -> dict[Path, str]:
    """Every form of the one plan, as files of `folder`, for a CI job that plans once per environment:
    the whole plan as markdown (plan.md) beside the bounded comment, and each `--output` form as it prints."""
    from fleetops.output import markdown

    return {folder / "plan.md": markdown.full(plan),
            **{folder / name: render(plan, form, max_chars, artifacts) for form, name in ARTIFACTS.items()}}
