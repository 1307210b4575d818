"""Shared helpers of the reconcile tests: a small fleet, its render, clusters, nodes, clock and gates."""

from __future__ import annotations

import datetime as dt
import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from fleetops import reconcile, render, spec
from fleetops.cluster import MemoryCluster

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "environments" / "dev.yaml"
T0 = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)
GOOD_FP = "sha256:" + "0d" * 32  # the dev-jetson allow list
BAD_FP = "sha256:" + "ee" * 32


@functools.cache
def dev() -> tuple[spec.Environment, render.DesiredState]:
    """The dev fleet, rendered once per test process (render takes seconds)."""
    return spec.load_environment(DEV), render.render(DEV, revision="rev-1")


def allow(env: Any, state: Any, live: Any) -> reconcile.GateResult:
    return reconcile.GateResult(False, [])


def deny(env: Any, state: Any, live: Any) -> reconcile.GateResult:
    return reconcile.GateResult(True, ["fleet.test: denied for the test"])


class Clock:
    def __init__(self, now: dt.datetime = T0):
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Sleeps(list):
    """A sleep that records instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def options(**kw: Any) -> reconcile.Options:
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("clock", Clock())
    return reconcile.Options(**kw)


def node(name: str, labels: dict[str, str] | None = None, ready: bool = True, since: dt.datetime = T0,
         allocatable: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {},
        "status": {
            "allocatable": allocatable or {"cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")}],
        },
    }


def clusters(env: spec.Environment, **kw: Any) -> dict[str, MemoryCluster]:
    return {c.name: MemoryCluster(c.name, **kw) for c in env.clusters}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit(repo: Path, text: str, message: str) -> str:
    (repo / "environments").mkdir(parents=True, exist_ok=True)
    (repo / "environments" / "dev.yaml").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path
