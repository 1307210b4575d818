"""A month of jobs replayed on the real Kueue, base and head: how long `fleetops whatif` takes.

    .venv/bin/python benchmarks/whatif_bench.py [--days 30] [--jobs 10000] [--load 0.5] [--seed 1] [--cluster center-bj]
    .venv/bin/python benchmarks/whatif_bench.py --claim [--loads 0.3 0.5 0.7] [--seeds 1 2 3]   # docs/whatif.md's table

The default run generates a PAI-shaped trace of environments/prod.yaml and replays it on base and head
(both the bundled prod fleet: the work a review of any change does), through the product's own servers
and harness; goal: at most 10 minutes of wall time for both. With --claim it replays base, static and
pooled at each offered load and seed and prints, per load, the median and range over seeds of each
side's allocation utilisation, p99 wait and backlog: the figures docs/whatif.md quotes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.goals import Goal, cpu_seconds, report  # noqa: E402
from fleetops import render, spec  # noqa: E402
from fleetops.errors import WhatifError  # noqa: E402
from fleetops.whatif import run, sides, trace  # noqa: E402

PROD = ROOT / "environments" / "prod.yaml"
ENVIRONMENTS = ROOT / "environments"
GOAL_SECONDS = 600.0


def base_side(path: Path = PROD) -> sides.Side:
    return sides.side_of(sides.SideKind.BASE, path.stem, spec.load_environment(path), render.render(path, revision="bench").clusters)


def speed(args: argparse.Namespace) -> int:
    env = spec.load_environment(PROD)
    work = trace.generate(env, args.days, args.jobs, args.load, args.seed, args.cluster)
    base = base_side()
    head = sides.side_of(sides.SideKind.HEAD, "prod", base.env, base.clusters)
    began, cpu = time.monotonic(), cpu_seconds()
    figures = run.replay([base, head], work, run.Options(root=ROOT, keep=args.keep))
    wall = time.monotonic() - began
    for f in figures:
        print(f"  {f.side}: {f.jobs} jobs, {f.finished} finished, utilisation {f.total_utilisation:.1%} of offered {f.offered_load:.1%}, "
              f"p99 wait {f.waits_all.p99:.2f} h, {sum(p.count for p in f.preemptions)} preemptions")
    print(f"  wall {wall:.0f} s, this process's CPU {cpu_seconds() - cpu:.0f} s (the servers' is not counted)")
    return report(f"whatif: {args.jobs} jobs over {args.days} days, base and head",
                  [Goal("replay of base and head, wall seconds", wall, GOAL_SECONDS, " s")])


def claim(args: argparse.Namespace) -> int:
    path = ENVIRONMENTS / f"{args.env}.yaml"
    env = spec.load_environment(path)
    base = base_side(path)
    chosen = [base, sides.derived(base, sides.SideKind.STATIC), sides.derived(base, sides.SideKind.POOLED)]
    for load in args.loads:
        rows: dict[str, list[tuple[float, float, int]]] = {str(s.kind): [] for s in chosen}
        offered = []
        for seed in args.seeds:
            work = trace.generate(env, args.days, args.jobs, load, seed, args.cluster)
            for f in run.replay(chosen, work, run.Options(root=ROOT)):
                rows[f.side].append((f.total_utilisation, f.waits_all.p99, f.backlog_jobs))
                offered.append(f.offered_load)
        print(f"offered load {load} (measured {statistics.median(offered):.2f}), seeds {' '.join(map(str, args.seeds))}:", flush=True)
        for side, values in rows.items():
            util, p99, backlog = zip(*values)
            print(f"  {side:<7} utilisation {statistics.median(util):.1%} [{min(util):.1%}-{max(util):.1%}]  "
                  f"p99 wait {statistics.median(p99):.1f} h [{min(p99):.1f}-{max(p99):.1f}]  backlog {statistics.median(backlog):.0f} jobs "
                  f"[{min(backlog)}-{max(backlog)}]", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", action="append", default=[], help="only jobs on this cluster (repeat); default: every cluster")
    parser.add_argument("--keep", type=Path, help="the servers' folders and logs go here and stay")
    parser.add_argument("--claim", action="store_true", help="base vs static vs pooled at --loads and --seeds")
    parser.add_argument("--env", default="prod", help="with --claim: the environment (default prod)")
    parser.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    try:
        return claim(args) if args.claim else speed(args)
    except WhatifError as exc:
        print(f"whatif_bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
