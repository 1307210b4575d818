"""The plan as the one JSON envelope every command prints (`--output json`, the fleet API's `/v1/plan`):
the published shape of fleetops/schemas/output.schema.json."""

from __future__ import annotations

from typing import Any

from fleetops.envelope import as_json, envelope
from fleetops.plan_result import PlanResult, PlanVerdict


def document(plan: PlanResult) -> dict[str, Any]:
    fields = plan.to_json()
    del fields["counts"]  # the envelope's own
    return envelope("plan", plan.verdict is PlanVerdict.ALLOWED, plan.counts, **fields)


def render(plan: PlanResult) -> str:
    return as_json(document(plan))
