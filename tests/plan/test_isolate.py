"""The confined render: a revision's program answers as bounded, validated data, or not at all."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fleetops import isolate
from fleetops.errors import Problem

pytestmark = pytest.mark.skipif(not isolate.available(), reason="the confined render needs Landlock (Linux 5.13+) and a seccomp filter (libseccomp2)")

ENV = "environments/x.yaml"


def program(tmp_path: Path, render_body: str) -> Path:
    """A revision's tree whose `fleetops.render.render_environment` runs `render_body` (returning clusters)."""
    tree = tmp_path / "tree"
    (tree / "fleetops").mkdir(parents=True)
    (tree / "environments").mkdir()
    (tree / ENV).write_text("environment: x\n")
    (tree / "fleetops" / "__init__.py").write_text("")
    (tree / "fleetops" / "spec.py").write_text(textwrap.dedent("""
        class SpecError(Exception):
            problems = []

        def load_environment(path, display=None):
            return open(path).read()
    """))
    (tree / "fleetops" / "render.py").write_text("class RenderError(Exception):\n    pass\n\n"
                                                  "class State:\n    pass\n\n"
                                                  "def render_environment(env, path, revision=None):\n"
                                                  + textwrap.indent(textwrap.dedent(render_body), "    ")
                                                  + "\n    state = State()\n    state.clusters = clusters\n    return state\n")
    return tree


def render(tree: Path, limits: isolate.IsolationLimits = isolate.LIMITS) -> dict:
    return isolate.start(tree, ENV, "abc", "x.yaml@abc", limits).finish()


