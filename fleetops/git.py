"""The Git facts fleetops needs: which revision a tree is at, and files of another revision."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

UNVERSIONED = "unversioned"


class GitError(Exception):
    pass


def run(repo: str | Path, *args: str) -> str:
    return start(repo, *args)()


def start(repo: str | Path, *args: str) -> Callable[[], str]:
    """`run`, started now: Git works while the caller does; calling the result waits for its output."""
    try:
        proc = subprocess.Popen(["git", "-C", str(repo), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise GitError("git is not installed") from None

    def output() -> str:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise GitError(f"git {' '.join(args)}: {err.strip() or 'failed'}")
        return out

    return output


def revision(repo: str | Path) -> str:
    """The commit a working tree is at, with `-dirty` when tracked files differ from it."""
    try:
        sha = run(repo, "rev-parse", "HEAD").strip()
        dirty = bool(run(repo, "status", "--porcelain", "--untracked-files=no").strip())
    except GitError:
        return UNVERSIONED
    return f"{sha}-dirty" if dirty else sha
