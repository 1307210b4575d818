"""An edge group's disconnect policy on the real kube-apiserver (v1.37): the MutatingAdmissionPolicy
fleetops renders gives the group's pods its offline tolerations, over the 300 s the API server's
DefaultTolerationSeconds plugin adds and over what the pod said. (Evictions and rescheduling with the
controller-manager and scheduler: tests/reconcile/test_real_edge.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fleetops import kube, render
from tests import servers

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def offline_tolerations(server: servers.ApiServer, namespace: str, pod_spec: dict[str, Any]) -> dict[str, int | None]:
    """The offline taints' tolerationSeconds the API server gives a pod (dry run: admission runs in full)."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "probe-"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **pod_spec}}
    created = client.CoreV1Api(server.client()).create_namespaced_pod(namespace, body, dry_run="All")
    return {t.key: t.toleration_seconds for t in created.spec.tolerations or [] if t.key in OFFLINE and t.effect == "NoExecute"}


def test_the_disconnect_policy_sets_the_groups_tolerations_at_admission(api_servers) -> None:
    server = api_servers("edge", crds=False)["edge"]
    state = render.render(ROOT / "environments" / "dev.yaml", revision="r1")
    wanted = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "PriorityClass"}
    apply = servers.applier(server)
    for manifest in sorted((m for m in state.clusters["dev-edge"] if m["kind"] in wanted), key=kube.kind_rank):
        apply(manifest)
    # No controller-manager makes the namespace's ServiceAccount, which pod admission looks up.
    apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}})
    # dev's default class, batch-low, is the group's offline work: serving work names its class.
    on_group = {"nodeSelector": {kube.EDGE_GROUP_LABEL: "dev-jetson"}, "priorityClassName": "inference-critical"}
    # The API server loads admission policies from its watch: wait until the group's is in force.
    servers.wait_until(lambda: offline_tolerations(server, "default", on_group) == dict.fromkeys(OFFLINE, 30),
                       "the disconnect policy of dev-jetson", timeout=60)
    # What the pod says about the offline taints gives way to the group's; its other tolerations stay.
    own = {**on_group, "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600},
                                       {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}
    assert offline_tolerations(server, "default", own) == dict.fromkeys(OFFLINE, 30)
    created = client.CoreV1Api(server.client()).create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "probe-"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **own}}, dry_run="All")
    assert "dedicated" in {t.key for t in created.spec.tolerations}
    # Offline batch work stays bound however long the node is away.
    assert offline_tolerations(server, "default", {**on_group, "priorityClassName": "batch-low"}) == dict.fromkeys(OFFLINE, None)
    assert offline_tolerations(server, "default", {"nodeSelector": on_group["nodeSelector"]}) == dict.fromkeys(OFFLINE, None)
    # A pod for no edge group keeps the API server's default 300 s.
    assert offline_tolerations(server, "default", {}) == dict.fromkeys(OFFLINE, 300)


def job_refusal(server: servers.ApiServer, namespace: str, queue: str, priority_class: str) -> str | None:
    """The API server's refusal of a Job (dry run) for `queue` of `priority_class`, or None when admitted."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "probe-", "labels": {"kueue.x-k8s.io/queue-name": queue}},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "priorityClassName": priority_class,
                                                           "containers": [{"name": "c", "image": "busybox"}]}}}}
    try:
        client.BatchV1Api(server.client()).create_namespaced_job(namespace, job, dry_run="All")
    except client.ApiException as exc:
        return exc.body if exc.status in (403, 422) else f"unexpected {exc.status}"
    return None


def test_the_offline_queue_admits_only_the_groups_offline_classes(api_servers) -> None:
    server = api_servers("edge", crds=False)["edge"]
    state = render.render(ROOT / "environments" / "dev.yaml", revision="r1")
    tenant = [m for m in state.clusters["dev-edge"] if m["kind"] in ("Namespace", "PriorityClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
              and m["metadata"]["name"] in ("edge-dev", "fleetops-tenant-edge-dev", "batch-low", "inference-critical")]
    apply = servers.applier(server)
    for manifest in sorted(tenant, key=kube.kind_rank):
        apply(manifest)
    servers.wait_until(lambda: servers.refused_job(server, "edge-dev"), "the admission policy of edge-dev", timeout=60)
    assert job_refusal(server, "edge-dev", "dev-jetson-offline", "batch-low") is None
    refusal = job_refusal(server, "edge-dev", "dev-jetson-offline", "inference-critical")
    assert refusal and "or dev-jetson-offline for offline work of batch-low" in refusal
    assert job_refusal(server, "edge-dev", "edge-dev-queue", "inference-critical") is None
