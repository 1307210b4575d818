"""Use and statements for the fleet API: `fleetops statements`'s own, read once per revision and period.

A period's statements are made for every tenant at once (metering's fixed few range queries, never a
query set per tenant or per request) and kept `ttl` seconds per (revision, period): many clients asking
for many tenants cost Prometheus one statements' worth of queries per period and ttl. Failures are not
kept: the next request asks again, and says so as 503, never as zero use.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetops import spec
from fleetops.metering.statements import Period, Statement, Statements, build
from fleetops.prometheus import Prometheus

TTL_SECONDS = 60.0  # the month to date moves with the minutes recorded; a minute old is fresh enough to bill by
PERIODS_KEPT = 24  # (revision, period) pairs held at once: two years of months, whatever clients ask for


def this_month(now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> str:
    """The current calendar month in UTC, YYYY-MM: its statements are the month to date."""
    return f"{now():%Y-%m}"


@dataclass
class Meter:
    """Every tenant's statements for a period, from `prometheus`, kept `ttl` seconds per (revision, period)."""

    prometheus: Prometheus
    ttl: float = TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _kept: OrderedDict[tuple[str, str], tuple[float, Statements]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def statements(self, revision: str, env: spec.Environment, period: Period) -> Statements:
        """Raises PrometheusError (unreachable, a bad answer) or StatementError (no metering in the period)."""
        key = (revision, period.name)
        # One lock for all: requests for a period being read wait for it instead of reading it again.
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and self.clock() - kept[0] < self.ttl:
                return kept[1]
            made = build(env, self.prometheus, period)
            self._kept[key] = (self.clock(), made)
            self._kept.move_to_end(key)
            while len(self._kept) > PERIODS_KEPT:
                self._kept.popitem(last=False)
            return made

    def statement(self, revision: str, env: spec.Environment, period: Period, tenant: str) -> Statement:
        return next(s for s in self.statements(revision, env, period).statements if s.tenant == tenant)
