"""Revisions out of Git for a plan: resolving a name, the default base, a bounded read-only copy of a
tree (`checkout`), and whose program a revision holds (`survey`: byte for byte the one running here,
compared by Git's object ids, or another that `fleetops.isolate` confines).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from fleetops import git, isolate
from fleetops.errors import PlanError, Problem

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


# What a render of a revision runs and reads (the folders `isolate` lets its confined render read):
# every file under them, code or data (modules/dashboards.json, fleetops/crds/), says whose program it is.
RENDERED = isolate.PROGRAM

# The program: everything a deploy runs or reads as code or data, beside the fleet's own data
# (environments/, the policies' rules and data): the render's folders and the stacks' configuration
# Pulumi reads (stacks/); the Pulumi project (Pulumi.yaml); what `make setup` runs to install it
# (Makefile, setup.py, setup.cfg, pyproject.toml, MANIFEST.in, requirements.txt); the policy pack
# `pulumi preview/up --policy-pack` runs (policies/pack/); the reconciler's image (image/); and the CI
# that runs them (.ci/, .github/, .gitlab/, .gitlab-ci.yml). The one definition every caller uses:
# plan's `program_files_changed`, the approvals' protected paths, the CI examples' path filters.
# A folder ends in "/", any other name is a file at the top; as Git pathspecs they name the same files.
PROGRAM = (*(f"{folder}/" for folder in RENDERED), "policies/pack/", "image/", ".ci/", ".github/", ".gitlab/",
           "Pulumi.yaml", "Makefile", "setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "requirements.txt", ".gitlab-ci.yml")

HERE = Path(__file__).resolve().parent.parent  # the program running now


def in_program(path: str) -> bool:
    """Whether the file at `path` (relative to the repository's top) is part of the program."""
    return any(path.startswith(name) if name.endswith("/") else path == name for name in PROGRAM)


# Git's modes of what is not a regular file: a link (`git archive` leaves it out of a plan's copy, a
# deploy's checkout follows it) and a submodule (another repository's commit, absent from both).
_NOT_A_FILE = {"120000": "a symbolic link", "160000": "a submodule"}


def _not_a_file(path: str, what: str, rev: str) -> PlanError:
    side = "the working tree" if rev == WORKTREE else f"revision {rev[:12]}"
    return PlanError(problems=[Problem(f"is {what} at {side}, not a file: refused, since what a plan reads of it is not what a "
                                       "deploy reads (fail closed)", path)])


def _same_code(tree: Path) -> bool:
    """Whether every file of the rendered program in a working tree is byte for byte the one running
    here: the same Git object ids, as `survey` compares a commit's. A link among them is refused."""
    running = _object_ids("sha1")
    names = rendered_files(tree)
    if link := next((name for name in names if (tree / name).is_symlink()), None):
        raise _not_a_file(link, "a symbolic link", WORKTREE)
    return set(names) == running.keys() and all(_object_id(tree / f, "sha1") == running[f] for f in names)


@dataclass(frozen=True)
class Revision:
    """What a plan needs to know of a revision before taking anything out of Git."""

    runs_here: bool  # its program is byte for byte the code running here: it renders in this process
    needs: list[str] | None  # the files and folders to take out of Git: None for the working tree


def survey(repo: Path, rev: str, env_rel: str) -> Revision:
    """A revision whose program runs here needs only its environment file and policies out of Git,
    another its program too; a commit's program is compared by Git's object ids (`ls-tree`), every file
    of it, without taking it out. An environment path or a program file that is a link, a folder or a
    submodule is refused (PlanError)."""
    if rev == WORKTREE:
        _worktree_environment(repo, env_rel)
        return Revision(runs_here=_same_code(repo), needs=None)
    entries = {}
    for entry in filter(None, git.run(repo, "ls-tree", "-r", "-z", rev, "--", *RENDERED, "policies", env_rel).split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, oid = meta.split()
        if mode in _NOT_A_FILE and (path == env_rel or path.split("/", 1)[0] in RENDERED):
            raise _not_a_file(path, _NOT_A_FILE[mode], rev)
        if path.startswith(env_rel + "/"):
            raise _not_a_file(env_rel, "a folder", rev)
        entries[path] = oid
    code = {path: oid for path, oid in entries.items() if path.split("/", 1)[0] in RENDERED}
    algorithm = "sha256" if any(len(oid) == 64 for oid in code.values()) else "sha1"
    data = [p for p in entries if p == env_rel or p.startswith("policies/")]
    if not code or code != _object_ids(algorithm):
        return Revision(runs_here=False, needs=sorted({p.split("/", 1)[0] for p in code}) + data)
    return Revision(runs_here=True, needs=data)


def _worktree_environment(repo: Path, env_rel: str) -> None:
    try:
        mode = (repo / env_rel).lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise _not_a_file(env_rel, "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "no regular file",
                          WORKTREE)


@functools.cache
def _object_ids(algorithm: str) -> dict[str, str]:
    """Git's object id of each file of the program running here (read once per process)."""
    return {name: _object_id(HERE / name, algorithm) for name in rendered_files(HERE)}


def rendered_files(root: Path) -> list[str]:
    """The files of the rendered program in a folder (a link to a folder named as a file), but what
    Python and the build leave beside them and the folder's .gitignore ignores (`__pycache__`, the
    compiled YAML writer): Git holds none of them."""
    ignored = _ignored(root)
    names = []
    for folder in RENDERED:
        for here, folders, files in os.walk(root / folder):
            links = [name for name in folders if os.path.islink(os.path.join(here, name))]
            folders[:] = [name for name in folders if name != "__pycache__" and name not in links]
            names += [Path(here, name).relative_to(root).as_posix() for name in (*files, *links)]
    return [name for name in names if not ignored.match_file(name)]


def _ignored(root: Path) -> pathspec.GitIgnoreSpec:
    try:
        return pathspec.GitIgnoreSpec.from_lines((root / ".gitignore").read_text(errors="replace").splitlines())
    except OSError:
        return pathspec.GitIgnoreSpec.from_lines([])


def _object_id(path: Path, algorithm: str) -> str:
    data = path.read_bytes()
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()


def stamp(repo: Path, rev: str) -> str:
    return git.revision(repo) if rev == WORKTREE else rev
