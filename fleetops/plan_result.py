"""The plan of a change, typed: what `plan.build` and `plan.assess` return, and what every form of the
plan reads (fleetops.output: markdown, json, junit, github) and the fleet API serves.

`to_json()` is the published `plan` shape (fleetops/schemas/output.schema.json), field for field; the
rows the policies, `changes` and `grants` make (decisions, fleet and file changes, grants, services)
stay the published rows their modules build.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

from fleetops import usage
from fleetops.spec import Capacity
# Made where they are made (`changes`, `grants`), typed there; read here and by the forms of a plan.
from fleetops.changes import FleetChange as FleetChange, PlanSide as PlanSide, SpecChange as SpecChange
from fleetops.diff import Changes
from fleetops.grants import ClusterGrant as ClusterGrant, Grants as Grants, TenantGrant as TenantGrant
from fleetops.envelope import DecisionStatus, Severity, decision_counts
from fleetops.errors import Problem
from fleetops.kube import ObjectKey

if TYPE_CHECKING:  # read by annotation only: the forms of a plan do not load the policy engine
    from fleetops.policy.decisions import Decision
    from fleetops.policy.verdict import Judgement
    from fleetops.policy.waivers import Waiver

Row: TypeAlias = dict[str, Any]  # one row of the published JSON, built by the module that owns its shape


class PlanVerdict(StrEnum):
    ALLOWED = "allowed"
    NEEDS_APPROVAL = "needs-approval"
    DENIED = "denied"
    INVALID = "invalid"  # the change cannot be judged: an invalid side, no policy engine

    @classmethod
    def of(cls, counts: dict[str, int]) -> PlanVerdict:
        return cls.DENIED if counts["deny"] else cls.NEEDS_APPROVAL if counts["approval"] else cls.ALLOWED


@dataclass(frozen=True)
class ChangeSide:
    """One side of the change; whether its environment file exists there is unknown (None) when it could not be read."""

    revision: str
    exists: bool | None = None

    def to_json(self) -> Row:
        return {"revision": self.revision} if self.exists is None else {"revision": self.revision, "exists": self.exists}


@dataclass(frozen=True)
class Approvals:
    have: int
    needed_by: list[str]  # the rules whose decisions more approvals resolve


@dataclass(frozen=True)
class Cost:
    """Monthly cost of the fleet at base and at head, in the environment's currency, and how much of the
    change the edited prices alone make (`spec.price_change_cost`); the rest is capacity added or removed."""

    before: float
    after: float
    currency: str
    from_prices: float = 0.0

    @property
    def delta(self) -> float:
        return round(self.after - self.before, 2)

    @property
    def from_capacity(self) -> float:
        return round(self.delta - self.from_prices, 2)

    def to_json(self) -> Row:
        return {"before": self.before, "after": self.after, "delta": self.delta, "from_prices": self.from_prices,
                "from_capacity": self.from_capacity, "currency": self.currency}


@dataclass(frozen=True)
class PolicyReview:
    """Who judged the change, and what of the policies it changes."""

    judged_by: str  # the base revision: its policies judge
    judge_program_is_base: bool
    policy_files_changed: list[str]
    owners: list[str]  # policies/owners.yaml of the base

    def to_json(self) -> Row:
        return {"judged_by": self.judged_by, "judge_program_is_base": self.judge_program_is_base,
                "policy_files_changed": self.policy_files_changed, "owners": self.owners,
                "needs_policy_owner_review": self.needs_policy_owner_review}

    @property
    def needs_policy_owner_review(self) -> bool:
        return bool(self.policy_files_changed)


@dataclass(frozen=True)
class PolicyFileChange:
    file: str
    security: bool  # a file that decides who may do what (waivers, owners, data)
    diff: str  # unified diff, base to head


@dataclass(frozen=True)
class CapacityChange:
    """A cluster's device resource at base and at head, each side the model's row (`spec.ClusterCapacity`)."""

    cluster: str
    resource: str
    before: Capacity
    after: Capacity

    @property
    def moved(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class PlanQuota:
    guaranteed: int
    burst: int


@dataclass(frozen=True)
class PlanQuotaChange:
    tenant: str
    cluster: str
    resource: str
    before: PlanQuota
    after: PlanQuota


@dataclass(frozen=True)
class Groups:
    """Pools and edge groups (`cluster/group`) the change adds and removes."""

    added: list[str]
    removed: list[str]


@dataclass(frozen=True)
class Location:
    """Where a decision is about: the field of the environment file, or the first changed line of a policy or program file."""

    file: str
    line: int
    column: int


class FindingKind(StrEnum):
    """A decision against the base revision's own, as Infracost and conftest users read a change's findings:
    the verdict counts every decision alike (a pre-existing deny still denies); only how loud it is differs."""

    NEW = "new"  # not at base, or at base with another status or message: the change made or moved it
    PRE_EXISTING = "pre-existing"  # at base as it is at head: the change did not make it
    RESOLVED = "resolved"  # at base, gone at head: the change resolved it


@dataclass(frozen=True)
class PlanDecision:
    """One policy decision on the change, with where it comes from and how to fix it ($defs/decision)."""

    status: DecisionStatus  # a deny that more approvals resolve is an approval
    rule: str
    severity: Severity
    msg: str
    resource: str  # `cluster:Kind/namespace/name`
    # `subject` and `figures` are the rule's own data, open by the policy contract (policies/README.md,
    # "Decisions"): each rule names what it needs, so they stay rows, passed on as the rule made them.
    subject: Row  # the resource as the rule names it: kind, name, cluster, tenant, ...
    package: str
    waived_by: str | None = None  # file:line of the waiver
    fix: str = ""
    title: str = ""  # the rule's METADATA title (explain): what a reader of SARIF or the JSON sees the rule called
    figures: Row | None = None  # the numbers the rule computed; None: a decision no rule made
    location: Location | None = None
    waiver: Waiver | None = None  # the waiver that waives it: a reviewer reads its owner, ticket, expiry and reason
    finding: FindingKind | None = None  # against the base's decisions (plan); None: judged alone (check, the fleet API's decisions)
    # Values the rule's fix names beyond its subject and figures (`policy.Decision.fix_values`): only
    # `explain` reads them; no form, report or record shows them.
    fix_values: Row = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def judged(cls, decision: Decision) -> PlanDecision:
        """A policy's decision as the plan shows it, before `explain` places it, gates it and finds its fix and waiver."""
        return cls(decision.status, decision.rule, decision.severity, decision.msg, decision.resource_ref(), decision.resource,
                   decision.package, decision.waived_by, figures=decision.figures, fix_values=decision.fix_values)

    def to_json(self) -> Row:
        w = self.waiver
        waiver = {"owner": w.owner, "ticket": w.ticket, "expires": w.expires.isoformat(), "reason": w.reason} if w is not None else None
        optional = {"figures": self.figures, "location": asdict(self.location) if self.location else None, "waiver": waiver,
                    "finding": self.finding.value if self.finding else None}
        return {"status": self.status.value, "rule": self.rule, "severity": self.severity.value, "msg": self.msg, "resource": self.resource,
                "subject": self.subject, "package": self.package, "waived_by": self.waived_by, "fix": self.fix,
                **({"title": self.title} if self.title else {}), **{k: v for k, v in optional.items() if v is not None}}


