"""Reconcile on real kube-apiservers (one per cluster, loopback): a converge, a no-op and a three-edit drift pass.

    .venv/bin/python benchmarks/reconcile_real_bench.py [--environment environments/prod.yaml]

The three hand edits, in the first cluster: a ResourceQuota's values, a Namespace relabelled for another
environment (out of the reconciler's label selector: found by its identity, an update of that label) and a
NetworkPolicy deleted (the only object to create). Prints each pass's wall and CPU seconds (this process,
every thread: on a shared machine the wall time measures the neighbours) and its API calls by verb. Not in
`make bench`: it needs the real servers (`.tools/`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.goals import Goal, report  # noqa: E402
from fleetops import reconcile, render, spec  # noqa: E402
from fleetops.kube import key_of  # noqa: E402
from tests import servers  # noqa: E402
from tests.backends import RealCluster  # noqa: E402
from tests.reconcile_support import allow, options  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def timed(env: spec.Environment, state: render.DesiredState, apis: dict[str, RealCluster], **kw: Any) -> tuple[reconcile.PassResult, dict[str, Any]]:
    for api in apis.values():
        api.reset_counts()
    wall, cpu = time.perf_counter(), time.process_time()
    result = reconcile.run_pass(env, state, apis, allow, options(**kw))
    calls: dict[str, int] = {}
    for api in apis.values():
        for (verb, _), n in api.calls.items():
            calls[verb] = calls.get(verb, 0) + n
    return result, {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2), "calls": calls}


def start(name: str, directory: Path, etcd: servers.Etcd) -> servers.ApiServer:
    for attempt in range(3):  # a port found free may be taken by a neighbour before the server binds it
        server = servers.ApiServer(name, directory / f"{name}-{attempt}", etcd)
        try:
            return server.start()
        except Exception:  # noqa: BLE001 - tried again on another port
            server.stop()
    raise SystemExit(f"{name}: kube-apiserver did not start in three attempts")


def edit_by_hand(state: render.DesiredState, cluster: str, api: RealCluster) -> None:
    first = {kind: next(m for m in state.clusters[cluster] if m["kind"] == kind) for kind in ("ResourceQuota", "Namespace", "NetworkPolicy")}
    quota = api.peek(*key_of(first["ResourceQuota"]))
    quota["spec"]["hard"] = {k: "999" for k in quota["spec"]["hard"]}
    api.put(quota)
    namespace = api.peek(*key_of(first["Namespace"]))
    namespace["metadata"]["labels"]["fleetops.io/environment"] = "elsewhere"  # kubectl label --overwrite
    api.put(namespace)
    api.remove(*key_of(first["NetworkPolicy"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", type=Path, default=ROOT / "environments" / "prod.yaml")
    args = parser.parse_args(argv)
    env = spec.load_environment(args.environment)
    state = render.render(args.environment, revision="bench")
    figures: dict[str, Any] = {"environment": args.environment.name, "objects": state.object_count}
    with tempfile.TemporaryDirectory() as tmp, servers.etcd_server(Path(tmp) / "etcd") as etcd:
        started: list[servers.ApiServer] = []
        try:
            for c in env.clusters:
                started.append(start(c.name, Path(tmp), etcd))
                servers.install_crds(started[-1])
            apis = {s.name: RealCluster(s.name, s, Path(tmp) / f"{s.name}.kubeconfig") for s in started}
            converged, figures["converge"] = timed(env, state, apis, force_conflicts=True)
            assert converged.status == "applied", converged.errors[:3]
            noop, figures["noop"] = timed(env, state, apis)
            assert noop.status == "clean", noop.errors[:3]
            first = env.clusters[0].name
            edit_by_hand(state, first, apis[first])
            fixed, figures["drift"] = timed(env, state, apis, force_conflicts=True)
            assert not fixed.errors, fixed.errors[:3]
            figures["drift"]["actions"] = sorted(f"{a.verb} {a.target}" for a in fixed.clusters[first].drift)
        finally:
            for server in started:
                server.stop()
    print(json.dumps(figures))
    creates = sum(1 for a in figures["drift"]["actions"] if a.startswith("create "))
    return report("reconcile_real_bench: converge, no-op and three hand edits on real kube-apiservers", [
        Goal("no-op pass: look-ups by identity", figures["noop"]["calls"].get("find", 0), 0),
        Goal("drift pass: writes", sum(figures["drift"]["calls"].get(v, 0) for v in ("apply", "create", "delete")), 3),
        Goal("drift pass: creates beyond the one object deleted", creates - 1, 0),
    ])


if __name__ == "__main__":
    sys.exit(main())