def test_a_programs_objects_come_back_as_plain_data(tmp_path: Path) -> None:
    tree = program(tmp_path, 'clusters = {"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "1"}}}]}')
    assert render(tree) == {"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "1"}}}]}


@pytest.mark.parametrize("clusters, why", [
    ('{"c1": [{"kind": "Namespace", "metadata": {"name": "a"}}]}', "c1.0.apiVersion: Field required"),
    ('{"c1": [{"apiVersion": "v1", "kind": 5, "metadata": {"name": "a"}}]}', "c1.0.kind: Input should be a valid string"),
    ('{"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {}}]}', "a Namespace without a name on c1"),
    ('{"c1": "not a list"}', "c1: Input should be a valid list"),
])
def test_an_answer_that_is_not_kubernetes_objects_is_refused(tmp_path: Path, clusters: str, why: str) -> None:
    with pytest.raises(isolate.IsolationError, match="x.yaml@abc: ") as caught:
        render(program(tmp_path, f"clusters = {clusters}"))
    assert why in str(caught.value)


def test_an_answer_over_its_bound_is_refused(tmp_path: Path) -> None:
    tree = program(tmp_path, 'clusters = {"c1": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "y" * (3 << 20)}}]}')
    with pytest.raises(isolate.IsolationError, match="answered more than 2 MiB"):
        render(tree, isolate.IsolationLimits(answer_bytes=2 << 20))


def test_a_program_that_never_ends_is_stopped_by_its_cpu_bound(tmp_path: Path) -> None:
    with pytest.raises(isolate.IsolationError, match="more than 1 s of CPU"):
        render(program(tmp_path, "while True:\n    pass"), isolate.IsolationLimits(cpu_seconds=1))


def test_a_program_that_takes_more_memory_than_its_bound_fails(tmp_path: Path) -> None:
    with pytest.raises(isolate.IsolationError, match="MemoryError"):
        render(program(tmp_path, "hog = bytearray(2 << 30)\nclusters = {}"), isolate.IsolationLimits(memory_bytes=1 << 30))


def test_what_a_program_prints_is_shown_without_control_characters(tmp_path: Path) -> None:
    tree = program(tmp_path, 'raise SystemExit("bad\\x1b[2J\\x07 input")')
    with pytest.raises(isolate.IsolationError) as caught:
        render(tree)
    assert "bad?[2J? input" in str(caught.value) and "\x1b" not in str(caught.value)


def refusing(tmp_path: Path, problems: str) -> Path:
    """A revision whose program refuses the file with `problems` (a Python expression) as its SpecError's."""
    return program(tmp_path, f"""
        from fleetops import spec

        class Problem:
            def __init__(self, **fields):
                self._fields = fields

            def fields(self):
                return self._fields

        exc = spec.SpecError()
        exc.problems = {problems}
        raise exc
    """)


@pytest.mark.parametrize("problems, expected", [
    ('[Problem(message="at most 3 clusters", file="environments/x.yaml", line=4, column=3, path="clusters")]',
     Problem("at most 3 clusters", "environments/x.yaml", 4, 3, "clusters")),
    # A revision from before problems had fields: its line, as it wrote it.
    ('["environments/x.yaml:4:3: clusters: at most 3 clusters"]', Problem("environments/x.yaml:4:3: clusters: at most 3 clusters")),
    ('[Problem(message="bad\\x1b[2J", file="environments/\\x07x.yaml", line=4, column=None, path=None, hint="new")]',
     Problem("bad?[2J", "environments/?x.yaml", 4)),
])
def test_a_programs_refusal_comes_back_as_problems_at_their_places(tmp_path: Path, problems: str, expected: Problem) -> None:
    with pytest.raises(isolate.IsolationError) as caught:
        render(refusing(tmp_path, problems))
    assert caught.value.problems == [expected]


@pytest.mark.parametrize("problems, why", [
    ('[Problem(message="x", line="4")]', "problems.0.line: Input should be a valid integer"),
    ('[Problem(message="x", line=0)]', "problems.0.line: Input should be greater than or equal to 1"),
    ('[Problem(file="environments/x.yaml")]', "problems.0.message: Field required"),
    ('[Problem(message="x", file=5)]', "problems.0.file: Input should be a valid string"),
])
def test_a_refusal_that_is_not_problems_is_refused(tmp_path: Path, problems: str, why: str) -> None:
    with pytest.raises(isolate.IsolationError, match="x.yaml@abc: the revision's program answered problems that are not problems: ") as caught:
        render(refusing(tmp_path, problems))
    assert why in str(caught.value)


def test_a_refusal_written_by_the_program_itself_must_say_something(tmp_path: Path) -> None:
    # The program owns its stdout: it can write an answer of its own and leave before the snippet's.
    tree = program(tmp_path, 'import os, sys\nsys.stdout.write(\'{"problems": []}\')\nsys.stdout.flush()\nos._exit(0)')
    with pytest.raises(isolate.IsolationError, match="answered problems that are not problems: problems: List should have at least 1 item"):
        render(tree)


# The second round: what the confined render could still reach, and how far its bounds held.

def probe(tmp_path: Path, attempt: str, limits: isolate.IsolationLimits = isolate.LIMITS) -> str:
    """What the revision's program met trying `attempt` (statements): "allowed", or the exception's name."""
    tree = program(tmp_path, f"""
        import ctypes, os, socket
        try:
{textwrap.indent(textwrap.dedent(attempt), " " * 12)}
            met = "allowed"
        except Exception as exc:
            met = type(exc).__name__
        raise SystemExit("probe " + met)
    """)
    with pytest.raises(isolate.IsolationError) as caught:
        render(tree, limits)
    return str(caught.value).split("probe ", 1)[1]


def test_a_program_cannot_connect_to_a_pathname_unix_socket(tmp_path: Path) -> None:
    # On a CI runner a container runtime's socket is one; Landlock (ABI 7) cannot refuse the connect.
    path = tmp_path / "runtime.sock"
    with socket.socket(socket.AF_UNIX) as runtime:
        runtime.bind(str(path))
        runtime.listen()
        runtime.setblocking(False)
        assert probe(tmp_path, f"socket.socket(socket.AF_UNIX).connect({str(path)!r})") == "PermissionError"
        with pytest.raises(BlockingIOError):
            runtime.accept()


@pytest.mark.parametrize("family, kind", [
    ("AF_UNIX", "SOCK_STREAM"), ("AF_INET", "SOCK_DGRAM"), ("AF_INET6", "SOCK_DGRAM"), ("AF_NETLINK", "SOCK_RAW"), ("AF_PACKET", "SOCK_RAW"),
])
def test_a_program_makes_no_socket_of_any_family(tmp_path: Path, family: str, kind: str) -> None:
    assert probe(tmp_path, f"socket.socket(socket.{family}, socket.{kind})") == "PermissionError"


def test_a_program_sends_no_datagram_where_no_network_namespace_can_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolate, "_CLONE_NEWNET", 0)  # unshare(0) makes nothing: the runner's own network
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        met = probe(tmp_path, f'socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"secret", ("127.0.0.1", {port}))')
        assert met == "PermissionError"
        with pytest.raises(BlockingIOError):  # a datagram sent on loopback is queued before sendto returns
            listener.recv(64)


