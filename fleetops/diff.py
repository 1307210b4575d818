"""What differs between two sets of Kubernetes objects, field by field.

Two uses, one model: the plan compares desired (base) with desired (head); the reconciler
compares live with desired. Live objects carry fields fleetops never set (status, managedFields,
server defaults), so a live object is first projected onto the fields the desired one sets:
fleetops owns what it sends and nothing else, the way server-side apply does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetops.kube import ObjectKey, object_key

SERVER_METADATA = (
    "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
    "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers",
)
# Annotations that change without the object's meaning changing.
VOLATILE_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "deprecated.daemonset.template.generation",
)


@dataclass(frozen=True)
class FieldChange:
    op: str  # add | remove | replace
    path: str  # JSON pointer, e.g. /spec/hard/requests.nvidia.com~1gpu
    old: Any = None
    new: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "path": self.path, "old": self.old, "new": self.new}


@dataclass
class Changes:
    added: list[ObjectKey] = field(default_factory=list)
    removed: list[ObjectKey] = field(default_factory=list)
    changed: dict[ObjectKey, list[FieldChange]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def count(self) -> int:
        return len(self.added) + len(self.removed) + len(self.changed)


def normalize(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what the server sets or what changes on every revision.

    A new object whose top level, metadata and annotations are copies (what is stripped), the rest shared
    with `manifest`: nothing here or in `drift` writes into it. A deep copy of every live object (its
    managedFields most of it) was half of a detect-only pass's CPU over prod (benchmarks/README.md, "Drift
    detection against pulumi refresh")."""
    out = dict(manifest)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = meta = dict(meta)
        if isinstance(meta.get("annotations"), dict):
            meta["annotations"] = dict(meta["annotations"])
    return _stripped(out)


def _stripped(out: dict[str, Any]) -> dict[str, Any]:
    """`normalize` of an object of the caller's own, in place."""
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_METADATA:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in VOLATILE_ANNOTATIONS:
                annotations.pop(key, None)
            if not annotations:
                meta.pop("annotations")
    return out


def project(live: Any, desired: Any) -> Any:
    """`live` cut down to the fields that `desired` sets (lists of equal length element by element)."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: project(live[k], v) for k, v in desired.items() if k in live}
    if isinstance(desired, list) and isinstance(live, list) and len(desired) == len(live):
        return [project(lv, dv) for lv, dv in zip(live, desired)]
    return live


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """Field-level differences that turn `old` into `new` (both already normalised).

    Plain add/remove/replace operations (no "move": a renamed key is a removal and an addition, as a
    reviewer reads it). Each operation's old value is read from the document as the operations before
    it left it, so list positions stay right.
    """
    import jsonpatch  # here: only a changed object needs it (kube, not this module, gives object keys)

    ops = jsonpatch.JsonPatch.from_diff(dict(old), dict(new), optimization=False).patch
    doc = copy.deepcopy(dict(old))
    changes = []
    for op in ops:
        before = jsonpatch.JsonPointer(op["path"]).resolve(doc, None) if op["op"] in ("remove", "replace") else None
        changes.append(FieldChange(op["op"], op["path"], before, op.get("value")))
        # In place, with a copy of the operation: a later operation changes neither its value nor
        # `new`, as a copy of the whole document for each operation (what `in_place=False` does) kept
        # it; a value read as `before` is out of the document once its operation is applied.
        doc = jsonpatch.apply_patch(doc, [copy.deepcopy(op)], in_place=True)
    return changes


def omit_empty(value: Any) -> Any:
    # The API server omits empty lists and maps (`omitempty`): `args: []` sent is no `args` read back.
    if isinstance(value, dict):
        return {k: omit_empty(v) for k, v in value.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [omit_empty(v) for v in value]
    return value


def drift(desired: Mapping[str, Any], live: Mapping[str, Any]) -> list[FieldChange]:
    """How a live object differs from what fleetops wants, judged only on the fields fleetops sets."""
    want = omit_empty(normalize(desired))
    have = project(normalize(live), want)
    # A steady fleet is mostly equal objects: an equality test is far cheaper than building a patch.
    return [] if have == want else field_changes(have, want)


def compare(before: Mapping[str, Sequence[Mapping[str, Any]]], after: Mapping[str, Sequence[Mapping[str, Any]]]) -> Changes:
    """Objects added, removed and changed (with their fields, in the order a reader meets them)
    between two desired states, each cluster -> its objects.

    Objects are compared as JSON text (1 and 1.0 differ, as in the manifest sent). Each cluster's
    objects of one kind are one text per side first: equal texts are the same objects, equal, in the
    same order. Only a kind whose texts differ is compared object by object, and only a changed
    object is decoded from its text for the field diff. (A price changes one PrometheusRule in 16 of
    the large fleet's 20 clusters: a text per object cost twice as much, and a text per cluster,
    decoded again whole when it differed, three times: benchmarks/README.md.)"""
    import orjson

    old_kinds, new_kinds = _by_kind(before), _by_kind(after)
    added: list[ObjectKey] = []
    removed: list[ObjectKey] = []
    changed: dict[ObjectKey, list[FieldChange]] = {}
    for part in old_kinds.keys() | new_kinds.keys():
        was_all, now_all = old_kinds.get(part, []), new_kinds.get(part, [])
        if orjson.dumps(was_all) == orjson.dumps(now_all):
            continue
        old = {object_key(part[0], m): m for m in was_all}
        new = {object_key(part[0], m): m for m in now_all}
        added += new.keys() - old.keys()
        removed += old.keys() - new.keys()
        for key in new.keys() & old.keys():
            was, now = orjson.dumps(old[key]), orjson.dumps(new[key])
            if was == now:
                continue
            fields = field_changes(_stripped(orjson.loads(was)), _stripped(orjson.loads(now)))  # decoded: already copies
            if fields:
                changed[key] = fields
    return Changes(added=sorted(added), removed=sorted(removed), changed=dict(sorted(changed.items())))


def _by_kind(clusters: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """(cluster, kind) -> its objects, in the order given."""
    parts: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for cluster, manifests in clusters.items():
        for m in manifests:
            parts.setdefault((cluster, m["kind"]), []).append(m)
    return parts
