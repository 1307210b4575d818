"""The terminal every command prints to: standard output and standard error as rich consoles, and a spinner.

rich is imported on first use: `validate` and the other quick paths never import it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


class _Console:
    """A rich Console made on first use: `validate` and the other quick paths never import rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


out = _Console(soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 160)
err = _Console(stderr=True, soft_wrap=True, emoji=False)


def say(message: str) -> None:
    """One line to standard error, as written: no markup, no highlighting."""
    err.print(message, markup=False, highlight=False)


@contextlib.contextmanager
def progress(what: str) -> Iterator[None]:
    """A spinner on stderr while `what` runs, on a terminal only: pipes and CI logs get none of it."""
    if not err.is_terminal:
        yield
        return
    with err.status(what, spinner="dots"):
        yield