def status_counts(decisions: Iterable[PlanDecision]) -> dict[str, int]:
    """How many decisions have each status, every status named: plan's counts, and the fleet API's."""
    return decision_counts({"status": d.status.value} for d in decisions)


class ServiceChange(StrEnum):
    ADDED = "added"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class PlanService:
    """An inference service of the head in fleet terms (`grants.services`, what the policies judge): its
    replicas and devices, what Kueue grants its tenant there, what it costs at max, against the base."""

    tenant: str
    name: str
    cluster: str
    pools: list[str]
    resource: str
    devices: int  # per replica
    min: int
    max: int
    at_max: int  # devices at max replicas
    reachable: int  # of its tenant's burst on its pools, on an idle cluster
    replica_monthly: float
    monthly_at_max: float
    change: ServiceChange
    monthly_at_max_delta: float
    text: str  # one sentence a reviewer reads


@dataclass(frozen=True)
class TenantWork:
    """One tenant's jobs of the trace, base → head (`_after`): queueing delay in hours (a job never admitted
    counts with the wait it had by the window's end), device-hours admitted, jobs never admitted."""

    tenant: str
    jobs: int
    wait_p50_hours: float
    wait_p50_hours_after: float
    wait_p99_hours: float
    wait_p99_hours_after: float
    device_hours: float
    device_hours_after: float
    never_admitted: int
    never_admitted_after: int


@dataclass(frozen=True)
class Work:
    """What the change does to the work (plan --whatif): a trace replayed on the real Kueue at base and at
    head (fleetops.whatif.report.impact), with what the figures depend on: the trace's source, jobs and
    window, the load it offers each side, the assumptions of the replay."""

    source: str
    jobs: int
    window_hours: float
    utilisation: float  # allocation: device-time admitted / device-time there is, over what the trace asks of
    utilisation_after: float
    offered_load: float  # device-time asked / device-time there is: the ceiling of the utilisation
    offered_load_after: float
    backlog_jobs: int  # waiting at the window's end
    backlog_jobs_after: int
    tenants: list[TenantWork]
    assumptions: list[str]

    @classmethod
    def of(cls, row: Row) -> Work:
        """From the plain data the policies read (`input.change.work`)."""
        return cls(**{**row, "tenants": [TenantWork(**t) for t in row["tenants"]]})


def _key(key: ObjectKey) -> dict[str, str]:
    return dict(zip(("cluster", "apiVersion", "kind", "namespace", "name"), key))


