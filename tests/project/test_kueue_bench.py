"""The Kueue latency benchmark's parts that need no server: its jobs, its flat queue, its figures.

benchmarks/kueue_bench.py times the real Kueue; these check that what it submits is what the prod
tenants may submit and can be admitted, that its baseline holds the same quota, and its arithmetic.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from benchmarks import kueue_bench as bench
from fleetops import render, spec

CLUSTER = "center-bj"


@pytest.fixture(scope="module")
def env() -> spec.Environment:
    return spec.load_environment(bench.ENVIRONMENT)


@pytest.fixture(scope="module")
def cluster(env: spec.Environment) -> spec.Cluster:
    return next(c for c in env.clusters if c.name == CLUSTER)


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return render.render(bench.ENVIRONMENT, revision="r1").clusters[CLUSTER]


def by_name(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The objects of one kind by name, namespace/name where they have one."""
    return {"/".join(filter(None, (m["metadata"].get("namespace"), m["metadata"]["name"]))): m for m in manifests if m["kind"] == kind}


def admissible(job: bench.Job, manifests: list[dict[str, Any]]) -> bool:
    """Whether the job's queue offers its resource on a flavor whose taints it (or the flavor) tolerates,
    with a nominal quota or a cohort to borrow from, as Kueue's flavor assigner checks."""
    queues, flavors = by_name(manifests, "LocalQueue"), by_name(manifests, "ResourceFlavor")
    cq = by_name(manifests, "ClusterQueue")[queues[f"{job.namespace}/{job.queue}"]["spec"]["clusterQueue"]]
    tolerated = {(t.key, t.value, t.effect) for t in job.tolerations}
    for group in cq["spec"]["resourceGroups"]:
        if job.resource not in group["coveredResources"]:
            continue
        for flavor in group["flavors"]:
            rf = flavors[flavor["name"]]["spec"]
            own = {t["key"] for t in rf.get("tolerations", [])}
            if all((t["key"], t.get("value", ""), t["effect"]) in tolerated or t["key"] in own for t in rf.get("nodeTaints", [])):
                return True
    return False


def test_the_jobs_are_what_each_tenant_of_the_cluster_may_submit_and_kueue_can_admit(env, cluster, manifests) -> None:
    jobs = bench.generate(env, cluster, 1000)
    tenants = {t.name: t for t in env.tenants if CLUSTER in t.clusters}
    classes = {pc.name: pc for pc in env.priority_classes}
    queues = by_name(manifests, "LocalQueue")
    cqs = by_name(manifests, "ClusterQueue")
    assert len(jobs) == 1000 and len({(j.namespace, j.name) for j in jobs}) == 1000
    # Every tenant of the cluster, each resource of its quota, each class it may use, each size.
    assert {(j.namespace, j.resource) for j in jobs} == {(t.name, r) for t in tenants.values() for r in t.quota}
    for name, tenant in tenants.items():
        assert {j.priority for j in jobs if j.namespace == name} == set(tenant.priority_classes)
    assert set(Counter(j.size for j in jobs)) == set(bench.SIZES)
    for job in jobs:
        tenant = tenants[job.namespace]
        assert job.size <= max(1, tenant.quota[job.resource].guaranteed // bench.SHARE), job
        # The queue its admission policy requires: a class that never preempts goes to a queue that never preempts.
        cq = cqs[queues[f"{job.namespace}/{job.queue}"]["spec"]["clusterQueue"]]
        never = cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
        assert never == (classes[job.priority].preemption == "Never"), job
        assert admissible(job, manifests), job
        assert job.manifest()["spec"]["suspend"] is True


def test_the_flat_queue_holds_the_whole_capacity_of_the_cluster_and_every_tenant_queue_points_at_it(cluster, manifests) -> None:
    flat = bench.flat(manifests, cluster)
    (cq,) = [m for m in flat if m["kind"] == "ClusterQueue"]
    assert not [m for m in flat if m["kind"] == "Cohort"]
    held = {(f["name"], r["name"]): r["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"]}
    assert held == {(p.name, r): n for p in cluster.pools for r, n in spec.group_capacity(p).items()}
    local = {(m["metadata"]["namespace"], m["metadata"]["name"]): m["spec"]["clusterQueue"] for m in flat if m["kind"] == "LocalQueue"}
    assert set(local) == {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests if m["kind"] == "LocalQueue"}
    assert set(local.values()) == {cq["metadata"]["name"]}
    assert cq["spec"]["namespaceSelector"] == {}
    # Everything else as rendered (admission policies, LimitRanges, flavors, priority classes).
    rest = [m for m in flat if m["kind"] not in ("ClusterQueue", "LocalQueue")]
    assert rest == [m for m in manifests if m["kind"] not in ("ClusterQueue", "Cohort", "LocalQueue")]


def test_latency_is_from_submission_to_admission_and_throughput_over_the_whole_run() -> None:
    submitted = {"a": 10.0, "b": 11.0, "c": 12.0, "d": 13.0}
    admitted = {"a": 11.0, "b": 13.0, "c": 16.0, "x": 1.0}  # d never admitted; x is not one of ours
    got = bench.figures(bench.Layout.FLAT, submitted, admitted)
    assert (got.submitted, got.admitted) == (4, 3)
    assert (got.p50, got.p99) == (2.0, 4.0)  # latencies 1, 2, 4
    assert got.throughput == pytest.approx(3 / 6.0)  # three admitted between 10.0 and 16.0
    assert bench.figures(bench.Layout.FLAT, submitted, {}).admitted == 0


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (bench.percentile(values, 0.5), bench.percentile(values, 0.99), bench.percentile(values, 1.0)) == (50.0, 99.0, 100.0)
    assert bench.percentile([7.0], 0.99) == 7.0


def test_each_repeat_alternates_which_layout_goes_first() -> None:
    assert [list(bench.layouts(i)) for i in range(3)] == [
        [bench.Layout.FLEETOPS, bench.Layout.FLAT], [bench.Layout.FLAT, bench.Layout.FLEETOPS], [bench.Layout.FLEETOPS, bench.Layout.FLAT]]


def test_every_goal_ratio_grows_when_fleetops_is_slower() -> None:
    flat = bench.Figures(bench.Layout.FLAT, 10, 10, p50=1.0, p99=2.0, throughput=5.0, queued_p50=0.1, queued_p99=0.2)
    slower = bench.Figures(bench.Layout.FLEETOPS, 10, 10, p50=1.5, p99=3.0, throughput=2.5, queued_p50=0.2, queued_p99=0.3)
    assert all(ratio(slower, flat) > bench.GOAL_RATIO for ratio in bench.RATIOS.values())
    assert all(ratio(flat, flat) == 1.0 for ratio in bench.RATIOS.values())
