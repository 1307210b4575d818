"""Field-level differences as a reviewer and the reconciler need them."""

from __future__ import annotations

from fleetops import diff

QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "device-nvidia-com-gpu", "namespace": "vision", "labels": {"a": "b"}, "annotations": {"pulumi.com/patchFieldManager": "fleetops"}},
    "spec": {"hard": {"requests.nvidia.com/gpu": "160"}},
}


def test_a_renamed_key_is_a_removal_and_an_addition() -> None:
    changes = diff.field_changes({"data": {"old-key": "v" * 50}}, {"data": {"new-key": "v" * 50}})
    assert [(c.op, c.path, c.old, c.new) for c in changes] == [
        ("remove", "/data/old-key", "v" * 50, None),
        ("add", "/data/new-key", None, "v" * 50),
    ]


def test_list_changes_report_the_values_at_their_positions() -> None:
    changes = diff.field_changes({"l": [1, 2, 3]}, {"l": [0, 1, 2, 3]})
    assert [(c.op, c.path, c.old, c.new) for c in changes] == [("add", "/l/0", None, 0)]
    moved = diff.field_changes({"l": ["a", "b", "c"]}, {"l": ["b", "c", "a"]})
    assert all(c.op in ("add", "remove", "replace") for c in moved)
    assert [c.old for c in moved if c.op == "remove"] == ["a"]


def test_server_fields_are_not_drift() -> None:
    live = {
        **QUOTA,
        "metadata": {
            **QUOTA["metadata"],
            "uid": "1234",
            "resourceVersion": "99",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "managedFields": [{"manager": "fleetops"}],
            "annotations": {"pulumi.com/patchFieldManager": "fleetops", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "160"}, "scopes": []},
        "status": {"used": {"requests.nvidia.com/gpu": "12"}},
    }
    assert diff.drift(QUOTA, live) == []


def test_a_hand_edit_is_drift_on_exactly_that_field() -> None:
    live = {**QUOTA, "spec": {"hard": {"requests.nvidia.com/gpu": "400"}}}
    assert diff.drift(QUOTA, live) == [diff.FieldChange("replace", "/spec/hard/requests.nvidia.com~1gpu", "400", "160")]


def test_an_empty_list_sent_equals_the_field_the_server_omits() -> None:
    desired = {"kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "args": []}]}}}}
    live = {"kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "imagePullPolicy": "IfNotPresent"}]}}}}
    assert diff.drift(desired, live) == []


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_compare_sorts_objects_into_added_removed_and_changed() -> None:
    key = ("c", "v1", "ResourceQuota", "vision", "device-nvidia-com-gpu")
    raised = {**QUOTA, "spec": {"hard": {"requests.nvidia.com/gpu": "176"}}}
    changes = diff.compare({"c": [namespace("vision"), QUOTA], "same": [namespace("a")]},
                           {"c": [raised, namespace("new")], "same": [namespace("a")], "new": [namespace("b")]})
    assert changes.added == [("c", "v1", "Namespace", "", "new"), ("new", "v1", "Namespace", "", "b")]
    assert changes.removed == [("c", "v1", "Namespace", "", "vision")]
    assert [c.new for c in changes.changed[key]] == ["176"]
    volatile = {**QUOTA, "metadata": {**QUOTA["metadata"], "annotations": {**QUOTA["metadata"]["annotations"], "kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
    assert diff.compare({"c": [QUOTA]}, {"c": [volatile]}).empty


def test_a_cluster_gone_removes_each_of_its_objects() -> None:
    changes = diff.compare({"c": [namespace("a"), QUOTA]}, {})
    assert changes.removed == [("c", "v1", "Namespace", "", "a"), ("c", "v1", "ResourceQuota", "vision", "device-nvidia-com-gpu")]


def test_an_integer_that_becomes_a_float_is_a_change() -> None:
    # 1 == 1.0 in Python, but the manifest sent (and the file written) says 1 or 1.0: the plan shows it.
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
    changes = diff.compare({"c": [{**config, "data": {"n": 1}}]}, {"c": [{**config, "data": {"n": 1.0}}]})
    assert [(c.path, c.old, c.new) for c in changes.changed[("c", "v1", "ConfigMap", "ns", "a")]] == [("/data/n", 1, 1.0)]



def test_objects_in_another_order_are_no_change_and_one_changed_among_equal_ones_of_its_kind_is_found() -> None:
    # compare reads each cluster's objects of one kind as one text first: another order is another
    # text but no change, and a text that differs still names only the object that changed.
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"n": "1"}}
    other = {**config, "metadata": {"name": "b", "namespace": "ns"}}
    assert diff.compare({"c": [namespace("a"), namespace("b"), config]}, {"c": [namespace("b"), namespace("a"), config]}).empty
    changes = diff.compare({"c": [namespace("a"), config, other], "d": [config]},
                           {"c": [namespace("a"), config, {**other, "data": {"n": "2"}}], "d": [config]})
    assert list(changes.changed) == [("c", "v1", "ConfigMap", "ns", "b")] and not changes.added and not changes.removed


def test_field_changes_leave_both_objects_as_they_were_and_replay_old_into_new() -> None:
    """The patch is applied in place to a copy of `old`: neither object, nor a value a change reports,
    is changed by a later operation (added list items and mappings changed again further on)."""
    import copy

    import jsonpatch

    old = {"a": [1, {"x": [1]}], "b": {"c": 1, "gone": {"y": 1}}, "s": "k"}
    new = {"a": [{"x": [2, 3]}, 1, {"z": {}}], "b": {"c": 2, "d": {"e": [1]}}, "s": 1.0}
    before, after = copy.deepcopy(old), copy.deepcopy(new)
    changes = diff.field_changes(old, new)
    assert (old, new) == (before, after)
    doc = copy.deepcopy(old)
    for change in changes:  # each reports the value its path held just before it, and together they make `new`
        if change.op != "add":
            assert jsonpatch.JsonPointer(change.path).resolve(doc) == change.old
        doc = jsonpatch.apply_patch(doc, [{"op": change.op, "path": change.path, **({"value": change.new} if change.op != "remove" else {})}])
    assert doc == new
