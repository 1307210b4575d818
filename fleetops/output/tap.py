"""Decisions as TAP version 13 (`check` and `plan --output tap`), as conftest prints them for a TAP consumer:
one test line per decision, `not ok` for a deny (or a deny that needs approvals), a waived one skipped, a
warning passing with its message; a last line, "policy gate", is the whole verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleetops.envelope import DecisionStatus

if TYPE_CHECKING:
    from fleetops import policy


def _diagnostic(row: dict[str, Any]) -> list[str]:
    """The decision as TAP 13's YAML block; each value a JSON string, which YAML reads as written."""
    fields = {"rule": row["rule"], "status": row["status"], "severity": row.get("severity") or "", "resource": row.get("resource") or "",
              "message": row["msg"]}
    if place := row.get("location"):
        fields["at"] = f"{place['file']}:{place['line']}:{place['column']}"
    return ["  ---", *(f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in fields.items()), "  ..."]


def render(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["TAP version 13", f"1..{len(rows) + 1}"]
    for number, row in enumerate(rows, 1):
        status = DecisionStatus(row["status"])
        name = f"{row['rule']} {row.get('resource') or ''}".strip().replace("#", "\\#")
        directive = f" # SKIP waived by {row.get('waived_by') or 'a waiver'}" if status is DecisionStatus.WAIVED else ""
        lines += [f"{'not ok' if status.blocks else 'ok'} {number} - {name}{directive}", *_diagnostic(row)]
    denied = sum(DecisionStatus(r["status"]).blocks for r in rows)
    lines.append(f"{'not ok' if denied else 'ok'} {len(rows) + 1} - policy gate: {denied} unwaived deny or approval decision(s)")
    return "\n".join(lines) + "\n"


def check(verdict: policy.Verdict) -> str:
    from fleetops import policy

    return render(policy.report_rows(verdict))
