"""Bulk building of acyclic data without Python's cycle collector.

Loading an environment, building its manifests and the policy input create hundreds of thousands
of dicts and lists that form trees, never cycles. Each generation-0 collection walks them all
again as they survive, so with the collector on, the work grew faster than the fleet (load and
render exponents ~1.2 from 0.5x to 4x the generated fleet; ~1.0 without it, benchmarks/scale_bench.py).
Reference counting still frees everything; the collector is only paused, never lost.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def acyclic() -> Iterator[None]:
    """Pause the cycle collector while building tree-shaped data (nests; restores the caller's state)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