def _objects_json(changes: Changes) -> Row:
    per_cluster: dict[str, dict[str, int]] = {}
    for what, keys in (("added", changes.added), ("removed", changes.removed), ("changed", list(changes.changed))):
        for key in keys:
            per_cluster.setdefault(key[0], {"added": 0, "removed": 0, "changed": 0})[what] += 1
    return {"added": [_key(k) for k in changes.added], "removed": [_key(k) for k in changes.removed],
            "changed": [{**_key(k), "fields": [f.to_dict() for f in fs]} for k, fs in changes.changed.items()],
            "per_cluster": dict(sorted(per_cluster.items()))}


@dataclass(frozen=True)
class PlanResult:
    """A change judged (or why it cannot be): a plan that cannot be judged has its `problems`, each a
    blocking decision, and none of the parts after `problems`."""

    environment: str
    verdict: PlanVerdict
    base: ChangeSide
    head: ChangeSide
    decisions: list[PlanDecision]
    no_effect: bool = False  # no object, field, policy or cost changes
    spec_changes: list[SpecChange] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    approvals: Approvals = Approvals(0, [])
    fleet_changes: list[FleetChange] = field(default_factory=list)  # largest first
    policy_file_changes: list[PolicyFileChange] = field(default_factory=list)
    program_file_changes: list[str] = field(default_factory=list)
    objects: Changes = field(default_factory=Changes)
    capacity: list[CapacityChange] = field(default_factory=list)
    quota_changes: list[PlanQuotaChange] = field(default_factory=list)
    grants: Grants = Grants([], [])  # what Kueue grants on an idle cluster
    services: list[PlanService] = field(default_factory=list)  # the head's inference services
    groups: Groups = Groups([], [])
    cost: Cost = Cost(0.0, 0.0, "")
    policy: PolicyReview = PolicyReview("", True, [], [])
    usage: usage.Usage | None = None
    work: Work | None = None  # what it does to the work; None: not asked (plan --whatif)
    judgement: Judgement | None = None  # how the policies judged it; None: not judged (verdict invalid)
    resolved: list[PlanDecision] = field(default_factory=list)  # the base's decisions head no longer has: they judge nothing

    @property
    def counts(self) -> dict[str, int]:
        return status_counts(self.decisions)

    @property
    def findings(self) -> dict[str, int]:
        """How many decisions the change made (new), found already at base (pre-existing), and resolved."""
        made = Counter(d.finding for d in self.decisions)
        return {FindingKind.NEW.value: made[FindingKind.NEW], FindingKind.PRE_EXISTING.value: made[FindingKind.PRE_EXISTING],
                FindingKind.RESOLVED.value: len(self.resolved)}

    def decision_rows(self) -> list[Row]:
        """The decisions as the decision log and JUnit take them: the published rows."""
        return [d.to_json() for d in self.decisions]

    @property
    def judged(self) -> bool:
        return self.verdict is not PlanVerdict.INVALID

    @property
    def security_changes(self) -> int:
        """Security-relevant edits of the environment file and the policies, and every program file changed."""
        return (sum(c.security for c in self.spec_changes) + sum(f.security for f in self.policy_file_changes)
                + len(self.program_file_changes))

    def to_json(self) -> Row:
        """The published `plan` fields (the envelope adds schema, command, version, ok and problems)."""
        common = {"environment": self.environment, "base": self.base.to_json(), "head": self.head.to_json(), "verdict": self.verdict.value}
        if not self.judged:
            return {**common, "problems": self.problems, "decisions": self.decision_rows(), "counts": self.counts,
                    "no_effect": self.no_effect, "spec_changes": [c.to_json() for c in self.spec_changes]}
        assert self.judgement is not None, "a judged plan says how it was judged"
        return {
            **common,
            "approvals": {"have": self.approvals.have, "needed_by": self.approvals.needed_by},
            "no_effect": self.no_effect,
            "fleet_changes": [asdict(c) for c in self.fleet_changes],
            "spec_changes": [c.to_json() for c in self.spec_changes],
            "policy_file_changes": [{"file": f.file, "security": f.security, "diff": f.diff} for f in self.policy_file_changes],
            "program_file_changes": self.program_file_changes,
            "security_changes": self.security_changes,
            "objects": _objects_json(self.objects),
            "capacity": [{"cluster": r.cluster, "resource": r.resource, "before": asdict(r.before), "after": asdict(r.after)} for r in self.capacity],
            "quota_changes": [{"tenant": q.tenant, "cluster": q.cluster, "resource": q.resource, "before": asdict(q.before), "after": asdict(q.after)}
                              for q in self.quota_changes],
            "grants": {"tenants": [asdict(r) for r in self.grants.tenants], "clusters": [asdict(c) for c in self.grants.clusters]},
            "services": [{**asdict(s), "change": s.change.value} for s in self.services],
            "groups": {"added": self.groups.added, "removed": self.groups.removed},
            "cost": self.cost.to_json(),
            "policy": self.policy.to_json(),
            "usage": self.usage.model_dump(mode="json") if self.usage is not None else None,
            **({"work": asdict(self.work)} if self.work is not None else {}),  # only when asked: the same plan without it
            "decisions": self.decision_rows(),
            "counts": self.counts,
            "findings": self.findings,
            "resolved": [d.to_json() for d in self.resolved],
            "judgement": self.judgement.to_json(),
        }
