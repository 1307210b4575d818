"""Reconcile at fleet scale against in-memory clusters: calls and writes of a no-op and a drifted pass.

    .venv/bin/python benchmarks/reconcile_bench.py                 # 2,000 nodes, ~11,000 managed objects in 20 clusters
    .venv/bin/python benchmarks/reconcile_bench.py --scale 0.05 --nodes 100
    .venv/bin/python benchmarks/reconcile_bench.py --scales 0.5 1 2 4  # growth: nodes scale with the fleet
    .venv/bin/python benchmarks/reconcile_bench.py --environment environments/prod.yaml --nodes 200 --drifted 3

Renders the synthetic environment once (about half a minute at scale 1) and reuses that
DesiredState for every pass (`--environment`: a bundled file instead). Asserts what it measures: a no-op
pass issues exactly one LIST per kind per cluster, no look-up by identity and no write; a pass over N
drifted objects (quotas edited, network policies deleted, namespaces relabelled out of the reconciler's
label selector) writes exactly N and creates only what was deleted. With --scales, each scale
runs in its own process with `--nodes` times the scale, and the no-op pass's CPU time (all threads:
on a shared machine wall time measures the neighbours) must grow linearly with the objects.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import _fingerprint, synthetic_yaml  # noqa: E402
from benchmarks.goals import Goal, exponent, report  # noqa: E402
from fleetops import identity, memory, reconcile, render, spec  # noqa: E402
from tests.fakes import MemoryCluster  # noqa: E402


def allow(env: object, state: object, live: object) -> reconcile.GateResult:
    return reconcile.GateResult(False, [])


def seed_nodes(env: spec.Environment, apis: dict[str, MemoryCluster], total: int) -> int:
    """`total` nodes spread over every pool and edge group, named by the groups' patterns."""
    groups = [(c.name, g) for c in env.clusters for g in (*c.pools, *c.edge_groups)]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i in range(total):
        cluster, group = groups[i % len(groups)]
        name = (group.match.name_pattern or f"{group.name}-*").replace("*", str(i))
        annotations = {"fleetops.io/device-fingerprint": _fingerprint(group.name)} if isinstance(group, spec.EdgeGroup) else {}
        apis[cluster].put({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {}, "annotations": annotations},
            "spec": {},
            "status": {"allocatable": {group.device.resource: str(group.device.per_node), "cpu": "64", "memory": "512Gi"},
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]},
        }, manager="kubelet")
    return total


