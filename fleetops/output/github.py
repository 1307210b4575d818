"""The plan as GitHub check annotations: workflow commands that put each decision, and each
security-relevant edit, on the line of the file it comes from."""

from __future__ import annotations

from fleetops import spec
from fleetops.envelope import DecisionStatus
from fleetops.output.markdown import GROUP_OVER
from fleetops.plan_result import PlanResult, Side, SpecChange

LEVEL = {DecisionStatus.DENY: "error", DecisionStatus.APPROVAL: "warning", DecisionStatus.WARN: "warning", DecisionStatus.WAIVED: "notice"}


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render(plan: PlanResult) -> str:
    """Workflow commands that put each decision on the line of the environment file it comes from."""
    out = []
    for d in plan.decisions:
        file, line = (d.location.file, d.location.line) if d.location else (spec.environment_path(plan.environment).as_posix(), 1)
        message = d.msg + (f" Fix: {d.fix}" if d.fix and d.status is DecisionStatus.DENY else "")
        out.append(f"::{LEVEL[d.status]} file={_escape(file, True)},line={line},"
                   f"title={_escape(d.status.value + ': ' + d.rule, True)}::{_escape(message)}")
    kinds: dict[str, list[SpecChange]] = {}
    for e in plan.spec_changes:
        if e.security and e.side is Side.HEAD:
            kinds.setdefault(e.security_field, []).append(e)
    for kind, edits in kinds.items():
        # A new environment's hundreds of node matches are one notice at the first, not one per line.
        many = len(edits) > GROUP_OVER
        for e in edits[:1] if many else edits:
            what = f"{len(edits):,} {kind} fields changed, the first here" if many else f"{e.path} changed"
            out.append(f"::notice file={_escape(e.file, True)},line={e.line},title={_escape('security-relevant change', True)}::"
                       f"{_escape(what + ': review who it lets in')}")
    return "\n".join(out) + ("\n" if out else "")
