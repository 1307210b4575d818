"""What a change does: base vs head rendered in isolation, diffed, costed and judged by the base's policies.

The judge (policy evaluation, approvals, verdict, decision record) is the code running this plan
(in CI, the base revision's: see docs/ci/), with the base revision's policies, data, waivers and
owners; nothing the head holds is read for the verdict. Each side is taken from its own revision
with `git archive` into a temporary folder (the user's working tree and index are never touched;
head defaults to the working tree itself, read only) and rendered by that revision's own program
and modules, so a change to `modules/` shows up in the plan exactly as `pulumi up` would deploy it.
A side whose program is byte for byte the one running (`survey`) renders here, and then only its
environment file and policies are taken out of Git; any other renders confined
(`fleetops.isolate`) and answers as data, which this process reads with its own model.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import math
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetops import changes as changes_mod
from fleetops import diff, git, grants, isolate, spec, usage
from fleetops.envelope import DecisionStatus, Severity
from fleetops.errors import PlanError, Problem
from fleetops.plan_result import (NO_CAPACITY, Approvals, Capacity, CapacityRow, ChangeSide, Cost, PlanDecision, FleetChange, Grants, Groups,
                                  Location, PlanResult, PolicyFileChange, PolicyReview, QuotaChange, Service, ServiceChange, SpecChange, Verdict,
                                  status_counts)
from fleetops.prometheus import PrometheusError

WORKTREE = "WORKTREE"
# What may be taken out of Git for one side: more is refused (a 600 MB blob must not become 1.2 GB of plan).
MAX_TREE_BYTES = 256 << 20
# Files whose change is a change of the program that renders or deploys the fleet: a policy fact.
PROGRAM_PATHS = ("fleetops/", "modules/", "stacks/", "Pulumi.yaml", "pyproject.toml", "setup.py")


@dataclass
class Side:
    """One revision of the environment, rendered: empty when the file does not exist there."""

    revision: str
    exists: bool
    env: spec.Environment | None = None
    clusters: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # each cluster's objects
    tree: Path | None = None
    parsed: changes_mod.Parsed | None = None  # the file's data and positions, when the render kept them


def resolve(repo: Path, rev: str) -> str:
    if rev == WORKTREE:
        return WORKTREE
    try:
        return git.run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except git.GitError:
        raise PlanError(f"{repo}: unknown revision {rev!r}") from None


def default_base(repo: Path, head: str = "HEAD") -> str:
    """The merge-base of the head (HEAD for the working tree) with the default branch (origin's HEAD, else main or master)."""
    candidates = []
    with contextlib.suppress(git.GitError):
        candidates.append(git.run(repo, "symbolic-ref", "--short", "refs/remotes/origin/HEAD").strip())
    candidates += ["origin/main", "main", "origin/master", "master"]
    for branch in candidates:
        try:
            return git.run(repo, "merge-base", head, branch).strip()
        except git.GitError:
            continue
    raise PlanError(f"{repo}: no default branch to compare with; pass --base")


def _files_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    # Links are skipped, not followed: a revision's tree is data, and nothing fleetops renders is a link.
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


@contextlib.contextmanager
def checkout(repo: Path, rev: str, only: Sequence[str] | None = None, limit: int = MAX_TREE_BYTES) -> Iterator[Path]:
    """A read-only copy of the tree at `rev`, or of its files and folders `only`, in a temporary
    folder removed afterwards; streamed out of Git, and refused past `limit` bytes."""
    if rev == WORKTREE:
        yield repo
        return
    with tempfile.TemporaryDirectory(prefix="fleetops-plan-") as tmp:
        if only is None or only:
            _extract(repo, rev, list(only or []), Path(tmp), limit)
        yield Path(tmp)


def _extract(repo: Path, rev: str, only: list[str], dest: Path, limit: int) -> None:
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", rev, "--", *only],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    taken = 0
    try:
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            for member in tar:
                taken += member.size
                if taken > limit:
                    raise PlanError(f"{repo}: revision {rev[:12]} holds more than {limit >> 20} MiB in "
                                    f"{', '.join(only) or 'its tree'}: refused (a plan's memory and disk stay bounded)")
                tar.extract(member, dest, filter=_files_only)
        archive.stdout.read()  # type: ignore[union-attr]  # the archive's end padding
        archive.wait()
    except BaseException as exc:
        archive.kill()
        archive.wait()
        if isinstance(exc, tarfile.TarError):
            raise PlanError(f"{repo}: cannot read revision {rev}: {_stderr(archive) or exc}") from None
        raise
    if archive.returncode != 0:
        raise PlanError(f"{repo}: cannot read revision {rev}: {_stderr(archive) or 'git archive failed'}")


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    return proc.stderr.read(4096).decode(errors="replace").strip() if proc.stderr else ""  # type: ignore[union-attr]


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
        self.sides: list[Side | None] = [None, None]
        self.procs: dict[int, isolate.Started] = {}

    def __enter__(self) -> Sides:
        try:
            for i, (rev, tree) in enumerate(zip(self.revs, self.trees)):
                if not (tree / self.env_rel).is_file():
                    self.sides[i] = Side(revision=rev, exists=False, tree=tree)
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

    def head(self) -> Side:
        return self._side(1)

    def base(self) -> Side:
        return self._side(0)

    def _side(self, i: int) -> Side:
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


def _isolated(tree: Path, env_rel: str, rev: str) -> isolate.Started:
    try:
        return isolate.start(tree, env_rel, rev, _label(env_rel, rev))
    except isolate.IsolationError as exc:
        raise PlanError(str(exc)) from None


def _label(env_rel: str, rev: str) -> str:
    return f"{env_rel}@{rev[:12] if rev != WORKTREE else 'working tree'}"


def _load_side(rev: str, tree: Path, env_rel: str) -> Side:
    try:
        document = spec.read_environment(tree / env_rel, display=env_rel)
    except spec.SpecError as exc:
        raise PlanError(problems=exc.problems) from None
    return Side(revision=rev, exists=True, env=document.env, tree=tree, parsed=(document.data, document.positions))


def rendered_side(rev: str, tree: Path, env_rel: str) -> Side:
    """The environment file of `tree`, read and rendered by the program running here."""
    side = _load_side(rev, tree, env_rel)
    side.clusters = _render_side(side, env_rel)
    return side


def _render_side(side: Side, env_rel: str) -> dict[str, list[dict[str, Any]]]:
    from fleetops import render

    assert side.env is not None and side.tree is not None
    try:  # the revision is a label here: nothing the plan compares carries it
        return render.render_environment(side.env, side.tree / env_rel, revision=side.revision).clusters
    except render.RenderError as exc:
        raise PlanError(str(exc)) from None


CODE = isolate.PROGRAM
HERE = Path(__file__).resolve().parent.parent  # the program running now


def _same_code(tree: Path) -> bool:
    """Whether every Python file of the program is byte for byte the one running here: the same Git
    object ids, as `survey` compares a commit's."""
    running = _object_ids("sha1")
    names = _sources(tree)
    return set(names) == running.keys() and all(_object_id(tree / f, "sha1") == running[f] for f in names)


@dataclass(frozen=True)
class Revision:
    """What a plan needs to know of a revision before taking anything out of Git."""

    runs_here: bool  # its program is byte for byte the code running here: it renders in this process
    needs: list[str] | None  # the files and folders to take out of Git: None for the working tree


def survey(repo: Path, rev: str, env_rel: str) -> Revision:
    """A revision whose program runs here needs only its environment file and policies out of Git,
    another its program too; a commit's program is compared by Git's object ids (`ls-tree`), without
    taking it out."""
    if rev == WORKTREE:
        return Revision(runs_here=_same_code(repo), needs=None)
    entries = {}
    for entry in filter(None, git.run(repo, "ls-tree", "-r", "-z", rev, "--", *CODE, "policies", env_rel).split("\0")):
        meta, path = entry.split("\t", 1)
        entries[path] = meta.split()[2]
    code = {path: oid for path, oid in entries.items() if path.endswith(".py") and path.split("/", 1)[0] in CODE}
    algorithm = "sha256" if any(len(oid) == 64 for oid in code.values()) else "sha1"
    data = [p for p in entries if p == env_rel or p.startswith("policies/")]
    if not code or code != _object_ids(algorithm):
        return Revision(runs_here=False, needs=sorted({p.split("/", 1)[0] for p in code}) + data)
    return Revision(runs_here=True, needs=data)


@functools.cache
def _object_ids(algorithm: str) -> dict[str, str]:
    """Git's object id of each Python file of the program running here (read once per process)."""
    return {name: _object_id(HERE / name, algorithm) for name in _sources(HERE)}


def _sources(root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for folder in CODE for path in (root / folder).rglob("*.py")]


def _object_id(path: Path, algorithm: str) -> str:
    data = path.read_bytes()
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()


def stamp(repo: Path, rev: str) -> str:
    return git.revision(repo) if rev == WORKTREE else rev


# --- what changed ---------------------------------------------------------------------------


def capacity_rows(before: spec.Environment | None, after: spec.Environment | None) -> list[CapacityRow]:
    """Per cluster x device resource: declared units, guaranteed and burst sums, headroom, before and after."""

    def facts(env: spec.Environment | None) -> dict[tuple[str, str], Capacity]:
        rows = spec.capacity_rows(env) if env is not None else []
        return {
            (r["cluster"], r["resource"]): Capacity(physical=r["physical"], schedulable=r["capacity"], sharing_factor=r["sharing_factor"],
                                                    guaranteed=r["guaranteed"], burst=r["burst"], headroom_percent=r["headroom_percent"])
            for r in rows
        }

    b, a = facts(before), facts(after)
    return [CapacityRow(key[0], key[1], b.get(key, NO_CAPACITY), a.get(key, NO_CAPACITY)) for key in sorted(set(b) | set(a))]


def quota_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    def quotas(env: spec.Environment | None) -> dict[tuple[str, str, str], dict[str, int]]:
        if env is None:
            return {}
        return {
            (t.name, c, r): {"guaranteed": q.guaranteed, "burst": q.burst}
            for t in env.tenants
            for c in t.clusters
            for r, q in t.quota.items()
        }

    b, a = quotas(before), quotas(after)
    zero = {"guaranteed": 0, "burst": 0}
    rows = []
    for key in sorted(set(b) | set(a)):
        old, new = b.get(key, zero), a.get(key, zero)
        if old != new:
            rows.append({"tenant": key[0], "cluster": key[1], "resource": key[2], "before": old, "after": new})
    return rows


def group_changes(before: spec.Environment | None, after: spec.Environment | None) -> dict[str, list[str]]:
    def groups(env: spec.Environment | None) -> set[str]:
        if env is None:
            return set()
        return {f"{c.name}/{g.name}" for c in env.clusters for g in (*c.pools, *c.edge_groups)}

    b, a = groups(before), groups(after)
    return {"added": sorted(a - b), "removed": sorted(b - a)}


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


def service_rows(before: Side, after: Side, granted: dict[str, Any]) -> list[dict[str, Any]]:
    """The head's inference services in fleet terms (`grants.services`, what the policies judge), each with
    what it adds at max to the month against the base and one sentence (`text`) a reviewer reads.
    `granted` is the head's `grants.facts`, read once by the plan."""
    def rows(side: Side, known: dict[str, Any] | None) -> dict[tuple[str, str, str], dict[str, Any]]:
        if side.env is None or not side.env.services:
            return {}
        return {(r["tenant"], r["cluster"], r["name"]): r for r in grants.services(side.env, grants.facts(side.clusters) if known is None else known)}

    old, new = rows(before, None), rows(after, granted)
    currency = after.env.budget.currency if after.env else ""
    out = []
    for key, row in new.items():
        was = old.get(key)
        change = "added" if was is None else "unchanged" if was == row else "changed"
        delta = round(row["monthly_at_max"] - (was["monthly_at_max"] if was else 0), 2)
        spend = f"{changes_mod.money(delta)} {currency}/mo at max" if change != "unchanged" else f"{row['monthly_at_max']:,.0f} {currency}/mo at max"
        text = (f"{row['tenant']}/{row['name']}: {row['min']}–{row['max']} replicas × {row['devices']} {row['resource']}; "
                f"at max {row['at_max']:,} of a reachable burst of {row['reachable']:,}; {spend}")
        out.append({**row, "change": change, "monthly_at_max_delta": delta, "text": text})
    return out


def price_changes(before: spec.Environment | None, after: spec.Environment | None) -> list[dict[str, Any]]:
    """Every device model whose price per device-hour differs between the sides (None: not priced there)."""
    old, new = (env.prices if env is not None else {} for env in (before, after))
    return [{"model": m, "before": old.get(m), "after": new.get(m)} for m in sorted(set(old) | set(new)) if old.get(m) != new.get(m)]


def cost_at_base_prices(before: spec.Environment | None, after: spec.Environment | None) -> float:
    """Head's fleet priced as the base prices each model (head's price for a model the base does not
    price): a price cut in the same change as more nodes cannot hide what the nodes cost."""
    if after is None:
        return 0.0
    base_prices = before.prices if before is not None else {}
    # A spot pool carries its own price: the base's, for a pool that was spot there too.
    base_spot = {(c.name, p.name): p.spot for c in before.clusters for p in c.pools if p.spot} if before is not None else {}
    clusters = [c.model_copy(update={"pools": [p.model_copy(update={"spot": base_spot.get((c.name, p.name), p.spot)}) if p.spot else p
                                               for p in c.pools]}) for c in after.clusters]
    return spec.monthly_cost(after.model_copy(update={"prices": {**after.prices, **base_prices}, "clusters": clusters}))


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

def change_facts(environment: str, base: Side, head: Side, quota: list[dict[str, Any]], groups: dict[str, list[str]],
                 files: dict[str, list[str]], approvals: int, costs: tuple[float, float]) -> dict[str, Any]:
    """The change under review, as the `fleet.change` policies see it."""
    return {
        "environment": environment,
        "base_revision": base.revision,
        "head_revision": head.revision,
        "environment_added": not base.exists and head.exists,
        "environment_removed": base.exists and not head.exists,
        "quota_changes": quota,
        "groups_added": groups["added"],
        "groups_removed": groups["removed"],
        "cost_before": costs[0],
        "cost_after": costs[1],
        "cost_after_base_prices": cost_at_base_prices(base.env, head.env),
        "price_changes": price_changes(base.env, head.env),
        "policy_files_changed": files["policies"],
        "program_files_changed": files["program"],
        "approvals": approvals,
    }


@dataclass(frozen=True)
class Meter:
    """Where the judge reads what the fleet used: its own Prometheus, from its command line, never from
    the revision under review; `source` None when none was given."""

    source: usage.Source | None = None
    window: usage.Window = usage.parse_window("30d")


def measured(meter: Meter, before: spec.Environment | None, after: spec.Environment | None,
             quota: list[dict[str, Any]]) -> usage.Usage:
    """The use of what the change touches, or why it is unknown: no answer is never zero use."""
    if meter.source is None:
        return usage.unavailable(meter.window, "no --prometheus given", before, after, quota)
    try:
        return usage.measure(meter.source, meter.window, before, after, quota, dt.datetime.now(dt.timezone.utc))
    except PrometheusError as exc:
        return usage.unavailable(meter.window, f"Prometheus did not answer: {exc}", before, after, quota)


def build(repo: Path, env_name: str, base_rev: str | None, head_rev: str | None, approvals: int,
          meter: Meter = Meter()) -> PlanResult:
    """Render both sides, compare them, and judge head (and the change) by the base revision's policies."""
    env_rel = spec.environment_path(env_name).as_posix()
    head = resolve(repo, head_rev) if head_rev else WORKTREE
    base = resolve(repo, base_rev) if base_rev else default_base(repo, "HEAD" if head == WORKTREE else head)
    with contextlib.ExitStack() as stack:
        policy_files_changed = changed_files(repo, base, head, ["policies/"], stack)
        program_files_changed = changed_files(repo, base, head, PROGRAM_PATHS, stack)
        first_lines = first_changed_lines(repo, base, head, ["policies/", *PROGRAM_PATHS], stack)
        revisions = [survey(repo, rev, env_rel) for rev in (base, head)]
        base_tree = stack.enter_context(checkout(repo, base, revisions[0].needs))
        head_tree = stack.enter_context(checkout(repo, head, revisions[1].needs))
        sides = stack.enter_context(Sides(env_rel, (base, head), (base_tree, head_tree), (revisions[0].runs_here, revisions[1].runs_here)))
        # The base revision's policies judge the change: a pull request cannot weaken its own gate.
        policies = base_tree / "policies"
        if not policies.is_dir():
            raise PlanError(f"base {base[:12]} has no policies/ to judge the change with (fail closed)")
        before, after = sides.base(), sides.head()
        if not before.exists and not after.exists:
            raise PlanError(f"{env_rel}: no such environment at base {base[:12]} or head")
        policy_files, program_files = policy_files_changed(), program_files_changed()
        return assess(env_name, env_rel, before, after, base_tree, (policy_files, program_files), first_lines(), approvals,
                      revisions[0].runs_here, stamp(repo, head), meter)


def assess(env_name: str, env_rel: str, before: Side, after: Side, base_tree: Path, files_changed: tuple[list[str], list[str]],
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
    used = measured(meter, before.env, after.env, quota)
    kueue = grants.of_fleet(after.clusters)  # read once: the policy input, `grants` and `services` share it
    rows, verdict = judge(after, env_name, facts, policies, used.model_dump(mode="json"), kueue.facts)
    granted = grants.review(after.env, kueue)
    services = service_rows(before, after, kueue.facts)
    changes = diff.compare(before.clusters, after.clusters)
    fleet_changes, capacity = changes_mod.fleet_changes(before.env, after.env), capacity_rows(before.env, after.env)
    currency = (after.env or before.env).budget.currency if (after.env or before.env) else ""
    owners = policy_owners(base_tree)
    files = [PolicyFileChange(f, f in changes_mod.SECURITY_FILES,
                              changes_mod.file_diff(_read(base_tree / f), _read(after.tree / f) if after.tree else None, f)) for f in policy_files]
    base_file, head_file = (side.parsed or changes_mod.parse(_read(side.tree / env_rel) if side.tree else None, env_rel)
                            for side in (before, after))
    (edits, fields), positions = changes_mod.spec_changes_and_fields(base_file, head_file), head_file[1]
    del base_file, head_file
    edited = Edited(env_rel, fields, {f: lines.get(f, 1) for f in policy_files}, {f: lines.get(f, 1) for f in program_files})
    decisions = explain(rows, after.env, positions, policies, edited)
    return PlanResult(
        environment=env_name,
        verdict=Verdict.of(status_counts(decisions)),
        base=ChangeSide(base, before.exists),
        head=ChangeSide(head_revision, after.exists),
        decisions=decisions,
        no_effect=changes.empty and not policy_files and not edits and cost_before == cost_after,
        spec_changes=[SpecChange.of(e) for e in edits],
        approvals=Approvals(approvals, sorted({d.rule for d in decisions if d.status is DecisionStatus.APPROVAL})),
        fleet_changes=[FleetChange(**c) for c in fleet_changes],
        policy_file_changes=files,
        program_file_changes=program_files,
        objects=changes,
        capacity=capacity,
        quota_changes=[QuotaChange.of(q) for q in quota],
        grants=Grants.of(granted),
        services=[Service(**{**row, "change": ServiceChange(row["change"])}) for row in services],
        groups=Groups(groups["added"], groups["removed"]),
        cost=Cost(cost_before, cost_after, currency),
        policy=PolicyReview(base, judge_program_is_base, policy_files, owners),
        usage=used,
        judgement=verdict.judgement(),
    )


def check_schema(head: Side, env_rel: str) -> None:
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
    return PlanResult(environment, Verdict.INVALID, ChangeSide(base or "default branch"), ChangeSide(head or "working tree"), decisions,
                      problems=list(problems))


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


# --- decisions a reviewer can act on --------------------------------------------------------------

@dataclass(frozen=True)
class Edited:
    """What a change edited, for placing each decision at it: the environment file's edited fields
    (head's, in file order) and the first changed line of each changed policy and program file."""

    env_file: str = ""
    fields: Sequence[spec.Loc] = ()
    policy_files: dict[str, int] = field(default_factory=dict)
    program_files: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def _first(self) -> dict[spec.Loc, spec.Loc]:
        # Every prefix of an edited field -> the first edited field under it: one lookup per decision,
        # not a scan of every field (a new environment's are all edited).
        first: dict[spec.Loc, spec.Loc] = {}
        for loc in self.fields:
            for end in range(1, len(loc) + 1):
                first.setdefault(loc[:end], loc)
        return first

    def first_within(self, scope: spec.Loc) -> spec.Loc | None:
        """The first edited field at or under `scope`."""
        return self._first.get(scope)


# The field of its item a rule is about, when the item has several (a tenant's quota: guaranteed or burst).
_RULE_FIELD: dict[str, spec.Loc] = {
    "quota.guaranteed_over_capacity": ("guaranteed",),
    "quota.tenant_share": ("guaranteed",),
    "quota.burst_over_capacity": ("burst",),
    "priority.value_outside_band": ("value",),
    "priority.batch_preempts": ("preemption",),
    "priority.multiple_global_defaults": ("global_default",),
    "edge.latency": ("latency_ms",),
    "edge.missing_fingerprints": ("fingerprints",),
    "network.egress_anywhere": ("network", "egress_cidrs"),
    "quota.unbounded_device": ("quota",),  # the quota it lacks; a pool it gained is found as the tenant's edit
    "autoscaling.max_beyond_burst": ("replicas", "max"),
    "autoscaling.spend_over_budget": ("replicas", "max"),
}
# Fields outside a decision's item that make the rule fire for it: a fleet-wide setting, or what the
# cost is made of (a cost increase is about the edit that costs; being over budget, about the budget).
_RULE_CAUSES: dict[str, tuple[spec.Loc, ...]] = {
    "network.missing_default_deny": (("network", "default_deny"),),
    "network.edge_egress_not_allowed": (("network", "center_endpoints"),),
    "change.cost_increase_approvals": (("clusters",), ("prices",)),
    "budget.alert_threshold": (("budget", "alert_at"),),  # a lowered threshold, when the budget itself is not edited
    "autoscaling.max_beyond_burst": (("tenants",), ("scheduler",)),  # a lowered burst, or less lent
    "autoscaling.spend_over_budget": (("budget", "monthly"), ("prices",), ("clusters",)),
}


def explain(rows: list[dict[str, Any]], env: spec.Environment | None, positions: spec.Positions | None, policies: Path,
            edited: Edited = Edited()) -> list[PlanDecision]:
    """Each decision with where it comes from (`location`), how to fix it, its gate (a deny that
    more approvals resolve is an `approval`, not a denial of the change itself) and its waiver."""
    from fleetops import policy

    meta = {m.rule_id: m for m in policy.rule_metadata(policy.load_bundle(policies))}
    waivers = {w.where: w.waiver for w in policy.load_waivers(policies / policy.WAIVERS_FILE, dt.date.today()).active}
    out = []
    for row in rows:
        rule = meta.get(row["rule"])
        row = dict(row)
        if row["status"] == "deny" and rule is not None and rule.gate == "approval":
            row["status"] = "approval"
        if (where := location(row, env, positions, edited)) is not None:
            row["location"] = where
        row["fix"] = suggest_fix(row, env) or (rule.fix if rule else "")
        out.append(PlanDecision.of(row, waivers.get(row.get("waived_by") or "")))
    return out


def location(row: dict[str, Any], env: spec.Environment | None, positions: spec.Positions | None,
             edited: Edited) -> dict[str, Any] | None:
    """The file, line and column a decision is about: the first changed line of the policy or program
    file a change rule is about; else the edited field of the environment file's item its subject
    comes from (the rule's own field of it, else any edited field in it, else a field that makes the
    rule fire for it); a decision about rendered objects nothing in the environment file explains is
    the program change's; else the item's field the rule is about."""
    subject, rule = row.get("subject") or {}, row["rule"]
    kind = subject.get("kind")
    if kind == "Policies" and edited.policy_files:
        return _first_change(edited.policy_files)
    if kind == "Program" and edited.program_files:
        return _first_change(edited.program_files)
    if kind == "Environment" and env is None and edited.env_file:  # removed: its whole file is the edit
        return {"file": edited.env_file, "line": 1, "column": 1}
    if env is None or positions is None or not subject:
        return None
    item = locate(subject, env)
    if kind == "DeviceResource" and not subject.get("tenant"):  # a cluster's sum: the quota this change edited there
        item = _edited_quota(subject, env, edited) or item
    own = item + _RULE_FIELD.get(rule, ())
    for scope in (own, item, *_RULE_CAUSES.get(rule, ())):
        if (loc := edited.first_within(scope)) is not None:
            return _at(positions, loc)
    if edited.program_files and not row.get("waived_by"):
        return _first_change(edited.program_files)
    return _at(positions, own)


def _at(positions: spec.Positions, loc: spec.Loc) -> dict[str, Any]:
    line, column = positions.at(loc)
    return {"file": positions.file, "line": line, "column": column}


def _first_change(files: dict[str, int]) -> dict[str, Any]:
    name = min(files)
    return {"file": name, "line": files[name], "column": 1}


def _edited_quota(subject: dict[str, Any], env: spec.Environment, edited: Edited) -> spec.Loc | None:
    """The tenant quota of `subject`'s device resource this change edited on its cluster."""
    resource, cluster = subject.get("name"), subject.get("cluster")
    quotas = (("tenants", i, "quota", resource) for i, t in enumerate(env.tenants) if cluster in t.clusters and resource in t.quota)
    return next((loc for loc in quotas if edited.first_within(loc)), None)


def locate(resource: dict[str, Any], env: spec.Environment) -> spec.Loc:
    """The field of the environment file a decision's resource comes from (the nearest one declared)."""
    kind, name, cluster, tenant = (resource.get(k) for k in ("kind", "name", "cluster", "tenant"))
    if kind == "Group" and "/" in (name or ""):  # the change rules name a group "cluster/group"
        cluster, name = name.split("/", 1)
    if kind == "Service":
        index = next((k for k, s in enumerate(env.services) if (s.tenant, s.cluster, s.name) == (tenant, cluster, name)), None)
        if index is not None:
            return ("services", index)
    tenants = {t.name: i for i, t in enumerate(env.tenants)}
    clusters = {c.name: i for i, c in enumerate(env.clusters)}
    if tenant in tenants:
        i = tenants[tenant]
        bound = [resource["field"]] if resource.get("field") else []  # a quota's `guaranteed` or `burst`
        field = {"DeviceResource": ("quota", name, *bound), "PriorityClass": ("priority_classes",), "NetworkPolicy": ("network",),
                 "Pool": ("pools",), "Namespace": ()}.get(kind, ())
        return ("tenants", i, *field)
    if kind == "Budget":
        return ("budget", "monthly")
    if kind == "Price":
        return ("prices", name)
    if kind == "PriorityClass":
        index = next((k for k, p in enumerate(env.priority_classes) if p.name == name), None)
        return ("priority_classes", index) if index is not None else ("priority_classes",)
    if cluster in clusters:
        ci = clusters[cluster]
        c = env.clusters[ci]
        for field, groups in (("pools", c.pools), ("edge_groups", c.edge_groups)):
            for gi, g in enumerate(groups):
                if g.name == name or (kind == "DeviceResource" and name in spec.group_capacity(g)):
                    return ("clusters", ci, field, gi, "nodes") if kind == "DeviceResource" else ("clusters", ci, field, gi)
        if kind == "Group":  # removed: the list it was removed from
            return ("clusters", ci, "edge_groups" if c.role == "edge" else "pools")
        return ("clusters", ci)
    return ("environment",)


def suggest_fix(row: dict[str, Any], env: spec.Environment | None) -> str:
    """The numbers of a fix where the decision gives them: quota over capacity by how much, or how many nodes;
    a burst Kueue will not grant, to what. The numbers are the decision's `figures`, as the rule computed them."""
    figures, subject = row.get("figures") or {}, row.get("subject") or {}
    resource, cluster = subject.get("name"), subject.get("cluster")
    if row["rule"] == "quota.burst_unreachable" and {"burst", "reachable"} <= figures.keys():
        reach = figures["reachable"]
        return (f"lower {subject.get('tenant')}'s burst {resource} to {reach} on {cluster or 'its cluster'}, or add "
                f"{figures['burst'] - reach} {resource} no tenant guarantees to its pools, "
                "or let the tenants lend more of their guarantee (scheduler.lend_fraction)")
    if row["rule"] in ("autoscaling.max_beyond_burst", "autoscaling.spend_over_budget") and "fits" in figures:
        raise_what = f"{subject.get('tenant')}'s burst on {cluster}" if row["rule"] == "autoscaling.max_beyond_burst" else "budget.monthly in its own reviewed PR"
        return f"lower {subject.get('tenant')}/{subject.get('name')}'s replicas.max to {figures['fits']}, or raise {raise_what}"
    if row["rule"] != "quota.guaranteed_over_capacity" or not {"quota", "limit", "headroom_percent"} <= figures.keys() or env is None:
        return ""
    excess, keep = figures["quota"] - figures["limit"], 1 - figures["headroom_percent"] / 100
    fixes = [f"lower guaranteed {resource} by {excess} across the tenants on {cluster}"]
    pools = [g for c in env.clusters if c.name == cluster for g in c.pools if resource in spec.group_capacity(g)]
    if pools:
        pool = pools[0]
        per_node = spec.group_capacity(pool)[resource] / pool.nodes
        fixes.append(f"add {math.ceil(excess / (per_node * keep))} nodes to {pool.name}")
    return ", or ".join(fixes + ["merge a waiver first in its own PR"])


def judge(head: Side, environment: str, facts: dict[str, Any] | None, policies: Path,
          used: dict[str, Any] | None = None, granted: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], Any]:
    """Head's fleet and the change itself, judged by the policies and data in `policies` (the base's):
    the decisions as rows, and the verdict they come from (for its digests and the decision record).
    `granted`: head's `grants.of_fleet(...).facts`, when the caller has read it."""
    from fleetops import policy

    if head.env is not None:
        resources = (policy.resource_entry(cluster, m) for cluster, manifests in head.clusters.items() for m in manifests)
        document = policy.build_input(head.env, resources, head.revision, change=facts, usage=used, granted=granted)
    else:  # the environment is deleted at head: only the change rules have anything to judge
        document = {"environment": environment, "revision": head.revision, "spec": None,
                    "resources": [], "by_kind": {}, "facts": None, "live": None, "change": facts, "usage": used}
    try:
        verdict = policy.evaluate_input(document, engine=policy.engine_from(), policies_dir=policies)
    except policy.PolicyError as exc:  # named by their path in the repository: the checkout is temporary
        raise PlanError(f"policy gate (fail closed): {str(exc).replace(f'{policies.parent}{os.sep}', '')}") from None
    rows = policy.report_rows(verdict) + [
        {"status": "warn", "rule": "waiver.invalid", "severity": "low", "msg": str(problem), "resource": "", "subject": {},
         "package": "fleet.waivers", "waived_by": None}
        for problem in verdict.waiver_problems
    ]
    return rows, verdict
