"""Progress and colour on a terminal, none of it in a pipe or a CI log."""

from __future__ import annotations

import os
import pty
import subprocess

from tests.command import fleetops_command
from tests.helpers import ROOT

ANSI = "\x1b["


def on_a_terminal(*args: str) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal, as a person at a shell does."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*fleetops_command(), *args], cwd=ROOT, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower side closed: the process ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_decisions_are_coloured_and_work_shows_a_spinner_on_a_terminal() -> None:
    text = on_a_terminal("check", "--env", "prod")
    assert "\x1b[33mwarn" in text and "\x1b[2mwaived" in text  # yellow warnings, dim waived decisions
    assert "judging prod" in text  # the spinner's line while the policies run


def test_nothing_of_it_in_a_pipe() -> None:
    done = subprocess.run([*fleetops_command(), "check", "--env", "prod"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert ANSI not in done.stdout and ANSI not in done.stderr
    assert "judging prod" not in done.stderr
