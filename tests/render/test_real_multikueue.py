"""Spill-over proven on the real Kueue's MultiKueue: prod's `research` submits on its manager, runs on a center.

Three real kube-apiservers on loopback, each with the real Kueue: the manager (edge-gz-gateway) and
the two workers (center-bj, center-sh), every one with exactly the objects fleetops renders for it.
The operator's part is done as README.md says: a Secret per worker in Kueue's namespace on the
manager, holding a kubeconfig for the worker (inline CA and token, as MultiKueue requires).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from fleetops import render, spec
from modules.multikueue import secret_name
from modules.scheduler import NAMESPACE as KUEUE_NAMESPACE
from tests import kueue_jobs, servers
from tests.render.test_real_kueue import Tenants

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
TENANT, MANAGER, WORKERS = "research", "edge-gz-gateway", ("center-bj", "center-sh")


def kubeconfig(server: servers.ApiServer) -> str:
    """What the operator puts in the worker's Secret: MultiKueue refuses file paths (certificate-authority)."""
    ca = base64.b64encode(server.ca_file.read_bytes()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "worker",
        "clusters": [{"name": "worker", "cluster": {"server": server.url, "certificate-authority-data": ca}}],
        "users": [{"name": "worker", "user": {"token": server.admin_token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "worker"}}],
    })


def dispatched(manager: Tenants, uid: str) -> str:
    """The worker the manager's Workload was admitted on (status.clusterName, set by MultiKueue)."""
    seen: dict[str, Any] = {}

    def ready() -> bool:
        wl = manager.workload(TENANT, uid)
        seen["wl"] = wl
        return wl is not None and bool(wl.get("status", {}).get("clusterName")) and any(
            c["type"] == "Admitted" and c["status"] == "True" for c in wl["status"].get("conditions", []))

    try:
        servers.wait_until(ready, f"MultiKueue's dispatch of job {uid}", manager.kueue.process, timeout=90)
    except Exception as exc:
        raise AssertionError(f"{exc}\nlast Workload status: {(seen.get('wl') or {}).get('status')}") from None
    return seen["wl"]["status"]["clusterName"]


@pytest.fixture
def fleet(api_servers, tmp_path: Path) -> Iterator[dict[str, servers.KueueServer]]:
    """The manager and both workers, each a real kube-apiserver with the real Kueue and its rendered
    objects, brought up side by side (tests/conftest.py `kueue` starts one at a time)."""
    rendered = render.render(ROOT / "environments" / "prod.yaml", revision="r1").clusters
    names = (MANAGER, *WORKERS)
    apis = api_servers(*names, crds=False)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        futures = {name: pool.submit(servers.kueue_cluster, apis[name], tmp_path / f"kueue-{name}", rendered[name]) for name in names}
    with ExitStack() as stack:
        for future in futures.values():  # every Kueue that started is stopped, even when another failed to
            if future.exception() is None:
                stack.callback(future.result().stop)
        yield {name: future.result() for name, future in futures.items()}


def test_a_job_submitted_on_the_manager_runs_on_a_worker_with_room_and_the_next_on_the_other(fleet, record_property) -> None:
    """A job of 26 GPUs fits research's allowance on either center (26 on h100-mig in Beijing, 48 on
    a100-train in Shanghai); once one center holds it, research has 22 left there, so a second job of
    26 can only go to the other center. Both are submitted on the manager only."""
    env = spec.load_environment(ROOT / "environments" / "prod.yaml")
    clusters = fleet
    core = client.CoreV1Api(clusters[MANAGER].api.client())
    for worker in WORKERS:
        core.create_namespaced_secret(KUEUE_NAMESPACE, {
            "metadata": {"name": secret_name(worker)}, "type": "Opaque",
            "data": {"kubeconfig": base64.b64encode(kubeconfig(clusters[worker].api).encode()).decode()}})
    ready = time.monotonic()

    tenant = next(t for t in env.tenants if t.name == TENANT)
    a100_train = next(p for c in env.clusters for p in c.pools if p.name == "a100-train")
    tolerations = kueue_jobs.tolerating(a100_train.taints)  # research trains on the dedicated pool too
    queue = kueue_jobs.queue_for(tenant, env, "training-standard")
    manager = Tenants(clusters[MANAGER])
    first = manager.submit(TENANT, "first", {"nvidia.com/gpu": 26}, "training-standard", queue, tolerations)
    landed = dispatched(manager, first)
    assert landed in WORKERS
    second = manager.submit(TENANT, "second", {"nvidia.com/gpu": 26}, "training-standard", queue, tolerations)
    other = dispatched(manager, second)
    assert other == next(w for w in WORKERS if w != landed), f"both jobs went to {landed}"

    # Each job is on the worker it was dispatched to, admitted by that worker's own Kueue, and on no other.
    for name, worker in (("first", landed), ("second", other)):
        on_worker = Tenants(clusters[worker])
        job = on_worker.jobs.read_namespaced_job(name, TENANT)
        on_worker.admitted(TENANT, job.metadata.uid)
        elsewhere = Tenants(clusters[next(w for w in WORKERS if w != worker)])
        servers.wait_until(lambda: not any(j.metadata.name == name for j in elsewhere.jobs.list_namespaced_job(TENANT).items),
                           f"job {name} withdrawn from the other worker", timeout=60)
    # The manager runs neither: MultiKueue manages its Jobs, which stay suspended there.
    for name in ("first", "second"):
        assert manager.jobs.read_namespaced_job(name, TENANT).spec.managed_by == "kueue.x-k8s.io/multikueue"
    record_property("timings", f"both dispatches and their checks {time.monotonic() - ready:.1f}s")
