"""Decisions as JUnit XML for CI test tabs, of `check` and of the plan: a deny or a missing approval fails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetops.envelope import DecisionStatus
from fleetops.plan_result import PlanResult

if TYPE_CHECKING:
    from fleetops import policy


def render(plan: PlanResult) -> str:
    return report(f"fleetops plan {plan.environment}", f"fleetops.plan.{plan.environment}", plan.decision_rows())


def check(verdict: policy.Verdict) -> str:
    from fleetops import policy  # the policy engine only when JUnit is asked for

    return report(f"fleetops check {verdict.environment}", "fleetops.check", policy.report_rows(verdict))


def report(suite: str, classname: str, rows: list[dict[str, Any]]) -> str:
    """Decisions as JUnit XML for CI test tabs: a deny fails, a waived deny is skipped, a warning passes
    with its message; a last case, "policy gate", passes or fails with the whole verdict."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    cases = []
    for d in rows:
        case = TestCase(f"{d['rule']} {d.get('resource') or ''}".strip(), classname=classname, stdout=d["msg"])
        status = DecisionStatus(d["status"])
        if status.blocks:
            case.add_failure_info(message=d["msg"], failure_type=status.value if status is DecisionStatus.APPROVAL else d.get("severity"))
        elif status is DecisionStatus.WAIVED:
            case.add_skipped_info(message=f"waived: {d['msg']}")
        else:
            case.stdout = f"warning: {d['msg']}"
        cases.append(case)
    denied = sum(DecisionStatus(d["status"]).blocks for d in rows)
    gate = TestCase("policy gate", classname=classname, stdout=f"{denied} unwaived deny or approval decision(s)")
    if denied:
        gate.add_failure_info(message=f"{denied} unwaived deny or approval decision(s)")
    return to_xml_report_string([TestSuite(suite, [*cases, gate])])
