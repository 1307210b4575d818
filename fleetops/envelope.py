"""One JSON shape for every command: a versioned envelope, problems as fields, decisions, counts.

`validate`, `check`, `plan`, `reconcile` and `audit` print `envelope(...)` with `--output json`; the
shape is published as JSON Schema (fleetops/schemas/output.schema.json, `fleetops schema`) and
every command's output is tested against it. A new field is a minor change; removing or
retyping one raises SCHEMA.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from fleetops import __version__
from fleetops.errors import Problem

SCHEMA = "fleetops/v1"


def envelope(command: str, ok: bool, counts: dict[str, int], problems: Sequence[Problem] = (), **fields: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "command": command, "fleetops_version": __version__, "ok": ok, "counts": counts,
            "problems": [p.fields() for p in problems], **fields}


def as_json(document: dict[str, Any]) -> str:
    """A document as every command prints it: indented, keys sorted, one newline at the end."""
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"


class DecisionStatus(StrEnum):
    """Every status a decision can have: plan's "approval" is a deny that more approvals resolve."""

    DENY = "deny"
    APPROVAL = "approval"
    WARN = "warn"
    WAIVED = "waived"

    @property
    def blocks(self) -> bool:
        """Whether it keeps a change from merging: an approval missing blocks as a deny does."""
        return self in (DecisionStatus.DENY, DecisionStatus.APPROVAL)


class Severity(StrEnum):
    """How much a rule's decision matters, as its METADATA (`custom.severity`) and its decisions say:
    policies/README.md fixes these four."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


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
