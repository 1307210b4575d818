"""Use and statements for the fleet API: `fleetops statements`'s own, read once per revision and period.

A period's statements are made for every tenant at once (metering's fixed few range queries, never a
query set per tenant or per request) and kept `ttl` seconds per (revision, period): many clients asking
for many tenants cost Prometheus one statements' worth of queries per period and ttl. Failures are not
kept: the next request asks again, and says so as 503, never as zero use.

Prometheus is never asked on the request path. A period is read by a thread of its own (a daemon: a
stopped server does not wait for Prometheus), at most `READS_AT_ONCE` periods at a time; a request
waits for its period's reading at most the app's deadline and then answers 503, the reading going on
for the next request. The lock only guards the tables of what is kept and being read: it is never held
while Prometheus answers, so no route waits on another's metering.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from fleetops import spec
from fleetops.metering.statements import Period, Statements, build
from fleetops.prometheus import Prometheus

TTL_SECONDS = 60.0  # the month to date moves with the minutes recorded; a minute old is fresh enough to bill by
PERIODS_KEPT = 24  # (revision, period) pairs held at once: two years of months, whatever clients ask for
READS_AT_ONCE = 2  # periods read from Prometheus at the same time; a request for another is 503 until one ends


class MeteringBusy(Exception):
    """As many periods as READS_AT_ONCE are being read: another is not started."""


def this_month(now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> str:
    """The current calendar month in UTC, YYYY-MM: its statements are the month to date."""
    return f"{now():%Y-%m}"


@dataclass
class StatementCache:
    """Every tenant's statements for a period, from `prometheus`, kept `ttl` seconds per (revision, period)."""

    prometheus: Prometheus
    ttl: float = TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _kept: OrderedDict[tuple[str, str], tuple[float, Statements]] = field(default_factory=OrderedDict)
    _reading: dict[tuple[str, str], Future[Statements]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def statements(self, revision: str, env: spec.Environment, period: Period) -> Future[Statements]:
        """The period's statements, kept or being read (requests for a period being read share its reading).
        Raises MeteringBusy; the future raises PrometheusError or StatementError (no metering in the period)."""
        key = (revision, period.name)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and self.clock() - kept[0] < self.ttl:
                done: Future[Statements] = Future()
                done.set_result(kept[1])
                return done
            if (reading := self._reading.get(key)) is not None:
                return reading
            if len(self._reading) >= READS_AT_ONCE:
                raise MeteringBusy
            # A future of its own thread, not an executor's: an executor's threads are waited for at exit.
            reading = self._reading[key] = Future()
            reading.set_running_or_notify_cancel()  # a request that stops waiting cannot cancel it for the others
        threading.Thread(target=self._read, args=(key, env, period, reading), name=f"metering {period.name}", daemon=True).start()
        return reading

    def _read(self, key: tuple[str, str], env: spec.Environment, period: Period, reading: Future[Statements]) -> None:
        try:
            made = build(env, self.prometheus, period)
        except Exception as exc:  # said to every request waiting for it, and not kept
            with self._lock:
                del self._reading[key]
            reading.set_exception(exc)
            return
        with self._lock:
            del self._reading[key]
            self._kept[key] = (self.clock(), made)
            self._kept.move_to_end(key)
            while len(self._kept) > PERIODS_KEPT:
                self._kept.popitem(last=False)
        reading.set_result(made)
