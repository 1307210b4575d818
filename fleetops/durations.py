"""A duration as every option and setting writes it: a whole number and one unit, s (seconds), m (minutes),
h (hours), d (days) or w (weeks): 30s, 5m, 12h, 30d, 2w. It is Prometheus's duration syntax with one unit, so a
window is put into PromQL as written and reads the same in `--usage-window`, `--window`, `--interval`, `--refresh`,
`--deadline` and `--request-timeout`."""

from __future__ import annotations

import re
from dataclasses import dataclass

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SPOKEN = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}
_SYNTAX = re.compile(r"([1-9][0-9]{0,8})([" + "".join(UNITS) + r"])")  # at most 9 digits: a bounded number


@dataclass(frozen=True)
class Duration:
    count: int
    unit: str

    @property
    def text(self) -> str:
        return f"{self.count}{self.unit}"

    @property
    def seconds(self) -> int:
        return self.count * UNITS[self.unit]

    def spoken(self) -> str:
        """`30d` -> `30 days`."""
        return f"{self.count} {_SPOKEN[self.unit]}{'s' if self.count != 1 else ''}"


def parse(text: str) -> Duration:
    """`30d` -> a duration; anything else raises ValueError saying what a duration is."""
    match = _SYNTAX.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m, 12h, 30d or 2w (a whole number and one of {', '.join(UNITS)})")
    return Duration(int(match[1]), match[2])
