"""The official client against a real API server: runs only when FLEETOPS_TEST_KUBECONFIG names one."""

from __future__ import annotations

import os
import uuid

import pytest

from fleetops.cluster import KubeCluster

KUBECONFIG = os.environ.get("FLEETOPS_TEST_KUBECONFIG")
pytestmark = pytest.mark.skipif(
    not KUBECONFIG, reason="no real cluster: set FLEETOPS_TEST_KUBECONFIG to a kubeconfig (no kube-apiserver can be installed here)"
)


def test_apply_list_replace_delete_against_a_real_api_server() -> None:
    api = KubeCluster("real", kubeconfig=KUBECONFIG, context=os.environ.get("FLEETOPS_TEST_CONTEXT"))
    name = f"fleetops-test-{uuid.uuid4().hex[:8]}"
    labels = {"app.kubernetes.io/managed-by": "fleetops", "fleetops.io/environment": name}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "labels": labels}, "data": {"k": "1"}}
    try:
        applied = api.apply(body, "fleetops")
        assert applied["metadata"]["resourceVersion"]
        listed = api.list("v1", "ConfigMap", f"fleetops.io/environment={name}")
        assert [o["metadata"]["name"] for o in listed] == [name] and listed[0]["kind"] == "ConfigMap"
        current = api.get("v1", "ConfigMap", "default", name)
        api.replace({**current, "data": {"k": "2"}})
        assert api.get("v1", "ConfigMap", "default", name)["data"] == {"k": "2"}
    finally:
        api.delete("v1", "ConfigMap", "default", name)
    assert api.get("v1", "ConfigMap", "default", name) is None
