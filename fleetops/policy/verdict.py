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

# The policy input (canonical JSON) one evaluation may hand an engine. regorus takes about 15 bytes of
# memory per byte of input, linearly (measured: the generated large fleet, 15,348 objects, 13 MB ->
# +200 MB; 20,000 small tenants, 191 MB -> +2.7 GB; 55,000 tenants died at 7.8 GB). 64 MiB is about
# 5x the large fleet and 1 GB of engine memory; more is refused, not evaluated in chunks: policies
# judge sums across tenants and clusters, which no part of the fleet shows alone.
MAX_INPUT_BYTES = 64 << 20


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


def evaluate_input(
    document: dict[str, Any],
    engine: Engine | None = None,
    policies_dir: Path = POLICIES_DIR,
    today: dt.date | None = None,
    max_input_bytes: int = MAX_INPUT_BYTES,
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
    if len(text) > max_input_bytes:
        tenants = len(document.get("spec", {}).get("tenants", []))
        raise PolicyError(f"{document['environment']}: the policy input is {len(text):,} bytes ({len(document['resources']):,} objects, "
                          f"{tenants:,} tenants), more than the {max_input_bytes:,} bytes a policy evaluation takes; split the environment")
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
    max_input_bytes: int = MAX_INPUT_BYTES,
) -> Verdict:
    """Judge a rendered environment. Raises PolicyError when no decision could be made."""
    document = policy_input(env, state, live, change)
    return evaluate_input(document, engine, policies_dir, today, max_input_bytes)


def report_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """The decisions as flat rows (resource as text), the shape reports and the plan share."""
    return [d.as_dict() for d in verdict.decisions]
