"""`make bench`: every benchmark of the repository, one after another. Add new ones to BENCHMARKS."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import render_bench  # noqa: E402

BENCHMARKS: list[Callable[[list[str]], None]] = [render_bench.main]


def main() -> None:
    for bench in BENCHMARKS:
        bench(sys.argv[1:])


if __name__ == "__main__":
    main()
