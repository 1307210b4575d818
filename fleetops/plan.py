"""What a change does: base vs head rendered in isolation, diffed, costed and judged by the base's policies.

The judge (policy evaluation, approvals, verdict, decision record) is the code running this plan
(in CI, the base revision's: see docs/ci/), with the base revision's policies, data, waivers and
owners; nothing the head holds is read for the verdict. Each side is taken from its own revision
as its blobs into a temporary folder (`revisions.checkout`; the user's working tree and index are never touched;
head defaults to the working tree itself, read only) and rendered by that revision's own program
and modules, so a change to `modules/` shows up in the plan exactly as `pulumi up` would deploy it.
A side whose program is byte for byte the one running (`revisions.survey`) renders here, and then only its
environment file and policies are taken out of Git; any other renders confined
(`fleetops.isolate`) and answers as data, which this process reads with its own model.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetops import changes, diff, git, grants, isolate, spec, usage
from fleetops.envelope import DecisionStatus, Severity
from fleetops.errors import PlanError, Problem, UnknownEnvironment
from fleetops.explain import Edited, explain
from fleetops.plan_result import (Approvals, CapacityChange, ChangeSide, Cost, PlanDecision, FindingKind, Groups,
                                  Location, PlanResult, PolicyFileChange, PolicyReview, PlanQuota, PlanQuotaChange, PlanService, ServiceChange, PlanVerdict,
                                  Work, status_counts)
from fleetops.prometheus import PrometheusError
from fleetops.revisions import PROGRAM_PATHSPECS, WORKTREE, checkout, default_base, environments, resolve, stamp, survey

if TYPE_CHECKING:  # read by annotation only: the policy engine loads when a plan is judged
    from fleetops.policy import verdict as policy_verdict


@dataclass
class RenderedSide:
    """One revision of the environment, rendered: empty when the file does not exist there."""

    revision: str
    exists: bool
    env: spec.Environment | None = None
    clusters: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # each cluster's objects
    tree: Path | None = None
    parsed: changes.Parsed | None = None  # the file's data and positions, when the render kept them


class Sides:
    """Base and head of a plan, each rendered by its own revision's code.

    A side whose program, modules and model are byte for byte the code running here renders in this
    process, one after the other (forking the base's render and the judgement beside them cost more
    CPU than it saved, and no wall time on a busy machine: benchmarks/README.md). Another side
    renders confined (`isolate`), started first so that it renders while this process works,
    answering its objects as data. Either way its environment file is read here, by the running model.
    """

    def __init__(self, env_rel: str, revs: tuple[str, str], trees: tuple[Path, Path], ours: tuple[bool, bool]) -> None:
        self.env_rel, self.revs, self.trees, self.ours = env_rel, revs, trees, ours
        self.sides: list[RenderedSide | None] = [None, None]
        self.procs: dict[int, isolate.IsolatedRender] = {}

    def __enter__(self) -> Sides:
        try:
            for i, (rev, tree) in enumerate(zip(self.revs, self.trees)):
                if not (tree / self.env_rel).is_file():
                    self.sides[i] = RenderedSide(revision=rev, exists=False, tree=tree)
                elif not self.ours[i]:  # another revision's code: confined, answering as data
                    self.procs[i] = _isolated(tree, self.env_rel, rev)
            for i, (rev, tree) in enumerate(zip(self.revs, self.trees)):
                if self.sides[i] is None and i not in self.procs:
                    self.sides[i] = rendered_side(rev, tree, self.env_rel)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.procs.values():  # a side that failed leaves the other nothing to do
            proc.close()

    def head(self) -> RenderedSide:
        return self._side(1)

    def base(self) -> RenderedSide:
        return self._side(0)

    def _side(self, i: int) -> RenderedSide:
        if self.sides[i] is None:
            # Its file is read by the model running here first, while the confined render works: the
            # problems of an invalid file are found here, at their places, whatever the program answers.
            side = _load_side(self.revs[i], self.trees[i], self.env_rel)
            try:
                side.clusters = self.procs.pop(i).finish()
            except isolate.IsolationError as exc:
                raise PlanError(problems=exc.problems) from None
            self.sides[i] = side
        return self.sides[i]  # type: ignore[return-value]


def _isolated(tree: Path, env_rel: str, rev: str) -> isolate.IsolatedRender:
    try:
        return isolate.start(tree, env_rel, rev, _label(env_rel, rev))
    except isolate.IsolationError as exc:
        raise PlanError(str(exc)) from None


def _label(env_rel: str, rev: str) -> str:
    return f"{env_rel}@{rev[:12] if rev != WORKTREE else 'working tree'}"


def _load_side(rev: str, tree: Path, env_rel: str) -> RenderedSide:
    try:
        document = spec.read_environment(tree / env_rel, display=env_rel)
    except spec.SpecError as exc:
        raise PlanError(problems=exc.problems) from None
    return RenderedSide(revision=rev, exists=True, env=document.env, tree=tree, parsed=(document.data, document.positions))


def rendered_side(rev: str, tree: Path, env_rel: str) -> RenderedSide:
    """The environment file of `tree`, read and rendered by the program running here."""
    side = _load_side(rev, tree, env_rel)
    side.clusters = _render_side(side, env_rel)
    return side


def _render_side(side: RenderedSide, env_rel: str) -> dict[str, list[dict[str, Any]]]:
    from fleetops import render

    assert side.env is not None and side.tree is not None
    try:  # the revision is a label here: nothing the plan compares carries it
        return render.render_environment(side.env, side.tree / env_rel, revision=side.revision).clusters
    except render.RenderError as exc:
        raise PlanError(str(exc)) from None


# --- what changed ---------------------------------------------------------------------------


def capacity_rows(before: spec.Environment | None, after: spec.Environment | None) -> list[CapacityChange]:
    """Per cluster x device resource: declared units, guaranteed and burst sums, headroom, before and after."""

    def facts(env: spec.Environment | None) -> dict[tuple[str, str], spec.Capacity]:
        return {(r.cluster, r.resource): r.capacity for r in spec.capacity_rows(env)} if env is not None else {}

    b, a = facts(before), facts(after)
    return [CapacityChange(key[0], key[1], b.get(key, spec.NO_CAPACITY), a.get(key, spec.NO_CAPACITY)) for key in sorted(set(b) | set(a))]


def quota_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[PlanQuotaChange]:
    def quotas(env: spec.Environment | None) -> dict[tuple[str, str, str], PlanQuota]:
        if env is None:
            return {}
        return {
            (t.name, c, r): PlanQuota(q.guaranteed, q.burst)
            for t in env.tenants
            for c in t.clusters
            for r, q in t.quota.items()
        }

    b, a = quotas(before), quotas(after)
    zero = PlanQuota(0, 0)
    rows = []
    for key in sorted(set(b) | set(a)):
        old, new = b.get(key, zero), a.get(key, zero)
        if old != new:
            rows.append(PlanQuotaChange(key[0], key[1], key[2], old, new))
    return rows


def group_changes(before: spec.Environment | None, after: spec.Environment | None) -> Groups:
    def groups(env: spec.Environment | None) -> set[str]:
        if env is None:
            return set()
        return {f"{c.name}/{g.name}" for c in env.clusters for g in (*c.pools, *c.edge_groups)}

    b, a = groups(before), groups(after)
    return Groups(sorted(a - b), sorted(b - a))


def changed_files(repo: Path, base: str, head: str, paths: Sequence[str], stack: contextlib.ExitStack) -> Callable[[], list[str]]:
    """The files under `paths` the change touches, looked up by Git while the caller goes on (stopped
    when `stack` closes); the result waits for them."""
    lookups = [git.Started(repo, "diff", "--name-only", "-z", base, *([] if head == WORKTREE else [head]), "--", *paths)]
    if head == WORKTREE:
        lookups.append(git.Started(repo, "ls-files", "-z", "--others", "--exclude-standard", "--", *paths))
    for lookup in lookups:
        stack.callback(lookup.close)
    return lambda: sorted({name for lookup in lookups for name in lookup().split("\0") if name})


# A diff read for its first hunk per file reads at most this many lines: the rest is not needed.
MAX_DIFF_LINES = 1_000_000
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def first_changed_lines(repo: Path, base: str, head: str, paths: Sequence[str], stack: contextlib.ExitStack) -> Callable[[], dict[str, int]]:
    """The first line of head's text where each file under `paths` differs from base (`git diff -U0`),
    looked up while the caller goes on; a file only in the working tree or removed is missing."""
    proc = subprocess.Popen(["git", "-C", str(repo), "diff", "-U0", "--no-color", "--no-ext-diff", "--no-renames", base,
                             *([] if head == WORKTREE else [head]), "--", *paths],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="surrogateescape")
    stack.callback(lambda: proc.poll() is None and proc.kill())

    def read() -> dict[str, int]:
        lines: dict[str, int] = {}
        name = None
        assert proc.stdout is not None
        for _, text in zip(range(MAX_DIFF_LINES), proc.stdout):
            if text.startswith("+++ "):
                name = text[4:].rstrip("\n").removeprefix("b/") if text.startswith("+++ b/") else None
            elif name is not None and name not in lines and (hunk := _HUNK.match(text)):
                start, count = int(hunk[1]), int(hunk[2] or 1)
                lines[name] = max(start, 1) if count else start + 1  # a pure removal: the line after it
        proc.kill()
        proc.wait()
        return lines

    return read


def service_rows(before: RenderedSide, after: RenderedSide, granted: dict[str, Any], base_granted: dict[str, Any]) -> list[PlanService]:
    """The head's inference services in fleet terms (`grants.services`, what the policies judge), each with
    what it adds at max to the month against the base and one sentence (`text`) a reviewer reads.
    `granted` and `base_granted` are each side's `grants.of_fleet(...).facts`, read once by the plan."""
    def rows(side: RenderedSide, known: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
        if side.env is None or not side.env.services:
            return {}
        return {(r["tenant"], r["cluster"], r["name"]): r for r in grants.services(side.env, known)}

    old, new = rows(before, base_granted), rows(after, granted)
    currency = after.env.budget.currency if after.env else ""
    out = []
    for key, row in new.items():
        was = old.get(key)
        change = ServiceChange.ADDED if was is None else ServiceChange.UNCHANGED if was == row else ServiceChange.CHANGED
        delta = round(row["monthly_at_max"] - (was["monthly_at_max"] if was else 0), 2)
        spend = (f"{changes.money(delta)} {currency}/mo at max" if change is not ServiceChange.UNCHANGED
                 else f"{row['monthly_at_max']:,.0f} {currency}/mo at max")
        text = (f"{row['tenant']}/{row['name']}: {row['min']}–{row['max']} replicas × {row['devices']} {row['resource']}; "
                f"at max {row['at_max']:,} of a reachable burst of {row['reachable']:,}; {spend}")
        out.append(PlanService(**row, change=change, monthly_at_max_delta=delta, text=text))
    return out


def price_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    """Every device model whose price per device-hour differs between the sides (None: not priced there)."""
    old, new = (env.prices if env is not None else {} for env in (before, after))
    return [{"model": m, "before": old.get(m), "after": new.get(m)} for m in sorted(set(old) | set(new)) if old.get(m) != new.get(m)]


def cost_at_base_prices(before: spec.Environment | None, after: spec.Environment | None) -> float:
    """Head's fleet priced at the base revision's reference (`spec.Reference`): a price cut, a renamed model
    or a new spot pool in the same change as more nodes cannot hide what the nodes cost."""
    return spec.cost_at_reference(spec.Reference.of(before), after) if after is not None else 0.0


def policy_owners(tree: Path) -> list[str]:
    path = tree / "policies" / "owners.yaml"
    if not path.is_file():
        return []
    data, _ = spec.parse_yaml(path.read_text(), str(path))
    owners = data.get("owners", []) if isinstance(data, dict) else []
    return [str(o) for o in owners]


def cost(env: spec.Environment | None) -> float:
    return spec.monthly_cost(env) if env is not None else 0.0


# --- the plan ---------------------------------------------------------------------------------

def change_facts(environment: str, base: RenderedSide, head: RenderedSide, quota: list[PlanQuotaChange], groups: Groups,
                 files: dict[str, list[str]], approvals: int, costs: tuple[float, float]) -> dict[str, Any]:
    """The change under review, as the `fleet.change` policies see it."""
    return {
        "environment": environment,
        "base_revision": base.revision,
        "head_revision": head.revision,
        "environment_added": not base.exists and head.exists,
        "environment_removed": base.exists and not head.exists,
        "quota_changes": [asdict(q) for q in quota],
        "groups_added": groups.added,
        "groups_removed": groups.removed,
        "cost_before": costs[0],
        "cost_after": costs[1],
        "cost_after_base_prices": cost_at_base_prices(base.env, head.env),
        "price_changes": price_changes(base.env, head.env),
        "below_reference": spec.below_reference(spec.Reference.of(base.env), head.env) if head.env is not None else [],
        "policy_files_changed": files["policies"],
        "program_files_changed": files["program"],
        "approvals": approvals,
        # Flows the change opens into a tenant marked `isolation: strict` (fleet.network reads them).
        "strict_opened": [r for r in changes.reach_changes(base.env, head.env) if r["strict"]] if base.env and head.env else [],
    }


@dataclass(frozen=True)
class Meter:
    """Where the judge reads what the fleet used: its own Prometheus, from its command line, never from
    the revision under review; `source` None when none was given. `work`: what the change does to the
    work, computed by the caller from the two rendered sides (plan --whatif replays a trace on them:
    fleetops.whatif.run.work) as plain data, the policy input's `change.work`; None: not asked."""

    source: usage.Source | None = None
    window: usage.Window = usage.parse_window("30d")
    work: Callable[[RenderedSide, RenderedSide], dict[str, Any]] | None = None


def measured(meter: Meter, before: spec.Environment | None, after: spec.Environment | None,
             quota: list[PlanQuotaChange]) -> usage.Usage:
    """The use of what the change touches, or why it is unknown: no answer is never zero use."""
    rows = [asdict(q) for q in quota]  # usage reads plain rows, as the policies do
    if meter.source is None:
        return usage.unavailable(meter.window, "no --prometheus given", before, after, rows)
    try:
        return usage.measure(meter.source, meter.window, before, after, rows, dt.datetime.now(dt.timezone.utc))
    except PrometheusError as exc:
        return usage.unavailable(meter.window, f"Prometheus did not answer: {exc}", before, after, rows)


def build(repo: Path, env_name: str, base_rev: str | None, head_rev: str | None, approvals: int,
          meter: Meter = Meter()) -> PlanResult:
    """Render both sides, compare them, and judge head (and the change) by the base revision's policies."""
    env_rel = spec.environment_path(env_name).as_posix()
    head = resolve(repo, head_rev) if head_rev else WORKTREE
    base = resolve(repo, base_rev) if base_rev else default_base(repo, "HEAD" if head == WORKTREE else head)
    known = environments(repo, base) | environments(repo, head)
    if env_name not in known:  # asked before anything is taken out of Git or rendered
        raise UnknownEnvironment(problems=[spec.no_environment(env_rel, env_name, known, f" at base {base[:12]} or head")])
    with contextlib.ExitStack() as stack:
        policy_files_changed = changed_files(repo, base, head, ["policies/"], stack)
        program_files_changed = changed_files(repo, base, head, PROGRAM_PATHSPECS, stack)
        first_lines = first_changed_lines(repo, base, head, ["policies/", *PROGRAM_PATHSPECS], stack)
        revisions = [survey(repo, rev, env_rel) for rev in (base, head)]
        base_tree = stack.enter_context(checkout(repo, base, revisions[0].needs))
        head_tree = stack.enter_context(checkout(repo, head, revisions[1].needs))
        sides = stack.enter_context(Sides(env_rel, (base, head), (base_tree, head_tree), (revisions[0].runs_here, revisions[1].runs_here)))
        # The base revision's policies judge the change: a pull request cannot weaken its own gate.
        policies = base_tree / "policies"
        if not policies.is_dir():
            raise PlanError(f"base {base[:12]} has no policies/ to judge the change with (fail closed)")
        before, after = sides.base(), sides.head()
        policy_files, program_files = policy_files_changed(), program_files_changed()
        return assess(env_name, env_rel, before, after, base_tree, (policy_files, program_files), first_lines(), approvals,
                      revisions[0].runs_here, stamp(repo, head), meter)


def assess(env_name: str, env_rel: str, before: RenderedSide, after: RenderedSide, base_tree: Path, files_changed: tuple[list[str], list[str]],
           lines: dict[str, int], approvals: int, judge_program_is_base: bool, head_revision: str,
           meter: Meter = Meter()) -> PlanResult:
    """A change of the environment from `before` to `after`, both rendered: compared, costed and judged by
    `base_tree`'s policies. `plan` gives it two revisions; the fleet API's quotes a revision and that
    revision edited in memory, so that a quote and a plan of the same change decide alike."""
    policy_files, program_files = files_changed
    policies = base_tree / "policies"
    base = before.revision
    quota = quota_changes(before.env, after.env)
    groups = group_changes(before.env, after.env)
    cost_before, cost_after = cost(before.env), cost(after.env)
    facts = change_facts(env_name, before, after, quota, groups, {"policies": policy_files, "program": program_files},
                         approvals, (cost_before, cost_after))
    check_schema(after, env_rel)  # a head the API server would refuse is refused before it is judged
    work = meter.work(before, after) if meter.work is not None else None
    if work is not None:  # only when asked: a plan without --whatif judges the input it always did
        facts["work"] = work
    used = measured(meter, before.env, after.env, quota)
    # Each side's Kueue tree read once: the policy input, `grants` and `services` share it.
    kueue, base_kueue = grants.of_fleet(after.clusters), grants.of_fleet(before.clusters)
    judged = judge(after, env_name, facts, policies, used.model_dump(mode="json"), kueue.facts)
    # The base's fleet by the same policies, without the change: what was found before it (no verdict of it counts).
    found, gone = findings(judged.decisions, judge(before, env_name, None, policies, granted=base_kueue.facts).decisions if before.env is not None else [])
    objects = diff.compare(before.clusters, after.clusters)
    currency = (after.env or before.env).budget.currency if (after.env or before.env) else ""
    owners = policy_owners(base_tree)
    files = [PolicyFileChange(f, f in changes.SECURITY_FILES,
                              changes.file_diff(_read(base_tree / f), _read(after.tree / f) if after.tree else None, f)) for f in policy_files]
    base_file, head_file = (side.parsed or changes.parse(_read(side.tree / env_rel) if side.tree else None, env_rel)
                            for side in (before, after))
    (edits, fields), positions = changes.spec_changes_and_fields(base_file, head_file), head_file[1]
    del base_file, head_file
    edited = Edited(env_rel, fields, {f: lines.get(f, 1) for f in policy_files}, {f: lines.get(f, 1) for f in program_files})
    decisions = explain([replace(d, finding=f) for d, f in zip(judged.decisions, found, strict=True)], after.env, positions, policies, edited)
    resolved = explain([replace(d, finding=FindingKind.RESOLVED) for d in gone], None, None, policies)
    return PlanResult(
        environment=env_name,
        verdict=PlanVerdict.of(status_counts(decisions)),
        base=ChangeSide(base, before.exists),
        head=ChangeSide(head_revision, after.exists),
        decisions=decisions,
        # A program change has an effect even where no object shows it (the deploy runs it: Makefile, the policy pack).
        no_effect=objects.empty and not policy_files and not program_files and not edits and cost_before == cost_after,
        spec_changes=edits,
        approvals=Approvals(approvals, sorted({d.rule for d in decisions if d.status is DecisionStatus.APPROVAL})),
        fleet_changes=changes.fleet_changes(before.env, after.env),
        policy_file_changes=files,
        program_file_changes=program_files,
        objects=objects,
        capacity=capacity_rows(before.env, after.env),
        quota_changes=quota,
        grants=grants.review(after.env, kueue),
        services=service_rows(before, after, kueue.facts, base_kueue.facts),
        groups=groups,
        cost=Cost(cost_before, cost_after, currency, spec.price_change_cost(before.env, after.env)),
        policy=PolicyReview(base, judge_program_is_base, policy_files, owners),
        usage=used,
        work=Work.of(work) if work is not None else None,
        judgement=judged.verdict.judgement(),
        resolved=resolved,
    )


def _identity(decision: PlanDecision) -> tuple[str, str, str]:
    """What a decision is about: its rule and resource as the rule names them."""
    return decision.rule, decision.resource, json.dumps(decision.subject, sort_keys=True, default=str)


def findings(head: list[PlanDecision], base: list[PlanDecision]) -> tuple[list[FindingKind], list[PlanDecision]]:
    """Each of head's decisions as new or pre-existing, and the base's decisions head no longer has (resolved).
    Pre-existing is only a decision base had as it is, status and message alike: one the change moved (a
    larger breach, a waiver outgrown, a cost further over) is new, and its base form is not resolved."""
    left: dict[tuple[str, str, str], list[int]] = {}
    for i, row in enumerate(base):
        left.setdefault(_identity(row), []).append(i)
    found = []
    for row in head:
        same = left.get(_identity(row), [])
        match = next((i for i in same if (base[i].status, base[i].msg) == (row.status, row.msg)), None)
        if match is not None:
            same.remove(match)
        found.append(FindingKind.NEW if match is None else FindingKind.PRE_EXISTING)
    for row, finding in zip(head, found):
        if finding is FindingKind.NEW and (same := left.get(_identity(row))):
            same.pop(0)  # moved by the change: its base form is the new one's, not resolved
    return found, [base[i] for i in sorted(i for rest in left.values() for i in rest)]


def check_schema(head: RenderedSide, env_rel: str) -> None:
    """Head's objects, checked as `render` checks them (`render.check_schemas`): a revision the API
    server would refuse is refused here, before it can be approved and freeze the reconciler once
    merged; and no more objects than an environment may render."""
    from fleetops import render

    try:
        # Counted again here: head's objects may come from head's own program, rendered in isolation.
        render.check_object_count(sum(len(m) for m in head.clusters.values()), env_rel)
        render.check_schemas(((cluster, m) for cluster, manifests in head.clusters.items() for m in manifests), env_rel)
    except render.RenderError as exc:
        raise PlanError(str(exc)) from None
    except spec.SpecError as exc:
        raise PlanError(problems=exc.problems) from None


def cannot_judge(environment: str, base: str | None, head: str | None, problems: Sequence[Problem]) -> PlanResult:
    """The plan of a change that cannot be judged (an invalid side, no policy engine): verdict
    "invalid", each problem a blocking decision at the file and line it names, so that every form
    of the plan (comment, annotations, JUnit, JSON) says so and replaces an earlier verdict."""
    decisions = [PlanDecision(DecisionStatus.DENY, "plan.cannot_judge", Severity.HIGH, str(p), "", {}, "fleetops.plan",
                              location=Location(p.file, p.line, p.column or 1) if p.file and p.line else None)
                 for p in problems]
    return PlanResult(environment, PlanVerdict.INVALID, ChangeSide(base or "default branch"), ChangeSide(head or "working tree"), decisions,
                      problems=list(problems))


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


@dataclass(frozen=True)
class Judged:
    """A fleet judged by the policies: its decisions as a plan shows them, before `explain` places them
    (each waiver that could not be used a warning), and the verdict they come from (for its digests and
    the decision record)."""

    decisions: list[PlanDecision]
    verdict: policy_verdict.Verdict


def judge(head: RenderedSide, environment: str, facts: dict[str, Any] | None, policies: Path,
          used: dict[str, Any] | None = None, granted: dict[str, Any] | None = None) -> Judged:
    """Head's fleet and the change itself, judged by the policies and data in `policies` (the base's).
    `granted`: head's `grants.of_fleet(...).facts`, when the caller has read it."""
    from fleetops import policy

    if head.env is not None:
        resources = (policy.resource_entry(cluster, m) for cluster, manifests in head.clusters.items() for m in manifests)
        document = policy.build_input(head.env, resources, head.revision, change=facts, usage=used, granted=granted)
    else:  # the environment is deleted at head: only the change rules have anything to judge
        document = policy.deleted_input(environment, head.revision, facts, used)
    try:
        verdict = policy.evaluate_input(document, engine=policy.engine_from(), policies_dir=policies)
    except policy.PolicyError as exc:  # named by their path in the repository: the checkout is temporary
        raise PlanError(f"policy gate (fail closed): {str(exc).replace(f'{policies.parent}{os.sep}', '')}") from None
    # With the values only the fix reads (`fix_values`): the reports and the decision record show none.
    return Judged([PlanDecision.judged(d) for d in verdict.decisions] + [
        PlanDecision(DecisionStatus.WARN, "waiver.invalid", Severity.LOW, str(problem), "", {}, "fleet.waivers")
        for problem in verdict.waiver_problems
    ], verdict)
