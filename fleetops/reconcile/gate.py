"""The policy gate a pass goes through before its first write."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fleetops import render, spec
from fleetops.envelope import DecisionStatus

# --- the gate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateResult:
    denied: bool
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # reported, never blocking (e.g. live capacity below quota)
    unavailable: bool = False  # denied because no decision could be made (no engine), not by a policy


class Gate(Protocol):
    def __call__(self, env: spec.Environment, state: render.DesiredState, live_nodes: dict[str, Any]) -> GateResult: ...


def default_gate(env: spec.Environment, state: render.DesiredState, live_nodes: dict[str, Any], policies_dir: Path) -> GateResult:
    """The policy gate of fleetops.policy, with the live node inventory in its input.

    `policies_dir` is the fetched revision's `policies/`, so the gate that deploys is the one `plan`
    and `check` used. Fails closed: a revision without policies, or an engine that cannot load them
    or raises, is denied.
    """
    if not policies_dir.is_dir():
        return GateResult(True, [f"the revision has no {policies_dir.name}/ folder: nothing to judge it by, nothing applied"])
    try:
        from fleetops import policy

        verdict = policy.evaluate(env, state, live=policy_inventory(live_nodes), policies_dir=policies_dir)
    except Exception as exc:  # noqa: BLE001 - any failure of the engine is a denial, never an apply
        return GateResult(True, [f"policy engine unavailable: {type(exc).__name__}: {exc}"], unavailable=True)
    warnings = [f"{d.rule}: {d.msg}" for d in verdict.of(DecisionStatus.WARN)]
    try:  # the same record plan, check and the policy pack write; losing it does not undo the decision
        policy.log_decisions(policy.decision_log_path(), policy.verdict_record(verdict, "reconcile"))
    except policy.PolicyError as exc:
        warnings.append(f"decision not recorded: {exc}")
    return GateResult(not verdict.ok, [f"{d.rule}: {d.msg}" for d in verdict.of(DecisionStatus.DENY)], warnings)


def policy_inventory(live: dict[str, Any]) -> Any:
    """The reconciler's live facts as the policy input's node inventory (clusters whose nodes were read)."""
    from fleetops import policy

    return policy.Inventory(nodes=[node for _, facts in sorted(live["clusters"].items()) if facts["nodes_read"] for node in facts["nodes"]])
