"""The environment at one Git revision, loaded whole before a request sees it.

Everything the API answers about a revision is computed here, once, from one `git archive` of it:
the rendered objects, capacity per pool, what Kueue grants, the policy decisions and the plan of
the commit that made the revision. A revision that does not load, render or judge is refused at
start; nothing is ever served half-loaded. The revision's program must be the one running: its
code and policies judge quotes (DESIGN.md, "Trust boundary of the review"), so the server runs the
image of the revision it serves.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetops import __version__, git, grants, plan, revisions, spec
from fleetops.errors import FleetopsError, PlanError, Problem
from fleetops.explain import explain
from fleetops.plan_result import PlanDecision, PlanResult

log = logging.getLogger("fleetops.api")


@dataclass(frozen=True)
class Snapshot:
    environment: str
    env_rel: str  # environments/<env>.yaml, as plan names it
    revision: str  # the commit
    side: plan.RenderedSide  # the environment, its file's data and positions, and its rendered objects
    tree: Path  # the revision's environment file and policies, kept while the server runs
    capacity: list[dict[str, Any]]
    grants: dict[str, Any]  # cluster -> tenant -> resource -> what Kueue grants (grants.facts)
    decisions: list[PlanDecision]  # as `plan` decides them: the API serves plan's own decision JSON
    latest_plan: PlanResult  # the plan of the commit that made this revision (its first parent as base)

    @property
    def env(self) -> spec.Environment:
        assert self.side.env is not None
        return self.side.env

    @property
    def policies(self) -> Path:
        return self.tree / "policies"

    @property
    def positions(self) -> spec.Positions:
        assert self.side.parsed is not None
        return self.side.parsed[1]

    def tenant(self, name: str) -> spec.Tenant | None:
        return next((t for t in self.env.tenants if t.name == name), None)


def load(repo: Path, environment: str, rev: str, stack: contextlib.ExitStack) -> Snapshot:
    """The environment at `rev`, loaded whole; its files stay in a folder `stack` removes. Raises PlanError."""
    env_rel = spec.environment_path(environment).as_posix()
    top = Path(git.run(repo, "rev-parse", "--show-toplevel").strip())
    revision = revisions.resolve(top, rev)
    survey = revisions.survey(top, revision, env_rel)
    if not survey.runs_here:
        raise PlanError(f"{repo}: revision {revision[:12]} holds another fleetops program than fleetops {__version__} running "
                        "here: serve it with that revision's image (its code judges the quotes it serves)")
    tree = stack.enter_context(revisions.checkout(top, revision, survey.needs))
    if not (tree / env_rel).is_file():
        raise PlanError(f"{env_rel}: no such environment at revision {revision[:12]}")
    side = plan.rendered_side(revision, tree, env_rel)
    plan.check_schema(side, env_rel)
    judged = plan.judge(side, environment, None, tree / "policies")  # the revision alone, as `check` judges it
    assert side.env is not None and side.parsed is not None
    decisions = explain(judged.decisions, side.env, side.parsed[1], tree / "policies")
    return Snapshot(environment, env_rel, revision, side, tree, capacity(side.env, side.clusters), grants.facts(side.clusters), decisions,
                    _latest_plan(top, environment, revision))


def _latest_plan(repo: Path, environment: str, revision: str) -> PlanResult:
    """The plan of the commit that made `revision`, as `plan --base REV^ --head REV` prints it; a root
    commit or a parent that cannot be judged gives the plan `invalid` with its problems, as plan does."""
    try:
        parent = git.run(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}^").strip()
    except git.GitError:
        return plan.cannot_judge(environment, None, revision, [Problem(f"revision {revision[:12]} has no parent to plan against")])
    try:
        return plan.build(repo, environment, parent, revision, 0)
    except PlanError as exc:
        return plan.cannot_judge(environment, parent, revision, exc.problems)


def capacity(env: spec.Environment, clusters: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per cluster, pool (a Kueue flavor) and device resource: physical devices, schedulable units,
    what tenants hold guaranteed there, the most one tenant may reach with burst on an idle cluster,
    and what the cluster's cohort holds there for anyone to borrow (free to lend)."""
    rows = []
    for cluster in env.clusters:
        nodes = grants.tree(clusters.get(cluster.name, []))
        granted = grants.of_cluster(clusters.get(cluster.name, []))
        free: dict[grants.FlavorResource, int] = {}
        for node in nodes:
            if node.parent is None and node.kind is grants.KueueKind.COHORT:
                for fr, amount in node.subtree.items():
                    free[fr] = free.get(fr, 0) + amount
        for group in (*cluster.pools, *cluster.edge_groups):
            shares = spec.physical_shares(group)
            for resource, units in sorted(spec.group_capacity(group).items()):
                held = [per[resource][group.name] for per in granted.values() if group.name in per.get(resource, {})]
                rows.append({"cluster": cluster.name, "pool": group.name, "flavor": group.name, "resource": resource,
                             "model": group.device.model, "physical": round(shares[resource], 2), "schedulable": units,
                             "guaranteed": sum(g.guaranteed for g in held), "reachable": max((g.reachable for g in held), default=0),
                             "free_to_lend": free.get((group.name, resource), 0)})
    return rows


Fetch = Callable[[], tuple[Path, str]]  # the repository and the commit the followed revision is at now


class Current:
    """The snapshot served, replaced whole once a newer revision has loaded: a request reads one
    snapshot from start to end. The one before stays open a period longer, for quotes still reading it."""

    def __init__(self, snapshot: Snapshot, stack: contextlib.ExitStack):
        self._snapshot, self._stacks = snapshot, [stack]
        self._lock = threading.Lock()

    def __call__(self) -> Snapshot:
        return self._snapshot

    def replace(self, snapshot: Snapshot, stack: contextlib.ExitStack) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._stacks.append(stack)
            while len(self._stacks) > 2:
                self._stacks.pop(0).close()

    def close(self) -> None:
        with self._lock:
            while self._stacks:
                self._stacks.pop().close()


def refresh(current: Current, fetch: Fetch) -> str | None:
    """Serve the revision `fetch` finds when it is new and loads whole; else keep the one served. The
    problem that kept it, or None."""
    try:
        repo, revision = fetch()
        if revision == current().revision:
            return None
        stack = contextlib.ExitStack()
        try:
            snapshot = load(repo, current().environment, revision, stack)
        except BaseException:
            stack.close()
            raise
    except FleetopsError as exc:
        log.warning("keeping revision %s: %s", current().revision[:12], exc.lines[0])
        return exc.lines[0]
    current.replace(snapshot, stack)
    log.info("serving revision %s", revision[:12])
    return None


def follow(current: Current, fetch: Fetch, period: float, stop: threading.Event) -> None:
    """Refresh every `period` seconds until `stop` is set."""
    while not stop.wait(period):
        refresh(current, fetch)
