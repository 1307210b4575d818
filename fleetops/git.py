"""The Git facts fleetops needs: which revision a tree is at, and files of another revision."""

from __future__ import annotations

import subprocess
from pathlib import Path

UNVERSIONED = "unversioned"


class GitError(Exception):
    pass


def run(repo: str | Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip() or 'failed'}")
    return out.stdout


def revision(repo: str | Path) -> str:
    """The commit a working tree is at, with `-dirty` when tracked files differ from it."""
    try:
        sha = run(repo, "rev-parse", "HEAD").strip()
        dirty = bool(run(repo, "status", "--porcelain", "--untracked-files=no").strip())
    except GitError:
        return UNVERSIONED
    return f"{sha}-dirty" if dirty else sha
