"""Work handed to a fork of this process, while this process goes on.

A fork starts in milliseconds with everything this process has built (no interpreter start, no
imports, no copy of the data: pages are shared until written), which is what lets plan render its
base and judge its head beside its own work. Where there is no fork (not Linux or macOS), or the
system refuses one (a process limit, no memory), `start` says so and callers do the same work in
this process, one step after the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import weakref
from collections.abc import Callable
from typing import Any

_CONTEXT = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
_LIVE: weakref.WeakSet[Forked] = weakref.WeakSet()  # whose reading ends a new fork must not keep open
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def start(name: str, error: type[Exception], target: Callable[..., None], *args: Any) -> Forked | None:
    """`target(reply, *args)` running in a fork, or None when no fork can be had: do the work here."""
    if _CONTEXT is None:
        return None
    try:
        return Forked(name, error, target, args)
    except OSError:  # EAGAIN (a process limit), ENOMEM: the same work, in this process
        return None


class Forked:
    """A fork's answers, in order: each `reply(value)` of the target reaches `recv()`.

    A failure reaches the caller as one line, never a traceback: an `error` raised by the target
    as its own message, anything else as "name: Type: message", and a fork that dies without an
    answer as such (fail closed). `close()` (or leaving the `with`) kills a fork still owing an
    answer; a fork also dies with this process, however it ends.
    """

    def __init__(self, name: str, error: type[Exception], target: Callable[..., None], args: tuple[Any, ...]) -> None:
        assert _CONTEXT is not None
        self.name, self.error = name, error
        self.conn, child = _CONTEXT.Pipe(duplex=False)
        self.proc = _CONTEXT.Process(target=_serve, args=(self.conn, child, name, error, target, args), daemon=True)
        try:
            self.proc.start()
        finally:
            child.close()
        self.pending = True
        _LIVE.add(self)

    def recv(self) -> Any:
        try:
            status, answer = self.conn.recv()
        except (EOFError, OSError):  # it died, before or in the middle of an answer
            self.proc.join()
            raise self.error(f"{self.name}: the process ended without an answer (exit {self.proc.exitcode})") from None
        if status == "error":
            raise self.error(answer)
        self.pending = status != "last"
        return answer

    def close(self) -> None:
        if self.pending:  # given up on: its answer would be read by no one
            self.proc.kill()
        self.pending = False
        self.conn.close()
        self.proc.join()
        _LIVE.discard(self)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _serve(reading: Any, conn: Any, name: str, error: type[Exception], target: Callable[..., None], args: tuple[Any, ...]) -> None:
    # Die with the parent (Linux), and hold no reading end of any pipe, ours or another fork's: a
    # parent killed without cleaning up (SIGKILL, the OOM killer) must not leave a fork blocked on
    # a pipe that only forks keep open.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler (clean up and exit) is the parent's: a fork just ends
    reading.close()
    for forked in list(_LIVE):
        forked.conn.close()
    # The caller may have stopped listening (it failed, or was interrupted): then nothing is left to
    # do, and nothing is printed.
    with contextlib.suppress(OSError, EOFError, KeyboardInterrupt):
        try:
            target(lambda value, last=False: conn.send(("last" if last else "more", value)), *args)
        except error as exc:
            conn.send(("error", str(exc)))
        except Exception as exc:  # noqa: BLE001 - one line for the caller to report
            conn.send(("error", f"{name}: {type(exc).__name__}: {exc}"))
    conn.close()
    # Out now: multiprocessing would flush this process's copy of stdout, whose lock a thread of
    # the parent (a progress spinner on a terminal) may have held at the moment of the fork.
    os._exit(0)
