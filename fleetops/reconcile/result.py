"""What a pass found and did: actions, per-cluster results, the pass's status and exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

import jsonpatch

from fleetops import diff, inventory
from fleetops.errors import ExitCode, Unreachable
from fleetops.spec import format_loc
from fleetops.kube import Key, Manifest

# --- actions, results ---------------------------------------------------------------------


class Write(StrEnum):
    """What an action writes (or would write, in a dry run or detect-only pass); the value is what the output shows."""

    CREATE = "create"
    APPLY = "apply"  # not seen live because its kind's LIST failed: applied anyway (idempotent)
    UPDATE = "update"
    PRUNE = "prune"
    LABEL = "label"
    TAINT = "taint"
    RELEASE = "release"
    QUARANTINE = "quarantine"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    APPROVE = "approve"
    DENY = "deny"
    RECORD = "record"


class Found(StrEnum):
    """What an action reports and leaves alone: a finding, never written; the value is what the output shows."""

    FOREIGN = "foreign"
    PROTECTED = "protected"
    ORPHAN = "orphan"
    UNOWNED = "unowned"
    IDENTITY = "identity"
    QUARANTINED = "quarantined"
    OFFLINE = "offline"
    UNMATCHED = "unmatched"


Verb: TypeAlias = Write | Found  # what an action is: a write, or a finding


class Outcome(StrEnum):
    """What became of an action in this pass."""

    PENDING = "pending"  # a write not made: planned (dry run, detect only), or left for the next pass
    REPORTED = "reported"  # a finding: nothing to write
    DONE = "done"
    FAILED = "failed"  # the call failed (`error` says why)
    NOT_ATTEMPTED = "not-attempted"  # no call made: the API server had stopped answering earlier in the pass


class PassStatus(StrEnum):
    """How a pass ended (gitops-engine's sync phases play this part)."""

    APPLIED = "applied"
    CLEAN = "clean"
    DRIFT = "drift"
    PLANNED = "planned"
    ERRORS = "errors"
    DENIED = "denied"
    STANDBY = "standby"
    INVALID = "invalid"
    UNAVAILABLE = "unavailable"


# Passes that judged the revision and reached every cluster: logged at info, counted as a success.
WORKED = frozenset({PassStatus.APPLIED, PassStatus.CLEAN, PassStatus.DRIFT, PassStatus.PLANNED})


@dataclass
class Action:
    """One thing a pass found: a write it makes (or would make), or a finding it reports."""

    cluster: str
    verb: Verb
    target: str
    detail: Any = None
    kind: str = ""
    error: str | None = None  # why it failed (outcome FAILED or NOT_ATTEMPTED)
    key: Key | None = None  # the object, for writes to it
    body: Manifest | None = field(default=None, repr=False)  # what an apply sends; what a node patch sends
    changed_by: dict[str, str] = field(default_factory=dict)  # of an update: JSON pointer -> the field manager that owns it live
    outcome: Outcome = Outcome.PENDING  # a finding's is REPORTED, from the start

    def __post_init__(self) -> None:
        if not self.write:
            self.outcome = Outcome.REPORTED

    @property
    def write(self) -> bool:
        return isinstance(self.verb, Write)

    @property
    def done(self) -> bool:
        return self.outcome is Outcome.DONE

    def failed(self, error: str, attempted: bool = True) -> None:
        """The call failed (`attempted`), or was not made: its server had stopped answering."""
        self.outcome, self.error = (Outcome.FAILED if attempted else Outcome.NOT_ATTEMPTED), error

    def failure(self) -> Failure | None:
        """The pass's error line of a failed action, None for any other."""
        if self.error is None:
            return None
        return Failure(f"{self.cluster}: {self.verb} {self.target}: {self.error}", self.outcome is not Outcome.NOT_ATTEMPTED)

    def to_dict(self) -> dict[str, Any]:
        detail = ([{**c.to_dict(), "changed_by": self.changed_by.get(c.path)} for c in self.detail]  # FieldChanges
                  if self.verb is Write.UPDATE else self.detail)
        return {"cluster": self.cluster, "verb": self.verb, "kind": self.kind, "target": self.target, "detail": detail,
                "write": self.write, "done": self.done, "error": self.error}

    def text(self) -> str:
        """The detail as a person reads it: an update's fields as `path: live → Git (who changed it)`."""
        if self.verb is Write.UPDATE and isinstance(self.detail, list):
            return "; ".join(change_text(c, self.changed_by.get(c.path)) for c in self.detail)
        return "" if self.detail is None else str(self.detail)


VALUE_CHARS = 80  # of one value in a drift line: a changed ConfigMap or pod template is summarised, not printed whole


def field_path(pointer: str) -> str:
    """A JSON pointer as a field path, written as an environment file's problems write theirs (`spec.format_loc`):
    /spec/hard/requests.nvidia.com~1gpu -> spec.hard["requests.nvidia.com/gpu"]."""
    return format_loc(tuple(int(part) if part.isdigit() else part for part in jsonpatch.JsonPointer(pointer).parts))


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def change_text(change: diff.FieldChange, changed_by: str | None) -> str:
    before = "(absent)" if change.op == "add" else _value(change.old)
    after = "(absent)" if change.op == "remove" else _value(change.new)
    return f"{field_path(change.path)}: {before} → {after}" + (f" (changed by {changed_by})" if changed_by else "")


@dataclass(frozen=True)
class Failure:
    """One error line of a cluster's pass, and whether its call was made (False: the guard refused it, the
    server having stopped answering; those are said in one line, not one per call)."""

    text: str
    attempted: bool = True


@dataclass
class ClusterResult:
    cluster: str
    actions: list[Action] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed live nodes
    capacity: list[inventory.LiveCapacity] = field(default_factory=list)
    shortfalls: list[dict[str, Any]] = field(default_factory=list)
    leader: bool = True
    nodes_read: bool = True  # False: the node LIST failed, so capacity is unknown (not zero)
    unreachable: str | None = None  # why the API server was taken for unreachable in this pass
    applied: set[Key] | None = None  # the inventory of applied objects after this pass; None: not known
    last_applied: str | None = None  # the revision its status ConfigMap records as applied
    measured: set[str] | None = None  # the kinds whose drift this pass measured; None: none (unreachable, denied, standby)
    seconds: float = 0.0  # what this pass spent on the cluster (its nodes, objects and records): its weight when replicas share the fleet

    @property
    def errors(self) -> list[str]:
        return [f.text for f in self.failures]

    def fail(self, text: str, exc: Exception | None = None) -> None:
        """An error line; `exc`, the error it reports: a call the guard refused (`Unreachable`) was not made."""
        self.failures.append(Failure(text, not isinstance(exc, Unreachable)))

    @property
    def kinds(self) -> list[tuple[str, str]]:
        """The kinds the next pass lists besides Git's: those the inventory holds objects of."""
        return sorted({(k[0], k[1]) for k in self.applied or ()})

    @property
    def drift(self) -> list[Action]:
        return [a for a in self.actions if a.write]

    def drift_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.drift:
            out[a.kind] = out.get(a.kind, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "leader": self.leader,
            "drift": len(self.drift),
            "actions": [a.to_dict() for a in self.actions],
            "errors": self.errors,
            "unreachable": self.unreachable,
            "last_applied": self.last_applied,
            "problems": self.problems,
            "capacity": [r.to_dict() for r in self.capacity],
            "shortfalls": self.shortfalls,
        }


@dataclass
class PassResult:
    environment: str
    revision: str | None
    status: PassStatus
    reasons: list[str] = field(default_factory=list)
    clusters: dict[str, ClusterResult] = field(default_factory=dict)
    last_applied: str | None = None
    warnings: list[str] = field(default_factory=list)
    gate_unavailable: bool = False

    @property
    def drift(self) -> int:
        return sum(len(c.drift) for c in self.clusters.values())

    @property
    def errors(self) -> list[str]:
        return [e for c in self.clusters.values() for e in c.errors]

    def exit_code(self) -> ExitCode:
        """OK; DENIED: drift left (detect-only, failed writes), denied, or another replica leads; BAD_INPUT: an
        invalid revision, no source, a cluster that cannot be reached from its kubeconfig."""
        if self.status in (PassStatus.INVALID, PassStatus.UNAVAILABLE):
            return ExitCode.BAD_INPUT
        if self.status in (PassStatus.DENIED, PassStatus.DRIFT, PassStatus.ERRORS, PassStatus.STANDBY):
            return ExitCode.DENIED
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "revision": self.revision,
            "status": self.status,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "last_applied": self.last_applied,
            "drift": self.drift,
            "clusters": {n: c.to_dict() for n, c in self.clusters.items()},
        }
