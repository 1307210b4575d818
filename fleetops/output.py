"""One JSON shape for every command: a versioned envelope, problems as fields, decisions, counts.

`validate`, `check`, `plan`, `reconcile` and `audit` print `envelope(...)` with `--output json`; the
shape is published as JSON Schema (fleetops/schemas/output.schema.json, `fleetops schema`) and
every command's output is tested against it. A new field is a minor change; removing or
retyping one raises SCHEMA.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from fleetops import __version__

SCHEMA = "fleetops/v1"
# `file:line:col: path: message` (environment files) or `file:line: message` (waivers, policies). A
# path is names, [index] or [item name] and ["key"], the key quoted as JSON (spec.format_loc): any character, escaped.
_PROBLEM = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+)(?::(?P<column>\d+))?: "
                      r'(?:(?P<path>(?:[\w./-]|\[(?:[^\s\[\]":]+|"(?:[^"\\]|\\.)*")\])+): )?(?P<message>.*)$', re.DOTALL)


def problem(text: str) -> dict[str, Any]:
    """A problem line as fields; a line without a place keeps the whole text as its message."""
    match = _PROBLEM.match(text)
    if match is None:
        return {"file": None, "line": None, "column": None, "path": None, "message": text}
    return {"file": match["file"], "line": int(match["line"]), "column": int(match["column"]) if match["column"] else None,
            "path": match["path"], "message": match["message"]}


def envelope(command: str, ok: bool, counts: dict[str, int], problems: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "command": command, "fleetops_version": __version__, "ok": ok, "counts": counts,
            "problems": [problem(p) for p in problems or []], **fields}


class DecisionStatus(StrEnum):
    """Every status a decision can have: plan's "approval" is a deny that more approvals resolve."""

    DENY = "deny"
    APPROVAL = "approval"
    WARN = "warn"
    WAIVED = "waived"


# What a policy verdict holds (check, audit): only plan reads a deny as an approval still missing.
VERDICT_STATUSES = (DecisionStatus.DENY, DecisionStatus.WARN, DecisionStatus.WAIVED)


def decision_counts(decisions: Iterable[dict[str, Any]], statuses: Iterable[DecisionStatus] = DecisionStatus) -> dict[str, int]:
    """How many decisions have each status, every status named even when none has it."""
    counts = dict.fromkeys(map(str, statuses), 0)
    for d in decisions:
        if d["status"] in counts:
            counts[d["status"]] += 1
    return counts


def json_schema() -> dict[str, Any]:
    from importlib import resources

    return json.loads(resources.files("fleetops").joinpath("schemas/output.schema.json").read_text())
