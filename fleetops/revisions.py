"""Revisions out of Git for a plan: resolving a name, the default base, a bounded read-only copy of a
tree (`checkout`: its blobs byte for byte), what the program is (`PROGRAM`: everything a deploy runs
or reads), and whose program a revision holds (`survey`: every file of it byte for byte the one
running here, compared by Git's object ids, or another that `fleetops.isolate` confines).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pathspec

from fleetops import git, isolate, spec
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


def environments(repo: Path, rev: str) -> set[str]:
    """The names of the environment files at `rev` (in the working tree for WORKTREE)."""
    if rev == WORKTREE:
        return {p.stem for p in (repo / spec.ENVIRONMENTS).glob("*.yaml")}
    folder = PurePosixPath(spec.ENVIRONMENTS.as_posix())
    paths = (PurePosixPath(entry.split("\t", 1)[1]) for entry in filter(None, _listing(repo, rev, [f"{folder}/"]).split("\0")))
    return {p.stem for p in paths if p.parent == folder and p.suffix == ".yaml"}


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


# Read from Git this much at a time: a blob is streamed to its file, never held whole.
_CHUNK = 1 << 20


def _extract(repo: Path, rev: str, only: list[str], dest: Path, limit: int) -> None:
    """Each regular file of `only` at `rev`, byte for byte its blob: no `.gitattributes` of the revision
    applies (`git archive` honours the revision's own `export-ignore` and `export-subst`, so a head could
    leave its environment file out of the plan's copy, or rewrite it); links and submodules are left out
    (`survey` refuses those a plan reads)."""
    _write_blobs(repo, rev, _regular_files(repo, rev, only, limit), dest)


def _regular_files(repo: Path, rev: str, only: list[str], limit: int) -> list[tuple[str, str, str]]:
    """Path, mode and object id of each regular file of `only` at `rev`: their sizes summed from Git's
    listing and refused past `limit` before anything is read."""
    files = []
    taken = 0
    for entry in filter(None, _listing(repo, rev, only).split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, oid, size = meta.split()
        if kind != "blob" or mode in _NOT_A_FILE:
            continue
        taken += int(size)
        if taken > limit:
            raise PlanError(f"{repo}: revision {rev[:12]} holds more than {limit >> 20} MiB in "
                            f"{', '.join(only) or 'its tree'}: refused (a plan's memory and disk stay bounded)")
        if path.startswith("/") or {"", ".", "..", ".git"} & set(path.split("/")):
            raise PlanError(f"{repo}: revision {rev[:12]} names a file {path!r} outside its tree: refused")
        files.append((path, mode, oid))
    return files


def _write_blobs(repo: Path, rev: str, files: list[tuple[str, str, str]], dest: Path) -> None:
    """The blobs of `files` into `dest`, streamed from one `git cat-file --batch`, asked one at a time
    (it answers each object as it is asked for it, so neither side waits on a full pipe)."""
    blobs = subprocess.Popen(["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    assert blobs.stdin is not None and blobs.stdout is not None
    try:
        for path, mode, oid in files:
            blobs.stdin.write(f"{oid}\n".encode())
            blobs.stdin.flush()
            header = blobs.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise PlanError(f"{repo}: cannot read {path} of revision {rev[:12]}: {b' '.join(header).decode(errors='replace') or 'no answer'}")
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                left = int(header[2])
                while left:
                    chunk = blobs.stdout.read(min(left, _CHUNK))
                    if not chunk:
                        raise PlanError(f"{repo}: cannot read {path} of revision {rev[:12]}: Git's answer was cut short")
                    out.write(chunk)
                    left -= len(chunk)
            if mode == "100755":
                target.chmod(0o755)
            blobs.stdout.read(1)  # the newline after each object
    finally:
        blobs.stdin.close()
        blobs.kill()
        blobs.wait()


def _listing(repo: Path, rev: str, paths: Sequence[str]) -> str:
    """`git ls-tree -r -l`: each entry's mode, type, object id and size (`-` for a submodule), then its path."""
    try:
        return git.run(repo, "ls-tree", "-r", "-z", "-l", rev, "--", *paths)
    except git.GitError as exc:
        raise PlanError(f"{repo}: cannot read revision {rev}: {exc}") from None


# What a render of a revision runs and reads (the folders `isolate` lets its confined render read):
# every file under them, code or data (modules/dashboards.json, fleetops/crds/), says whose program it is.
RENDERED = isolate.PROGRAM

# The program: everything a deploy runs or reads as code or data, beside the fleet's own data
# (environments/, the policies' rules and data): the render's folders and the stacks' configuration
# Pulumi reads (stacks/); the Pulumi project (Pulumi.yaml); what `make setup` runs to install it
# (Makefile, setup.py, setup.cfg, pyproject.toml, MANIFEST.in, requirements.txt); the policy pack
# `pulumi preview/up --policy-pack` runs (policies/pack/); the reconciler's image (image/); the CI
# that runs them (.ci/, .github/, .gitlab/, .gitlab-ci.yml); and every .gitattributes, which says what
# a deploy's checkout makes of each file (line ends, encodings, filters). The one definition every
# caller uses: plan's `program_files_changed`, the approvals' protected paths, the CI examples' path
# filters. A name ending in "/" is a folder at the top, one starting with "**/" a file of that name in
# any folder, any other a file at the top.
PROGRAM = (*(f"{folder}/" for folder in RENDERED), "policies/pack/", "image/", ".ci/", ".github/", ".gitlab/",
           "Pulumi.yaml", "Makefile", "setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "requirements.txt", ".gitlab-ci.yml",
           "**/.gitattributes")
# The same as Git's pathspecs (`git diff -- ...`).
PROGRAM_PATHSPECS = tuple(f":(glob){name}" if name.startswith("**/") else f":(literal){name}" for name in PROGRAM)

HERE = Path(__file__).resolve().parent.parent  # the program running now


def in_program(path: str) -> bool:
    """Whether the file at `path` (relative to the repository's top) is part of the program."""
    return any(_names(name, path) for name in PROGRAM)


def _names(name: str, path: str) -> bool:
    """Whether a name of PROGRAM names the file at `path`."""
    if name.endswith("/"):
        return path.startswith(name)
    if name.startswith("**/"):
        return path == name[3:] or path.endswith(name[2:])
    return path == name


# Git's modes of what is not a regular file: a link (left out of a plan's copy, followed by a
# deploy's checkout) and a submodule (another repository's commit, absent from both).
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
    for entry in filter(None, _listing(repo, rev, [*RENDERED, "policies", env_rel]).split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, oid, _ = meta.split()
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
