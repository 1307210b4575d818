"""Spill-over (Kueue's MultiKueue) as declared, validated, rendered and planned; tests/render/test_real_multikueue.py
proves it on the real Kueue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, spec
from tests.plan.test_plan import commit, edit, make_repo, plan_json

ROOT = Path(__file__).resolve().parents[2]
PROD = ROOT / "environments" / "prod.yaml"
DECLARED = "spill_over: {manager: edge-gz-gateway, workers: [center-bj, center-sh]}"


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def refusals(tmp_path: Path, declared: str) -> list[str]:
    text = PROD.read_text()
    path = tmp_path / "prod.yaml"
    path.write_text(text.replace(DECLARED, declared))
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(path)
    return raised.value.lines


@pytest.mark.parametrize(("declared", "column", "field", "words"), [
    ("spill_over: {manager: center-bj, workers: [center-bj, center-sh]}", 18, "manager", "center-bj is also a worker"),
    ("spill_over: {manager: edge-sh-factory, workers: [center-bj, edge-gz-gateway]}", 65, "workers[1]",
     "the tenant is not on edge-gz-gateway, so it has no queue there"),
    ("spill_over: {manager: center-sh, workers: [center-bj]}", 18, "manager", "center-sh is one of the tenant's clusters, where its queue holds quota"),
    ("spill_over: {manager: nowhere, workers: [center-bj, center-sh]}", 18, "manager", "unknown cluster 'nowhere'"),
    ("spill_over: {manager: edge-gz-gateway, workers: [center-bj, center-bj]}", 65, "workers[1]", "duplicate worker name 'center-bj'"),
], ids=["manager-is-a-worker", "worker-lacks-the-tenant", "manager-holds-quota", "unknown-manager", "worker-twice"])
def test_a_declaration_that_cannot_work_is_refused_at_its_field(tmp_path: Path, declared: str, column: int, field: str, words: str) -> None:
    line = line_of(PROD.read_text(), DECLARED)
    [problem] = refusals(tmp_path, declared)
    assert problem.startswith(f"{tmp_path / 'prod.yaml'}:{line}:{column}: tenants[research].spill_over.{field}: "), problem
    assert words in problem, problem


@pytest.fixture(scope="module")
def prod() -> dict[str, list[dict[str, Any]]]:
    return render.render(PROD, revision="r1").clusters


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_manager_dispatches_to_the_workers_through_secrets_it_only_names(prod: dict[str, list[dict[str, Any]]]) -> None:
    manager = prod["edge-gz-gateway"]
    check = named(manager, "AdmissionCheck", "multikueue-research")["spec"]
    assert check == {"controllerName": "kueue.x-k8s.io/multikueue",
                     "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "research"}}
    assert named(manager, "MultiKueueConfig", "research")["spec"] == {"clusters": ["center-bj", "center-sh"]}
    for worker in ("center-bj", "center-sh"):
        assert named(manager, "MultiKueueCluster", worker)["spec"] == {
            "clusterSource": {"kubeConfig": {"location": f"multikueue-{worker}", "locationType": "Secret"}}}
    for name in ("research", "research-non-preempting"):
        assert named(manager, "ClusterQueue", name)["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue-research"}]}
    # The credentials are the operator's: no cluster gets a Secret from fleetops.
    assert not [o for objects in prod.values() for o in objects if o["kind"] == "Secret"]


def test_the_managers_quota_is_what_the_tenant_may_hold_on_each_worker_summed(prod: dict[str, list[dict[str, Any]]]) -> None:
    def per_flavor(queue: dict[str, Any], field: str) -> dict[tuple[str, str], int]:
        return {(f["name"], r["name"]): r.get(field, 0) for g in queue["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"]}

    reachable: dict[tuple[str, str], int] = {}
    for worker in ("center-bj", "center-sh"):
        nominal = per_flavor(named(prod[worker], "ClusterQueue", "research"), "nominalQuota")
        borrow = per_flavor(named(prod[worker], "Cohort", f"{worker}.research"), "borrowingLimit")
        for key in nominal:
            reachable[key] = reachable.get(key, 0) + nominal[key] + borrow[key]
    assert per_flavor(named(prod["edge-gz-gateway"], "ClusterQueue", "research"), "nominalQuota") == reachable
    assert sum(reachable.values()) == 2 * 48  # research's burst of nvidia.com/gpu, on each of its two clusters


def test_the_workers_queues_are_as_without_spill_over(prod: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    path = tmp_path / "prod.yaml"
    path.write_text(PROD.read_text().replace(DECLARED, ""))
    without = render.render(path, revision="r1").clusters
    for cluster in ("center-bj", "center-sh", "edge-sh-factory"):
        assert json.dumps(prod[cluster], sort_keys=True) == json.dumps(without[cluster], sort_keys=True), cluster
    assert not [o for o in without["edge-gz-gateway"] if o["kind"].startswith("MultiKueue") or o["kind"] == "AdmissionCheck"]


def test_the_plan_says_a_tenants_spill_over_was_removed_and_what_leaves_the_manager(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    edit(repo, DECLARED, "")
    commit(repo, "research: no spill-over")
    _, result = plan_json(repo)
    [change] = [c for c in result["fleet_changes"] if "spill-over" in c["text"]]
    assert change["text"] == "tenant research: spill-over submitted on edge-gz-gateway, run on center-bj, center-sh (MultiKueue) → none"
    assert change["security"] is True
    removed = {(o["cluster"], o["kind"], o["name"]) for o in result["objects"]["removed"]}
    assert {("edge-gz-gateway", "AdmissionCheck", "multikueue-research"), ("edge-gz-gateway", "MultiKueueConfig", "research"),
            ("edge-gz-gateway", "MultiKueueCluster", "center-bj"), ("edge-gz-gateway", "ClusterQueue", "research")} <= removed
    assert not [o for o in result["objects"]["removed"] + result["objects"]["added"] if o["cluster"] != "edge-gz-gateway"]
