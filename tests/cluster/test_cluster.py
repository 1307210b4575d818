"""The in-memory API server behaves like the real one where the reconciler depends on it."""

from __future__ import annotations

import pytest

from fleetops.cluster import ApiError
from tests.fakes import Faults, MemoryCluster, selector_matcher


def cm(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None, ns: str = "default") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "data": data or {}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1,b=2", {"a": "1", "b": "2", "c": "3"}, True),
        ("a=1,b=2", {"a": "1"}, False),
        ("a==1", {"a": "1"}, True),
        ("a!=1", {"a": "2"}, True),
        ("a!=1", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("!a", {"b": "x"}, True),
        ("env in (prod, dev),tier notin (db)", {"env": "dev", "tier": "web"}, True),
        ("env in (prod, dev)", {"env": "qa"}, False),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert selector_matcher(selector)(labels) is expected


def test_list_filters_by_selector_and_counts_one_call() -> None:
    c = MemoryCluster()
    c.seed(cm("a", {"app.kubernetes.io/managed-by": "fleetops"}), cm("b", {"app.kubernetes.io/managed-by": "helm"}))
    c.reset_counts()
    names = [o["metadata"]["name"] for o in c.list("v1", "ConfigMap", "app.kubernetes.io/managed-by=fleetops")]
    assert names == ["a"]
    assert c.count("list", "ConfigMap") == 1 and c.writes() == 0


def test_apply_adds_server_fields_and_resource_version_grows() -> None:
    c = MemoryCluster()
    first = c.apply(cm("a", data={"k": "1"}), "fleetops")
    meta = first["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["managedFields"][0]["manager"] == "fleetops"
    second = c.apply(cm("a", data={"k": "2"}), "fleetops")
    assert int(second["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert second["metadata"]["uid"] == meta["uid"] and second["data"] == {"k": "2"}
    deploy = c.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1}}, "fleetops")
    assert deploy["status"] and deploy["spec"]["revisionHistoryLimit"] == 10  # server defaults


def test_apply_conflicts_with_another_manager_unless_forced() -> None:
    c = MemoryCluster()
    c.apply(cm("a", data={"k": "1"}), "fleetops")
    c.put(cm("a", data={"k": "hand"}))  # kubectl edit: takes the field
    with pytest.raises(ApiError) as err:
        c.apply(cm("a", data={"k": "1"}), "fleetops")
    assert err.value.status == 409
    assert c.apply(cm("a", data={"k": "1"}), "fleetops", force=True)["data"] == {"k": "1"}


def test_apply_drops_fields_the_manager_no_longer_sends_and_keeps_others() -> None:
    c = MemoryCluster()
    c.apply(cm("a", {"x": "1", "y": "2"}), "fleetops")
    c.apply(cm("a", {"z": "9"}), "other")
    after = c.apply(cm("a", {"x": "1"}), "fleetops")
    assert after["metadata"]["labels"] == {"x": "1", "z": "9"}


def test_stale_replace_and_duplicate_create_are_409() -> None:
    c = MemoryCluster()
    created = c.create(cm("a"))
    c.replace({**created, "data": {"k": "1"}})
    with pytest.raises(ApiError) as err:
        c.replace({**created, "data": {"k": "2"}})  # the resourceVersion read before the first replace
    assert err.value.status == 409
    with pytest.raises(ApiError) as err:
        c.create(cm("a"))
    assert err.value.status == 409


def test_namespaced_object_needs_its_namespace() -> None:
    c = MemoryCluster()
    with pytest.raises(ApiError) as err:
        c.apply(cm("a", ns="tenant-x"), "fleetops")
    assert err.value.status == 404


def test_node_patch_merges_and_checks_resource_version() -> None:
    c = MemoryCluster()
    c.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "1"}}, "spec": {}})
    rv = c.peek("v1", "Node", "", "n1")["metadata"]["resourceVersion"]
    out = c.patch_node("n1", {"metadata": {"labels": {"b": "2"}}})
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
    with pytest.raises(ApiError) as err:
        c.patch_node("n1", {"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True}})
    assert err.value.status == 409


def test_faults_are_seeded_and_carry_retry_after() -> None:
    def failures(seed: int) -> list[int]:
        c = MemoryCluster(faults=Faults(rate=0.5, seed=seed, retry_after=3))
        out = []
        for i in range(20):
            try:
                c.list("v1", "ConfigMap")
            except ApiError as exc:
                assert exc.retry_after == 3
                out.append(i)
        return out

    assert failures(1) == failures(1) and failures(1)
    c = MemoryCluster(faults=Faults(scripted=[("delete", "ConfigMap", 503)]))
    with pytest.raises(ApiError) as err:
        c.delete("v1", "ConfigMap", "default", "missing")
    assert err.value.status == 503 and err.value.retryable


def test_latency_is_injected_not_slept() -> None:
    slept: list[float] = []
    c = MemoryCluster(latency=0.25, sleep=slept.append)
    c.list("v1", "ConfigMap")
    assert slept == [0.25]