def drift(state: render.DesiredState, apis: dict[str, MemoryCluster], count: int) -> tuple[int, int]:
    """`count` hand edits, a third each: ResourceQuotas edited, Namespaces relabelled for another
    environment (out of the reconciler's label selector) and NetworkPolicies deleted. Returns the edits
    and the deletions (the only objects to create)."""
    quotas = [(c, m) for c, m in state.objects() if m["kind"] == "ResourceQuota"][: count // 3]
    namespaces = [(c, m) for c, m in state.objects() if m["kind"] == "Namespace"][: count // 3]
    policies = [(c, m) for c, m in state.objects() if m["kind"] == "NetworkPolicy"][: count - len(quotas) - len(namespaces)]
    for cluster, manifest in quotas:
        edited = copy.deepcopy(manifest)
        edited["spec"]["hard"] = {k: "999" for k in edited["spec"]["hard"]}  # never the value Git has
        apis[cluster].put(edited)
    for cluster, manifest in namespaces:
        edited = copy.deepcopy(manifest)
        edited["metadata"]["labels"]["fleetops.io/environment"] = "elsewhere"  # kubectl label --overwrite
        apis[cluster].put(edited)
    for cluster, m in policies:
        apis[cluster].remove(m["apiVersion"], m["kind"], m["metadata"]["namespace"], m["metadata"]["name"])
    return len(quotas) + len(namespaces) + len(policies), len(policies)


def timed_pass(env: spec.Environment, state: render.DesiredState, apis: dict[str, MemoryCluster], opts: reconcile.Options) -> tuple[reconcile.PassResult, float, float]:
    """The pass, its wall time and its CPU time (every thread of this process)."""
    for api in apis.values():
        api.reset_counts()
    started, cpu = time.perf_counter(), time.process_time()
    result = reconcile.run_pass(env, state, apis, allow, opts)
    return result, time.perf_counter() - started, time.process_time() - cpu


GOAL_EXPONENT = 1.1


def growth(scales: list[float], nodes: int, drifted: int) -> int:
    """The no-op pass at each scale, in a fresh process each, and its exponent over objects."""
    rows = []
    for scale in scales:
        argv = [sys.executable, __file__, "--scale", str(scale), "--nodes", str(round(nodes * scale)), "--drifted", str(drifted)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if not done.stdout.startswith("{"):
            raise SystemExit(f"scale {scale}: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        rows.append(json.loads(done.stdout.splitlines()[0]))
        print(f"scale {scale:>4}: {rows[-1]['objects']:>6,} objects, {rows[-1]['nodes']:>5,} nodes: no-op pass "
              f"{rows[-1]['noop_pass_cpu_seconds']:6.2f} s CPU ({rows[-1]['noop_pass_seconds']:.2f} s wall)", flush=True)
    span = f"{scales[0]:g}x..{scales[-1]:g}x"
    grows = exponent([r["objects"] for r in rows], [r["noop_pass_cpu_seconds"] for r in rows])
    return report("reconcile_bench: growth of the no-op pass", [Goal(f"no-op pass CPU exponent over objects ({span})", grows, GOAL_EXPONENT)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--drifted", type=int, default=100)
    parser.add_argument("--scales", type=float, nargs="+", help="measure growth over these scales instead")
    parser.add_argument("--environment", type=Path, help="an environment file (environments/prod.yaml) instead of the synthetic fleet")
    args = parser.parse_args(argv)
    memory.for_a_command()  # as `fleetops` runs every command (cli.main)
    if args.scales:
        return growth(args.scales, args.nodes, args.drifted)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.environment or Path(tmp) / "large.yaml"
        if args.environment is None:
            path.write_text(synthetic_yaml(args.scale))
        env = spec.load_environment(path)
        started = time.perf_counter()
        state = render.render(path, revision="bench")
        render_seconds = time.perf_counter() - started
    render_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    seed_nodes(env, apis, args.nodes)
    opts = reconcile.Options(force_conflicts=True, sleep=lambda s: None)
    first, first_seconds, first_cpu = timed_pass(env, state, apis, opts)
    assert first.status == "applied" and not first.errors, first.errors[:3]

    noop, noop_seconds, noop_cpu = timed_pass(env, state, apis, opts)
    expected_lists = 0
    for name, api in apis.items():
        # Nodes for the gate, and kubelet certificate requests where edge identity is guarded.
        guarded = identity.guarded(spec.cluster_by_name(env, name))
        kinds = {m["kind"] for m in state.clusters[name]} | {"Node"} | ({"CertificateSigningRequest"} if guarded else set())
        lists = {k: n for (verb, k), n in api.calls.items() if verb == "list"}
        assert lists == {k: 1 for k in kinds}, (name, lists)
        expected_lists += len(kinds)
        assert api.writes() == 0 and api.count("find") == 0, (name, api.calls)
    assert noop.status == "clean"
    noop_writes = sum(api.writes() for api in apis.values())
    noop_lists = sum(api.count("list") for api in apis.values())

    drifted, deleted = drift(state, apis, args.drifted)
    fixed, fixed_seconds, fixed_cpu = timed_pass(env, state, apis, opts)
    writes = sum(api.writes() for api in apis.values())
    assert writes == drifted and fixed.drift == drifted and not fixed.errors, (writes, drifted, fixed.errors[:3])
    # A relabelled object is found by its identity: an update of its label, never an object to create.
    creates = sum(1 for c in fixed.clusters.values() for a in c.drift if a.verb is reconcile.Write.CREATE)

    figures = {
        "clusters": len(apis),
        "objects": state.object_count,
        "nodes": args.nodes,
        "render_seconds": round(render_seconds, 2),
        "converge_pass_seconds": round(first_seconds, 2),
        "converge_pass_cpu_seconds": round(first_cpu, 2),
        "noop_pass_seconds": round(noop_seconds, 2),
        "noop_pass_cpu_seconds": round(noop_cpu, 2),
        "noop_lists": noop_lists,
        "noop_writes": noop_writes,
        "drifted_objects": drifted,
        "drift_pass_writes": writes,
        "drift_pass_seconds": round(fixed_seconds, 2),
        "drift_pass_cpu_seconds": round(fixed_cpu, 2),
        "drift_pass_finds": sum(api.count("find") for api in apis.values()),
        "drift_pass_creates": creates,
        "peak_rss_after_render_mib": round(render_rss, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(figures))
    return report("reconcile_bench: a no-op pass and a drifted pass", [
        Goal("no-op pass: writes", noop_writes, 0),
        Goal("no-op pass: LISTs beyond one per kind and cluster", noop_lists - expected_lists, 0),
        Goal("drifted pass: writes per drifted object", writes / drifted, 1.0),
        Goal("drifted pass: creates beyond the objects deleted", creates - deleted, 0),
        Goal("no-op pass over 2,000 nodes and every object", noop_seconds, 10.0, "s"),
    ])


if __name__ == "__main__":
    sys.exit(main())
