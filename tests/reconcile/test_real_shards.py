"""Sharded reconciler replicas on real kube-apiservers: three `fleetops reconcile --shard-home` processes over three
clusters, one SIGKILLed while it repairs its cluster. Its clusters are taken over within the Lease time, what it
was repairing is repaired by its successor, and the API servers' audit logs show no cluster written by two
replicas at once (each replica calls as a ServiceAccount of its own, so the audit names the writer)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from benchmarks.generate import synthetic_environment
from tests import servers
from tests.command import fleetops_command
from tests.reconcile.test_real_kube import service_account_token
from tests.reconcile_support import DEV, commit, new_repo

pytestmark = pytest.mark.real

REPLICAS = ("replica-a", "replica-b", "replica-c")
CLUSTERS = ("center-0", "center-1", "edge-0")
NAMESPACE = "fleetops-system"
INTERVAL = 2
LEASE = 15  # max(15 s, 3 x the interval)
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "verbs": ["create", "update", "patch", "delete"]}, {"level": "None"}]}


def audited_server(name: str, directory: Path, etcd: servers.Etcd) -> servers.ApiServer:
    server = servers.ApiServer(name, directory / name, etcd, extra_args=[
        f"--audit-log-path={directory / name / 'audit.log'}", f"--audit-policy-file={directory / 'audit-policy.yaml'}"])
    server.start()
    servers.install_crds(server)
    return server


def replica_tokens(server: servers.ApiServer) -> dict[str, str]:
    """The reconciler's namespace (as installing it made it), and a ServiceAccount per replica, bound to
    cluster-admin: the audit log tells the replicas apart."""
    core, rbac = client.CoreV1Api(server.client()), client.RbacAuthorizationV1Api(server.client())
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    for replica in REPLICAS:
        core.create_namespaced_service_account("default", {"metadata": {"name": replica}})
    rbac.create_cluster_role_binding({"metadata": {"name": "fleetops-replicas"},
                                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                                      "subjects": [{"kind": "ServiceAccount", "name": r, "namespace": "default"} for r in REPLICAS]})
    return {r: service_account_token(server, "default", r) for r in REPLICAS}


def lease_of(server: servers.ApiServer) -> dict[str, Any]:
    try:
        lease = client.CoordinationV1Api(server.client()).read_namespaced_lease("fleetops-reconciler", NAMESPACE)
    except client.ApiException:
        return {}
    return {"holder": lease.spec.holder_identity, "transitions": lease.spec.lease_transitions or 0}


def status_of(server: servers.ApiServer) -> dict[str, str]:
    try:
        return client.CoreV1Api(server.client()).read_namespaced_config_map("fleetops-status", NAMESPACE).data or {}
    except client.ApiException:
        return {}


MANAGED = "app.kubernetes.io/managed-by=fleetops"


def repairable(server: servers.ApiServer) -> set[tuple[str, str, str]]:
    """The fleet's NetworkPolicies and ResourceQuotas on a cluster: what the test deletes by hand."""
    api = server.client()
    found = [("NetworkPolicy", p) for p in client.NetworkingV1Api(api).list_network_policy_for_all_namespaces(label_selector=MANAGED).items]
    found += [("ResourceQuota", q) for q in client.CoreV1Api(api).list_resource_quota_for_all_namespaces(label_selector=MANAGED).items]
    return {(kind, o.metadata.namespace, o.metadata.name) for kind, o in found}


def delete(server: servers.ApiServer, objects: set[tuple[str, str, str]]) -> None:
    networking, core = client.NetworkingV1Api(server.client()), client.CoreV1Api(server.client())
    for kind, namespace, name in objects:
        if kind == "NetworkPolicy":
            networking.delete_namespaced_network_policy(name, namespace)
        else:
            core.delete_namespaced_resource_quota(name, namespace)


def slot_holders(home: servers.ApiServer) -> set[str]:
    leases = client.CoordinationV1Api(home.client()).list_namespaced_lease(NAMESPACE).items
    return {lease.spec.holder_identity for lease in leases if lease.metadata.name.startswith("fleetops-reconciler-shard-") and lease.spec.holder_identity}


