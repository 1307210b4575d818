"""A revision's own program, rendered where it cannot reach the judge: the review's trust boundary.

`fleetops plan` judges a pull request with the code that runs it (in CI, the base revision's). A side
whose program differs from that code (a head that edits `modules/`, `fleetops/` or `stacks/`) is
still rendered by its own program, since that is what `pulumi up` would deploy once merged; but in a
process that:

- starts from an empty environment (no tokens: not `GITHUB_TOKEN`, not `FLEETOPS_OPA_TOKEN`, no
  kubeconfig path) and Python's isolated mode (`-I`: no `PYTHON*` variables, no user site);
- is confined by Landlock (Linux 5.13+, no privileges needed): it may read only its own tree and the
  Python installation, and write nothing anywhere, so it can neither read the runner's secrets nor
  rewrite the judge's code or anything a later CI step runs; TCP, abstract sockets and signals to
  other processes are refused where the kernel can (ABI 4 and 6), and where this process may create
  one (root, or unprivileged user namespaces), it gets a network namespace of its own with no
  interface up;
- runs under a seccomp filter (libseccomp) for what Landlock cannot refuse: it makes no socket of any
  family (a pathname UNIX socket such as a container runtime's, UDP, netlink: Landlock ABI 7 refuses
  none of them) and no io_uring (which opens and connects sockets without those calls), and it starts
  no process and no thread. So the render is one task, bounded as one unit by its process limits: no
  descendant can outlive it or hold its answer's pipe open past its wall limit, its memory (address
  space) and CPU bounds are the whole render's, not each fork's, and it holds one process id of the
  system's (threads at 32 KiB of stack each would take every free one within its memory bound). No
  cgroup is needed, so none has to be delegated to the judge on a runner;
- holds no capability, even when the judge runs as root (root gains none at its exec: SECBIT_NOROOT);
- is bounded in memory, CPU time, wall time, the size of its answer and of its error output (a file
  the kernel stops at its size: RLIMIT_FSIZE), and its answer in depth;
- answers as data: one JSON document, size-bounded, validated against `IsolatedAnswer` before anything reads
  it: its objects, or its problems, each with its file, line, column and field, as `errors.Problem`
  records here. Nothing it writes is ever run or unpickled here.

Where Landlock or the seccomp filter (kernel support, libseccomp) is not available the side is not
rendered at all: plan fails closed (exit 2).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict  # pydantic reads TypedDicts from here on Python 3.11

import landlockpy
import orjson
import pydantic
from landlockpy import AccessFS, AccessNet, Ruleset, Scope

from fleetops.errors import IsolationError, Problem


@dataclass(frozen=True)
class IsolationLimits:
    memory_bytes: int = 8 << 30  # address space: the large generated fleet renders in under 2 GiB
    cpu_seconds: int = 600
    wall_seconds: float = 900.0
    answer_bytes: int = 512 << 20  # its JSON: about 60 MiB for the large generated fleet (15,348 objects)
    problems: int = 200  # lines of a refusal kept, each cut at `problem_chars`
    problem_chars: int = 2000
    stderr_bytes: int = 1 << 20  # its error output, a file on the judge's disk
    # Nesting of the answer: the deepest object fleetops renders is 10 levels; the judge's readers take
    # 128 (the policy engine's JSON) and 255 (orjson, the schema validator) and fail past them.
    depth: int = 64


LIMITS = IsolationLimits()

# Runs in the revision's own tree with its own fleetops and modules (taken first on sys.path), and
# prints one JSON document. The code it imports is the revision's: nothing here trusts it.
_SNIPPET = """
import sys
sys.path.insert(0, sys.argv[1])
import orjson
from fleetops import render, spec

def problem(p):
    # The revision's errors.Problem gives its place as fields; a revision from before it, a line.
    fields = getattr(p, "fields", None)
    return fields() if callable(fields) else {"message": str(p)}

try:
    env = spec.load_environment(sys.argv[2], display=sys.argv[4])
    if hasattr(render, "render_environment"):
        state = render.render_environment(env, sys.argv[2], revision=sys.argv[3])
    else:  # a revision from before render took a loaded environment
        state = render.render(sys.argv[2], revision=sys.argv[3], display=sys.argv[4])
except (spec.SpecError, render.RenderError) as exc:
    answer = {"problems": [problem(p) for p in getattr(exc, "problems", None) or [exc]]}
else:
    answer = {"clusters": state.clusters}
