"""The process's memory settings, made once by the CLI's entry point (`cli.main`), never by library code.

A fleetops command loads an environment, builds its manifests and the policy input: hundreds of
thousands of dicts and lists that form trees, never cycles. With the cycle collector on, each
young collection walks them again as they survive: render of the generated fleet took 0.92 s of
CPU with it, 0.50 s without (load 0.41 s against 0.18 s; benchmarks/README.md, "What pays").
So a command runs with the collector off (`for_a_command`): reference counting still frees
everything that is not a cycle, and a command ends. The reconcile loop, which does not end,
collects once per pass (`release`). Library code (the Pulumi program, the policy pack, tests)
runs with Python's defaults.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator


def for_a_command() -> None:
    """The cycle collector off for the rest of this process (a command, which ends)."""
    gc.disable()


def release() -> None:
    """Free the cycles that have become garbage since the last call (the reconcile loop calls it
    before each pass, its collector being off as every command's)."""
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
    import ctypes  # here: every command imports this module for `for_a_command`

    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


_M_TRIM_THRESHOLD = -1  # glibc malloc.h
