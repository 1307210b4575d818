"""The policy gate: build the policy input, evaluate the Rego policies, apply waivers, log decisions.

    verdict = evaluate(env, state, live=None, change=None, engine=None)
    verdict.of(DecisionStatus.DENY)  # unwaived deny decisions: any of them fails the gate
    verdict.decisions   # every decision, deny / warn / waived

Policies are Rego v1 files under `policies/` (packages `fleet.<domain>`, each exposing `deny` and
`warn` sets). Two engines give the same decisions: `EmbeddedEngine` (regorus, in-process, the
default) and `OpaEngine` (an OPA server, through opa-python-client). Anything that keeps the engine
from answering - a policy that does not parse, an unreachable server, a timeout - raises
`PolicyError`, and callers fail closed: no answer is never a pass.

A module per job: `facts` (the input), `bundle` (policies, data, METADATA), `dataschema` (the
data's schema), `engine` (regorus and OPA), `waivers`, `decisions`, `verdict` (evaluate), `records` (decision log, JUnit), `rego_tests`
(`fleetops policy test`) and `pack` (the Pulumi policy pack's adapter). This module names what the
CLI, the other commands and the tests use.
"""

from fleetops.errors import PolicyError
from fleetops.policy.bundle import (
    DATA_ROOT,
    POLICIES_DIR,
    WAIVERS_FILE,
    Bundle,
    Resolution,
    RuleMeta,
    display_path,
    load_bundle,
    package_of,
    read_text,
    rule_metadata,
)
from fleetops.policy.decisions import Decision
from fleetops.policy.engine import EmbeddedEngine, Engine, OpaEngine, Results, collect, engine_from, rebase
from fleetops.policy.facts import Inventory, PolicyInput, build_input, deleted_input, load_inventory, policy_input, resource_entry
from fleetops.policy.pack import stack_input, validate_stack
from fleetops.policy.records import DecisionRecord, decision_log_path, decision_record, log_decisions, verdict_record
from fleetops.policy.rego_tests import TestReport, TestResult, run_tests
from fleetops.policy.verdict import Judgement, Verdict, canonical_json, evaluate, evaluate_input, input_size, report_rows, too_large
from fleetops.policy.waivers import Waiver, WaiverEntry, load_waivers, read_waivers

__all__ = [
    "DATA_ROOT",
    "POLICIES_DIR",
    "WAIVERS_FILE",
    "Bundle",
    "Decision",
    "DecisionRecord",
    "EmbeddedEngine",
    "Engine",
    "Inventory",
    "Judgement",
    "OpaEngine",
    "PolicyError",
    "PolicyInput",
    "Resolution",
    "Results",
    "RuleMeta",
    "TestReport",
    "TestResult",
    "Verdict",
    "Waiver",
    "WaiverEntry",
    "build_input",
    "canonical_json",
    "collect",
    "decision_log_path",
    "decision_record",
    "deleted_input",
    "display_path",
    "engine_from",
    "evaluate",
    "evaluate_input",
    "input_size",
    "load_bundle",
    "load_inventory",
    "load_waivers",
    "log_decisions",
    "package_of",
    "policy_input",
    "read_text",
    "read_waivers",
    "rebase",
    "report_rows",
    "resource_entry",
    "rule_metadata",
    "run_tests",
    "stack_input",
    "too_large",
    "validate_stack",
    "verdict_record",
]
