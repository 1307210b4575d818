"""Decisions as JUnit XML for CI test tabs, of `check` and of the plan: a deny or a missing approval fails."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetops.plan_result import PlanResult

if TYPE_CHECKING:
    from fleetops import policy


def render(plan: PlanResult) -> str:
    from fleetops import policy  # the policy engine only when JUnit is asked for

    return policy.junit_report(f"fleetops plan {plan.environment}", f"fleetops.plan.{plan.environment}", plan.decision_rows())


def check(verdict: policy.Verdict) -> str:
    from fleetops import policy

    return policy.junit_report(f"fleetops check {verdict.environment}", "fleetops.check", policy.report_rows(verdict))