sys.stdout.buffer.write(orjson.dumps(answer))
"""


@pydantic.with_config(pydantic.ConfigDict(extra="allow"))
class _ObjectMetadata(TypedDict, total=False):
    name: pydantic.StrictStr
    namespace: pydantic.StrictStr


@pydantic.with_config(pydantic.ConfigDict(extra="allow"))
class _Object(TypedDict):
    apiVersion: pydantic.StrictStr
    kind: pydantic.StrictStr
    metadata: _ObjectMetadata


_Place = Annotated[pydantic.StrictInt, pydantic.Field(ge=1)]


# Fields a later revision's problem adds are dropped, not refused: its message still reaches the reviewer.
@pydantic.with_config(pydantic.ConfigDict(extra="ignore"))
class _Problem(TypedDict):
    """One problem as errors.Problem.fields() writes it: the message, and where it is when known."""

    message: pydantic.StrictStr
    file: NotRequired[pydantic.StrictStr | None]
    line: NotRequired[_Place | None]
    column: NotRequired[_Place | None]
    path: NotRequired[pydantic.StrictStr | None]


@pydantic.with_config(pydantic.ConfigDict(extra="forbid"))
class IsolatedAnswer(TypedDict):
    """What an isolated render may say: its objects per cluster, or why its program refused the file."""

    clusters: NotRequired[dict[pydantic.StrictStr, list[_Object]]]
    problems: NotRequired[Annotated[list[_Problem], pydantic.Field(min_length=1)]]


_ANSWER = pydantic.TypeAdapter(IsolatedAnswer)


def available() -> bool:
    """Whether this system can confine a render: Landlock's filesystem rules and a seccomp filter."""
    try:
        _syscall_filter()
    except IsolationError:
        return False
    return landlockpy.abi_version() >= 1


@dataclass
class IsolatedRender:
    """An isolated render under way; `finish()` waits for it and returns its objects per cluster."""

    proc: subprocess.Popen[bytes]
    stderr: Any
    label: str
    limits: IsolationLimits

    def finish(self) -> dict[str, list[dict[str, Any]]]:
        answer = _answer(self._read(), self.label, self.limits.depth)
        if "problems" in answer:
            raise IsolationError(problems=[_problem(p, self.limits.problem_chars) for p in answer["problems"][: self.limits.problems]])
        clusters = answer.get("clusters")
        if clusters is None:
            raise IsolationError(f"{self.label}: the revision's program answered neither objects nor problems")
        for cluster, objects in clusters.items():
            for obj in objects:
                if not obj["metadata"].get("name"):
                    raise IsolationError(f"{self.label}: the revision's program rendered a {obj['kind']} without a name on {cluster}")
        return clusters  # type: ignore[return-value]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self.stderr.close()

    def _read(self) -> bytes:
        expired = threading.Event()
        timer = threading.Timer(self.limits.wall_seconds, lambda: (expired.set(), self.proc.kill()))
        timer.start()
        try:
            data = self.proc.stdout.read(self.limits.answer_bytes + 1)  # type: ignore[union-attr]
            if len(data) > self.limits.answer_bytes:
                self.proc.kill()
                raise IsolationError(f"{self.label}: the revision's program answered more than {self.limits.answer_bytes >> 20} MiB")
            code = self.proc.wait()
            if code != 0:
                why = f"more than {self.limits.wall_seconds:g} s" if expired.is_set() else self._why(code)
                raise IsolationError(f"{self.label}: the revision's program could not be rendered: {why}")
        finally:
            timer.cancel()
            self.close()
        return data

    def _why(self, code: int) -> str:
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return f"more than {self.limits.cpu_seconds} s of CPU"
        size = self.stderr.seek(0, os.SEEK_END)
        if size >= self.limits.stderr_bytes:  # the kernel stopped its writes there (RLIMIT_FSIZE)
            return f"more than {self.limits.stderr_bytes >> 10} KiB of error output"
        self.stderr.seek(max(0, size - (64 << 10)))  # a traceback's last line is its end's
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return _printable(lines[-1], self.limits.problem_chars) if lines else f"exit {code}, no output"


