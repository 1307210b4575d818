"""Pulumi policy pack: the same Rego policies `fleetops check` runs, on the stack Pulumi is about to deploy.

    pulumi preview --policy-pack policies/pack            # with Pulumi's Python language host
    pulumi preview --policy-pack policies/pack/analyzer   # without it (a CLI built from source)

The gate judges what Git declares: the inputs Pulumi sends for each kubernetes:* resource. A stack
policy sees outputs, and in a preview those are unknown for every object the provider cannot
dry-run yet (anything in a namespace the same update creates), so a resource policy records each
resource's inputs as the engine registers it and the stack policy, which runs after all of them,
judges the record (fleetops.policy.stack_input: props are manifests, the provider names the
cluster). Unwaived denies are mandatory violations, warnings advisory; a gate that cannot decide
is a mandatory violation.
"""

from pathlib import Path
from typing import Literal

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from fleetops import policy

DECLARED: dict[str, ResourceValidationArgs] = {}  # urn -> the resource as registered, with its inputs


def record_inputs(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type.startswith("kubernetes:"):
        DECLARED[args.urn] = args


def judge(kind: Literal["deny", "warn"], report_violation: ReportViolation) -> None:
    # Pulumi runs the pack in the project's folder: the fleet repository, with its own environments/ and policies/.
    here = Path.cwd()
    verdict = policy.validate_stack(DECLARED.values(), report_violation, kind, here / "environments", here / "policies")
    if kind == "deny" and verdict is not None:  # one record per update, as plan, check and reconcile write
        try:
            policy.log_decisions(policy.decision_log_path(), policy.verdict_record(verdict, "pack"))
        except policy.PolicyError as exc:
            report_violation(f"fleetops policy gate: decision not recorded: {exc}", None)


def validate_denies(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    judge("deny", report_violation)


def validate_warnings(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    judge("warn", report_violation)


POLICIES = [
    ResourceValidationPolicy(
        name="fleetops-inputs",
        description="records the manifest of every Kubernetes object for the fleetops gate (never reports)",
        enforcement_level=EnforcementLevel.ADVISORY,
        validate=record_inputs,
    ),
    StackValidationPolicy(
        name="fleetops-deny",
        description="fleetops Rego policies: every unwaived deny decision blocks the update",
        enforcement_level=EnforcementLevel.MANDATORY,
        validate=validate_denies,
    ),
    StackValidationPolicy(
        name="fleetops-warn",
        description="fleetops Rego policies: warnings, reported without blocking",
        enforcement_level=EnforcementLevel.ADVISORY,
        validate=validate_warnings,
    ),
]

if __name__ == "__main__":  # Pulumi runs this file; tests import it without starting the analyzer
    PolicyPack(name="fleetops", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
