"""Reconciler replicas sharing the fleet: the assignment, slot Leases, takeover, pins, metrics and /readyz."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from typer.testing import CliRunner

from benchmarks.generate import synthetic_environment
from fleetops import cli, reconcile, render, spec
from fleetops.reconcile.shards import assign, loads, slot_name, weights_of
from fleetops.reconcile.source import Fetched
from tests.fakes import WRITE_VERBS, MemoryCluster
from tests.reconcile_support import DEV, Clock, allow, commit, new_repo, options

LEASE = ("coordination.k8s.io/v1", "Lease", "fleetops-system", "fleetops-reconciler")
CLUSTERS = [f"c{i}" for i in range(500)]


def measured(seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    return weights_of(CLUSTERS, {c: rng.lognormvariate(0, 0.8) for c in CLUSTERS})


def members(n: int) -> list[str]:
    return [slot_name(i) for i in range(n)]


# --- the assignment -------------------------------------------------------------------------


def test_every_replica_computes_the_same_assignment() -> None:
    weights = measured()
    first = assign(members(8), CLUSTERS, weights, {})
    # Another replica read the slots and costs in another order: the same owners.
    shuffled = list(reversed(members(8)))
    again = assign(shuffled, sorted(CLUSTERS, reverse=True), dict(reversed(list(weights.items()))), {})
    assert first == again and set(first) == set(CLUSTERS)


@pytest.mark.parametrize("n", [1, 4, 16])
def test_the_assignment_is_balanced_by_measured_cost(n: int) -> None:
    weights = measured()
    load = loads(assign(members(n), CLUSTERS, weights, {}), weights, members(n))
    mean = sum(weights.values()) / n
    assert max(load.values()) / mean <= 1.25 + 1e-9  # the bound (1 + epsilon)
    assert min(load.values()) > 0


def test_a_heavy_cluster_counts_for_its_cost_not_as_one() -> None:
    weights = {c: 1.0 for c in CLUSTERS[:40]} | {"big": 40.0}
    owners = assign(members(2), [*CLUSTERS[:40], "big"], weights, {})
    load = loads(owners, weights, members(2))
    # Counted as one cluster it would leave its owner ~21 clusters and twice the other's work; weighed, at most 10 more.
    assert sum(owner == owners["big"] for owner in owners.values()) <= 11
    assert max(load.values()) <= 1.25 * 40


def test_adding_a_member_moves_about_its_share_and_removing_one_moves_its_clusters() -> None:
    weights = measured()
    total = sum(weights.values())
    before = assign(members(8), CLUSTERS, weights, {})
    added = assign(members(9), CLUSTERS, weights, {})
    moved = sum(weights[c] for c in CLUSTERS if before[c] != added[c])
    assert moved / total <= 1.5 / 9  # about 1/(n+1) of the weight, not a reshuffle
    to_new = sum(weights[c] for c in CLUSTERS if before[c] != added[c] and added[c] == slot_name(8))
    assert to_new >= 0.75 * moved  # mostly to the new member; the load bound passes a few on (85% here)
    removed = assign(members(8)[1:], CLUSTERS, weights, {})
    others = sum(weights[c] for c in CLUSTERS if before[c] != removed[c] and before[c] != slot_name(0))
    assert others / total <= 0.02  # the lost member's clusters move; the rest stay (bounded load may nudge a few)
    assert all(removed[c] != slot_name(0) for c in CLUSTERS)


def test_a_pin_holds_while_its_slot_is_live_and_falls_back_to_hashing() -> None:
    weights = measured()
    pins = {"c1": slot_name(2), "c2": slot_name(2)}
    assert {assign(members(3), CLUSTERS, weights, pins)[c] for c in pins} == {slot_name(2)}
    without = assign(members(2), CLUSTERS, weights, pins)
    assert set(without.values()) == {slot_name(0), slot_name(1)} and set(without) == set(CLUSTERS)


def test_no_member_no_owner() -> None:
    assert assign([], CLUSTERS, measured(), {}) == {}


# --- replicas over in-memory clusters -------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[spec.Environment, render.DesiredState]:
    """Six clusters, three reconciler replicas, edge-0 pinned to shard 2."""
    doc = synthetic_environment(0.1, "shards", center_clusters=5, edge_clusters=1, tenants=6, edge_groups=1, nodes=1)
    doc["reconciler"] = {"replicas": 3, "pins": {"edge-0": 2}}
    path = tmp_path_factory.mktemp("fleet") / "shards.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return spec.load_environment(path), render.render(path, revision="rev-1")


class Source:
    """A revision already rendered: the loop reads it as if fetched from Git."""

    def fetch(self) -> Fetched:
        return Fetched(Path("/fleet"), "rev-1")


class Writes(list):
    """Every write to a cluster (not to its Leases), with whether the writer held the cluster's Lease then."""


