"""How spec loading, render and policy evaluation grow with the fleet: each must stay linear.

    .venv/bin/python benchmarks/scale_bench.py [--scales 0.5 1 2 4] [--runs 5]

For each scale of the generated environment (`generate.py`), in a fresh process: load and validate
the environment, render it (direct, as plan/check/reconcile do), evaluate the policies on it, each
timed after a first untimed run; the median of `--runs` such processes, the scales taking turns (a
machine whose speed drifts then slows every scale alike, not the last ones more). The exponent is the least-squares slope of log(time) over log(size), size
being the environment file's bytes for loading and the rendered objects for render and policy.
Goal: every exponent <= 1.1 from 0.5x to 4x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generate import synthetic_yaml  # noqa: E402
from benchmarks.goals import Goal, compile_sources, exponent, report  # noqa: E402

GOAL_EXPONENT = 1.1


def _timed(fn):  # after a first run: its page faults and caches are not what grows with the fleet
    fn()
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def measure(env_file: Path) -> dict[str, float]:
    from fleetops import memory, policy, render, spec

    memory.for_a_command()  # as `fleetops` runs every command (cli.main)

    load, env = _timed(lambda: spec.load_environment(env_file))
    rendered, state = _timed(lambda: render.render(env_file, revision="bench"))
    evaluate, _ = _timed(lambda: policy.evaluate(env, state))
    return {"bytes": env_file.stat().st_size, "objects": state.object_count, "load": load, "render": rendered, "policy": evaluate}


def main(argv: list[str]) -> int:
    if argv[:1] == ["measure"]:
        print(json.dumps(measure(Path(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    compile_sources()
    runs: dict[float, list[dict[str, float]]] = {scale: [] for scale in args.scales}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for scale in args.scales:
            files[scale] = Path(tmp) / str(scale) / "large.yaml"  # the file is named after its environment
            files[scale].parent.mkdir()
            files[scale].write_text(synthetic_yaml(scale))
        for _ in range(args.runs):
            for scale in args.scales:
                done = subprocess.run([sys.executable, __file__, "measure", str(files[scale])], capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"scale {scale}: {done.stderr.strip().splitlines()[-1]}")
                runs[scale].append(json.loads(done.stdout.splitlines()[-1]))
    rows = []
    for scale, measured in runs.items():
        row = {key: statistics.median(m[key] for m in measured) for key in measured[0]}
        rows.append(row)
        print(f"scale {scale:>4}: {row['bytes'] / 1e6:5.1f} MB, {row['objects']:>6,.0f} objects: load {row['load']:6.2f} s, "
              f"render {row['render']:6.2f} s, policy {row['policy']:6.2f} s")
    span = f"{args.scales[0]:g}x..{args.scales[-1]:g}x"
    goals = [
        Goal(f"spec load exponent over file size ({span})", exponent([r["bytes"] for r in rows], [r["load"] for r in rows]), GOAL_EXPONENT),
        Goal(f"render exponent over objects ({span})", exponent([r["objects"] for r in rows], [r["render"] for r in rows]), GOAL_EXPONENT),
        Goal(f"policy evaluation exponent over objects ({span})", exponent([r["objects"] for r in rows], [r["policy"] for r in rows]), GOAL_EXPONENT),
    ]
    return report("scale_bench: growth with the fleet's size", goals)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
