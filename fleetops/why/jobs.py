"""Kueue's Workloads as the jobs they stand for: who submitted them, what they ask, where Kueue has them.

A Workload is written by Kueue from a user's Job, so its pod templates are the user's: untrusted input,
validated here (pydantic, unknown fields ignored) before anything counts it. A Workload that cannot be
read is reported and left out, never guessed at.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetops.inventory import parse_quantity, parse_time

WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")
# The priority class Kueue records for a Workload (kueue's jobframework.ExtractPriority): this label, or the pods' class.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Resources(_Read):
    requests: dict[str, str | int] = {}
    limits: dict[str, str | int] = {}


class _Container(_Read):
    resources: _Resources = _Resources()


class _Toleration(_Read):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class _PodSpec(_Read):
    containers: list[_Container] = Field(default=[], max_length=256)
    initContainers: list[_Container] = Field(default=[], max_length=256)
    tolerations: list[_Toleration] = Field(default=[], max_length=256)
    priorityClassName: str | None = None


class _Template(_Read):
    spec: _PodSpec = _PodSpec()


class _PodSet(_Read):
    name: str
    count: int = Field(default=1, ge=0)
    template: _Template = _Template()


class _ClassRef(_Read):
    name: str | None = None


class _Spec(_Read):
    podSets: list[_PodSet] = Field(default=[], max_length=16)
    queueName: str | None = None
    priority: int | None = None
    priorityClassName: str | None = None
    priorityClassRef: _ClassRef | None = None


class _Condition(_Read):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    lastTransitionTime: str | None = None


class _Assignment(_Read):
    name: str
    flavors: dict[str, str] = {}
    resourceUsage: dict[str, str | int] = {}


class _Admission(_Read):
    clusterQueue: str
    podSetAssignments: list[_Assignment] = Field(default=[], max_length=16)


class _Status(_Read):
    conditions: list[_Condition] = Field(default=[], max_length=64)
    admission: _Admission | None = None


class _Owner(_Read):
    kind: str
    name: str


class _Metadata(_Read):
    name: str
    namespace: str
    labels: dict[str, str] = {}
    ownerReferences: list[_Owner] = Field(default=[], max_length=16)
    creationTimestamp: str | None = None


class WorkloadObject(_Read):
    metadata: _Metadata
    spec: _Spec = _Spec()
    status: _Status = _Status()


class State(StrEnum):
    """Where Kueue has a job: a closed set, as `why` reports it."""

    PENDING = "pending"  # no quota reserved: waiting for admission
    RESERVED = "reserved"  # quota reserved, admission checks not passed yet
    ADMITTED = "admitted"  # admitted: its pods may start
    EVICTED = "evicted"  # admitted once, evicted (preempted or reclaimed) and waiting again
    FINISHED = "finished"


WAITING = (State.PENDING, State.EVICTED, State.RESERVED)  # what `why --tenant` and the API answer by default


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("key", self.key), ("operator", self.operator), ("value", self.value), ("effect", self.effect)) if v}


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    requests: dict[str, int]  # device resource -> units for the whole pod set (whole units; fractions rounded up)
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True)
class Job:
    """One Workload: the job a user submitted, where Kueue has it and why."""

    namespace: str
    name: str  # the job's (its owner's) name; the Workload's own when it has no owner
    workload: str
    queue: str | None
    priority_class: str | None
    priority: int
    pod_sets: tuple[PodSet, ...]
    state: State
    message: str  # Kueue's own words on its state (QuotaReserved's or Evicted's message)
    reason: str
    cluster_queue: str | None  # where it is admitted (status.admission)
    assigned: dict[str, dict[str, int]] = field(default_factory=dict)  # flavor -> resource -> units it holds
    since: dt.datetime | None = None
    created: dt.datetime | None = None  # when it was submitted: its arrival
    reserved_at: dt.datetime | None = None  # when Kueue last reserved its quota: its run started (kept after it finishes)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def requests(self) -> dict[str, int]:
        """Units asked per resource, over every pod set."""
        out: dict[str, int] = {}
        for ps in self.pod_sets:
            for r, n in ps.requests.items():
                out[r] = out.get(r, 0) + n
        return out

    @property
    def holds(self) -> bool:
        return self.state in (State.RESERVED, State.ADMITTED)


def _units(value: str | int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(parse_quantity(value))


def _pod_requests(spec: _PodSpec) -> dict[str, int]:
    """A pod's requests as Kubernetes computes them: the sum over containers, at least each init container's;
    a container's limit stands for its request where it names none (extended resources are asked by limit)."""

    def one(c: _Container) -> dict[str, int]:
        asked = {**c.resources.limits, **c.resources.requests}
        return {r: _units(v) for r, v in asked.items()}

    total: dict[str, int] = {}
    for c in spec.containers:
        for r, n in one(c).items():
            total[r] = total.get(r, 0) + n
    for c in spec.initContainers:
        for r, n in one(c).items():
            total[r] = max(total.get(r, 0), n)
    return total


