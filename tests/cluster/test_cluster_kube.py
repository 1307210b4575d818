"""The official client against a real API server (`make tools` builds it): the calls the reconciler makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetops import errors
from fleetops.cluster import ApiError, KubeCluster

pytestmark = pytest.mark.real

LABELS = {"app.kubernetes.io/managed-by": "fleetops", "fleetops.io/environment": "t"}


def test_apply_list_replace_delete_against_a_real_api_server(api_servers, tmp_path: Path) -> None:
    server = api_servers("one", crds=False)["one"]
    api = KubeCluster("one", kubeconfig=str(server.kubeconfig(tmp_path / "kubeconfig")), context="one")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default", "labels": LABELS}, "data": {"k": "1"}}
    applied = api.apply(body, "fleetops")
    assert applied["metadata"]["resourceVersion"]
    assert [m["manager"] for m in applied["metadata"]["managedFields"]] == ["fleetops"]
    listed = api.list("v1", "ConfigMap", "fleetops.io/environment=t")
    assert [o["metadata"]["name"] for o in listed] == ["a"] and listed[0]["kind"] == "ConfigMap"
    current = api.get("v1", "ConfigMap", "default", "a")
    api.replace({**current, "data": {"k": "2"}})
    assert api.get("v1", "ConfigMap", "default", "a")["data"] == {"k": "2"}
    with pytest.raises(ApiError) as stale:
        api.replace(current)  # the resourceVersion read before the last write
    assert stale.value.status == 409
    api.delete("v1", "ConfigMap", "default", "a")
    assert api.get("v1", "ConfigMap", "default", "a") is None


def test_an_unknown_field_is_refused_not_dropped(api_servers, tmp_path: Path) -> None:
    server = api_servers("one", crds=False)["one"]
    api = KubeCluster("one", kubeconfig=str(server.kubeconfig(tmp_path / "kubeconfig")), context="one")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {}, "spec": {"x": 1}}
    with pytest.raises(errors.Untypable) as caught:
        api.apply(body, "fleetops")
    # A real kube-apiserver answers 500 here, not 400, with no reason: the error must still not be retried.
    assert caught.value.status == 500 and ".spec: field not declared in schema" in caught.value.reason
    assert not caught.value.retryable
    assert api.get("v1", "ConfigMap", "default", "a") is None
