"""Pulumi policy pack: the same Rego policies `fleetops check` runs, on the stack Pulumi is about to deploy.

    pulumi preview --policy-pack policies/pack

The stack's kubernetes:* resources are turned into the policy input (props are the manifests, the
provider names the cluster) by fleetops.policy.stack_input; unwaived denies are mandatory
violations, warnings advisory. A gate that cannot decide reports a mandatory violation.
"""

from pulumi_policy import EnforcementLevel, PolicyPack, ReportViolation, StackValidationArgs, StackValidationPolicy

from fleetops import policy


def validate_denies(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    policy.validate_stack(args.resources, report_violation, "deny")


def validate_warnings(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    policy.validate_stack(args.resources, report_violation, "warn")


POLICIES = [
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