class Recorded:
    """One replica's view of a memory cluster: each write is recorded with the Lease holder at that moment."""

    def __init__(self, api: MemoryCluster, replica: str, writes: Writes):
        self._api, self._replica, self._writes = api, replica, writes

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        verb = "patch" if name == "patch_node" else name
        if verb not in WRITE_VERBS:
            return method

        def write(*args: Any, **kw: Any) -> Any:
            kind = args[0]["kind"] if args and isinstance(args[0], dict) else "Node" if name == "patch_node" else args[1]
            if kind != "Lease":
                holder = (self._api.peek(*LEASE) or {}).get("spec", {}).get("holderIdentity")
                self._writes.append((self._api.name, self._replica, holder == self._replica))
            return method(*args, **kw)

        return write


class Ticks:
    """A timer that moves one second per reading: with one worker each cluster's pass measures 2 s (nodes, then objects)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


class Replicas:
    """Replicas of the reconciler over one set of memory clusters, on one clock."""

    def __init__(self, env: spec.Environment, state: render.DesiredState, home: str = "center-0"):
        self.env, self.state, self.home, self.clock, self.writes = env, state, home, Clock(), Writes()
        self.apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
        for api in self.apis.values():  # a deployed fleet: the reconciler's namespace is there
            api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleetops-system"}})
        self.loops: dict[str, reconcile.ReconcileLoop] = {}

    def start(self, name: str, sharded: bool = True) -> reconcile.ReconcileLoop:
        views = {n: Recorded(api, name, self.writes) for n, api in self.apis.items()}
        loop = reconcile.ReconcileLoop("shards", Source(), lambda c: views[c.name], gate=allow, opts=options(clock=self.clock, timer=Ticks(), workers=1),
                                       identity=name, shards=reconcile.Shards(self.home) if sharded else None)
        loop._rendered["rev-1"] = (self.env, self.state)  # rendered once for all replicas
        self.loops[name] = loop
        return loop

    def round(self, seconds: float = 5, skip: tuple[str, ...] = ()) -> None:
        self.clock.advance(seconds)
        for name, loop in self.loops.items():
            if name not in skip:
                loop.run_once()

    def holders(self) -> dict[str, str | None]:
        return {n: (api.peek(*LEASE) or {}).get("spec", {}).get("holderIdentity") for n, api in self.apis.items()}

    def assignment(self, name: str) -> dict[str, str]:
        shards = self.loops[name].shards
        assert shards is not None
        return shards.assignment


def converge(replicas: Replicas, skip: tuple[str, ...] = (), rounds: int = 4) -> None:
    for _ in range(rounds):
        replicas.round(skip=skip)


def test_three_replicas_split_the_fleet_and_one_lost_is_taken_over_within_the_lease_time(fleet) -> None:
    replicas = Replicas(*fleet)
    for name in ("a", "b", "c"):
        replicas.start(name)
    converge(replicas)
    views = [replicas.assignment(n) for n in ("a", "b", "c")]
    assert views[0] == views[1] == views[2] and len(views[0]) == 6  # every replica computes the same owners
    slots = {n: replicas.loops[n].shards.mine for n in ("a", "b", "c")}
    assert sorted(slots.values()) == [slot_name(0), slot_name(1), slot_name(2)]
    owner_of = {c: next(n for n, s in slots.items() if s == slot) for c, slot in views[0].items()}
    assert replicas.holders() == owner_of  # each cluster's Lease is held by its assigned replica
    assert views[0]["edge-0"] == slot_name(2)  # the pin
    assert all(any(o == n for o in owner_of.values()) for n in ("a", "b", "c"))  # nobody takes everything

    lost = sorted(c for c, o in owner_of.items() if o == "c")
    for c in lost:  # a hand edit on c's clusters, for the replica that takes over to repair
        replicas.apis[c].remove("v1", "ConfigMap", "fleetops-system", "fleetops-status")
    replicas.writes.clear()
    taken_after = None
    for step in range(1, 8):  # c is killed: it renews nothing from now on
        replicas.round(skip=("c",))
        if all(replicas.holders()[x] in ("a", "b") for x in lost) and \
                all(replicas.apis[x].peek("v1", "ConfigMap", "fleetops-system", "fleetops-status") for x in lost):
            taken_after = step * 5
            break
    assert taken_after is not None and taken_after <= 15 + 5 + 5, taken_after  # the Lease duration, one interval, one pass
    assert replicas.assignment("a") == replicas.assignment("b") and slot_name(2) not in replicas.assignment("a").values()
    assert replicas.assignment("a")["edge-0"] in (slot_name(0), slot_name(1))  # the pinned cluster is not left without an owner
    assert replicas.writes and all(held for _, _, held in replicas.writes), [w for w in replicas.writes if not w[2]]


def test_a_replica_added_takes_its_share_at_once_and_no_write_comes_from_a_non_holder(fleet) -> None:
    replicas = Replicas(*fleet)
    replicas.start("a")
    replicas.round()
    assert set(replicas.holders().values()) == {"a"}  # alone, it keeps every cluster
    replicas.start("b")
    replicas.start("c")
    replicas.round()  # b and c join; a sees them at its next pass and releases what moved
    replicas.round()
    holders = replicas.holders()
    assert {"a", "b", "c"} == set(holders.values())  # handed over in two passes, no Lease left to expire
    for api in replicas.apis.values():
        api.remove("v1", "ConfigMap", "fleetops-system", "fleetops-status")  # drift everywhere: every owner writes
    replicas.writes.clear()
    replicas.round()
    assert {n for _, n, _ in replicas.writes} == {"a", "b", "c"}
    assert all(held for _, _, held in replicas.writes)
    by_cluster: dict[str, set[str]] = {}
    for cluster, replica, _ in replicas.writes:
        by_cluster.setdefault(cluster, set()).add(replica)
    assert len(by_cluster) == 6 and all(len(writers) == 1 for writers in by_cluster.values()), by_cluster  # one writer a cluster


def test_a_stopped_replica_hands_its_clusters_over_without_waiting_for_expiry(fleet) -> None:
    import threading

    replicas = Replicas(*fleet)
    for name in ("a", "b"):
        replicas.start(name)
    converge(replicas)
    stop = threading.Event()
    stop.set()
    replicas.loops["b"].serve(0, stop)  # SIGTERM: no pass, it releases its Leases and its slot
    assert "b" not in replicas.holders().values()
    replicas.round(seconds=1, skip=("b",))  # one second later, well inside the Lease time
    assert set(replicas.holders().values()) == {"a"}


def test_metrics_per_shard(fleet) -> None:
    replicas = Replicas(*fleet)
    for name in ("a", "b"):
        replicas.start(name)
    converge(replicas)
    loop = replicas.loops["a"]
    shard, owned = loop.shards.mine, sorted(loop.shards.owned)
    replicas.clock.advance(7)
    text = generate_latest(loop.metrics.registry).decode()
    assert f'fleetops_shard_clusters{{shard="{shard}"}} {float(len(owned))}' in text
    objects = sum(len(fleet[1].clusters[c]) for c in owned)
    assert f'fleetops_shard_objects{{shard="{shard}"}} {float(objects)}' in text
    for c in owned:  # reconciled in the last round, 7 s ago
        assert f'fleetops_shard_lag_seconds{{cluster="{c}",shard="{shard}"}} 7.0' in text
    assert f'fleetops_shard_pass_seconds{{shard="{shard}"}} {2.0 * len(owned)}' in text
    lease = replicas.apis["center-0"].peek("coordination.k8s.io/v1", "Lease", "fleetops-system", shard)
    published = json.loads(lease["metadata"]["annotations"]["fleetops.io/pass-seconds"])
    assert {c: published.get(c) for c in owned} == {c: 2.0 for c in owned}  # what the others weigh them by


def test_readyz_names_a_cluster_whose_lease_another_keeps(fleet) -> None:
    replicas = Replicas(*fleet)
    replicas.start("a")
    replicas.round()
    assert replicas.loops["a"].ready
    # An old replica that does not shard (or a stuck one) holds center-3's Lease and keeps renewing it.
    stale = reconcile.LeaseElector(replicas.apis["center-3"], "fleetops-system", "old-replica", 15, replicas.clock)
    replicas.apis["center-3"].remove(*LEASE)
    assert stale.acquire()
    for _ in range(4):
        replicas.clock.advance(5)
        stale.acquire()
        replicas.loops["a"].run_once()
    ready = replicas.loops["a"].ready
    assert not ready and "center-3" in ready.reason and "old-replica" in ready.reason
    assert "center-1" not in ready.reason


def test_readyz_names_every_cluster_when_no_shard_is_live(fleet) -> None:
    replicas = Replicas(*fleet)
    loop = replicas.start("a")
    replicas.apis["center-0"].faults.scripted += [("get", "Lease", 503)] * 20  # the home cluster fails every slot read
    replicas.round()
    ready = loop.ready
    assert not ready and "no live shard on center-0" in ready.reason and "edge-0" in ready.reason
    assert replicas.writes == []  # fail closed: without a slot nothing is written


def test_without_shards_the_loop_leads_every_cluster_as_before(fleet) -> None:
    replicas = Replicas(*fleet)
    replicas.start("a", sharded=False)
    replicas.round()
    assert set(replicas.holders().values()) == {"a"}
    assert replicas.apis["center-0"].peek("coordination.k8s.io/v1", "Lease", "fleetops-system", slot_name(0)) is None


# --- the command line -----------------------------------------------------------------------


runner = CliRunner()


def test_cli_refuses_bad_shard_input_in_one_line(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "fleet")
    commit(repo, DEV.read_text(), "good")
    common = ["reconcile", "--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c")]
    for args, says in [
        (["--interval", "5s", "--shard-home", "nowhere"], "--shard-home: no cluster nowhere in environment dev"),
        (["--interval", "5s", "--shard-home", "dev-center", "--shards", "0"], "--shards: must be 1 or more, got 0"),
        (["--interval", "5s", "--shards", "2"], "--shards N needs --shard-home CLUSTER"),
        (["--once", "--shard-home", "dev-center"], "--shard-home shares the writes of a running service"),
    ]:
        result = runner.invoke(cli.app, [*common, *args])
        assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output, result.output
    assert "--shard-home" in runner.invoke(cli.app, ["reconcile", "--help"]).output


def test_validate_refuses_pins_at_their_line(tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "dev.yaml").write_text(DEV.read_text() + "reconciler:\n  replicas: 2\n  pins: {dev-edge: 2, nowhere: 0}\n")
    result = runner.invoke(cli.app, ["validate", "--environments", str(folder)])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert any('dev.yaml:114:10: reconciler.pins["dev-edge"]: shard 2 does not exist: reconciler.replicas is 2' in line for line in lines), result.output
    assert any("dev.yaml:114:23: reconciler.pins.nowhere: no cluster nowhere in this environment" in line for line in lines), result.output