def _condition(status: _Status, kind: str) -> _Condition | None:
    return next((c for c in status.conditions if c.type == kind), None)


def _state(status: _Status) -> tuple[State, _Condition | None]:
    finished = _condition(status, "Finished")
    if finished is not None and finished.status == "True":
        return State.FINISHED, finished
    reserved = _condition(status, "QuotaReserved")
    admitted = _condition(status, "Admitted")
    evicted = _condition(status, "Evicted")
    if admitted is not None and admitted.status == "True":
        return State.ADMITTED, admitted
    if reserved is not None and reserved.status == "True":
        return State.RESERVED, reserved
    if evicted is not None and evicted.status == "True":
        return State.EVICTED, evicted
    return State.PENDING, reserved


def read_job(raw: dict[str, Any]) -> Job:
    """One Workload as a Job; ValueError naming what is wrong with it."""
    try:
        wl = WorkloadObject.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    meta, spec = wl.metadata, wl.spec
    owner = next((o.name for o in meta.ownerReferences), meta.name)
    pod_sets = []
    for ps in spec.podSets:
        per_pod = _pod_requests(ps.template.spec)
        tolerations = tuple(Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "") for t in ps.template.spec.tolerations)
        pod_sets.append(PodSet(ps.name, ps.count, {r: n * ps.count for r, n in per_pod.items()}, tolerations))
    named = meta.labels.get(PRIORITY_LABEL) or spec.priorityClassName or (spec.priorityClassRef.name if spec.priorityClassRef else None)
    priority_class = named or next((ps.template.spec.priorityClassName for ps in spec.podSets if ps.template.spec.priorityClassName), None)
    state, cond = _state(wl.status)
    assigned: dict[str, dict[str, int]] = {}
    admission = wl.status.admission
    if admission is not None and state in (State.RESERVED, State.ADMITTED):
        for a in admission.podSetAssignments:
            for r, flavor in a.flavors.items():
                units = _units(a.resourceUsage.get(r, 0))
                assigned.setdefault(flavor, {})[r] = assigned.get(flavor, {}).get(r, 0) + units
    reserved = _condition(wl.status, "QuotaReserved")
    return Job(meta.namespace, owner, meta.name, spec.queueName, priority_class, spec.priority or 0, tuple(pod_sets), state,
               (cond.message or "") if cond else "", (cond.reason or "") if cond else "",
               admission.clusterQueue if admission is not None and state in (State.RESERVED, State.ADMITTED) else None, assigned,
               _time(cond), parse_time(meta.creationTimestamp) if meta.creationTimestamp else None,
               _time(reserved) if reserved is not None and reserved.status == "True" else None)


def _time(condition: _Condition | None) -> dt.datetime | None:
    return parse_time(condition.lastTransitionTime) if condition is not None and condition.lastTransitionTime else None


def select(jobs: list[Job], namespace: str, name: str | None = None) -> list[Job]:
    """The jobs of `namespace` a question is about: the one named `name` (its owner's name or its Workload's), or,
    without a name, every one still waiting (pending, evicted, or reserved and not yet admitted)."""
    mine = [j for j in jobs if j.namespace == namespace]
    return [j for j in mine if name in (j.name, j.workload)] if name is not None else [j for j in mine if j.state in WAITING]
