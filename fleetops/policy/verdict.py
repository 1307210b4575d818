"""The verdict: input -> engine -> decisions -> waivers, with the digests the decision log records."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import spec
from fleetops.errors import PolicyError, Problem
from fleetops.envelope import VERDICT_STATUSES, DecisionStatus, decision_counts
from fleetops.policy.bundle import POLICIES_DIR, WAIVERS_FILE, load_bundle, rule_metadata
from fleetops.policy.decisions import Decision, to_decisions
from fleetops.policy.engine import EmbeddedEngine, Engine
from fleetops.policy.facts import Inventory, policy_input
from fleetops.policy.waivers import apply_waivers, load_waivers
from fleetops.render import DesiredState



@dataclass(frozen=True)
class Judgement:
    """How a verdict's decisions were reached: the engine, the policy and input digests, the time the
    engine took, and the waivers that could not be used. A plan publishes it (`judgement`) and every
    decision record holds its fields."""

    engine: str
    policy_digest: str
    input_digest: str
    duration_seconds: float
    waiver_problems: tuple[Problem, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "policy_digest": self.policy_digest, "input_digest": self.input_digest,
                "duration_seconds": round(self.duration_seconds, 4), "waiver_problems": list(map(str, self.waiver_problems))}


@dataclass
class Verdict:
    environment: str
    revision: str
    engine: str
    policy_digest: str
    input_digest: str
    duration_seconds: float
    decisions: list[Decision]
    waiver_problems: list[Problem] = field(default_factory=list)

    def of(self, status: DecisionStatus) -> list[Decision]:
        """The decisions with `status`: an unwaived deny fails the gate."""
        return [d for d in self.decisions if d.status == status]

    @property
    def ok(self) -> bool:
        return not self.of(DecisionStatus.DENY)

    def rules(self, status: DecisionStatus | None = None) -> set[str]:
        return {d.rule for d in self.decisions if status is None or d.status == status}

    def judgement(self) -> Judgement:
        return Judgement(self.engine, self.policy_digest, self.input_digest, self.duration_seconds, tuple(self.waiver_problems))

    def as_dict(self) -> dict[str, Any]:
        rows = [d.as_dict() for d in self.decisions]
        return {
            "environment": self.environment,
            "revision": self.revision,
            **self.judgement().to_json(),
            "passed": self.ok,
            "summary": decision_counts(rows, VERDICT_STATUSES),
            "decisions": rows,
        }


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the text the engine reads and the input digest hashes.
    orjson writes the large fleet's 13 MB of policy input in 0.06 s; json.dumps took 0.3 s."""
    import orjson

    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def too_large(document: dict[str, Any], size: int, limit: int | None = None) -> str | None:
    """Why a policy input of `size` bytes is not evaluated (past `limit`, by default spec.LIMITS.policy_input_bytes), or None."""
    limit = spec.LIMITS.policy_input_bytes if limit is None else limit
    if size <= limit:
        return None
    tenants = len((document.get("spec") or {}).get("tenants", []))
    return (f"the policy input is {size:,} bytes ({len(document['resources']):,} objects, "
            f"{tenants:,} tenants), more than the {limit:,} bytes a policy evaluation takes; split the environment")


def input_size(env: spec.Environment, state: DesiredState) -> tuple[dict[str, Any], int]:
    """The fleet's own policy input (no live state, no change) and its size: what `check` hands the engine."""
    document = policy_input(env, state)
    return document, len(canonical_json(document))


def evaluate_input(
    document: dict[str, Any],
    engine: Engine | None = None,
    policies_dir: Path = POLICIES_DIR,
    today: dt.date | None = None,
    max_input_bytes: int | None = None,
) -> Verdict:
    """Evaluate a ready-made policy input (the Pulumi policy pack builds its own)."""
    engine = engine or EmbeddedEngine()
    bundle = load_bundle(policies_dir)
    waivers = load_waivers(policies_dir / WAIVERS_FILE, today or dt.date.today())
    known = {m.rule_id for m in rule_metadata(bundle)}
    unknown = [w for w in waivers.active if w.waiver.rule not in known]
    # A waiver of a rule that does not exist waives nothing; say so, as it usually is a typo.
    problems = waivers.problems + [Problem(f"waiver of {w.waiver.rule}: no policy has this rule", w.file, w.line) for w in unknown]
    active = [w for w in waivers.active if w not in unknown]
    text = canonical_json(document)  # serialised once: the engine reads it, the digest hashes it
    if (oversized := too_large(document, len(text), max_input_bytes)) is not None:
        raise PolicyError(f"{document['environment']}: {oversized}")
    started = time.perf_counter()
    results = engine.evaluate(bundle, document, text)
    duration = time.perf_counter() - started
    decisions = apply_waivers(to_decisions(results), document["environment"], active)
    return Verdict(
        environment=document["environment"],
        revision=document.get("revision", ""),
        engine=engine.name,
        policy_digest=bundle.digest,
        input_digest="sha256:" + hashlib.sha256(text).hexdigest(),
        duration_seconds=duration,
        decisions=decisions,
        waiver_problems=problems,
    )


def evaluate(
    env: spec.Environment,
    state: DesiredState,
    live: Inventory | None = None,
    change: dict[str, Any] | None = None,
    engine: Engine | None = None,
    policies_dir: Path = POLICIES_DIR,
    today: dt.date | None = None,
    max_input_bytes: int | None = None,
) -> Verdict:
    """Judge a rendered environment. Raises PolicyError when no decision could be made."""
    document = policy_input(env, state, live, change)
    return evaluate_input(document, engine, policies_dir, today, max_input_bytes)


def report_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """The decisions as flat rows (resource as text), the shape reports and the plan share."""
    return [d.as_dict() for d in verdict.decisions]
