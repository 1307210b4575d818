"""Disaster tests of edge continuity (issue 24) with the real control plane: kube-apiserver,
kube-controller-manager (node lifecycle, taint-based eviction, ReplicaSets) and kube-scheduler, on
Node objects without kubelets whose Leases the test renews (tests/servers.py Kubelets).

An edge node loses its uplink: its Lease is no longer renewed, the node lifecycle controller marks it
Unknown and taints it NoExecute, and what happens to its pods is what fleetops rendered for its group:
"move after 30 s" pods are evicted after 30 s and replaced on another node of the same group, "stay"
pods keep their node; the reconciler cordons the node after the group's offline grace. The API server
runs with default toleration seconds shorter than both (DEFAULT_TOLERATION), so a pod whose tolerations
fleetops did not set is evicted first: that the group's pods are not is the rendered policy at work.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from fleetops import identity, kube, reconcile, render, spec
from fleetops.reconcile.result import Found
from modules.tenant import QUEUE_LABEL, queue_names
from tests import servers
from tests.backends import RealCluster
from tests.command import fleetops_command
from tests.reconcile_support import DEV, allow, options
from tests.reconcile.test_real_kube import fleet_repo

pytestmark = pytest.mark.real

CLUSTER, TENANT = "dev-edge", "edge-dev"
MOVE_AFTER = 30  # the "move" group's declared disconnect.after_seconds
GRACE = 40  # every group's offline_grace_seconds: when the reconciler cordons (policy: a move ends within it)
DEFAULT_TOLERATION = 15  # the API server's default for pods fleetops leaves alone (upstream: 300)
MONITOR_GRACE = 8  # --node-monitor-grace-period: a Lease this old makes the node Unknown
EVICTION_SLACK = 15  # how late after the declared seconds an eviction may come on a loaded machine
# The node lifecycle controller's taints on a node it cannot hear from (and the pods' tolerations for them).
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"

GROUPS = {  # name -> (node name prefix, node count, disconnect policy)
    "edge-move": ("move", 2, {"action": "move", "after_seconds": MOVE_AFTER}),
    "edge-stay": ("stay", 1, {"action": "stay"}),
    "edge-other": ("other", 1, None),  # a healthy group beside them: replacements must never land here
}


def fingerprint(node: str) -> str:
    """The kubelet key fingerprint fleetops approved for a test node (the nodes have no certificates)."""
    return "sha256:" + hashlib.sha256(node.encode()).hexdigest()


def environment_text() -> str:
    """The dev fleet with its edge cluster's groups replaced by the three above, each allowing its
    members' keys, and the edge tenant's burst what those groups hold."""
    doc = yaml.safe_load(DEV.read_text())
    edge = next(c for c in doc["clusters"] if c["name"] == CLUSTER)
    template = edge["edge_groups"][0]
    edge["edge_groups"] = [
        {**{k: v for k, v in template.items() if k not in ("match", "name", "nodes")},
         "name": name, "nodes": count, "heartbeat_seconds": 2, "offline_grace_seconds": GRACE,
         "fingerprints": [fingerprint(n) for n in members(name)],
         "match": {"name_pattern": f"{prefix}-*"}, **({"disconnect": disconnect} if disconnect else {})}
        for name, (prefix, count, disconnect) in GROUPS.items()]
    tenant = next(t for t in doc["tenants"] if t["name"] == TENANT)
    tenant["edge_groups"] = list(GROUPS)
    tenant["quota"] = {"nvidia.com/gpu": {"guaranteed": 2, "burst": 2}}  # split over three flavors, Kueue grants no burst beyond
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class EdgeFleet:
    """The dev-edge cluster of `environment_text()`, rendered and applied by the reconciler to a real
    control plane, its nodes kept alive by `kubelets`."""

    server: servers.ApiServer
    kubelets: servers.Kubelets
    env: spec.Environment
    state: render.DesiredState
    api: RealCluster
    repo: Path
    kubeconfig: Path

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.server.client())

    def reconcile(self) -> reconcile.PassResult:
        """One reconciler pass on the real clock."""
        edge = self.env.model_copy(update={"clusters": [c for c in self.env.clusters if c.name == CLUSTER]})
        return reconcile.run_pass(edge, self.state, {CLUSTER: self.api}, allow, options(clock=lambda: dt.datetime.now(dt.UTC), sleep=time.sleep))

    def node_selector(self, group: str) -> dict[str, str]:
        """What the cluster's scheduler objects say a pod of `group` selects: its Kueue flavor's node labels."""
        flavor = next(m for m in self.state.clusters[CLUSTER] if m["kind"] == "ResourceFlavor" and m["metadata"]["name"] == group)
        return flavor["spec"]["nodeLabels"]

    def pod(self, group: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """A pod of the tenant pinned to `group` the way its workloads are (the flavor's node labels),
        in its queue with its class, as the tenant's admission policy requires. Kueue is not what is
        tested here and does not run: nothing gates the pods, the scheduler binds them at once."""
        tenant = next(t for t in self.env.tenants if t.name == TENANT)
        return {"metadata": {"labels": {QUEUE_LABEL: queue_names(tenant)[0], **(labels or {})}},
                "spec": {"nodeSelector": self.node_selector(group), "priorityClassName": tenant.priority_classes[0],
                         "containers": [{"name": "c", "image": "registry.invalid/serve:1"}]}}

    def deploy(self, name: str, group: str, replicas: int) -> None:
        client.AppsV1Api(self.server.client()).create_namespaced_deployment(TENANT, {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": self.pod(group, {"app": name})}})

    def pods(self, app: str) -> list[Any]:
        return self.core.list_namespaced_pod(TENANT, label_selector=f"app={app}").items

    def node(self, name: str) -> Any:
        return self.core.read_node(name)


def members(group: str) -> list[str]:
    prefix, count, _ = GROUPS[group]
    return [f"{prefix}-{i}" for i in range(1, count + 1)]


def bound(pods: list[Any]) -> dict[str, str]:
    """Pod name -> node, for the pods the scheduler has bound and nothing is deleting."""
    return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp}


def taint(node: Any, key: str) -> Any:
    return next((t for t in node.spec.taints or [] if t.key == key and t.effect == "NoExecute"), None)


@pytest.fixture
def edge_fleet(etcd: servers.Etcd, tmp_path: Path) -> Iterator[EdgeFleet]:
    server = servers.ApiServer(CLUSTER, tmp_path / "kube", etcd, extra_args=[
        f"--default-not-ready-toleration-seconds={DEFAULT_TOLERATION}", f"--default-unreachable-toleration-seconds={DEFAULT_TOLERATION}"])
    try:
        server.start()
        servers.install_crds(server)
        server.start_controllers(
            "node-lifecycle-controller", "taint-eviction-controller", "replicaset-controller", "deployment-controller",
            "resourcequota-controller", "serviceaccount-controller",
            flags=("--node-monitor-period=1s", f"--node-monitor-grace-period={MONITOR_GRACE}s", "--node-eviction-rate=10"))
        server.start_scheduler()
        env_file = tmp_path / "fleet" / "environments" / "dev.yaml"
        repo = fleet_repo(tmp_path / "fleet", environment_text())  # with the policies the reconciler's gate reads
        env, state = spec.load_environment(env_file), render.render(env_file, revision="rev-1")
        with servers.Kubelets(server) as kubelets:
            for group in GROUPS:
                for name in members(group):
                    kubelets.register(name, {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "1"})
            # The keys fleetops approved when these devices joined, in the record nodes cannot write.
            namespace = env.reconciler.namespace
            core = client.CoreV1Api(server.client())
            core.create_namespace({"metadata": {"name": namespace}})
            core.create_namespaced_config_map(namespace, {
                "metadata": {"name": identity.RECORD_CONFIGMAP},
                "data": identity.record_data({n: fingerprint(n) for g in GROUPS for n in members(g)})})
            fleet = EdgeFleet(server, kubelets, env, state, RealCluster(CLUSTER, server, tmp_path / "kubeconfig"), repo,
                              server.kubeconfig(tmp_path / "reconciler.kubeconfig", context=CLUSTER))
            first = fleet.reconcile()
            assert first.status == "applied" and not first.errors, first.errors
            # The reconciler labelled each node as its group's member; the node lifecycle controller has
            # seen them Ready (it lifts the not-ready NoSchedule taint every new node is created with).
            servers.wait_until(lambda: all(not any(t.key == NOT_READY for t in fleet.node(n).spec.taints or [])
                                           and fleet.node(n).metadata.labels.get("fleetops.io/edge-group") == g
                                           for g in GROUPS for n in members(g)), "nodes Ready and labelled", timeout=60)
            yield fleet
            assert kubelets.errors == []  # every heartbeat of a connected node reached the server
    finally:
        server.stop()


def wait_admission(fleet: EdgeFleet, group: str) -> list[dict[str, Any]]:
    """Until the API server applies the group's rendered admission (it loads policies from a watch):
    the unreachable/not-ready tolerations a dry-run pod of the group gets."""
    def tolerations() -> list[dict[str, Any]]:
        pod = fleet.pod(group)
        made = fleet.core.create_namespaced_pod(TENANT, {**pod, "metadata": {**pod["metadata"], "generateName": "probe-"}}, dry_run="All")
        return [t.to_dict() for t in made.spec.tolerations or [] if t.key in (UNREACHABLE, NOT_READY)]

    servers.wait_until(lambda: all(t["toleration_seconds"] != DEFAULT_TOLERATION for t in tolerations()),
                       f"the disconnect policy of {group} in effect", timeout=60)
    return tolerations()


def evicted_at(pod: Any) -> dt.datetime | None:
    """When the taint eviction controller took the pod: its DisruptionTarget condition."""
    cond = servers.condition(pod, "DisruptionTarget")
    return cond.last_transition_time if cond is not None and cond.reason == "DeletionByTaintManager" else None


def seconds_since(moment: dt.datetime) -> float:
    return (dt.datetime.now(dt.UTC) - moment).total_seconds()


def disconnect(fleet: EdgeFleet, name: str) -> dt.datetime:
    """Cut a node off; once the node lifecycle controller has tainted it, when it did (the taint's timeAdded)."""
    fleet.kubelets.disconnect(name)
    servers.wait_until(lambda: taint(fleet.node(name), UNREACHABLE) is not None, f"{name} tainted unreachable", timeout=MONITOR_GRACE + 30)
    return taint(fleet.node(name), UNREACHABLE).time_added


def placed(fleet: EdgeFleet, app: str, replicas: int) -> dict[str, str]:
    servers.wait_until(lambda: len(bound(fleet.pods(app))) == replicas, f"{app}: {replicas} pods bound", timeout=60)
    return bound(fleet.pods(app))


def movers(fleet: EdgeFleet) -> tuple[dict[str, str], str, set[str]]:
    """Four pods of the move group, bound: where each is, the member holding most of them (the one
    to cut off), and those pods."""
    fleet.deploy("mover", "edge-move", 4)
    before = placed(fleet, "mover", 4)
    assert set(before.values()) <= set(members("edge-move")), before  # the group's selector holds from the start
    lost = max(members("edge-move"), key=lambda n: list(before.values()).count(n))
    return before, lost, {p for p, n in before.items() if n == lost}


def test_a_move_group_evicts_after_its_seconds_into_the_group_a_stay_group_keeps_its_pods_and_the_node_is_cordoned(
        edge_fleet: EdgeFleet, record_property: Any) -> None:
    fleet = edge_fleet
    move = wait_admission(fleet, "edge-move")
    assert {(t["key"], t["effect"], t["toleration_seconds"]) for t in move} == {(UNREACHABLE, "NoExecute", MOVE_AFTER), (NOT_READY, "NoExecute", MOVE_AFTER)}
    stay = wait_admission(fleet, "edge-stay")
    assert {(t["key"], t["effect"], t["toleration_seconds"]) for t in stay} == {(UNREACHABLE, "NoExecute", None), (NOT_READY, "NoExecute", None)}
    _, lost, gone = movers(fleet)
    fleet.deploy("stayer", "edge-stay", 2)
    stayers = placed(fleet, "stayer", 2)
    assert set(stayers.values()) == {"stay-1"}

    fleet.kubelets.disconnect("stay-1")
    tainted = disconnect(fleet, lost)
    servers.wait_until(lambda: taint(fleet.node("stay-1"), UNREACHABLE) is not None, "stay-1 tainted unreachable", timeout=30)
    # Before the grace: the reconciler reports the node offline and leaves it schedulable.
    early = fleet.reconcile()
    assert (kube.CORDON_ANNOTATION not in (fleet.node(lost).metadata.annotations or {})
            and any(a.verb is Found.OFFLINE and a.target == f"Node {lost}" for a in early.clusters[CLUSTER].actions)), early.clusters[CLUSTER].actions

    def all_evicted() -> bool:
        return all(evicted_at(p) for p in fleet.pods("mover") if p.metadata.name in gone)

    servers.wait_until(all_evicted, f"the pods on {lost} evicted", timeout=MOVE_AFTER + EVICTION_SLACK + 10)
    took = [(evicted_at(p) - tainted).total_seconds() for p in fleet.pods("mover") if p.metadata.name in gone]
    # Not before the declared seconds (timestamps are whole seconds), not the 15 s default, not upstream's 300 s.
    assert all(MOVE_AFTER - 1 <= s <= MOVE_AFTER + EVICTION_SLACK for s in took), took
    after = placed(fleet, "mover", 4)
    others = [n for n in members("edge-move") if n != lost]
    assert set(after.values()) == set(others), after  # replaced on the group's other node, never outside the group

    def cordoned() -> bool:
        fleet.reconcile()
        return bool(fleet.node(lost).spec.unschedulable)

    servers.wait_until(cordoned, f"{lost} cordoned by the reconciler", timeout=GRACE + 30)
    offline_since = servers.condition(fleet.node(lost), "Ready").last_transition_time
    cordoned_after = seconds_since(offline_since)
    assert cordoned_after >= GRACE and fleet.node(lost).metadata.annotations[kube.CORDON_ANNOTATION] == "offline"
    # The stay group's pods outlived the API server's 15 s default, the move group's 30 s and the grace: still bound, none taken.
    still = fleet.pods("stayer")
    assert bound(still) == stayers and not any(evicted_at(p) for p in still)
    record_property("timings", f"move pods evicted {min(took):.0f}-{max(took):.0f} s after the taint (declared {MOVE_AFTER} s, default {DEFAULT_TOLERATION} s); "
                    f"cordoned {cordoned_after:.0f} s after NotReady (grace {GRACE} s); stay pods still bound {seconds_since(tainted):.0f} s after their taint")


def start_reconciler(fleet: EdgeFleet, directory: Path) -> servers.Process:
    """`fleetops reconcile` in service mode (a pass every 2 s, the real policy gate) on the fleet's
    repository; ready once its first pass has run. The same identity each start: a restarted
    reconciler takes its own Lease back at once."""
    port = servers.free_port()
    process = servers.Process("fleetops-reconcile", [
        *fleetops_command(), "reconcile", "--env", "dev", "--repo", str(fleet.repo), "--interval", "2s", "--cluster", CLUSTER,
        "--kubeconfig", str(fleet.kubeconfig), "--cache-dir", str(directory / "cache"), "--identity", "disaster-test",
        "--metrics-port", str(port), "--force-conflicts",
    ], directory).start()
    servers.wait_until(lambda: servers.http_ok(f"http://127.0.0.1:{port}/readyz"), "the reconciler's first pass", process, timeout=120)
    return process


def test_restarting_the_scheduler_and_the_reconciler_mid_incident_loses_nothing_and_converges(
        edge_fleet: EdgeFleet, tmp_path: Path, record_property: Any) -> None:
    fleet = edge_fleet
    wait_admission(fleet, "edge-move")
    before, lost, gone = movers(fleet)
    reconciler = start_reconciler(fleet, tmp_path / "reconciler")

    tainted = disconnect(fleet, lost)
    # Mid-incident both go down hard: the scheduler, and the reconciler in the middle of whatever pass it runs.
    fleet.server.scheduler.stop(signal.SIGKILL)
    reconciler.stop(signal.SIGKILL)
    # The controllers still evict; the ReplicaSet makes replacements that nothing binds while the scheduler is down.
    servers.wait_until(lambda: all(evicted_at(p) for p in fleet.pods("mover") if p.metadata.name in gone),
                       f"the pods on {lost} evicted", timeout=MOVE_AFTER + EVICTION_SLACK + 10)
    servers.wait_until(lambda: len([p for p in fleet.pods("mover") if not p.spec.node_name]) == len(gone), "replacements created")
    assert len(bound(fleet.pods("mover"))) == 4 - len(gone)

    evicted = max(evicted_at(p) for p in fleet.pods("mover") if p.metadata.name in gone)
    assert not fleet.node(lost).spec.unschedulable  # the reconciler went down before the grace
    restarted = time.monotonic()
    fleet.server.start_scheduler()
    reconciler = start_reconciler(fleet, tmp_path / "reconciler")
    try:
        after = placed(fleet, "mover", 4)
        rebound = time.monotonic() - restarted
        assert set(after.values()) == {n for n in members("edge-move") if n != lost}, after
        assert {p: n for p, n in after.items() if p in before} == {p: n for p, n in before.items() if p not in gone}  # the survivors kept their node
        servers.wait_until(lambda: bool(fleet.node(lost).spec.unschedulable), f"{lost} cordoned by the restarted reconciler", reconciler, timeout=GRACE + 30)
        cordoned = time.monotonic() - restarted
    finally:
        reconciler.stop()
    record_property("timings", f"evicted {(evicted - tainted).total_seconds():.0f} s after the taint with the scheduler down (declared {MOVE_AFTER} s); "
                    f"after the restarts, replacements bound in {rebound:.1f} s, node cordoned in {cordoned:.1f} s")
    # Converged: a pass finds every rendered object as Git has it and nothing left to write.
    final = fleet.reconcile()
    assert final.status == "clean" and final.drift == 0 and not final.errors, (final.status, final.errors)
    assert not [a for a in final.clusters[CLUSTER].actions if a.write], final.clusters[CLUSTER].actions
