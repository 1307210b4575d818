"""One reconcile suite, two backends: the in-memory twin and a real kube-apiserver.

`RealCluster` is the product's `KubeCluster` on a real API server, with what the tests do to a
`MemoryCluster` besides reconciling: count the reconciler's calls per verb and kind, read objects
without counting (`peek`), and act as other clients would (`put` is a hand edit by another field
manager, `seed` creates objects, `remove` deletes one).
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

from fleetops.cluster import KubeCluster, Manifest
from tests.fakes import CallCounts
from tests.servers import ApiServer


class RealCluster(CallCounts):
    def __init__(self, name: str, server: ApiServer, kubeconfig: Path, token: str | None = None):
        self.name = name
        self.server = server
        server.kubeconfig(kubeconfig, context=name, token=token)
        self.kube = KubeCluster(name, kubeconfig=str(kubeconfig), context=name)
        self._admin = KubeCluster(name, kubeconfig=str(server.kubeconfig(kubeconfig.with_suffix(".admin"), context=name)), context=name)
        self.calls: Counter[tuple[str, str]] = Counter()

    # -- the ClusterAPI the reconciler uses, counted --------------------------------------------

    def list(self, api_version: str, kind: str, label_selector: str = "") -> list[Manifest]:
        self.calls[("list", kind)] += 1
        return self.kube.list(api_version, kind, label_selector)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        self.calls[("get", kind)] += 1
        return self.kube.get(api_version, kind, namespace, name)

    def find(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        self.calls[("find", kind)] += 1
        return self.kube.find(api_version, kind, namespace, name)

    def apply(self, manifest: Manifest, field_manager: str, force: bool = False) -> Manifest:
        self.calls[("apply", manifest["kind"])] += 1
        return self.kube.apply(manifest, field_manager, force)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.calls[("delete", kind)] += 1
        self.kube.delete(api_version, kind, namespace, name)

    def patch_node(self, name: str, patch: Manifest) -> Manifest:
        self.calls[("patch", "Node")] += 1
        return self.kube.patch_node(name, patch)

    def create(self, manifest: Manifest) -> Manifest:
        self.calls[("create", manifest["kind"])] += 1
        return self.kube.create(manifest)

    def replace(self, manifest: Manifest) -> Manifest:
        self.calls[("replace", manifest["kind"])] += 1
        return self.kube.replace(manifest)

    def approve(self, csr: Manifest) -> Manifest:
        self.calls[("approve", csr["kind"])] += 1
        return self.kube.approve(csr)

    # -- other clients, uncounted ----------------------------------------------------------------

    def peek(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        return self._admin.get(api_version, kind, namespace, name)

    def objects(self, kind: str | None = None, api_version: str = "v1") -> list[Manifest]:
        assert kind is not None, "a real server is listed one kind at a time"
        return self._admin.list(api_version, kind)

    def seed(self, *manifests: Manifest, manager: str = "kubectl") -> None:
        for manifest in manifests:
            self.put(manifest, manager=manager)

    def put(self, manifest: Manifest, manager: str = "kubectl-edit") -> Manifest:
        """A write by another client: create the object, or replace it (a `kubectl edit`), as `manager`."""
        if manifest["kind"] == "CertificateSigningRequest":
            return self._request_certificate(manifest)
        body = copy.deepcopy(manifest)
        body["metadata"].pop("managedFields", None)
        meta = body["metadata"]
        current = self.peek(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"])
        resource = self._admin._resource(body["apiVersion"], body["kind"])
        namespace = meta.get("namespace")
        if current is None:
            meta.pop("resourceVersion", None)
            created = resource.create(body=body, namespace=namespace, field_manager=manager).to_dict()
            if "status" in body and body["kind"] == "Node":
                # A kubelet reports node status through the status subresource.
                body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
                return resource.status.replace(body=body, field_manager=manager).to_dict()
            return created
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        updated = resource.replace(body=body, namespace=namespace, field_manager=manager).to_dict()
        if "status" in body and body["kind"] == "Node":
            body["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"]
            return resource.status.replace(body=body, field_manager=manager).to_dict()
        return updated

    def _request_certificate(self, csr: Manifest) -> Manifest:
        """A kubelet's certificate request, sent as the kubelet: the server sets spec.username from
        whoever sends it (a bootstrap token before the node exists, the node itself to renew)."""
        from kubernetes import dynamic

        user = csr["spec"]["username"]
        groups = [g for g in csr["spec"].get("groups") or [] if g != "system:authenticated"]
        admin = dynamic.DynamicClient(self.server.client())
        binding = {  # what kubeadm grants joining and renewing kubelets
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "test-kubelet-csr"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in ("system:bootstrappers", "system:nodes")]
            + [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],  # a requester of any other name
        }
        admin.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRoleBinding").server_side_apply(body=binding, field_manager="test")
        kubelet = dynamic.DynamicClient(self.server.client(impersonate=(user, groups)))
        body = {**csr, "spec": {k: v for k, v in csr["spec"].items() if k not in ("username", "groups")}}
        return kubelet.resources.get(api_version=csr["apiVersion"], kind=csr["kind"]).create(body=body).to_dict()

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._admin.delete(api_version, kind, namespace, name)
