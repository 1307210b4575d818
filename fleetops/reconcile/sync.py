"""One pass: every cluster in parallel, each read, diffed, written (apply in kind order, prune, nodes) and recorded."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from fleetops import identity, inventory, render, spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError, NotFound, Unreachable
from fleetops.kube import MANAGER, Key, Manifest, key_of
from fleetops.reconcile.gate import Gate, GateResult
from fleetops.reconcile.nodes import NODE_KIND, identity_actions, live_input, node_actions, read_nodes
from fleetops.reconcile.objects import kinds_of, not_served, object_actions, read_live
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import Action, ClusterResult, Outcome, PassResult, PassStatus, Write
from fleetops.reconcile.retry import Guard, call, explain
from fleetops.reconcile.status import (INVENTORY_CONFIGMAP, Recorded, applied_after, inventory_content, read_applied, read_status, status_data,
                                      write_record, write_status)

# --- one cluster ----------------------------------------------------------------------------


def _execute(api: ClusterAPI, action: Action, opts: Options) -> None:
    assert action.key is not None
    try:
        if action.kind == "Node":
            precondition = "resourceVersion" in (action.body or {}).get("metadata", {})
            call(opts, api.patch_node, action.key[3], action.body, conflicts=not precondition)
        elif action.kind == "CertificateSigningRequest":
            call(opts, api.approve, action.body, conflicts=False)  # 409: decided elsewhere since the read
        elif action.verb is Write.RECORD:
            write = api.replace if "resourceVersion" in action.body["metadata"] else api.create
            call(opts, write, action.body, conflicts=False)
        elif action.verb is Write.PRUNE:
            try:
                call(opts, api.delete, *action.key)
            except NotFound:
                pass  # already gone is what pruning wanted
        else:
            call(opts, api.apply, action.body, MANAGER, opts.force_conflicts)
        action.outcome = Outcome.DONE
    except ApiError as exc:
        conflict = "; another field manager owns it (a hand edit?): --force-conflicts takes it back for Git, or change Git to match"
        action.failed(explain(exc) + (conflict if exc.field_conflict else ""), attempted=not isinstance(exc, Unreachable))


def reconcile_cluster(
    api: ClusterAPI,
    env: spec.Environment,
    cluster: spec.Cluster,
    desired: list[Manifest],
    result: ClusterResult,
    node_work: list[Action],
    applied: set[Key] | None,
    opts: Options,
) -> None:
    """Objects (apply in kind order, then prune) and nodes of one cluster. One failure never stops the rest.

    `applied` is the inventory of the last pass (None: it could not be read, so nothing is pruned).
    """
    # Kinds applied last time are listed too, so that a kind Git dropped entirely is still pruned.
    wanted = set(kinds_of(desired))
    kinds = sorted(wanted | {(k[0], k[1]) for k in applied or ()})
    identities = {key_of(m) for m in desired} | (applied or set())
    live, failed, unserved = read_live(api, kinds, env.environment, opts, result, wanted, identities)
    for line in not_served(cluster.name, desired, unserved):
        result.fail(line)
    result.measured = {k for v, k in kinds if (v, k) not in unserved} | {NODE_KIND[1]}
    desired = [m for m in desired if (m["apiVersion"], m["kind"]) not in unserved]
    result.actions += object_actions(cluster.name, env.environment, desired, live, failed, opts, applied)
    result.actions += node_work
    if opts.writes:
        outcome: dict[Key, Action] = {}
        for action in result.actions:
            if not action.write:
                continue
            if action.kind == "Node" and action.key in outcome:
                first = outcome[action.key]
                action.outcome, action.error = first.outcome, first.error
                continue
            if action.verb is Write.RECORD and any(a.error for a in result.actions if a.kind == "CertificateSigningRequest"):
                action.failed("not recorded: an approval failed; the next pass decides again")
                continue
            _execute(api, action, opts)
            outcome[action.key] = action
    result.failures += [f for a in result.actions if (f := a.failure()) is not None]
    if applied is not None:
        result.applied = applied_after(applied, (key_of(m) for m in desired), live, failed, result.actions)


# --- one pass over every cluster ------------------------------------------------------------


def run_pass(
    env: spec.Environment,
    state: render.DesiredState,
    apis: dict[str, ClusterAPI],
    gate: Gate,
    opts: Options | None = None,
    last_applied: str | None = None,
) -> PassResult:
    """One reconcile pass of a rendered revision over the clusters in `apis` (others are not touched).

    Nodes are read first because the gate judges the revision with the live inventory in view;
    a denial stops the pass before any object is read or written. A detect-only pass is not judged (`Options.judges`).
    """
    opts = dataclasses.replace(opts or Options(), namespace=(opts and opts.namespace) or env.reconciler.namespace)
    clusters = [c for c in env.clusters if c.name in apis]
    results = {c.name: ClusterResult(c.name) for c in clusters}
    guards = {name: Guard(api) for name, api in apis.items()}
    apis = dict(guards)
    now = opts.clock()

    def survey(cluster: spec.Cluster) -> tuple[inventory.ClusterInventory, list[Action]]:
        started = opts.timer()
        try:
            return surveyed_nodes(cluster)
        finally:
            results[cluster.name].seconds += opts.timer() - started

    def surveyed_nodes(cluster: spec.Cluster) -> tuple[inventory.ClusterInventory, list[Action]]:
        inv, error = read_nodes(apis[cluster.name], cluster, opts)
        result = results[cluster.name]
        if guards[cluster.name].down is not None:
            # Nothing more is asked of a server that does not answer: one line, no guessed actions.
            result.unreachable = guards[cluster.name].down
            result.fail(f"{cluster.name}: API server unreachable ({result.unreachable}): nothing read or written this pass")
            result.nodes_read = False
            return inv, []
        result.problems = inv.problems
        approvals, record = identity_actions(apis[cluster.name], cluster, opts, result) if identity.guarded(cluster) else ([], {})
        work, members = node_actions(cluster, inv, now, record)
        work = approvals + work  # a node approved in this pass is known to the quarantine decision
        if error:
            # Unknown is not zero: no capacity figures, no shortfall warnings from a failed read.
            result.fail(error)
            result.nodes_read = False
            return inv, work
        result.capacity = inventory.capacity(cluster, members)
        result.shortfalls = inventory.shortfalls(env, cluster.name, result.capacity)
        return inv, work

    with ThreadPoolExecutor(max_workers=max(1, opts.workers)) as pool:
        surveyed = dict(zip((c.name for c in clusters), pool.map(survey, clusters)))
        inventories = {name: inv for name, (inv, _) in surveyed.items()}
        verdict = gate(env, state, live_input(env, inventories, results)) if opts.judges else GateResult(False)
        if verdict.denied:
            return PassResult(env.environment, state.revision, PassStatus.DENIED, verdict.reasons, results, last_applied, verdict.warnings,
                              gate_unavailable=verdict.unavailable)

        def one(cluster: spec.Cluster) -> None:
            started = opts.timer()
            try:
                reconciled(cluster)
            finally:
                results[cluster.name].seconds += opts.timer() - started

        def reconciled(cluster: spec.Cluster) -> None:
            api, result = apis[cluster.name], results[cluster.name]
            if result.unreachable is not None:
                return
            desired = state.clusters.get(cluster.name, [])
            try:
                status, known = read_status(api, opts), True
                result.last_applied = (status or {}).get("data", {}).get("revision") or None
            except ApiError as exc:
                status, known = None, False  # unknown: reconcile anyway, but do not overwrite the record blind
                result.fail(f"{cluster.name}: read status ConfigMap: {exc}", exc)
            try:
                inventory_map, applied = read_applied(api, opts)
            except ApiError as exc:
                inventory_map, applied = None, None  # unknown: apply, but prune nothing and keep the record
                result.fail(f"{cluster.name}: read inventory ConfigMap: {explain(exc)}", exc)
            try:
                reconcile_cluster(api, env, cluster, desired, result, surveyed[cluster.name][1], applied, opts)
            except Exception as exc:  # noqa: BLE001 - one cluster's failure is reported, the others go on
                result.fail(f"{cluster.name}: {type(exc).__name__}: {exc}", exc)
                return
            if (down := guards[cluster.name].down) is not None:
                # The server stopped answering part-way: one line for what was not attempted.
                skipped = [f for f in result.failures if not f.attempted]
                result.unreachable = down
                result.failures = [f for f in result.failures if f.attempted]
                result.fail(f"{cluster.name}: API server stopped answering during the pass ({down}): "
                            f"{len(skipped)} call(s) not attempted; the next pass converges")
                return
            if opts.writes and result.applied is not None:
                try:
                    write_record(api, opts, INVENTORY_CONFIGMAP, inventory_map, inventory_content(result.applied))
                except ApiError as exc:
                    result.fail(f"{cluster.name}: inventory ConfigMap: {explain(exc)}", exc)
            if opts.writes and known:
                ok = not result.errors
                data = status_data(env.environment, state.revision if ok else (status or {}).get("data", {}).get("revision") or last_applied,
                                    Recorded.OK if ok else Recorded.ERRORS, "; ".join(result.errors))
                try:
                    write_status(api, opts, status, data)
                    result.last_applied = data["revision"] or None
                except ApiError as exc:
                    result.fail(f"{cluster.name}: status ConfigMap: {exc}", exc)

        list(pool.map(one, clusters))
    shortfalls = [s["msg"] for r in results.values() for s in r.shortfalls]
    out = PassResult(env.environment, state.revision, PassStatus.CLEAN, shortfalls, results, last_applied, verdict.warnings)
    if out.errors:
        out.status = PassStatus.ERRORS
    elif out.drift and opts.writes:
        out.status = PassStatus.APPLIED
    elif out.drift:
        out.status = PassStatus.PLANNED if opts.dry_run else PassStatus.DRIFT
    if opts.writes and not out.errors:
        out.last_applied = state.revision
    elif len(recorded := {c.last_applied for c in results.values()}) == 1 and None not in recorded:
        out.last_applied = recorded.pop()  # what every cluster's status records, read even when nothing is written
    return out


def record_refusal(apis: dict[str, ClusterAPI], opts: Options, result: Recorded, message: str) -> None:
    """Write a denied/invalid outcome to each status ConfigMap, keeping the last applied revision it holds."""
    for api in apis.values():
        try:
            status = read_status(api, opts)
            if status is None:
                continue  # nothing was ever applied here: nothing to keep, nowhere to write
            data = dict(status.get("data") or {})
            data.update(result=result.value, message=message[:1000])
            write_status(api, opts, status, data)
        except ApiError:
            pass  # the record is best effort; the refusal itself already held