def test_a_program_cannot_make_sockets_through_io_uring(tmp_path: Path) -> None:
    # io_uring opens and connects sockets without the socket and connect calls a filter sees.
    attempt = """
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(425, 8, ctypes.create_string_buffer(120)) < 0:  # io_uring_setup(8 entries, params)
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    """
    assert probe(tmp_path, attempt) == "PermissionError"


@pytest.mark.skipif(os.geteuid() != 0, reason="a judge that is not root gives its render no capability to drop")
def test_a_render_started_by_root_holds_no_capability(tmp_path: Path) -> None:
    assert probe(tmp_path, "os.setuid(4242)") == "PermissionError"


def test_a_daemonized_grandchild_does_not_hold_the_render_open(tmp_path: Path) -> None:
    # The attack: a grandchild in a session of its own keeps the answer's pipe open after the render
    # answered and ended, and the judge waits on it past every limit.
    tree = program(tmp_path, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
            os._exit(0)
        os.wait()
        clusters = {}
    """)
    outcome: list[BaseException | dict] = []

    def judge() -> None:
        try:
            outcome.append(render(tree, isolate.IsolationLimits(wall_seconds=5)))
        except isolate.IsolationError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=judge, daemon=True)
    waiting.start()
    waiting.join(timeout=60)  # a bound on the test, far past the render's wall limit
    assert outcome, "the judge still waits on the render's descendants"
    assert isinstance(outcome[0], isolate.IsolationError) and "PermissionError" in str(outcome[0])


def test_forks_do_not_multiply_the_memory_bound(tmp_path: Path) -> None:
    # Each of four processes stays under 1 GiB of address space; together they hold 3 GiB (untouched).
    tree = program(tmp_path, """
        import os
        for _ in range(4):
            if os.fork() == 0:
                hog = bytearray(768 << 20)
                os._exit(0)
            os.wait()
        clusters = {}
    """)
    with pytest.raises(isolate.IsolationError, match="PermissionError"):
        render(tree, isolate.IsolationLimits(memory_bytes=1 << 30))


def test_a_program_starts_no_thread(tmp_path: Path) -> None:
    # Threads of 32 KiB of stack within the memory bound would take every free process id of the system.
    attempt = """
        import threading
        threading.stack_size(32 << 10)
        for _ in range(3):
            threading.Thread(target=lambda: None).start()
    """
    assert probe(tmp_path, attempt) == "RuntimeError"  # Python's "can't start new thread"


def test_the_error_output_is_bounded_on_the_judges_disk(tmp_path: Path) -> None:
    tree = program(tmp_path, 'import sys\nsys.stderr.write("x" * (8 << 20))\nraise SystemExit("done")')
    with pytest.raises(isolate.IsolationError, match=r"could not be rendered: more than 1024 KiB of error output"):
        render(tree)


def test_an_answer_nested_past_the_judges_readers_is_refused(tmp_path: Path) -> None:
    # The program owns its stdout: it writes an answer 1,000 levels deep and leaves before the snippet's.
    tree = program(tmp_path, """
        import os, sys
        deep = b"[" * 1000 + b"]" * 1000
        sys.stdout.buffer.write(b'{"clusters": {"c1": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": ' + deep + b'}]}}')
        sys.stdout.flush()
        os._exit(0)
    """)
    with pytest.raises(isolate.IsolationError, match="x.yaml@abc: the revision's program answered data nested more than 64 deep"):
        render(tree)


def test_without_a_seccomp_filter_nothing_is_rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = program(tmp_path, "clusters = {}")
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # as where libseccomp is missing: its import fails
    isolate._syscall_filter.cache_clear()
    try:
        assert not isolate.available()
        with pytest.raises(isolate.IsolationError, match="x.yaml@abc: its program differs from the one judging and this system "
                                                         "cannot confine it: no seccomp filter without libseccomp"):
            render(tree)
    finally:
        isolate._syscall_filter.cache_clear()
