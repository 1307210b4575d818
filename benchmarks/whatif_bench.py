"""A month of jobs replayed on the real Kueue, base and head: how long `fleetops whatif` takes.

    .venv/bin/python benchmarks/whatif_bench.py [--days 30] [--jobs 10000] [--load 0.5] [--seed 1] [--cluster center-bj]
    .venv/bin/python benchmarks/whatif_bench.py --claim [--loads 0.3 0.5 0.7] [--seeds 1 2 3] [--parallel 3]   # docs/whatif.md's table

The default run generates a PAI-shaped trace of environments/prod.yaml and replays it on base and head
(both the bundled prod fleet: the work a review of any change does), through the product's own servers
and harness; goal: at most 10 minutes of wall time for both. With --claim it replays base, static and
pooled at each offered load and seed and prints, per load, the median and range over seeds of each
side's allocation utilisation, p99 wait and backlog: the figures docs/whatif.md quotes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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


def base_side(path: Path = PROD) -> sides.ReplaySide:
    return sides.side_of(sides.SideKind.BASE, path.stem, spec.load_environment(path), render.render(path, revision="bench").clusters)


def speed(args: argparse.Namespace) -> int:
    env = spec.load_environment(PROD)
    work = trace.generate(env, args.days, args.jobs, args.load, args.seed, args.cluster)
    base = base_side()
    head = sides.side_of(sides.SideKind.HEAD, "prod", base.env, base.clusters)
    began, cpu = time.monotonic(), cpu_seconds()
    figures = run.replay([base, head], work, run.ReplayOptions(root=ROOT, keep=args.keep))
    wall = time.monotonic() - began
    for f in figures:
        print(f"  {f.side}: {f.jobs} jobs, {f.finished} finished, utilisation {f.total_utilisation:.1%} of offered {f.offered_load:.1%}, "
              f"p99 wait {f.waits_all.p99:.2f} h, {sum(p.count for p in f.preemptions)} preemptions")
    print(f"  wall {wall:.0f} s, this process's CPU {cpu_seconds() - cpu:.0f} s (the servers' is not counted)")
    return report(f"whatif: {args.jobs} jobs over {args.days} days, base and head",
                  [Goal("replay of base and head, wall seconds", wall, GOAL_SECONDS, " s")])


def claim_run(env_name: str, days: int, jobs: int, load: float, seed: int, clusters: list[str]) -> list[tuple[str, float, float, int, float]]:
    """One (load, seed) of the claim: (side, utilisation, p99 wait h, backlog jobs, offered load) of base, static, pooled.

    Each run starts servers of its own, so runs go side by side: the replay waits on Kueue's wall seconds, not the CPU."""
    path = ENVIRONMENTS / f"{env_name}.yaml"
    base = base_side(path)
    chosen = [base, sides.derived(base, sides.SideKind.STATIC), sides.derived(base, sides.SideKind.POOLED)]
    work = trace.generate(base.env, days, jobs, load, seed, clusters)
    return [(f.side, f.total_utilisation, f.waits_all.p99, f.backlog_jobs, f.offered_load) for f in run.replay(chosen, work, run.ReplayOptions(root=ROOT))]


def claim(args: argparse.Namespace) -> int:
    runs = [(load, seed) for load in args.loads for seed in args.seeds]
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.parallel) as pool:
        done = dict(zip(runs, pool.map(claim_run, *zip(*((args.env, args.days, args.jobs, load, seed, args.cluster) for load, seed in runs)))))
    print(f"{args.env}, {args.jobs} jobs over {args.days} days{' on ' + ', '.join(args.cluster) if args.cluster else ''}, "
          f"seeds {' '.join(map(str, args.seeds))}: median [range] over seeds")
    print("| offered load (asked / measured) | side | allocation utilisation | p99 wait | backlog at the end |\n|---|---|---|---|---|")
    for load in args.loads:
        rows = [row for seed in args.seeds for row in done[(load, seed)]]
        offered = statistics.median(row[4] for row in rows)
        for n, side in enumerate(dict.fromkeys(row[0] for row in rows)):
            _, util, p99, backlog, _ = zip(*(row for row in rows if row[0] == side))
            print(f"| {f'{load} / {offered:.2f}' if n == 0 else ''} | {side} | {statistics.median(util):.1%} [{min(util):.1%}-{max(util):.1%}] | "
                  f"{statistics.median(p99):.1f} h [{min(p99):.1f}-{max(p99):.1f}] | {statistics.median(backlog):.0f} [{min(backlog)}-{max(backlog)}] |",
                  flush=True)
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
    parser.add_argument("--parallel", type=int, default=1, help="with --claim: (load, seed) runs side by side, each on servers of its own")
    args = parser.parse_args()
    try:
        return claim(args) if args.claim else speed(args)
    except WhatifError as exc:
        print(f"whatif_bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
