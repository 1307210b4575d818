"""Every command's `--output json`: the one JSON envelope (fleetops/schemas/output.schema.json) around what
the command found; the plan's is also the fleet API's `/v1/plan`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetops import errors
from fleetops.envelope import as_json, decision_counts, envelope
from fleetops.plan_result import PlanResult, PlanVerdict
from fleetops.whatif import report

if TYPE_CHECKING:
    from fleetops.whatif.figures import SideFigures
    from fleetops.whatif.trace import Trace
    from fleetops import policy
    from fleetops.audit import AuditReport
    from fleetops.deploy import Result as DeployResult
    from fleetops.metering.statements import Statements
    from fleetops.policy.rego_tests import TestReport
    from fleetops.reconcile import PassResult


def document(plan: PlanResult) -> dict[str, Any]:
    fields = plan.to_json()
    del fields["counts"]  # the envelope's own
    return envelope("plan", plan.verdict is PlanVerdict.ALLOWED, plan.counts, **fields)


def render(plan: PlanResult) -> str:
    return as_json(document(plan))


def validate(paths: Sequence[Path], problems: list[errors.Problem]) -> str:
    return as_json(envelope("validate", not problems, {"problems": len(problems)}, problems, files=[str(p) for p in paths]))


def check(verdict: policy.Verdict) -> str:
    body = verdict.as_dict()
    return as_json(envelope("check", verdict.ok, decision_counts(body["decisions"]), verdict.waiver_problems,
                            **{k: v for k, v in body.items() if k != "waiver_problems"}))


def policy_tests(report: TestReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


def audit(report: AuditReport) -> str:
    return as_json(envelope("audit", report.ok, decision_counts(report.decisions), **report.to_json()))


def statements(result: Statements, counts: dict[str, int], ok: bool) -> tuple[dict[str, str], str]:
    """Each tenant's statement, and all of them in one envelope."""
    return {s.tenant: as_json(result.statement_document(s)) for s in result.statements}, as_json(envelope("statements", ok, counts, **result.document()))


def reconcile(result: PassResult) -> str:
    body = result.to_dict()
    return as_json(envelope("reconcile", result.exit_code() == 0, {"drift": result.drift or 0, "errors": len(result.errors)},
                            [errors.Problem(e) for e in result.errors], **body))  # a cluster's, not a file's


def why(env: str, cluster: str, status: Any, answers: list[Any], problems: list[str]) -> str:
    never = sum(not a.can_ever for a in answers)
    counts = {"jobs": len(answers), "never": never, "blocked": sum(bool(a.blockers) for a in answers)}
    return as_json(envelope("why", not never, counts, [errors.Problem(p) for p in problems], environment=env,
                            cluster=cluster, reconciler=status, answers=[a.to_dict() for a in answers]))


def standing(env: str, tenant: str, rows: list[Any], problems: list[str]) -> str:
    return as_json(envelope("standing", True, {"rows": len(rows)}, [errors.Problem(p) for p in problems], environment=env,
                            tenant=tenant, standing=[r.to_dict() for r in rows]))


def deploy(env: str, result: DeployResult) -> str:
    return as_json(envelope("deploy", result.ok, result.changes, environment=env, **result.to_dict()))


def whatif_document(environment: str, trace: Trace, figures: list[SideFigures]) -> dict[str, Any]:
    """`fleetops whatif --output json`: every side's figures in the one envelope, beside the trace and the assumptions."""
    def side(f: SideFigures) -> dict[str, Any]:
        out = dataclasses.asdict(f)
        for row, u in zip(out["utilisation"], f.utilisation):
            row["utilisation"] = round(u.utilisation, 4)
        out["preemptions_by_class"] = f.preemptions_by_class()
        return out

    return envelope("whatif", True, {"jobs": len(trace.jobs), "sides": len(figures)}, environment=environment,
                    revision=None, trace={"source": trace.source, "jobs": len(trace.jobs), "window_hours": trace.window / 3600},
                    assumptions=list(report.ASSUMPTIONS), sides=[side(f) for f in figures])


def whatif(environment: str, trace: Trace, figures: list[SideFigures]) -> str:
    return as_json(whatif_document(environment, trace, figures))
