"""What only a real kube-apiserver can tell: it accepts every rendered object, the reconciler's own RBAC
is enough for a pass, and a server that stops or never answers is handled in seconds.

The reconcile behaviours themselves (converge, drift, conflicts, prune, nodes, Lease) run on both
backends in tests/reconcile/test_reconcile.py and tests/reconcile/test_reconcile_service.py.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic

from fleetops import kube, reconcile, render
from tests import servers
from tests.backends import RealCluster
from tests.command import run
from tests.reconcile_support import DEV, Sleeps, allow, commit, dev, key_fingerprint, kubelet_csr, new_repo, options

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]


def dry_run_apply(dyn: Any, manifest: dict[str, Any]) -> str | None:
    """Server-side apply with dryRun=All and strict field validation; the server's refusal, or None."""
    resource = dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    try:
        resource.server_side_apply(body=manifest, namespace=manifest["metadata"].get("namespace"), field_manager="fleetops",
                                   dry_run="All", query_params=[("fieldValidation", "Strict")])
    except Exception as exc:  # noqa: BLE001 - the server's answer is what the test reports
        return f"{manifest['kind']} {manifest['metadata']['name']}: {getattr(exc, 'body', exc)}"
    return None


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_the_real_server_accepts_every_rendered_object_strictly(api_servers, name: str) -> None:
    server = api_servers("one")["one"]
    dyn = dynamic.DynamicClient(server.client())
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="r1")
    refused = []
    for cluster, manifests in state.clusters.items():
        namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
        for m in manifests:  # namespaced objects are judged in namespaces that exist
            if m["kind"] == "Namespace":
                namespaces.server_side_apply(body=m, field_manager="fleetops", force_conflicts=True)
        refused += [f"{cluster}: {r}" for m in manifests if (r := dry_run_apply(dyn, m))]
    assert refused == []
    # The check can fail: a field no schema has is refused, in a core kind and in a custom resource.
    quota = next(m for m in state.clusters[next(iter(state.clusters))] if m["kind"] == "ResourceQuota")
    assert dry_run_apply(dyn, {**quota, "spec": {**quota["spec"], "hardd": {}}})
    queue = next(m for m in state.objects() if m[1]["kind"] in ("ClusterQueue", "Queue"))[1]
    assert dry_run_apply(dyn, {**queue, "spec": {**queue["spec"], "nominalQuota": 1}})


# --- RBAC: a pass as the reconciler's own ServiceAccount -------------------------------------------------


def service_account_token(server: servers.ApiServer, namespace: str, name: str) -> str:
    """A token the way a pod gets one: TokenRequest for the ServiceAccount."""
    core = client.CoreV1Api(server.client())
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[server.url], expiration_seconds=3600))
    return core.create_namespaced_service_account_token(name, namespace, request).status.token


