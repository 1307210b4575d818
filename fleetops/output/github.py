"""The plan as GitHub check annotations: workflow commands that put each decision the change made, and
each security-relevant edit, on the line of the file it comes from; those already at base, counted."""

from __future__ import annotations

from fleetops import spec
from fleetops.envelope import DecisionStatus
from fleetops.output.markdown import GROUP_OVER
from fleetops.plan_result import FindingKind, PlanDecision, PlanResult, PlanSide, SpecChange

LEVEL = {DecisionStatus.DENY: "error", DecisionStatus.APPROVAL: "warning", DecisionStatus.WARN: "warning", DecisionStatus.WAIVED: "notice"}


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _place(plan: PlanResult, d: PlanDecision | None) -> str:
    file, line = (d.location.file, d.location.line) if d and d.location else (spec.environment_path(plan.environment).as_posix(), 1)
    return f"file={_escape(file, True)},line={line}"


def _already(plan: PlanResult) -> list[str]:
    """The decisions already at base, counted rather than put on every line again: those that block as one
    error (they still block: fail closed), the rest as one notice; and what the change resolved."""
    there = [d for d in plan.decisions if d.finding is FindingKind.PRE_EXISTING]
    out = []
    blocking = [d for d in there if d.status.blocks]
    if blocking:
        rules = ", ".join(dict.fromkeys(d.rule for d in blocking))
        out.append(f"::error {_place(plan, blocking[0])},title={_escape(f'{len(blocking):,} pre-existing decision(s) block', True)}::"
                   f"{_escape(f'Already at base, not made by this change, and still blocking it: {rules}. See the plan.')}")
    rest = len(there) - len(blocking)
    if rest:
        out.append(f"::notice {_place(plan, None)},title={_escape('pre-existing findings', True)}::"
                   f"{_escape(f'{rest:,} warning(s) or waived decision(s) already at base, unchanged by this change: see the plan.')}")
    if plan.resolved:
        out.append(f"::notice {_place(plan, None)},title={_escape('resolved findings', True)}::"
                   f"{_escape(f'{len(plan.resolved):,} decision(s) at base resolved by this change: see the plan.')}")
    return out


def render(plan: PlanResult) -> str:
    """Workflow commands that put each decision the change made on the line of the environment file it
    comes from; those already at base and those it resolved, counted (`_already`)."""
    out = []
    for d in plan.decisions:
        if d.finding is FindingKind.PRE_EXISTING:
            continue
        message = d.msg + (f" Fix: {d.fix}" if d.fix and d.status is DecisionStatus.DENY else "")
        out.append(f"::{LEVEL[d.status]} {_place(plan, d)},title={_escape(d.status.value + ': ' + d.rule, True)}::{_escape(message)}")
    out += _already(plan)
    kinds: dict[str, list[SpecChange]] = {}
    for e in plan.spec_changes:
        if e.security and e.side is PlanSide.HEAD:
            kinds.setdefault(e.security_field, []).append(e)
    for kind, edits in kinds.items():
        # A new environment's hundreds of node matches are one notice at the first, not one per line.
        many = len(edits) > GROUP_OVER
        for e in edits[:1] if many else edits:
            what = f"{len(edits):,} {kind} fields changed, the first here" if many else f"{e.path} changed"
            out.append(f"::notice file={_escape(e.file, True)},line={e.line},title={_escape('security-relevant change', True)}::"
                       f"{_escape(what + ': review who it lets in')}")
    return "\n".join(out) + ("\n" if out else "")
