"""`fleetops why` and `standing` without real servers: bad input refused in one line, and the fleet API's
routes keeping a tenant token to its own jobs and use.

The answers themselves are proven on the real Kueue (tests/why/test_why_real.py). Here the cluster is the
in-memory twin holding dev-center's rendered queues and Workloads as Kueue writes them (an admitted one
with its ClusterQueue's usage, a pending one with Kueue's message): what the routes are given to show.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetops import render
from fleetops.api import app as api_app, auth, snapshot as snapshot_mod
from tests.command import run
from tests.fakes.cluster import MemoryCluster
from tests.helpers import ROOT
from tests.kueue_jobs import suspended_job
from tests.plan.test_plan import make_repo

OPERATOR = "op-why-0a1b2c3d4e5f-not-a-real-secret"
SANDBOX = "sandbox-why-9f8e7d6c-tenant-token"
KUEUE = "kueue.x-k8s.io/v1beta2"


def workload(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue writes for a Job (its pod template as the pod set), with `status`."""
    meta = job["metadata"]
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": f"job-{meta['name']}-1a2b3", "namespace": meta["namespace"], "labels": {},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": "u"}]},
            "spec": {"queueName": meta["labels"]["kueue.x-k8s.io/queue-name"],
                     "podSets": [{"name": "main", "count": 1, "template": job["spec"]["template"]}]},
            "status": status}


def twin() -> MemoryCluster:
    """dev-center with platform-dev holding 20 GPUs of dev-a100 (4 borrowed) and ml-sandbox's 16 pending."""
    objects = render.render(ROOT / "environments" / "dev.yaml", revision="r1").clusters["dev-center"]
    cluster = MemoryCluster("dev-center")
    cluster.seed(*(o for o in objects if o["kind"] == "Namespace"))
    for o in objects:
        if o["kind"] in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"):
            if o["metadata"]["name"] == "platform-dev" and o["kind"] == "ClusterQueue":
                o = {**o, "status": {"flavorsReservation": [{"name": "dev-a100", "resources": [{"name": "nvidia.com/gpu", "total": "20", "borrowed": "4"}]}]}}
            cluster.seed(o)
    fill = suspended_job("platform-dev", "fill", "platform-dev-queue", {"nvidia.com/gpu": 20}, "training-standard")
    cluster.seed(workload(fill, {"conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
                                 "admission": {"clusterQueue": "platform-dev", "podSetAssignments": [
                                     {"name": "main", "flavors": {"nvidia.com/gpu": "dev-a100"}, "resourceUsage": {"nvidia.com/gpu": "20"}}]}}))
    train = suspended_job("ml-sandbox", "train", "ml-sandbox-queue", {"nvidia.com/gpu": 16}, "training-standard")
    cluster.seed(workload(train, {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                                  "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor dev-a100, 4 more needed"}]}))
    return cluster


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[snapshot_mod.Snapshot, auth.Tokens]]:
    tmp = tmp_path_factory.mktemp("why-api")
    repo = make_repo(tmp)
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [
        {"name": "portal", "sha256": auth.digest(OPERATOR), "scope": "operator"},
        {"name": "sandbox-portal", "sha256": auth.digest(SANDBOX), "scope": "tenant", "tenant": "ml-sandbox"}]}))
    with contextlib.ExitStack() as stack:
        snapshot = snapshot_mod.load(repo, "dev", "HEAD", stack)
        yield snapshot, auth.admit(auth.read(tokens), {t.name for t in snapshot.env.tenants})


@pytest.fixture
def api(served: tuple[snapshot_mod.Snapshot, auth.Tokens]) -> TestClient:
    snapshot, tokens = served
    cluster = twin()
    return TestClient(api_app.create_app(lambda: snapshot, tokens, lambda: [], api_app.Settings(rate="10000/minute"),
                                         clusters=lambda c: cluster if c.name == "dev-center" else None), raise_server_exceptions=False)


def get(api: TestClient, path: str, token: str) -> Any:
    return api.get(path, headers={"Authorization": f"Bearer {token}"})


def test_a_tenant_token_is_told_why_its_job_waits_without_learning_another_tenants_jobs_or_use(api: TestClient) -> None:
    """ml-sandbox's token asks why its job waits: the pool's size at its line, what fits now, but not who holds
    the pool, nor that tenant's job or units; another tenant's answers and standing are refused (403); the
    operator's token sees platform-dev holding 20, 4 of them borrowed, and its job."""
    mine = get(api, "/v1/tenants/ml-sandbox/why?cluster=dev-center", SANDBOX)
    assert mine.status_code == 200, mine.text
    (answer,) = mine.json()["answers"]
    assert answer["job"] == "ml-sandbox/train" and answer["holders"] == []
    pool = next(b for b in answer["blockers"] if b["cause"] == "pool-size")
    assert (pool["file"], pool["path"]) == ("environments/dev.yaml", "clusters[dev-center].pools[dev-a100].nodes") and "12 free" in pool["message"]
    for secret in ("platform-dev", "fill", "20 nvidia"):
        assert secret not in mine.text, secret
    standing = get(api, "/v1/tenants/ml-sandbox/standing", SANDBOX)
    assert standing.status_code == 200 and "platform-dev" not in standing.text
    assert [r["pending_units"] for r in standing.json()["standing"] if r["resource"] == "nvidia.com/gpu"] == [16]
    for path in ("/v1/tenants/platform-dev/why", "/v1/tenants/platform-dev/why?cluster=dev-center&job=fill", "/v1/tenants/platform-dev/standing"):
        refused = get(api, path, SANDBOX)
        assert refused.status_code == 403 and "platform-dev" not in refused.json()["detail"].replace("tenant 'ml-sandbox'", ""), refused.text

    seen = get(api, "/v1/tenants/ml-sandbox/why?cluster=dev-center", OPERATOR).json()["answers"][0]
    (held,) = seen["holders"]
    assert (held["tenant"], held["units"], held["borrowed"], held["jobs"][0]["job"]) == ("platform-dev", 20, 4, "platform-dev/fill")


