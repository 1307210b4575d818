"""Start-up cost of the commands people run most: `fleetops validate --env dev` as a process.

    .venv/bin/python benchmarks/cli_bench.py [--runs 7]

Wall time of the whole process (interpreter start, imports, load and validate dev.yaml), median of
`--runs` after one warm-up. Goal: <= 0.3 s: validate imports neither the policy engine, JSON Schema,
nor Pulumi.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.goals import Goal, compile_sources, report  # noqa: E402

GOAL_SECONDS = 0.3
COMMAND = [sys.executable, "-m", "fleetops.cli", "validate", "--env", "dev"]


def once() -> float:
    started = time.perf_counter()
    subprocess.run(COMMAND, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    compile_sources()
    once()
    times = [once() for _ in range(args.runs)]
    print(f"cli_bench: fleetops validate --env dev: {', '.join(f'{t:.3f}' for t in times)} s")
    return report("", [Goal(f"validate --env dev, median of {args.runs}", statistics.median(times), GOAL_SECONDS, "s")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
