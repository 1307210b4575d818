"""Object keys: one object, one key, in a cluster and across the fleet."""

from __future__ import annotations

import pytest

from fleetops import diff
from fleetops.kube import key_of, object_key


@pytest.mark.parametrize("metadata", [{"name": "x"}, {"name": "x", "namespace": None}, {"name": "x", "namespace": ""}],
                         ids=["absent", "null", "empty"])
def test_a_cluster_scoped_object_has_one_key_however_its_namespace_is_left_out(metadata: dict) -> None:
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    assert object_key("c1", manifest) == ("c1", *key_of(manifest)) == ("c1", "v1", "Namespace", "", "x")


def test_a_namespace_written_null_is_not_a_removed_and_an_added_object() -> None:
    absent = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    null = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "namespace": None}}
    changes = diff.compare({"c1": [absent]}, {"c1": [null]})
    assert (changes.added, changes.removed) == ([], [])
