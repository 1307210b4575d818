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

import gc


def for_a_command() -> None:
    """The cycle collector off for the rest of this process (a command, which ends)."""
    gc.disable()


def release() -> None:
    """Free the cycles that have become garbage since the last call (the reconcile loop calls it
    before each pass, its collector being off as every command's)."""
    gc.collect()
