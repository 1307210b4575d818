"""Bulk building of acyclic data without Python's cycle collector.

Loading an environment, building its manifests and the policy input create hundreds of thousands
of dicts and lists that form trees, never cycles. Each generation-0 collection walks them all
again as they survive, so with the collector on, the work grew faster than the fleet (load and
render exponents ~1.2 from 0.5x to 4x the generated fleet; ~1.0 without it, benchmarks/scale_bench.py).
Reference counting still frees everything; the collector is only paused, never lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def acyclic() -> Iterator[None]:
    """Pause the cycle collector while building tree-shaped data (nests; restores the caller's state).

    On leaving the outermost block, what is alive is set aside from the collector (`gc.freeze`)
    before it runs again: its first collection would otherwise walk every object just built, only
    to find no cycle (0.06 s after rendering the large fleet, 0.26 s at 4x: more per object as the
    heap grows). Long-running processes hand it back once per cycle of work (`release`).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()


def release() -> None:
    """Give the collector back what `acyclic` set aside and collect it, so that cycles among it that
    have since become garbage are freed (the reconcile loop calls it before each pass)."""
    gc.unfreeze()
    gc.collect()


@contextlib.contextmanager
def heap_kept() -> Iterator[None]:
    """Stop glibc from returning the top of the heap to the system after every large free, while
    inside the block; on leaving, its default (128 KiB) is back and the heap shrinks again.

    The embedded policy engine parses the policy input (13 MB of JSON for the large fleet) with many
    allocations that grow and shrink; glibc's default gave each shrink back and faulted it in again,
    0.2-0.5 s of system time per evaluation against 0.1 s of parsing. A no-op without glibc.
    """
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_TRIM_THRESHOLD, 512 << 20)
    try:
        yield
    finally:
        if mallopt is not None:
            mallopt(_M_TRIM_THRESHOLD, 128 << 10)


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


_M_TRIM_THRESHOLD = -1  # glibc malloc.h
