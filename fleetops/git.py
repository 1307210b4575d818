"""The Git facts fleetops needs: which revision a tree is at, and files of another revision."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from fleetops.errors import GitError

UNVERSIONED = "unversioned"


def run(repo: str | Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """`env`: variables set for this command only, on top of this process's (credentials, never in argv)."""
    return Started(repo, *args, env=env)()


class Started:
    """A Git command started now, so that Git works while the caller does: calling it waits for the
    output; `close()` stops it if nobody will (the caller failed first). Names Git writes that are
    not UTF-8 come back as `os.fsdecode` would make them."""

    def __init__(self, repo: str | Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.args = args
        try:
            self.proc = subprocess.Popen(["git", "-C", str(repo), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, errors="surrogateescape", env={**os.environ, **env} if env else None)
        except FileNotFoundError:
            raise GitError("git is not installed") from None

    def __call__(self) -> str:
        out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            raise GitError(f"git {' '.join(self.args)}: {err.strip() or 'failed'}")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def revision(repo: str | Path) -> str:
    """The commit a working tree is at, with `-dirty` when tracked files differ from it."""
    try:
        sha = run(repo, "rev-parse", "HEAD").strip()
        dirty = bool(run(repo, "status", "--porcelain", "--untracked-files=no").strip())
    except GitError:
        return UNVERSIONED
    return f"{sha}-dirty" if dirty else sha
