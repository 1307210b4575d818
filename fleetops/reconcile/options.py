"""What one pass may do (write, prune, retry), and the clock it reads."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Options:
    prune: bool = False
    dry_run: bool = False  # say what a pass would write; write nothing
    detect_only: bool = False  # report drift; write nothing
    force_conflicts: bool = False
    namespace: str | None = None  # where the status ConfigMap and the Lease live; default: the spec's reconciler.namespace
    workers: int = 4  # clusters reconciled at once
    attempts: int = 5  # per API call, for retryable errors
    backoff: float = 0.5  # first retry delay in seconds; doubles, with jitter, up to backoff_max
    backoff_max: float = 30.0
    clock: Callable[[], dt.datetime] = utcnow
    sleep: Callable[[float], None] = time.sleep
    # A cluster's pass cost (its weight among shards): CPU seconds of the thread that worked on it. The waits on its API
    # server overlap in the worker pool, the CPU does not: it is what a replica runs out of, and other processes do not move it.
    timer: Callable[[], float] = time.thread_time

    @property
    def writes(self) -> bool:
        return not (self.dry_run or self.detect_only)

    @property
    def judges(self) -> bool:
        """The gate judges what a pass would write; a detect-only pass writes and plans nothing, it compares (as
        `pulumi refresh` runs no policy pack). `check` and `plan` judge a revision."""
        return not self.detect_only