def owned(port: int) -> set[str]:
    """The clusters a replica says its shard keeps (its lag series, one per kept cluster)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {m.group(1) for m in re.finditer(r'^fleetops_shard_lag_seconds\{cluster="([^"]+)"', text, re.M)}


def writes(audit: Path) -> list[tuple[str, str]]:
    """(time, replica) of each write that succeeded, Leases left out (the replicas' own bookkeeping)."""
    out = []
    for line in audit.read_text().splitlines():
        event = json.loads(line)
        user = event.get("user", {}).get("username", "")
        if (event.get("stage") == "ResponseComplete" and event.get("objectRef", {}).get("resource") != "leases"
                and user.startswith("system:serviceaccount:default:") and event.get("responseStatus", {}).get("code", 500) < 300):
            out.append((event["stageTimestamp"], user.rsplit(":", 1)[1]))
    return sorted(out)


def writer_runs(events: list[tuple[str, str]]) -> list[str]:
    """The writers in time order, one entry per run of writes by the same replica."""
    runs: list[str] = []
    for _, replica in events:
        if not runs or runs[-1] != replica:
            runs.append(replica)
    return runs


def test_a_replica_killed_mid_pass_is_taken_over_within_the_lease_time_and_no_cluster_has_two_writers(
        etcd: servers.Etcd, tmp_path: Path, record_property: Any) -> None:
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    started: list[servers.ApiServer] = []
    processes: dict[str, servers.Process] = {}
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            apis = dict(zip(CLUSTERS, pool.map(lambda n: audited_server(n, kube, etcd), CLUSTERS)))
        started += apis.values()
        tokens = {c: replica_tokens(s) for c, s in apis.items()}
        doc = synthetic_environment(0.1, "dev", center_clusters=2, edge_clusters=1, tenants=30, edge_groups=1, nodes=8)
        doc["reconciler"] = {"replicas": 3}
        repo = new_repo(tmp_path / "fleet")
        shutil.copytree(DEV.parent.parent / "policies", repo / "policies", ignore=shutil.ignore_patterns("pack", "__pycache__"))
        commit(repo, yaml.safe_dump(doc, sort_keys=False), "three clusters, three replicas")
        ports = {r: servers.free_port() for r in REPLICAS}
        for replica in REPLICAS:
            config = servers.write_kubeconfig(tmp_path / replica / "kubeconfig", {c: (apis[c], tokens[c][replica]) for c in CLUSTERS})
            processes[replica] = servers.Process(replica, [
                *fleetops_command(), "reconcile", "--env", "dev", "--repo", str(repo), "--interval", f"{INTERVAL}s", "--kubeconfig", str(config),
                "--cache-dir", str(tmp_path / replica / "cache"), "--identity", replica, "--shard-home", "center-0", "--force-conflicts", "--metrics-port", str(ports[replica]),
            ], tmp_path / replica).start()

        def settled() -> bool:
            """Every replica holds a slot, the replicas' shards split the clusters, each cluster applied by the holder of its Lease."""
            with contextlib.suppress(OSError, urllib.error.URLError):
                shards = {r: owned(ports[r]) for r in REPLICAS}
                keeper = {c: r for r, kept in shards.items() for c in kept}
                return slot_holders(apis["center-0"]) == set(REPLICAS) and sum(map(len, shards.values())) == len(CLUSTERS) \
                    and all(status_of(s).get("result") == "ok" and lease_of(s).get("holder") == keeper.get(c) for c, s in apis.items())
            return False

        servers.wait_until(settled, "every cluster applied by a replica holding its Lease, the assignment settled", timeout=120)
        holders = {c: lease_of(s)["holder"] for c, s in apis.items()}
        victim = holders["center-1"]
        kept = [c for c, h in holders.items() if h == victim]
        assert len(set(holders.values())) >= 2, holders  # shared, not one replica taking every cluster
        # Drift on the victim's cluster: its next pass re-creates what was deleted; it is killed as the first is back.
        deleted = repairable(apis["center-1"])
        assert len(deleted) > 50, "the fleet renders NetworkPolicies and ResourceQuotas"
        delete(apis["center-1"], deleted)
        servers.wait_until(lambda: bool(repairable(apis["center-1"])), "the victim's repair under way", processes[victim], timeout=30)
        processes[victim].stop(signal.SIGKILL)
        killed = time.monotonic()
        restored_at_kill = len(repairable(apis["center-1"]))

        def taken_over() -> bool:
            return all(lease_of(apis[c]).get("holder") not in (None, victim) for c in kept)

        servers.wait_until(taken_over, f"{victim}'s clusters taken over", timeout=LEASE + 4 * INTERVAL + 15)
        takeover = time.monotonic() - killed
        # One more hand edit, after the takeover: its repair (and whatever the victim had left) is the successor's.
        delete(apis["center-1"], {sorted(repairable(apis["center-1"]))[0]})
        servers.wait_until(lambda: repairable(apis["center-1"]) == deleted, "the successor's repair", timeout=30)
        repaired = time.monotonic() - killed
        assert takeover <= LEASE + 2 * INTERVAL + 5, takeover  # the Lease time, an interval, and a pass starting
        for replica in REPLICAS:
            if replica != victim:
                processes[replica].stop()  # SIGTERM: they release their Leases and slots
        runs = {c: writer_runs(writes(kube / c / "audit.log")) for c in CLUSTERS}
        transitions = {c: lease_of(s)["transitions"] for c, s in apis.items()}
        # Each change of writer is a change of Lease holder: no cluster written by two replicas in turn within one tenure.
        assert all(len(runs[c]) <= transitions[c] + 1 for c in CLUSTERS), (runs, transitions)
        assert victim in runs["center-1"] and runs["center-1"][-1] != victim  # the victim wrote it, then its successor did
        record_property("timings", f"{victim} killed with {restored_at_kill} of {len(deleted)} deleted objects restored; its clusters "
                        f"{', '.join(kept)} taken over in {takeover:.1f} s (Lease {LEASE} s, interval {INTERVAL} s), repaired in "
                        f"{repaired:.1f} s; writers per cluster in turn: {runs}")
    finally:
        for process in processes.values():
            process.stop()
        for server in started:
            server.stop()
