"""What a pass found and did: actions, per-cluster results, the pass's status and exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jsonpatch

from fleetops import diff, inventory
from fleetops.errors import ExitCode
from fleetops.spec import format_loc
from fleetops.kube import Key, Manifest

# --- actions, results ---------------------------------------------------------------------


class Verb(StrEnum):
    """What an action writes, or (write=False) what it reports; the value is what the output shows."""

    CREATE = "create"
    APPLY = "apply"  # not seen live because its kind's LIST failed: applied anyway (idempotent)
    UPDATE = "update"
    PRUNE = "prune"
    FOREIGN = "foreign"
    PROTECTED = "protected"
    ORPHAN = "orphan"
    UNOWNED = "unowned"
    LABEL = "label"
    TAINT = "taint"
    RELEASE = "release"
    IDENTITY = "identity"
    QUARANTINE = "quarantine"
    QUARANTINED = "quarantined"
    CORDON = "cordon"
    OFFLINE = "offline"
    UNCORDON = "uncordon"
    UNMATCHED = "unmatched"
    APPROVE = "approve"
    DENY = "deny"
    RECORD = "record"


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
    write: bool = True
    kind: str = ""
    done: bool = False
    error: str | None = None
    key: Key | None = None  # the object, for writes to it
    body: Manifest | None = field(default=None, repr=False)  # what an apply sends; what a node patch sends
    changed_by: dict[str, str] = field(default_factory=dict)  # of an update: JSON pointer -> the field manager that owns it live

    def to_dict(self) -> dict[str, Any]:
        detail = ([{**c.to_dict(), "changed_by": self.changed_by.get(c.path)} for c in self.detail]  # FieldChanges
                  if self.verb == Verb.UPDATE else self.detail)
        return {"cluster": self.cluster, "verb": self.verb, "kind": self.kind, "target": self.target, "detail": detail,
                "write": self.write, "done": self.done, "error": self.error}

    def text(self) -> str:
        """The detail as a person reads it: an update's fields as `path: live → Git (who changed it)`."""
        if self.verb == Verb.UPDATE and isinstance(self.detail, list):
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


@dataclass
class ClusterResult:
    cluster: str
    actions: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed live nodes
    capacity: list[inventory.LiveCapacity] = field(default_factory=list)
    shortfalls: list[dict[str, Any]] = field(default_factory=list)
    leader: bool = True
    nodes_read: bool = True  # False: the node LIST failed, so capacity is unknown (not zero)
    unreachable: str | None = None  # why the API server was taken for unreachable in this pass
    applied: set[Key] | None = None  # the inventory of applied objects after this pass; None: not known
    last_applied: str | None = None  # the revision its status ConfigMap records as applied
    measured: set[str] | None = None  # the kinds whose drift this pass measured; None: none (unreachable, denied, standby)

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
