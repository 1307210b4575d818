"""`make bench`: every benchmark of the repository, each in its own process (its memory its own).

Add new ones to BENCHMARKS; each prints its figures beside its goals and exits 1 when it misses one,
so `make bench` exits 1 when any goal is missed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [["cli_bench.py"], ["render_bench.py"], ["scale_bench.py"], ["plan_bench.py"], ["policy_bench.py"], ["reconcile_bench.py"],
              ["reconcile_bench.py", "--scales", "0.5", "1", "2", "4"], ["api_bench.py"],
              ["whatif_bench.py"]]


def main() -> int:
    failed = []
    for name, *args in BENCHMARKS:
        title = " ".join([name, *args])
        print(f"== {title}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name), *args], check=False).returncode != 0:
            failed.append(title)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
