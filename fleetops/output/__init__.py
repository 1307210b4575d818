"""Every form of a plan, one module each, each a function of the typed plan (`fleetops.plan_result`):
`markdown` (the bounded pull-request comment, and the whole plan), `json` (the envelope every command
prints), `junit` (CI test tabs) and `github` (check annotations on the lines). `plan --output` picks one
by `Format`; `--artifacts` writes each by the same functions (`forms`).

The modules are imported when a form is asked for: `validate` and the other quick commands load none of them.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetops.plan_result import PlanResult

class Format(StrEnum):
    markdown = "markdown"
    json = "json"
    junit = "junit"
    github = "github"


def render(plan: PlanResult, form: Format, max_chars: int, artifacts: str = "") -> str:
    """The plan in `form`; markdown is the comment, at most `max_chars`, pointing to the full plan at `artifacts`."""
    from fleetops.output import github, json, junit, markdown

    if form is Format.markdown:
        return markdown.comment(plan, max_chars, artifacts)
    return {Format.json: json.render, Format.junit: junit.render, Format.github: github.render}[form](plan)


def forms(plan: PlanResult, folder: Path, max_chars: int, artifacts: str = "") -> dict[Path, str]:
    """Every form of the one plan, as files of `folder`, for a CI job that plans once per environment:
    the whole plan as markdown (plan.md) beside the bounded comment."""
    from fleetops.output import github, json, junit, markdown

    return {folder / "plan.json": json.render(plan), folder / "plan.md": markdown.full(plan),
            folder / "comment.md": markdown.comment(plan, max_chars, artifacts), folder / "plan-junit.xml": junit.render(plan),
            folder / "annotations.txt": github.render(plan)}