def test_the_routes_answer_no_such_job_cluster_or_an_unreachable_cluster_as_problems(api: TestClient) -> None:
    assert get(api, "/v1/tenants/ml-sandbox/why?cluster=dev-center&job=nothing", SANDBOX).status_code == 404
    assert get(api, "/v1/tenants/ml-sandbox/why?cluster=dev-edge", SANDBOX).json()["type"].endswith("no-such-cluster")
    assert get(api, "/v1/tenants/ml-sandbox/why", "not-a-token").status_code == 401


def test_why_refuses_bad_input_in_one_line_and_exit_2(tmp_path: Path) -> None:
    """Bad selectors, an unknown cluster or tenant, and a cluster that does not answer: one line, exit 2, no traceback."""
    refusing = socket.socket()  # bound, never listening: every connection to it is refused
    refusing.bind(("127.0.0.1", 0))
    closed = refusing.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "dev",
                                      "clusters": [{"name": "dev", "cluster": {"server": f"https://127.0.0.1:{closed}", "insecure-skip-tls-verify": True}}],
                                      "users": [{"name": "dev", "user": {"token": "t0ken-never-printed"}}],
                                      "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}]}))
    cases = [
        (("--env", "dev", "--cluster", "dev-center"), "choose one of --job NAMESPACE/NAME or --tenant T"),
        (("--env", "dev", "--cluster", "dev-center", "--job", "no-slash"), "--job: expected NAMESPACE/NAME"),
        (("--env", "dev", "--cluster", "nowhere", "--job", "a/b"), "--cluster: no cluster 'nowhere' in dev"),
        (("--env", "dev", "--cluster", "dev-center", "--tenant", "nobody"), "--tenant: no tenant 'nobody' in dev"),
        (("--env", "dev", "--cluster", "dev-center", "--job", "ml-sandbox/x", "--kubeconfig", kubeconfig, "--request-timeout", "3s"),
         "dev-center: list Workload"),
    ]
    for args, said in cases:
        done = run("why", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "t0ken" not in done.stderr
    done = run("standing", "--env", "dev", "--tenant", "ml-sandbox", "--cluster", "dev-edge")
    assert done.returncode == 2 and "tenant ml-sandbox is not on dev-edge" in done.stderr
    refusing.close()


def test_the_change_that_would_let_a_job_in_comes_judged_as_the_fleet_apis_quote_of_it(api: TestClient) -> None:
    """ml-sandbox's job waits for dev-a100: growing the pool by a node would let it in. The answer carries that change
    judged as POST /v1/quotes judges it (the same verdict and cost); the tenant's token sees only the verdict and the
    cost's change, the operator's the decisions too."""
    def nodes_remedy(token: str) -> dict[str, Any]:
        (answer,) = get(api, "/v1/tenants/ml-sandbox/why?cluster=dev-center", token).json()["answers"]
        return next(r for r in answer["remedies"] if r["kind"] == "nodes")

    operator, tenant = nodes_remedy(OPERATOR), nodes_remedy(SANDBOX)
    assert operator["quote"] == tenant["quote"] == {"changes": [{"op": "nodes", "cluster": "dev-center", "pool": "dev-a100", "delta": 1}]}
    quoted = api.post("/v1/quotes", json=operator["quote"], headers={"Authorization": f"Bearer {OPERATOR}"})
    assert quoted.status_code == 200, quoted.text
    judged = quoted.json()
    assert operator["quoted"]["verdict"] == tenant["quoted"]["verdict"] == judged["verdict"]
    assert operator["quoted"]["cost"] == judged["cost"] and judged["cost"]["delta"] > 0, judged["cost"]
    assert operator["quoted"]["decisions"] == judged["decisions"]
    assert tenant["quoted"] == {"verdict": judged["verdict"], "cost": {"delta": judged["cost"]["delta"], "currency": judged["cost"]["currency"]}}


def test_standing_without_metering_history_says_the_minutes_below_guarantee_are_unknown_never_zero(api: TestClient) -> None:
    rows = get(api, "/v1/tenants/ml-sandbox/standing", SANDBOX).json()["standing"]
    assert rows and all(r["below_guarantee_minutes"] is None and r["below_guarantee_basis"] == "unknown (no history: give --prometheus)" for r in rows), rows
