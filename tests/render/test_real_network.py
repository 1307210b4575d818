"""Tenant isolation proven on the wire: each bundled environment's rendered NetworkPolicies enforced
by a real dataplane (kube-router's firewall, tests/dataplane.py), probed cell by cell.

For every cluster of the environment: its rendered Namespaces and NetworkPolicies applied to a real
kube-apiserver, a pod for each party of the matrix (tests/netmatrix.py: each tenant, twice; the
reconciler and the fleet API; DNS; monitoring; each edge group's model cache) and a host for each
declared endpoint and egress CIDR, the fleet API's clients and an address nothing allows; then a
real TCP connection (UDP for DNS) for every cell. Expected is the environment's intent
(fleetops.spec.reach), the model render itself reads; every cell must agree. One API server and one
kube-router serve every environment, cluster after cluster (one test: the suite's workers cannot
split it into several dataplanes). The table of cells is printed (-rA shows
it) with the figures per environment; the time per environment goes to the run's timings.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetops import render, spec
from tests import servers
from tests.dataplane import Wire, dataplane
from tests.helpers import ROOT
from tests.netmatrix import Cell, cells, parties

pytestmark = pytest.mark.real

AGREE_TIMEOUT = 90.0  # kube-router syncs on every change it watches; a cluster's rules land within seconds


def matrix(wire: Wire, env: spec.Environment, cluster: spec.Cluster, manifests: list[dict]) -> tuple[list[Cell], list[str]]:
    """The cluster's cells and what each observed once every cell agrees (or the deadline passes)."""
    everyone = parties(env, cluster)
    wire.clear()
    wire.set_up(everyone, manifests, env.monitoring.namespace)
    silent = wire.reachable_from_node(everyone)
    assert not silent, f"{cluster.name}: listeners the node cannot reach: {silent}"
    todo = cells(env, cluster, everyone)
    pairs = [(c.source, c.destination, c.port) for c in todo]
    observed: list[str] = []

    def agrees() -> bool:
        observed[:] = wire.probe(pairs)
        return all((seen == "open") == cell.expected for seen, cell in zip(observed, todo))

    try:
        servers.wait_until(agrees, f"{cluster.name}: the dataplane enforcing the rendered NetworkPolicies", wire.kube_router, AGREE_TIMEOUT)
    except TimeoutError:
        pass  # the table below names every cell that disagrees
    return todo, observed


def run_environment(wire: Wire, name: str) -> tuple[list[str], list[str], str]:
    """Every cluster of one environment: the table's rows, those that disagree, and its figures."""
    path = ROOT / "environments" / f"{name}.yaml"
    env, state = spec.load_environment(path), render.render(path, revision="test")
    started = time.monotonic()
    rows, disagree, allowed, total = [], [], 0, 0
    for cluster in env.clusters:
        todo, observed = matrix(wire, env, cluster, state.clusters[cluster.name])
        for cell, seen in zip(todo, observed):
            ok = (seen == "open") == cell.expected
            total += 1
            allowed += cell.expected
            rows.append(f"{cluster.name:<16} {cell.source.label:<28} -> {cell.destination.label:<34} {str(cell.port):>7}  "
                        f"{'allow' if cell.expected else 'deny':<5}  {seen:<8} {'ok' if ok else 'DISAGREES'}")
            if not ok:
                disagree.append(rows[-1])
    figures = (f"{name}: {total} cells ({allowed} allowed, {total - allowed} denied), {total - len(disagree)} agree, "
               f"{time.monotonic() - started:.1f}s")
    return rows, disagree, figures


def test_every_cell_of_the_probe_matrix_agrees_with_the_intent(etcd: servers.Etcd, tmp_path: Path, record_property) -> None:
    disagree, figures = [], []
    started = time.monotonic()
    with dataplane(etcd, tmp_path) as wire:
        figures.append(f"API server and kube-router up in {time.monotonic() - started:.1f}s")
        for name in ("dev", "staging", "prod"):
            rows, wrong, line = run_environment(wire, name)
            disagree += wrong
            figures.append(line)
            print(f"\n{line}\n{'cluster':<16} {'from':<28}    {'to':<34} {'port':>7}  {'want':<5}  {'seen':<8}")
            print("\n".join(rows))
    record_property("timings", "network matrix " + "; ".join(figures))
    assert not disagree, "\n".join(disagree)
