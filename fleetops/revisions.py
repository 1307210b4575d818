"""Revisions out of Git for a plan: resolving a name, the default base, a bounded read-only copy of a
tree (`checkout`), and whose program a revision holds (`survey`: byte for byte the one running here,
compared by Git's object ids, or another that `fleetops.isolate` confines).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetops import git, isolate
from fleetops.errors import PlanError

WORKTREE = "WORKTREE"
# What may be taken out of Git for one side: more is refused (a 600 MB blob must not become 1.2 GB of plan).
MAX_TREE_BYTES = 256 << 20


def resolve(repo: Path, rev: str) -> str:
    if rev == WORKTREE:
        return WORKTREE
    try:
        return git.run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except git.GitError:
        raise PlanError(f"{repo}: unknown revision {rev!r}") from None


def default_base(repo: Path, head: str = "HEAD") -> str:
    """The merge-base of the head (HEAD for the working tree) with the default branch (origin's HEAD, else main or master)."""
    candidates = []
    with contextlib.suppress(git.GitError):
        candidates.append(git.run(repo, "symbolic-ref", "--short", "refs/remotes/origin/HEAD").strip())
    candidates += ["origin/main", "main", "origin/master", "master"]
    for branch in candidates:
        try:
            return git.run(repo, "merge-base", head, branch).strip()
        except git.GitError:
            continue
    raise PlanError(f"{repo}: no default branch to compare with; pass --base")


def _files_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    # Links are skipped, not followed: a revision's tree is data, and nothing fleetops renders is a link.
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


@contextlib.contextmanager
def checkout(repo: Path, rev: str, only: Sequence[str] | None = None, limit: int = MAX_TREE_BYTES) -> Iterator[Path]:
    """A read-only copy of the tree at `rev`, or of its files and folders `only`, in a temporary
    folder removed afterwards; streamed out of Git, and refused past `limit` bytes."""
    if rev == WORKTREE:
        yield repo
        return
    with tempfile.TemporaryDirectory(prefix="fleetops-plan-") as tmp:
        if only is None or only:
            _extract(repo, rev, list(only or []), Path(tmp), limit)
        yield Path(tmp)


def _extract(repo: Path, rev: str, only: list[str], dest: Path, limit: int) -> None:
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", rev, "--", *only],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    taken = 0
    try:
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            for member in tar:
                taken += member.size
                if taken > limit:
                    raise PlanError(f"{repo}: revision {rev[:12]} holds more than {limit >> 20} MiB in "
                                    f"{', '.join(only) or 'its tree'}: refused (a plan's memory and disk stay bounded)")
                tar.extract(member, dest, filter=_files_only)
        archive.stdout.read()  # type: ignore[union-attr]  # the archive's end padding
        archive.wait()
    except BaseException as exc:
        archive.kill()
        archive.wait()
        if isinstance(exc, tarfile.TarError):
            raise PlanError(f"{repo}: cannot read revision {rev}: {_stderr(archive) or exc}") from None
        raise
    if archive.returncode != 0:
        raise PlanError(f"{repo}: cannot read revision {rev}: {_stderr(archive) or 'git archive failed'}")


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    return proc.stderr.read(4096).decode(errors="replace").strip() if proc.stderr else ""  # type: ignore[union-attr]


CODE = isolate.PROGRAM
HERE = Path(__file__).resolve().parent.parent  # the program running now


def _same_code(tree: Path) -> bool:
    """Whether every Python file of the program is byte for byte the one running here: the same Git
    object ids, as `survey` compares a commit's."""
    running = _object_ids("sha1")
    names = _sources(tree)
    return set(names) == running.keys() and all(_object_id(tree / f, "sha1") == running[f] for f in names)


@dataclass(frozen=True)
class Revision:
    """What a plan needs to know of a revision before taking anything out of Git."""

    runs_here: bool  # its program is byte for byte the code running here: it renders in this process
    needs: list[str] | None  # the files and folders to take out of Git: None for the working tree


def survey(repo: Path, rev: str, env_rel: str) -> Revision:
    """A revision whose program runs here needs only its environment file and policies out of Git,
    another its program too; a commit's program is compared by Git's object ids (`ls-tree`), without
    taking it out."""
    if rev == WORKTREE:
        return Revision(runs_here=_same_code(repo), needs=None)
    entries = {}
    for entry in filter(None, git.run(repo, "ls-tree", "-r", "-z", rev, "--", *CODE, "policies", env_rel).split("\0")):
        meta, path = entry.split("\t", 1)
        entries[path] = meta.split()[2]
    code = {path: oid for path, oid in entries.items() if path.endswith(".py") and path.split("/", 1)[0] in CODE}
    algorithm = "sha256" if any(len(oid) == 64 for oid in code.values()) else "sha1"
    data = [p for p in entries if p == env_rel or p.startswith("policies/")]
    if not code or code != _object_ids(algorithm):
        return Revision(runs_here=False, needs=sorted({p.split("/", 1)[0] for p in code}) + data)
    return Revision(runs_here=True, needs=data)


@functools.cache
def _object_ids(algorithm: str) -> dict[str, str]:
    """Git's object id of each Python file of the program running here (read once per process)."""
    return {name: _object_id(HERE / name, algorithm) for name in _sources(HERE)}


def _sources(root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for folder in CODE for path in (root / folder).rglob("*.py")]


def _object_id(path: Path, algorithm: str) -> str:
    data = path.read_bytes()
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()


def stamp(repo: Path, rev: str) -> str:
    return git.revision(repo) if rev == WORKTREE else rev
