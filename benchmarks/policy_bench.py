"""Policy evaluation speed on the synthetic large fleet, and how it grows with the input.

    .venv/bin/python benchmarks/policy_bench.py            # scales 0.1 and 1.0, 5 runs each
    .venv/bin/python benchmarks/policy_bench.py --runs 3 --scales 0.1 1.0

Measures `fleetops.policy.evaluate` (input build, JSON, engine, waivers) on an already rendered
state: rendering the large fleet takes far longer than judging it, so each scale is rendered once
per run of this script (cached in a temporary folder) and never timed. Goals: <= 1 s at scale 1
(~15,000 objects, 1,000 tenants) and near-linear growth (10x input -> at most 12x time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from generate import synthetic_environment  # noqa: E402
from goals import Goal, report  # noqa: E402

from fleetops import memory, policy, render, spec  # noqa: E402

GOAL_SECONDS = 1.0
GOAL_GROWTH = 12.0


def rendered(scale: float, cache: Path) -> tuple[spec.Environment, render.DesiredState]:
    (cache / str(scale)).mkdir(exist_ok=True)
    env_path = cache / str(scale) / "large.yaml"  # the file is named after its environment
    state_path = cache / f"state-{scale}.json"
    if not state_path.exists():
        env_path.write_text(yaml.safe_dump(synthetic_environment(scale), sort_keys=False))
        state = render.render(env_path, revision="bench")
        state_path.write_text(json.dumps({"environment": state.environment, "revision": state.revision, "clusters": state.clusters, "resources": state.resources}))
    return spec.load_environment(env_path), render.DesiredState(**json.loads(state_path.read_text()))


def measure(env: spec.Environment, state: render.DesiredState, runs: int) -> tuple[float, float, int]:
    """(median total seconds, median engine seconds, decisions) over `runs` evaluations after one warm-up."""
    policy.evaluate(env, state)
    totals, engine = [], []
    for _ in range(runs):
        started = time.perf_counter()
        verdict = policy.evaluate(env, state)
        totals.append(time.perf_counter() - started)
        engine.append(verdict.duration_seconds)
    return statistics.median(totals), statistics.median(engine), len(verdict.decisions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs=2, default=[0.1, 1.0], metavar=("SMALL", "LARGE"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cache", type=Path, help="Keep rendered states here (default: a temporary folder)")
    args = parser.parse_args()
    memory.for_a_command()  # as `fleetops` runs every command (cli.main)
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or Path(tmp)
        cache.mkdir(parents=True, exist_ok=True)
        rows = []
        for scale in args.scales:
            env, state = rendered(scale, cache)
            total, engine, decisions = measure(env, state, args.runs)
            rows.append((scale, state.object_count, len(env.tenants), total, engine, decisions))
            print(f"scale {scale:>4}: {state.object_count:>6} objects, {len(env.tenants):>5} tenants: "
                  f"evaluate {total:.3f} s (engine {engine:.3f} s), {decisions} decisions", flush=True)
    (_, small_n, _, small_t, _, _), (_, large_n, _, large_t, _, _) = rows
    return report(f"policy_bench: input x{large_n / small_n:.1f}", [
        Goal(f"evaluate at scale {args.scales[1]:g}", large_t, GOAL_SECONDS, "s"),
        Goal(f"time growth for x{large_n / small_n:.1f} input", large_t / small_t, GOAL_GROWTH * (large_n / small_n) / 10, "x"),
    ])


if __name__ == "__main__":
    sys.exit(main())
