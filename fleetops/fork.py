"""Work handed to a fork of this process, while this process goes on.

A fork starts in milliseconds with everything this process has built (no interpreter start, no
imports, no copy of the data: pages are shared until written), which is what lets plan render its
base and judge its head beside its own work, and render write its files beside rendering. Without
fork (not Linux or macOS), callers do the same work in this process, one step after the other.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

FORK = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


class Forked:
    """`target(reply, *args)` run in a fork; each `reply(value)` reaches `recv()` in order.

    A failure reaches the caller as one line, never a traceback: an `error` raised by the target
    as its own message, anything else as "name: Type: message", and a fork that dies without an
    answer as such (fail closed). `close()` (or leaving the `with`) kills a fork still owing an answer.
    """

    def __init__(self, name: str, error: type[Exception], target: Callable[..., None], *args: Any) -> None:
        assert FORK is not None, "callers check fork.FORK first"
        self.name, self.error = name, error
        self.conn, child = FORK.Pipe()
        self.proc = FORK.Process(target=_serve, args=(child, name, error, target, args), daemon=True)
        self.proc.start()
        child.close()
        self.pending = True

    def recv(self) -> Any:
        try:
            status, answer = self.conn.recv()
        except EOFError:
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

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _serve(conn: Any, name: str, error: type[Exception], target: Callable[..., None], args: tuple[Any, ...]) -> None:
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
