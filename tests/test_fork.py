"""Work in forks of the process (fleetops/fork.py) and what the collector sets aside (fleetops/memory.py)."""

from __future__ import annotations

import gc
import os
import select
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from fleetops import fork, memory
from tests.helpers import ROOT

PARENT = """
import sys
sys.path.insert(0, {root!r})
from fleetops import fork

def target(reply):
    reply(b"x" * 10_000_000, last=True)  # more than a pipe holds: blocks until someone reads

forked = fork.start("writer", RuntimeError, target)
print(forked.proc.pid, flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits for the fork's exit through a pidfd (Linux)")
def test_a_fork_ends_with_its_parent_killed_without_cleanup(tmp_path: Path) -> None:
    # SIGKILL, the OOM killer: no handler runs. The fork must not stay blocked on its pipe forever.
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(root=str(ROOT)))
    parent = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = os.pidfd_open(int(parent.stdout.readline()))
    parent.kill()
    parent.wait()
    ended, _, _ = select.select([child], [], [], 60)
    os.close(child)
    assert ended, "the fork outlived its parent"


def refuse_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(type(fork._CONTEXT.Process()), "start", refused)


def test_plan_judges_here_when_the_system_refuses_a_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetops import plan
    from tests.test_plan import commit, edit, git, make_repo

    repo = make_repo(tmp_path)
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 112, burst: 176, guaranteed_per_pool: {h100-train: 56, a100-infer: 56}}")
    commit(repo, "vision: more GPUs")
    monkeypatch.chdir(repo)
    refuse_forks(monkeypatch)
    # The base runs this code too: rendered here, not by a process of its tree (which holds only its file and policies).
    monkeypatch.setattr(plan, "_isolated", lambda *args: pytest.fail("the base was rendered by a process of its own tree"))
    result = plan.build(repo, "prod", git(repo, "rev-parse", "main").strip(), None, 0)
    assert result["verdict"] == "allowed" and result["decisions"]
    assert ("ResourceQuota", "vision") in {(o["kind"], o["namespace"]) for o in result["objects"]["changed"]}


def test_what_the_collector_set_aside_is_collected_on_release() -> None:
    class Node:
        pass

    with memory.acyclic():
        node = Node()
        node.itself = node  # a cycle: only the collector frees it
        alive = weakref.ref(node)
    del node
    gc.collect()
    assert alive() is not None  # set aside when the block ended
    memory.release()
    assert alive() is None
