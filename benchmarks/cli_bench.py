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

from benchmarks.goals import Goal, compile_sources, cpu_seconds, report  # noqa: E402

GOAL_SECONDS = 0.3
COMMAND = [sys.executable, "-m", "fleetops.cli", "validate", "--env", "dev"]


def once() -> tuple[float, float]:
    """Wall and CPU seconds of one process."""
    started, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run(COMMAND, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started, cpu_seconds() - cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    compile_sources()
    once()
    runs = [once() for _ in range(args.runs)]
    times = [wall for wall, _ in runs]
    print(f"cli_bench: fleetops validate --env dev: {', '.join(f'{t:.3f}' for t in times)} s; "
          f"CPU (user+sys) median {statistics.median(cpu for _, cpu in runs):.3f} s")
    return report("", [Goal(f"validate --env dev, median of {args.runs}", statistics.median(times), GOAL_SECONDS, "s")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
