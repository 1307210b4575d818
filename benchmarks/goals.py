"""Each benchmark's goals, printed beside its figures; a missed goal makes the benchmark exit 1."""

from __future__ import annotations

import compileall
import math
import resource
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Goal:
    name: str
    measured: float
    limit: float
    unit: str = ""
    at_least: bool = False  # the figure must be >= limit (a rate), else <= limit (a time, a ratio)

    @property
    def met(self) -> bool:
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit

    def line(self) -> str:
        sign = ">=" if self.at_least else "<="
        return f"  {'met   ' if self.met else 'MISSED'}  {self.name:<52} {self.measured:>10.3g}{self.unit:<4} goal {sign} {self.limit:g}{self.unit}"


def report(title: str, goals: list[Goal]) -> int:
    print(title)
    for goal in goals:
        print(goal.line())
    return 0 if all(g.met for g in goals) else 1


def exponent(sizes: list[float], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) over log(size): 1 is linear, 2 quadratic."""
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def cpu_seconds() -> float:
    """User and system time of this process and its finished children: on a shared machine the wall
    time measures the neighbours too (benchmarks/README.md, "What pays"), printed beside it."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def compile_sources() -> None:
    """Byte-compile fleetops's own code, as installing its wheel does. An editable install is compiled
    at each start instead where PYTHONDONTWRITEBYTECODE is set (this machine's environment): 10 ms of
    every command's start, and more in each process a benchmark starts, that no installed copy pays."""
    for package in ("fleetops", "modules", "stacks"):
        compileall.compile_dir(ROOT / package, quiet=1)
