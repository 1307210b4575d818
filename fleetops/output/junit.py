"""The plan as JUnit XML for CI test tabs: a deny or a missing approval fails, as `check --output junit` reports."""

from __future__ import annotations

from fleetops.plan_result import PlanResult


def render(plan: PlanResult) -> str:
    from fleetops import policy  # the policy engine only when JUnit is asked for

    return policy.junit_report(f"fleetops plan {plan.environment}", f"fleetops.plan.{plan.environment}", plan.decision_rows())
