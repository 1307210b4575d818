"""Fixtures shared by the test modules, including the real servers (tests/servers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, spec
from tests.fakes import MemoryCluster
from tests import servers
from tests.backends import RealCluster
from tests.helpers import render_env, small_env


@pytest.fixture(scope="module")
def small_state(tmp_path_factory: pytest.TempPathFactory) -> render.DesiredState:
    return render_env(tmp_path_factory.mktemp("small"), small_env())


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Etcd]:
    """One etcd per test process; every API server gets a prefix of its own in it."""
    with servers.etcd_server(tmp_path_factory.mktemp("etcd")) as server:
        yield server


ApiServers = Callable[..., dict[str, servers.ApiServer]]


@pytest.fixture
def api_servers(etcd: servers.Etcd, tmp_path: Path) -> Iterator[ApiServers]:
    """`api_servers("a", "b", crds=True)`: fresh, empty kube-apiservers (started side by side), stopped after the test."""
    started: list[servers.ApiServer] = []

    def start(*names: str, crds: bool = True) -> dict[str, servers.ApiServer]:
        fresh = [servers.ApiServer(name, tmp_path / "kube" / name, etcd) for name in names]
        started.extend(fresh)

        def up(server: servers.ApiServer) -> None:
            server.start()
            if crds:
                servers.install_crds(server)

        with ThreadPoolExecutor(max_workers=len(fresh)) as pool:
            list(pool.map(up, fresh))
        return {s.name: s for s in fresh}

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def opa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Opa]:
    with servers.opa_server(tmp_path_factory.mktemp("opa")) as server:
        yield server


Clusters = Callable[[spec.Environment], dict[str, Any]]


@pytest.fixture(params=["memory", pytest.param("real", marks=pytest.mark.real)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Clusters:
    """`backend(env)`: one cluster per cluster of the environment, in memory or on real kube-apiservers.

    The tests that take it run twice: the in-memory twin is checked against the real server.
    """
    if request.param == "memory":
        return lambda env: {c.name: MemoryCluster(c.name) for c in env.clusters}
    start = request.getfixturevalue("api_servers")

    def real(env: spec.Environment) -> dict[str, Any]:
        started = start(*(c.name for c in env.clusters))
        return {name: RealCluster(name, server, tmp_path / f"{name}.kubeconfig") for name, server in started.items()}

    return real


@pytest.fixture(autouse=True)
def decision_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every gate writes a decision record (FLEETOPS_DECISION_LOG): into the test's folder, not the repository."""
    path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("FLEETOPS_DECISION_LOG", str(path))
    return path


KueueClusters = Callable[[list[dict[str, Any]]], servers.KueueServer]


@pytest.fixture
def kueue(api_servers: ApiServers, tmp_path: Path) -> Iterator[KueueClusters]:
    """`kueue(manifests)`: one cluster's rendered objects on a fresh kube-apiserver with the real Kueue
    (servers.kueue_cluster), stopped after the test."""
    started: list[servers.KueueServer] = []

    def start(manifests: list[dict[str, Any]]) -> servers.KueueServer:
        name = f"kueue-{len(started)}"
        kueue = servers.kueue_cluster(api_servers(name, crds=False)[name], tmp_path / name, manifests)
        started.append(kueue)
        return kueue

    yield start
    for kueue in started:
        kueue.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The timings a passing test recorded (`record_property("timings", ...)`), after the run, so that CI's
    log shows them (xdist passes recorded properties back; a test's own output it keeps)."""
    lines = [f"{report.nodeid}: {value}" for report in terminalreporter.stats.get("passed", [])
             for name, value in report.user_properties if name == "timings"]
    if lines:
        terminalreporter.write_sep("-", "timings")
        for line in lines:
            terminalreporter.write_line(line)