def start(tree: Path, env_rel: str, revision: str, label: str, limits: IsolationLimits = LIMITS) -> IsolatedRender:
    """Render `tree/env_rel` with the program in `tree`, confined, in the background."""
    cannot = f"{label}: its program differs from the one judging and this system cannot confine it"
    if landlockpy.abi_version() < 1:
        raise IsolationError(f"{cannot} (Landlock, Linux 5.13+); plan a revision with other code where Landlock is available")
    try:
        program = _syscall_filter()
    except IsolationError as exc:
        raise IsolationError(f"{cannot}: {exc}") from None
    stderr = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _SNIPPET, str(tree), str(tree / env_rel), revision, env_rel],
            cwd=tree,
            env={"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": str(tree), "TMPDIR": str(tree)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            preexec_fn=_confine(_readable(tree, env_rel), limits, program),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        stderr.close()
        raise IsolationError(f"{label}: cannot start a confined render: {exc}") from None
    return IsolatedRender(proc, stderr, label, limits)


PROGRAM = ("fleetops", "modules", "stacks")  # the folders of a revision its render runs


def _readable(tree: Path, env_rel: str) -> list[tuple[Path, AccessFS]]:
    """What the render may read: the names in its tree (Python lists a folder to import from it), the
    files of its program and environment (not its `.git`, nor anything else a working tree holds), the
    Python installation it runs on and the system's libraries."""
    tree = tree.resolve()
    files = [tree / name for name in PROGRAM] + [tree / env_rel]
    python = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, Path(sys.executable).parent)}
    system = [Path(p) for p in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/etc/ld.so.cache", "/dev/null", "/dev/urandom")]
    readable = [p for p in (*files, *sorted(python), *system) if p.exists()]
    return [(tree, AccessFS.READ_DIR)] + [(p, _READ if p.is_dir() else AccessFS.READ_FILE) for p in readable]


_READ = AccessFS.READ_FILE | AccessFS.READ_DIR


_CLONE_NEWNET = 0x40000000  # linux/sched.h
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PR_SET_SECUREBITS, _SECBIT_NOROOT, _SECBIT_NOROOT_LOCKED = 28, 1 << 0, 1 << 1  # linux/securebits.h
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_PR_GET_SECCOMP = 21

# What the render may not call: every way to a socket (it needs none; Landlock refuses TCP only, and a
# pathname UNIX socket or UDP not at all) and every way to start a task, process or thread (it needs
# none either), so that it stays one.
_REFUSED = ("socket", "socketpair", "io_uring_setup", "io_uring_enter", "io_uring_register", "fork", "vfork", "clone", "clone3")


@functools.cache
def _syscall_filter() -> bytes:
    """The seccomp program (classic BPF) of the render, built here once by libseccomp: the child only loads it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        raise IsolationError("this kernel has no seccomp filter")
    try:
        import pyseccomp  # loads libseccomp: only a confined render needs it

        rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        rules.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)  # another ABI's calls (int 0x80) are not filtered: none
        for name in _REFUSED:
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        with tempfile.TemporaryFile() as out:
            rules.export_bpf(out)
            out.seek(0)
            return out.read()
    except (ImportError, RuntimeError, OSError, ValueError) as exc:  # no libseccomp, or one too old to name a call
        raise IsolationError(f"no seccomp filter without libseccomp 2.5+ (libseccomp2): {exc}") from None


class _SockFprog(ctypes.Structure):  # linux/filter.h
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _confine(readable: list[tuple[Path, AccessFS]], limits: IsolationLimits, program: bytes) -> Any:
    """The steps the child takes on itself between fork and exec (each inherited by the program it runs)."""
    rights = [(str(path), access | AccessFS.EXECUTE if access & AccessFS.READ_FILE else access) for path, access in readable]
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))  # 8 bytes per BPF instruction

    def confine() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.unshare(_CLONE_NEWNET)  # best effort: no socket can be made below anyway
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))  # SIGXCPU, then SIGKILL
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.stderr_bytes, limits.stderr_bytes))  # the one file it writes
        # Root gains no capability at exec (refused without CAP_SETPCAP: then there is none to gain).
        libc.prctl(_PR_SET_SECUREBITS, _SECBIT_NOROOT | _SECBIT_NOROOT_LOCKED, 0, 0, 0)
        libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        with Ruleset(handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                     scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as ruleset:
            for path, access in rights:
                ruleset.allow_path(path, access)
            ruleset.restrict()  # sets no_new_privs, which the seccomp filter needs
        if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "seccomp filter refused")

    return confine


def _answer(data: bytes, label: str, depth: int) -> IsolatedAnswer:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise IsolationError(f"{label}: the revision's program answered something that is not JSON: {exc}") from None
    if _deeper(parsed, depth):
        raise IsolationError(f"{label}: the revision's program answered data nested more than {depth} deep")
    try:
        return _ANSWER.validate_python(parsed)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][:6])
        what = "problems that are not problems" if first["loc"][:1] == ("problems",) else "objects that are not Kubernetes objects"
        raise IsolationError(f"{label}: the revision's program answered {what}: {where}: {first['msg']}") from None


def _deeper(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and mappings more than `limit` deep (one iterator per open level)."""
    levels = [iter((value,))]
    while levels:
        for item in levels[-1]:
            kind = type(item)
            if kind is dict or kind is list:
                if len(levels) > limit:
                    return True
                levels.append(iter(item.values() if kind is dict else item))
                break
        else:
            levels.pop()
    return False


def _problem(answered: _Problem, limit: int) -> Problem:
    """A problem the revision's program answered, its text made printable and bounded, at its place."""
    file, path = (answered.get(k) for k in ("file", "path"))
    return Problem(_printable(answered["message"], limit), _printable(file, limit) if file is not None else None,
                   answered.get("line"), answered.get("column"), _printable(path, limit) if path is not None else None)


def _printable(text: str, limit: int) -> str:
    """A line from the revision's program as it may be shown: no control characters, bounded."""
    clean = "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in text)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"