def install_reconciler_rbac(server: servers.ApiServer, manifests: list[dict[str, Any]], drop_resource: str | None = None) -> None:
    """What an administrator applies once (pulumi up): the reconciler's namespace, account and roles."""
    dyn = dynamic.DynamicClient(server.client())
    own = [m for m in manifests if m["metadata"]["name"] in ("fleetops-reconciler", "fleetops-system")
           and m["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]
    for m in sorted(own, key=kube.kind_rank):
        if m["kind"] == "ClusterRole" and drop_resource:
            m = {**m, "rules": [{**r, "resources": [x for x in r["resources"] if x != drop_resource]} for r in m["rules"]]}
        dyn.resources.get(api_version=m["apiVersion"], kind=m["kind"]).server_side_apply(body=m, field_manager="admin")


def fleet_repo(path: Path, text: str | None = None) -> Path:
    repo = new_repo(path)
    shutil.copytree(ROOT / "policies", repo / "policies", ignore=shutil.ignore_patterns("pack"))
    commit(repo, text or DEV.read_text(), "fleet")
    return repo


CONTEXTS = {"dev-center": "dev", "dev-edge": "dev-edge"}


def as_reconciler(api_servers, tmp_path: Path, cluster: str = "dev-center", drop_resource: str | None = None,
                  text: str | None = None) -> tuple[servers.ApiServer, Path, Path]:
    server = api_servers(cluster)[cluster]
    _, state = dev()
    install_reconciler_rbac(server, state.clusters[cluster], drop_resource)
    token = service_account_token(server, "fleetops-system", "fleetops-reconciler")
    kubeconfig = servers.write_kubeconfig(tmp_path / "reconciler.kubeconfig", {CONTEXTS[cluster]: (server, token)})
    return server, kubeconfig, fleet_repo(tmp_path / "fleet", text)


def reconcile_as(kubeconfig: Path, repo: Path, tmp_path: Path, cluster: str = "dev-center") -> tuple[int, dict[str, Any], str]:
    done = run("reconcile", "--env", "dev", "--repo", repo, "--once", "--cluster", cluster, "--kubeconfig", kubeconfig,
               "--prune", "--force-conflicts", "--cache-dir", tmp_path / "cache", "--output", "json")
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


@pytest.mark.parametrize("cluster", ["dev-center", "dev-edge"])
def test_a_pass_as_the_reconcilers_service_account_succeeds_with_its_rendered_role(api_servers, tmp_path: Path, cluster: str) -> None:
    text = DEV.read_text().replace(f"          - sha256:{'0d' * 32}", f"          - {key_fingerprint('orin-1')}")
    server, kubeconfig, repo = as_reconciler(api_servers, tmp_path, cluster, text=text)
    if cluster == "dev-edge":  # a device asks to join: approving it takes the signer permission the role grants
        RealCluster("dev-edge", server, tmp_path / "seed.kubeconfig").seed(kubelet_csr("csr-orin-1", "dev-orin-1", key="orin-1"))
    code, result, stderr = reconcile_as(kubeconfig, repo, tmp_path, cluster)
    assert code == 0 and result["status"] == "applied", (stderr, result.get("clusters", {}).get(cluster, {}).get("errors"))
    if cluster == "dev-edge":
        assert ("approve", "CertificateSigningRequest csr-orin-1") in {(a["verb"], a["target"]) for a in result["clusters"][cluster]["actions"]}
    code, again, _ = reconcile_as(kubeconfig, repo, tmp_path, cluster)
    assert code == 0 and again["status"] == "clean" and again["drift"] == 0


def test_a_pass_that_needs_a_kind_the_role_lacks_fails_with_a_clear_error(api_servers, tmp_path: Path) -> None:
    _, kubeconfig, repo = as_reconciler(api_servers, tmp_path, drop_resource="limitranges")
    code, result, stderr = reconcile_as(kubeconfig, repo, tmp_path)
    errors = result["clusters"]["dev-center"]["errors"]
    assert code == 1 and result["status"] == "errors"
    lacking = [e for e in errors if "LimitRange" in e]
    assert lacking and all("403" in e and 'cannot list resource "limitranges"' in e or 'cannot patch resource "limitranges"' in e for e in lacking), errors
    assert any("RBAC" in e for e in lacking)  # says where the permission comes from
    # The reconciler cannot grant itself what it lacks: the ClusterRole is an administrator's to update.
    assert any("ClusterRole fleetops-reconciler" in e and "403" in e for e in errors), errors


# --- faults ---------------------------------------------------------------------------------------------


class StopsAfter(RealCluster):
    """A cluster whose API server is stopped after a number of applies, in the middle of a pass."""

    stop_after: int = -1

    def apply(self, manifest, field_manager, force=False):
        if self.stop_after == 0:
            self.server.stop()
        self.stop_after -= 1
        return super().apply(manifest, field_manager, force)


def test_a_server_stopped_mid_pass_then_restarted_converges_and_loses_nothing(api_servers, tmp_path: Path) -> None:
    env, state = dev()
    started = api_servers(*(c.name for c in env.clusters))
    apis = {n: StopsAfter(n, s, tmp_path / f"{n}.kubeconfig") for n, s in started.items()}
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "applied"
    before = {n: len(api.objects("ConfigMap")) + len(api.objects("NetworkPolicy", "networking.k8s.io/v1")) for n, api in apis.items()}
    bigger = render.DesiredState(state.environment, "rev-2", {
        c: [m if m["kind"] != "ResourceQuota" else {**m, "spec": {"hard": {k: "33" for k in m["spec"]["hard"]}}} for m in ms]
        for c, ms in state.clusters.items()}, state.resources)
    apis["dev-center"].stop_after = 1
    sleeps = Sleeps()
    broken = reconcile.run_pass(env, bigger, apis, allow, options(sleep=sleeps, prune=True))
    assert broken.status == "errors" and broken.last_applied is None
    center = broken.clusters["dev-center"]
    assert [e for e in center.errors if "stopped answering" in e] == center.errors[-1:] and len(center.errors) <= 2, center.errors
    assert not [a for a in center.actions if a.verb == "prune"]  # unknown is never pruned
    assert broken.clusters["dev-edge"].errors == []  # the other cluster went on
    started["dev-center"].start()  # same store, same address
    servers.wait_crds_served(started["dev-center"])  # a restarted server answers 429 until CRD storage is back
    healed = reconcile.run_pass(env, bigger, apis, allow, options(prune=True))
    assert healed.status == "applied" and not healed.errors
    assert reconcile.run_pass(env, bigger, apis, allow, options(prune=True)).status == "clean"
    after = {n: len(api.objects("ConfigMap")) + len(api.objects("NetworkPolicy", "networking.k8s.io/v1")) for n, api in apis.items()}
    assert after == before  # nothing managed was lost
    quota = apis["dev-center"].peek("v1", "ResourceQuota", "ml-sandbox", "device-nvidia-com-gpu")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "33"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def unreachable_kubeconfig(tmp_path: Path, server: servers.ApiServer, ports: dict[str, int]) -> Path:
    """The dev contexts, each pointing at a port of 127.0.0.1 where no API server answers."""
    path = servers.write_kubeconfig(tmp_path / "kubeconfig", {ctx: (server, "token") for ctx in ports})
    text = path.read_text()
    for ctx, port in ports.items():
        text = text.replace(f"server: {server.url}", f"server: https://127.0.0.1:{port}", 1)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("how", "mode"), [("refused", "--dry-run"), ("silent", "--dry-run"), ("refused", "--prune"), ("silent", "--prune")])
def test_an_unreachable_server_is_one_clear_line_per_cluster_within_seconds(api_servers, tmp_path: Path, how: str, mode: str) -> None:
    server = api_servers("one", crds=False)["one"]  # for its CA file only
    listeners = []
    if how == "refused":
        ports = {"dev": closed_port(), "dev-edge": closed_port()}
    else:  # accepts connections and never answers: only a timeout ends a call
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            listeners.append(s)
        ports = {"dev": listeners[0].getsockname()[1], "dev-edge": listeners[1].getsockname()[1]}
    kubeconfig = unreachable_kubeconfig(tmp_path, server, ports)
    repo = fleet_repo(tmp_path / "fleet")
    started = time.monotonic()
    done = run("reconcile", "--env", "dev", "--repo", repo, "--once", mode, "--kubeconfig", kubeconfig,
               "--request-timeout", "2s", "--cache-dir", tmp_path / "cache")
    elapsed = time.monotonic() - started
    for s in listeners:
        s.close()
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "unreachable" in line]
    assert sorted(line.split(":")[0] for line in lines) == ["dev-center", "dev-edge"], done.stderr
    assert "planned" not in done.stdout and "create" not in done.stdout  # no rows that pretend the cluster is empty
    assert elapsed < 60, f"took {elapsed:.0f}s"  # seconds, not the minutes of a retry schedule per object


