"""Reconciler replicas sharing a fleet (in-memory clusters): pass time per replica, balance, handover, memory.

    .venv/bin/python benchmarks/shard_bench.py                                   # 500 clusters, 50,000 nodes; 1, 4 and 16 replicas
    .venv/bin/python benchmarks/shard_bench.py --clusters 60 --nodes 6000 --replicas 3   # smaller, one count

Each replica count runs in its own process (its memory its own). The fleet: `generate.py`'s clusters, one pool
each (about 58 objects a cluster: 29,000 in all at 500), already deployed (Git's objects seeded as fleetops
applied them), and `--nodes` spread over the clusters unevenly (log-normal: the largest cluster holds ~20x the
median), so that a cluster's measured pass cost, not its count, decides the balance. The replicas run on one
simulated clock, a pass each per interval (5 s; Lease 15 s, as `--interval 5s` gives), one after another in
this process: a replica's pass time is its own work. After the assignment settles, one steady round is
measured; then the replica with the most load is lost (it stops renewing) and the rounds are counted until
every cluster it kept is held and reconciled by another. Memory: the peak Python allocation of the busiest
replica's steady pass (tracemalloc), beside the rendered fleet every replica also holds (RSS growth of the
render); the in-memory clusters are not any replica's.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from benchmarks.generate import synthetic_environment  # noqa: E402
from benchmarks.goals import Goal, peak_rss_mib, report  # noqa: E402
from fleetops import memory, reconcile, render, spec  # noqa: E402
from fleetops.kube import MANAGER  # noqa: E402
from fleetops.reconcile.source import Fetched  # noqa: E402
from tests.fakes import MemoryCluster  # noqa: E402
from tests.reconcile_support import Clock  # noqa: E402

INTERVAL = 5
LEASE = 15
HOME = "center-0"
SETTLE_ROUNDS = 14


def allow(env: object, state: object, live: object) -> reconcile.GateResult:
    return reconcile.GateResult(False, [])


class Source:
    def fetch(self) -> Fetched:
        return Fetched(Path("/fleet"), "rev-1")


def fleet(clusters: int, folder: Path) -> tuple[spec.Environment, render.DesiredState, float]:
    """The environment, its render and the RSS (MiB) the render added."""
    edge = max(1, clusters // 10)
    doc = synthetic_environment(0.08, "shards", center_clusters=clusters - edge, edge_clusters=edge, tenants=2 * clusters,
                                edge_groups=edge * 2, nodes=100)
    path = folder / "shards.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = spec.load_environment(path)
    before = peak_rss_mib()
    state = render.render(path, revision="rev-1")
    return env, state, peak_rss_mib() - before


def deployed(env: spec.Environment, state: render.DesiredState, nodes: int, seed: int = 7) -> dict[str, MemoryCluster]:
    """Memory clusters holding Git's objects and `nodes` nodes, spread log-normally over the clusters."""
    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    rng = random.Random(seed)
    shares = {c.name: rng.lognormvariate(0, 1) for c in env.clusters}
    total = sum(shares.values())
    now = "2026-12-01T12:00:00Z"
    for cluster in env.clusters:
        api = apis[cluster.name]
        api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": env.reconciler.namespace}})
        api.seed(*state.clusters.get(cluster.name, []), manager=MANAGER)
        group = (*cluster.pools, *cluster.edge_groups)[0]
        for i in range(max(1, round(nodes * shares[cluster.name] / total))):
            api.put({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": (group.match.name_pattern or f"{group.name}-*").replace("*", str(i)), "labels": {}, "annotations": {}},
                     "spec": {},
                     "status": {"allocatable": {group.device.resource: str(group.device.per_node), "cpu": "64", "memory": "512Gi"},
                                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}}, manager="kubelet")
    return apis


def replicas(env: spec.Environment, state: render.DesiredState, apis: dict[str, MemoryCluster], n: int, clock: Clock) -> dict[str, reconcile.ReconcileLoop]:
    loops = {}
    for i in range(n):
        loop = reconcile.ReconcileLoop(env.environment, Source(), lambda c: apis[c.name], gate=allow, opts=reconcile.Options(clock=clock),
                                       identity=f"replica-{i}", shards=reconcile.Shards(HOME, n))
        loop._rendered["rev-1"] = (env, state)  # rendered once here; each real replica renders its own (its memory below)
        loop.lease_seconds = LEASE
        loops[loop.identity or ""] = loop
    return loops


def round_of(loops: dict[str, reconcile.ReconcileLoop], clock: Clock) -> dict[str, float]:
    """A pass of each replica, one after another; the wall seconds of each."""
    clock.advance(INTERVAL)
    seconds = {}
    for name, loop in loops.items():
        started = time.perf_counter()
        loop.run_once()
        seconds[name] = time.perf_counter() - started
    return seconds


def holders(apis: dict[str, MemoryCluster], namespace: str) -> dict[str, str | None]:
    return {n: (api.peek("coordination.k8s.io/v1", "Lease", namespace, "fleetops-reconciler") or {}).get("spec", {}).get("holderIdentity")
            for n, api in apis.items()}


