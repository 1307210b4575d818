"""KubeCluster speaks the API server's protocol: checked against a scripted HTTP server on 127.0.0.1.

This is not a real kube-apiserver (none can be installed here); it answers discovery and a few
object paths, and records each request so the test can check what the official client sent.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from fleetops import errors
from fleetops.cluster import ApiError, KubeCluster

RESOURCES = {
    "kind": "APIResourceList", "groupVersion": "v1",
    "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap", "verbs": ["create", "delete", "get", "list", "patch", "update"]},
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list", "patch"]},
    ],
}
DISCOVERY = {
    "/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": RESOURCES,
}


class Scripted(http.server.BaseHTTPRequestHandler):
    requests: list[dict] = []

    def _answer(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                              "content_type": self.headers.get("Content-Type"), "body": body})
        if url.path in DISCOVERY:
            return self._send(200, DISCOVERY[url.path])
        if url.path == "/api/v1/configmaps":
            return self._send(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {},
                                    "items": [{"metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"}, "data": {}}]})
        if url.path == "/api/v1/namespaces/default/configmaps":  # a LIST by name: the one object, or none
            named = [n for n in ("a",) if parse_qs(url.query).get("fieldSelector") == [f"metadata.name={n}"]]
            return self._send(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {},
                                    "items": [{"metadata": {"name": n, "namespace": "default", "labels": {"edited": "by-hand"}}} for n in named]})
        if url.path.endswith("/configmaps/missing"):
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
        if url.path.endswith("/configmaps/echo"):  # a server that echoes the request into its Status message
            echoed = f"denied {self.headers.get('Authorization')}; also Bearer other-token-value and eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl " + "x" * 5000
            return self._send(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403, "message": echoed})
        if url.path.endswith("/configmaps/page"):  # a proxy's page, not a Status: its body is never shown
            return self._send(502, {"request": {"headers": {"Authorization": self.headers.get("Authorization")}}})
        if url.path.endswith("/configmaps/busy"):
            return self._send(429, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests", "code": 429}, {"Retry-After": "3"})
        if url.path.endswith("/configmaps/owned"):  # the Status kube-apiserver answers a server-side apply conflict with
            return self._send(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                                    "message": "Apply failed with 1 conflict: conflict with \"kubectl-edit\": .data.k",
                                    "details": {"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl-edit\"", "field": ".data.k"}]}})
        if url.path.endswith("/configmaps/stale"):  # a stale update: a conflict of another kind, no field manager named
            return self._send(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                                    "message": "Apply failed with 1 conflict: the object has been modified"})
        if url.path.endswith("/configmaps/untypable"):  # kube-apiserver's answer to an apply with a field the schema lacks: no reason
            return self._send(500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                                    "message": "failed to create typed patch object (default/untypable; /v1, Kind=ConfigMap): .spec: field not declared in schema"})
        if url.path.endswith("/configmaps/flaky"):  # an error the storage did not type either, which a retry may heal
            return self._send(500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "message": "etcdserver: leader changed"})
        echo = {"apiVersion": "v1", "kind": "Node", **(body or {}), "metadata": {**(body or {}).get("metadata", {}), "resourceVersion": "8"}}
        return self._send(200, echo)

    do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _answer

    def _send(self, code: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kube(tmp_path: Path):
    Scripted.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "t", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    try:
        yield KubeCluster("t", kubeconfig=str(config), context="t", timeout=5)
    finally:
        server.shutdown()


def sent(method: str, suffix: str) -> dict:
    return next(r for r in Scripted.requests if r["method"] == method and r["path"].endswith(suffix))


def test_list_by_label_selector_fills_in_kind(kube: KubeCluster) -> None:
    items = kube.list("v1", "ConfigMap", "app.kubernetes.io/managed-by=fleetops,fleetops.io/environment=dev")
    assert items[0]["kind"] == "ConfigMap" and items[0]["apiVersion"] == "v1" and items[0]["metadata"]["name"] == "a"
    assert sent("GET", "/api/v1/configmaps")["query"]["labelSelector"] == ["app.kubernetes.io/managed-by=fleetops,fleetops.io/environment=dev"]


def test_find_lists_one_namespace_by_metadata_name_whatever_the_labels(kube: KubeCluster) -> None:
    found = kube.find("v1", "ConfigMap", "default", "a")
    assert (found["apiVersion"], found["kind"], found["metadata"]["name"]) == ("v1", "ConfigMap", "a")
    request = sent("GET", "/api/v1/namespaces/default/configmaps")
    assert request["query"]["fieldSelector"] == ["metadata.name=a"] and "labelSelector" not in request["query"]
    assert kube.find("v1", "ConfigMap", "default", "gone") is None


def test_apply_is_a_server_side_apply_patch_with_field_manager_and_force(kube: KubeCluster) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}
    kube.apply(body, "fleetops", force=True)
    request = sent("PATCH", "/namespaces/default/configmaps/a")
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["query"]["fieldManager"] == ["fleetops"] and request["query"]["force"][0].lower() == "true"
    assert request["body"] == body


def test_node_patch_is_a_merge_patch(kube: KubeCluster) -> None:
    kube.patch_node("n1", {"metadata": {"labels": {"fleetops.io/pool": "p"}}})
    assert sent("PATCH", "/api/v1/nodes/n1")["content_type"] == "application/merge-patch+json"


def test_not_found_is_none_and_429_carries_retry_after(kube: KubeCluster) -> None:
    assert kube.get("v1", "ConfigMap", "default", "missing") is None
    with pytest.raises(ApiError) as err:
        kube.get("v1", "ConfigMap", "default", "busy")
    assert err.value.status == 429 and err.value.retry_after == 3 and err.value.retryable
    assert "not-a-real-token" not in str(err.value)


def test_a_field_conflict_is_told_by_the_cause_the_server_names_not_by_its_message(kube: KubeCluster) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}, "data": {"k": "v"}}
    with pytest.raises(errors.Conflict) as owned:
        kube.apply({**body, "metadata": {**body["metadata"], "name": "owned"}}, "fleetops")
    assert owned.value.field_conflict and not owned.value.retryable
    # The same words in the message without the cause: a conflict a retry after a re-read may heal.
    with pytest.raises(errors.Conflict) as stale:
        kube.apply({**body, "metadata": {**body["metadata"], "name": "stale"}}, "fleetops")
    assert not stale.value.field_conflict and stale.value.retryable


def test_an_apply_the_schema_cannot_type_is_its_own_kind_and_not_retried(kube: KubeCluster) -> None:
    # Both are a 500 with no reason: only the words tell them apart, read once where the Status is read.
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}, "data": {}}
    with pytest.raises(errors.Untypable) as untypable:
        kube.apply({**body, "metadata": {**body["metadata"], "name": "untypable"}}, "fleetops")
    assert untypable.value.status == 500 and not untypable.value.retryable
    with pytest.raises(errors.ServerError) as flaky:
        kube.apply({**body, "metadata": {**body["metadata"], "name": "flaky"}}, "fleetops")
    assert type(flaky.value) is errors.ServerError and flaky.value.retryable


def test_a_server_echoing_the_token_never_gets_it_printed(kube: KubeCluster) -> None:
    with pytest.raises(ApiError) as err:
        kube.get("v1", "ConfigMap", "default", "echo")
    shown = str(err.value)
    assert shown.startswith("403 Forbidden: denied Bearer ***; also Bearer ***") and "***" in shown
    for secret in ("not-a-real-token", "other-token-value", "eyJhbGciOi"):
        assert secret not in shown
    assert len(shown) < 400  # bounded, not 5,000 characters of a message
    with pytest.raises(ApiError) as err:
        kube.get("v1", "ConfigMap", "default", "page")
    assert err.value.status == 502 and "not-a-real-token" not in str(err.value) and "Authorization" not in str(err.value)
