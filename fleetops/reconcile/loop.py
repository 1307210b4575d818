"""The loop: fetch, validate, render, gate and reconcile, pass after pass."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fleetops import memory, render, spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError, KubeconfigError, NotFound
from fleetops.kube import MANAGER
from fleetops.reconcile.gate import Gate, default_gate
from fleetops.reconcile.lease import LeaseElector, lease_failure
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import WORKED, ClusterResult, PassResult, PassStatus
from fleetops.reconcile.retry import call
from fleetops.reconcile.service import READY_REASON_CHARS, Metrics, Readiness, readiness
from fleetops.reconcile.shards import ShardCollector, Shards
from fleetops.reconcile.status import Recorded
from fleetops.reconcile.source import GitSource, redact
from fleetops.reconcile.sync import record_refusal, run_pass

log = logging.getLogger("fleetops.reconcile")
# A library logs only where its user asks it to (the reconcile service installs JSON logs). Set here,
# in the one module that logs, so that the commands that never log do not import logging.
logging.getLogger("fleetops").addHandler(logging.NullHandler())

# --- the loop -------------------------------------------------------------------------------


Connect = Callable[[spec.Cluster], ClusterAPI]
LOG_ITEMS = 20  # objects and reasons a pass's log line names; the rest is a count (a first pass drifts in thousands)


class ReconcileLoop:
    """Fetch, validate, render, gate and reconcile, pass after pass; keeps the last good and last applied revisions."""

    def __init__(
        self,
        environment: str,
        source: GitSource,
        connect: Connect,
        gate: Gate | None = None,
        opts: Options | None = None,
        only: list[str] | None = None,
        metrics: Metrics | None = None,
        identity: str | None = None,
        shards: Shards | None = None,
    ):
        self.environment = environment
        self.source = source
        self.connect = connect
        self.gate = gate
        self.opts = opts or Options()
        self.only = only
        self.metrics = metrics or Metrics()
        self.identity = identity  # set: write only where this identity holds the cluster's Lease; None: no election
        self.shards = shards  # set (with an identity): only the clusters the shard assignment gives this replica
        if shards is not None:
            self.metrics.registry.register(ShardCollector(shards))
        self.last_applied: str | None = None
        self.last_status: PassStatus | None = None
        self.last_result: PassResult | None = None
        self.failure: str | None = None  # why the last pass raised instead of ending with a result
        self.lease_seconds = 15  # longer than the interval in service mode, or leadership flaps between passes
        self.passes = 0
        self._apis: dict[str, ClusterAPI] = {}
        self._electors: dict[str, LeaseElector] = {}
        self._home: ClusterAPI | None = None  # the shards' home cluster, when this replica does not reconcile it
        self._rendered: dict[str, tuple[spec.Environment, render.DesiredState] | list[str]] = {}
        self._passing = threading.Lock()  # one pass at a time: the service's and those asked over HTTP share the clients and caches

    def load(self, checkout: Path, revision: str) -> tuple[spec.Environment, render.DesiredState] | list[str]:
        """The revision validated and rendered, or its problems (file:line); cached, a revision renders the same every time."""
        if revision not in self._rendered:
            self._rendered.clear()  # keep one: memory stays flat over a long-running loop
            display = spec.environment_path(self.environment).as_posix()
            try:
                checked = render.load_checked(checkout / display, display=display, revision=revision)
                self._rendered[revision] = (checked.env, checked.state)
            except spec.SpecError as exc:
                self._rendered[revision] = exc.lines
            except render.RenderError as exc:
                self._rendered[revision] = [str(exc)]
        return self._rendered[revision]

    def _apis_for(self, env: spec.Environment) -> dict[str, ClusterAPI]:
        unknown = sorted(set(self.only or []) - {c.name for c in env.clusters})
        if unknown:
            raise ValueError(f"no cluster {', '.join(unknown)} in environment {env.environment}")
        for cluster in env.clusters:
            if (self.only is None or cluster.name in self.only) and cluster.name not in self._apis:
                self._apis[cluster.name] = self.connect(cluster)
            if self.shards is not None and cluster.name == self.shards.home and self._home is None:
                self._home = self._apis.get(cluster.name) or self.connect(cluster)
        if self.shards is not None and self.shards.home not in {c.name for c in env.clusters}:
            raise ValueError(f"no cluster {self.shards.home} in environment {env.environment} to hold the shards' Leases (--shard-home)")
        return self._apis

    def _leaders(self, env: spec.Environment, state: render.DesiredState, apis: dict[str, ClusterAPI]) -> dict[str, ClusterAPI]:
        """The clusters this replica leads; without an identity it is the only writer of all."""
        if self.identity is None:
            return apis
        if self.shards is not None:
            apis = self._assigned(env, state, apis)
        leading = {}
        for name, api in apis.items():
            elector = self._electors.setdefault(name, LeaseElector(api, self.opts.namespace or "", self.identity, self.lease_seconds, self.opts.clock))
            held = elector.acquire()
            if not held and isinstance(elector.last_failure, NotFound):
                self._ensure_namespace(api, state, name)
                held = elector.acquire()
            if held:
                leading[name] = api
        if self.shards is not None:
            self.shards.holders(set(leading), self._electors)
        return leading

    def _assigned(self, env: spec.Environment, state: render.DesiredState, apis: dict[str, ClusterAPI]) -> dict[str, ClusterAPI]:
        """The clusters the shard assignment gives this replica; the Lease of any other it holds is released at once."""
        assert self.shards is not None and self.identity is not None
        home = self._home
        assert home is not None  # connected by _apis_for
        owned = self.shards.plan(env, [c.name for c in env.clusters], home, self.identity, self.lease_seconds, self.opts.clock)
        if self.shards.membership is not None and isinstance(self.shards.membership.last_failure, NotFound):
            self._ensure_namespace(home, state, self.shards.home)  # the first replica creates the namespace of the slot Leases
            owned = self.shards.plan(env, [c.name for c in env.clusters], home, self.identity, self.lease_seconds, self.opts.clock)
        for name in sorted(set(self._electors) - owned):
            self._electors.pop(name).release()  # a failed release expires on its own
        return {n: api for n, api in apis.items() if n in owned}

    def _standby(self, name: str) -> str:
        """Why this replica wrote nothing to a cluster."""
        if self.shards is not None and name not in self.shards.owned:
            owner = self.shards.assignment.get(name)
            return f"{name}: assigned to {owner or 'no live shard'}, not to {self.shards.mine or 'this replica (it holds no slot)'}; nothing written"
        return f"{name}: {self._electors[name].holder or 'another replica'} holds the Lease; nothing written"

    def _held(self) -> dict[str, ClusterAPI]:
        """Clusters reached in earlier passes that this replica may write to now (no bootstrap)."""
        if self.identity is None:
            return dict(self._apis)
        mine = self._apis.keys() if self.shards is None else self.shards.owned
        return {n: api for n, api in self._apis.items() if n in self._electors and n in mine and self._electors[n].acquire()}

    def _ensure_namespace(self, api: ClusterAPI, state: render.DesiredState, name: str) -> None:
        # The Lease lives in the reconciler's namespace, which the first apply creates: bootstrap it.
        rendered = [m for m in state.clusters.get(name, []) if m["kind"] == "Namespace" and m["metadata"]["name"] == self.opts.namespace]
        body = rendered[0] if rendered else {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.opts.namespace}}
        try:
            call(self.opts, api.apply, body, MANAGER, self.opts.force_conflicts)
        except ApiError:
            pass

    def run_once(self) -> PassResult:
        started = time.perf_counter()
        with self._passing:
            result = self._pass(self.opts)
        self.passes += 1
        self.last_status, self.last_result, self.failure = result.status, result, None
        self.metrics.observe(result, time.perf_counter() - started, time.time())
        level = logging.INFO if result.status in WORKED else logging.WARNING
        drifted = [f"{a.cluster}: {a.verb} {a.target}" for c in result.clusters.values() for a in c.drift]
        log.log(
            level,
            "reconcile pass",
            extra={"fields": {"environment": self.environment, "revision": result.revision, "status": result.status,
                              "drift": result.drift, "drifted": drifted[:LOG_ITEMS], "drifted_more": max(0, len(drifted) - LOG_ITEMS),
                              "errors": len(result.errors), "reasons": result.reasons[:LOG_ITEMS], "last_applied": result.last_applied}},
        )
        return result

    def detect(self) -> PassResult:
        """A detect-only pass now, between the service's passes, on what they keep warm (clients, the rendered
        revision): what differs from Git at the revision fetched now. It writes nothing, holds no Lease and leaves
        the service's record (metrics, /readyz, last result) to its own passes."""
        with self._passing:
            return self._pass(dataclasses.replace(self.opts, dry_run=False, detect_only=True))

    def _pass(self, opts: Options) -> PassResult:
        fetched = self.source.fetch()
        notes = [fetched.error] if fetched.error else []
        if fetched.path is None or fetched.revision is None:
            return PassResult(self.environment, None, PassStatus.UNAVAILABLE, notes, last_applied=self.last_applied)
        loaded = self.load(fetched.path, fetched.revision)
        if isinstance(loaded, list):
            if opts.writes:
                record_refusal(self._held(), opts, Recorded.INVALID, "; ".join(loaded))
            return PassResult(self.environment, fetched.revision, PassStatus.INVALID, notes + loaded, last_applied=self.last_applied)
        env, state = loaded
        self.opts.namespace = opts.namespace = opts.namespace or env.reconciler.namespace
        try:
            apis = self._apis_for(env)
        except (ValueError, ApiError, KubeconfigError) as exc:
            return PassResult(self.environment, fetched.revision, PassStatus.UNAVAILABLE, notes + [str(exc)], last_applied=self.last_applied)
        if opts.writes:
            leaders = self._leaders(env, state, apis)
            if not leaders:  # a follower: no gate, no reads, no writes until the Lease is free
                failed = {n: e for n, e in sorted(self._electors.items()) if n in apis and n in self._mine(apis) and e.last_error}
                if failed:  # an unreachable or forbidden API server is not another leader
                    errors = {n: lease_failure(n, e) for n, e in failed.items()}
                    return PassResult(self.environment, fetched.revision, PassStatus.ERRORS, notes + [r.errors[0] for r in errors.values()], errors, self.last_applied)
                held = [self._standby(n) for n in sorted(apis)]
                standby = {n: ClusterResult(n, leader=False) for n in sorted(apis)}
                return PassResult(self.environment, fetched.revision, PassStatus.STANDBY, notes + held, standby, self.last_applied)
            apis = leaders
        policies = fetched.path / "policies"
        gate = self.gate or functools.partial(default_gate, policies_dir=policies)
        result = run_pass(env, state, apis, gate, opts, self.last_applied)
        result.reasons = notes + result.reasons
        if result.status == PassStatus.DENIED and opts.writes:
            record_refusal(apis, opts, Recorded.DENIED, "; ".join(result.reasons))
        for name in sorted(set(self._apis) - set(apis)):
            elector = self._electors.get(name)
            if elector is not None and elector.last_error and name in self._mine(self._apis):  # not another leader: a server that failed us
                result.clusters[name] = lease_failure(name, elector)
                result.reasons.append(result.clusters[name].errors[0])
                result.status = PassStatus.ERRORS
            else:
                result.clusters[name] = ClusterResult(name, leader=False)
        if result.last_applied:
            self.last_applied = result.last_applied
        result.last_applied = self.last_applied
        if self.shards is not None and opts.writes:  # a detect pass reads every cluster: it is no measure of this shard's load
            self.shards.observe(result, {n: len(state.clusters.get(n, [])) for n in self.shards.owned})
        return result

    def _mine(self, apis: dict[str, ClusterAPI]) -> set[str]:
        """The clusters whose Lease failures are this replica's to report: all, or its shard's."""
        return set(apis) if self.shards is None else self.shards.owned

    @property
    def ready(self) -> Readiness:
        state = Readiness(self.failure) if self.failure else readiness(self.last_result)
        shards = self.shards.problems(sorted(self._apis)) if self.shards is not None else []
        if not shards:
            return state
        why = "; ".join(([state.reason] if state.reason else []) + shards)
        return Readiness(why if len(why) <= READY_REASON_CHARS else why[:READY_REASON_CHARS] + "...")

    def serve(self, interval: float, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set; a failing pass is logged and the next one starts on time."""
        while not stop.is_set():
            memory.release()
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - the loop outlives any one pass
                error = redact(f"{type(exc).__name__}: {exc}")
                self.failure = f"the last pass failed: {error}"[:READY_REASON_CHARS]
                log.error("reconcile pass failed", extra={"fields": {"error": error}})
            stop.wait(interval)
        if self.shards is not None and self.shards.membership is not None:
            # A planned stop: hand the clusters and the slot over now rather than after the Leases expire.
            for elector in self._electors.values():
                elector.release()
            self.shards.membership.leave()