def measure(n: int, clusters: int, nodes: int, folder: Path) -> dict[str, object]:
    env, state, render_mib = fleet(clusters, folder)
    apis = deployed(env, state, nodes)
    clock = Clock()
    loops = replicas(env, state, apis, n, clock)
    shards = {name: loop.shards for name, loop in loops.items()}
    rounds, seen = 0, []
    while rounds < SETTLE_ROUNDS:  # the first writes the records; then until the assignment and the Leases stay put a round
        rounds += 1
        round_of(loops, clock)
        seen.append((next(iter(shards.values())).assignment, holders(apis, env.reconciler.namespace)))  # type: ignore[union-attr]
        if len(seen) >= 2 and seen[-1] == seen[-2]:
            break
    steady = round_of(loops, clock)
    owned = {name: s.owned for name, s in shards.items()}  # type: ignore[union-attr]
    load = {name: sum(s.cost(c) for c in owned[name]) for name, s in shards.items()}  # type: ignore[union-attr]
    busiest = max(load, key=lambda k: load[k])
    tracemalloc.start()
    loops[busiest].run_once()
    _, pass_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    row: dict[str, object] = {
        "replicas": n, "clusters": len(env.clusters), "nodes": sum(len(a.objects("Node")) for a in apis.values()),
        "objects": sum(len(v) for v in state.clusters.values()), "rounds_to_settle": rounds, "settled": rounds < SETTLE_ROUNDS,
        "pass_seconds_max": max(steady.values()), "pass_seconds_mean": sum(steady.values()) / n,
        "clusters_max": max(len(o) for o in owned.values()), "clusters_min": min(len(o) for o in owned.values()),
        "load_max_over_mean": max(load.values()) / (sum(load.values()) / n) if sum(load.values()) else None,
        "pass_max_over_mean": max(steady.values()) / (sum(steady.values()) / n),
        "pass_peak_mib": pass_peak / 2**20, "render_mib": render_mib, "unowned": sum(1 for h in holders(apis, env.reconciler.namespace).values() if h is None),
    }
    if n > 1:
        lost = sorted(owned[busiest])
        del loops[busiest]
        lost_at = clock.now
        for passes in range(1, 11):
            round_of(loops, clock)
            held = holders(apis, env.reconciler.namespace)
            done = all(held[c] in loops and c in shards[held[c]].reconciled_at  # type: ignore[union-attr]
                       and shards[held[c]].reconciled_at[c] >= lost_at.timestamp() for c in lost)  # type: ignore[union-attr]
            if done:
                row.update(handover_passes=passes, handover_seconds=(clock.now - lost_at).total_seconds(), lost_clusters=len(lost))
                break
        else:
            row.update(handover_passes=None, handover_seconds=None, lost_clusters=len(lost))
    return row


def table(rows: list[dict[str, object]]) -> None:
    print(f"{'replicas':>8} {'pass s max':>10} {'pass s mean':>11} {'clusters min-max':>16} {'load max/mean':>13} {'pass max/mean':>13} "
          f"{'handover':>18} {'pass peak MiB':>13} {'render MiB':>10}")
    for r in rows:
        handover = f"{r['handover_passes']} passes, {r['handover_seconds']:.0f} s" if r.get("handover_passes") else "n/a" if r["replicas"] == 1 else "NOT DONE"
        print(f"{r['replicas']:>8} {r['pass_seconds_max']:>10.2f} {r['pass_seconds_mean']:>11.2f} {str(r['clusters_min']) + '-' + str(r['clusters_max']):>16} "
              f"{r['load_max_over_mean'] or 0:>13.2f} {r['pass_max_over_mean']:>13.2f} {handover:>18} {r['pass_peak_mib']:>13.1f} {r['render_mib']:>10.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--json", action="store_true", help="one replica count: print its row as JSON")
    args = parser.parse_args(argv)
    memory.for_a_command()
    if args.json:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(args.replicas[0], args.clusters, args.nodes, Path(tmp))))
        return 0
    rows = []
    for n in args.replicas:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--clusters", str(args.clusters), "--nodes", str(args.nodes), "--replicas", str(n), "--json"],
                              capture_output=True, text=True, check=False)
        if not done.stdout.startswith("{"):
            raise SystemExit(f"{n} replicas: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        rows.append(json.loads(done.stdout.splitlines()[0]))
        print(f"{n} replicas measured in {time.perf_counter() - started:.0f} s", flush=True)
    first = rows[0]
    print(f"{first['clusters']} clusters, {first['nodes']:,} nodes, {first['objects']:,} objects; interval {INTERVAL} s, Lease {LEASE} s")
    table(rows)
    goals = [Goal(f"{r['replicas']} replicas: load max/mean", r["load_max_over_mean"] or 0.0, 1.25) for r in rows if r["replicas"] > 1]
    goals += [Goal(f"{r['replicas']} replicas: handover seconds (Lease + 2 intervals)", r.get("handover_seconds") or float("inf"), LEASE + 2 * INTERVAL, " s")
              for r in rows if r["replicas"] > 1]
    goals += [Goal(f"{r['replicas']} replicas: clusters without a Lease holder", float(r["unowned"]), 0) for r in rows]  # type: ignore[arg-type]
    return report("shard_bench", goals)


if __name__ == "__main__":
    sys.exit(main())