# --- tenant limits, enforced by the API server itself ------------------------------------------------


def job(name: str, namespace: str, priority: str | None = None, queue: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    if priority:
        pod["priorityClassName"] = priority
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"suspend": True, "template": {"spec": pod}}}


def submit(dyn: Any, manifest: dict[str, Any], dry_run: bool = False) -> str | None:
    """Create as a user would (kubectl create); the API server's refusal, or None."""
    try:
        dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"]).create(
            body=manifest, namespace=manifest["metadata"]["namespace"], **({"dry_run": "All"} if dry_run else {}))
    except Exception as exc:  # noqa: BLE001 - the refusal is what the test reads
        return json.loads(exc.body)["message"] if getattr(exc, "body", None) else str(exc)
    return None


def test_a_tenants_priority_classes_and_queue_hold_for_every_workload_submitted(api_servers, tmp_path: Path) -> None:
    env, state = dev()
    started = api_servers("dev-center")
    started["dev-center"].start_controllers("resourcequota")  # quota admission needs the quota's status
    apis = {"dev-center": RealCluster("dev-center", started["dev-center"], tmp_path / "kubeconfig")}
    center = env.model_copy(update={"clusters": [c for c in env.clusters if c.name == "dev-center"]})
    assert reconcile.run_pass(center, state, apis, allow, options()).status == "applied"
    dyn = dynamic.DynamicClient(started["dev-center"].client())
    tenant = "ml-sandbox"  # training-standard and batch-low; queue ml-sandbox-queue
    # The API server loads a new policy from its watch within moments: probe with dry runs until it holds.
    servers.wait_until(lambda: submit(dyn, job("probe", tenant, "inference-critical", f"{tenant}-queue"), dry_run=True) is not None,
                       "the tenant's admission policy in effect", timeout=30)
    assert submit(dyn, job("ok", tenant, "training-standard", f"{tenant}-queue")) is None
    refused = submit(dyn, job("vip", tenant, "inference-critical", f"{tenant}-queue"))
    assert refused and "priority class inference-critical is not allowed for tenant ml-sandbox (allowed: batch-low, training-standard)" in refused
    refused = submit(dyn, job("bypass", tenant, "training-standard"))
    assert refused and "set the label kueue.x-k8s.io/queue-name: ml-sandbox-queue" in refused
    refused = submit(dyn, job("other-queue", tenant, "training-standard", "platform-dev-queue"))
    assert refused and "ml-sandbox-queue" in refused
    # A bare pod of a forbidden class is refused too; the tenant's quota of other classes is zero pods.
    client.CoreV1Api(started["dev-center"].client()).create_namespaced_service_account(
        tenant, {"metadata": {"name": "default"}})  # what the controller manager's serviceaccount controller does
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": tenant, "labels": {"kueue.x-k8s.io/queue-name": f"{tenant}-queue"}},
           "spec": {"priorityClassName": "inference-critical", "containers": [{"name": "c", "image": "busybox"}]}}
    assert "is not allowed for tenant ml-sandbox" in (submit(dyn, pod) or "")
    # The other tenant's classes are its own: inference-critical is allowed in platform-dev.
    assert submit(dyn, job("vip", "platform-dev", "inference-critical", "platform-dev-queue")) is None
    # Without the policy (deleted by hand), the quota alone still admits no pod of another class.
    apis["dev-center"].remove("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "", f"fleetops-tenant-{tenant}")
    servers.wait_until(lambda: "exceeded quota: priority-classes" in (submit(dyn, pod, dry_run=True) or ""), "the quota refusing the pod", timeout=30)


# --- the fleet API's own rights ------------------------------------------------------------------------


def test_the_fleet_apis_service_account_reads_the_status_configmap_and_nothing_else(api_servers, tmp_path: Path) -> None:
    """What prod renders for the API (modules/api.py), applied to a real server: its token may read the
    reconciler's status ConfigMap, as `serve --in-cluster` does, and is refused anything else."""
    from fleetops import cluster as cluster_mod
    from fleetops.errors import Forbidden
    from fleetops.reconcile.options import Options
    from fleetops.reconcile.status import read_status
    from modules.api import NAME

    server = api_servers("one")["one"]
    dyn = dynamic.DynamicClient(server.client())
    state = render.render(ROOT / "environments" / "prod.yaml", revision="r1")
    namespace = next(m for m in state.clusters["center-bj"] if m["kind"] == "Deployment" and m["metadata"]["name"] == NAME)["metadata"]["namespace"]
    own = [m for m in state.clusters["center-bj"] if (m["kind"], m["metadata"]["name"]) in
           {("Namespace", namespace), ("ServiceAccount", NAME), ("Role", NAME), ("RoleBinding", NAME)}]
    assert len(own) == 4
    for m in sorted(own, key=kube.kind_rank):
        dyn.resources.get(api_version=m["apiVersion"], kind=m["kind"]).server_side_apply(body=m, field_manager="admin")
    status = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": kube.STATUS_CONFIGMAP, "namespace": namespace},
              "data": {"environment": "prod", "revision": "abc", "result": "ok", "message": ""}}
    dyn.resources.get(api_version="v1", kind="ConfigMap").create(body=status, namespace=namespace)
    token = service_account_token(server, namespace, NAME)
    kubeconfig = servers.write_kubeconfig(tmp_path / "api.kubeconfig", {"api": (server, token)})
    api = cluster_mod.connect("center-bj", str(kubeconfig), "api", False, 10)
    assert read_status(api, Options(namespace=namespace, attempts=1))["data"]["result"] == "ok"
    for attempt in (lambda: api.list("v1", "ConfigMap"), lambda: api.get("v1", "Secret", namespace, "fleetops-git"),
                    lambda: api.get("v1", "ConfigMap", namespace, "fleetops-inventory")):
        with pytest.raises(Forbidden):
            attempt()
