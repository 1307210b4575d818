"""The in-memory twin of a Kubernetes API server, for tests and benchmarks (never shipped: the wheel
holds fleetops, modules and stacks only).

`MemoryCluster` behaves like the API server where the reconciler's correctness depends on it:
resourceVersion and 409 on stale writes, label selectors, server-side apply ownership per field
manager, server-set fields, injectable errors and latency, and a count of calls per verb and kind so
tests can assert "one LIST per kind" and "zero writes".
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fleetops.errors import FIELD_MANAGER_CONFLICT, TIMEOUT, ApiError
from fleetops.kube import CLUSTER_SCOPED, Key, Manifest, describe, key_of
from fleetops.spec import SYSTEM_NAMESPACES

WRITE_VERBS = frozenset({"apply", "create", "replace", "delete", "patch", "approve"})

# --- label selectors ------------------------------------------------------------------------

_SET_EXPR = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    # Commas separate requirements except inside the parentheses of a set expression.
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def selector_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A Kubernetes label selector (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a)`) as a predicate."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_selector(selector):
        if m := _SET_EXPR.match(part):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif part.startswith("!"):
            tests.append(lambda labels, k=part[1:].strip(): k not in labels)
        elif re.fullmatch(r"[^\s!=,()]+", part):
            tests.append(lambda labels, k=part: k in labels)
        else:
            raise ValueError(f"invalid label selector {selector!r}: cannot read {part!r}")
    return lambda labels: all(t(labels) for t in tests)


# --- merge helpers --------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the in-memory API server ---------------------------------------------------------------


@dataclass
class Faults:
    """Errors the memory cluster injects: a share of calls (seeded) and scripted one-offs."""

    rate: float = 0.0
    statuses: tuple[int, ...] = (500, 503, 429, 409, TIMEOUT)
    retry_after: float | None = None
    verbs: frozenset[str] = frozenset({"list", "find", "apply", "delete", "patch", "get", "create", "replace"})
    seed: int = 0
    scripted: list[tuple[str, str, int]] = field(default_factory=list)  # (verb, kind, status) each fails once
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def check(self, verb: str, kind: str) -> None:
        for i, (v, k, status) in enumerate(self.scripted):
            if v == verb and k in (kind, "*"):
                del self.scripted[i]
                raise ApiError(status, "injected", self.retry_after)
        if verb in self.verbs and self.rate and self.rng.random() < self.rate:
            raise ApiError(self.rng.choice(self.statuses), "injected", self.retry_after)


# Fields the server fills in on create when a manifest leaves them out, by kind (a few, to show
# that drift ignores what fleetops does not send).
_DEFAULTS: dict[str, Manifest] = {
    "Deployment": {"spec": {"revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}},
    "DaemonSet": {"spec": {"revisionHistoryLimit": 10}},
    "Namespace": {"spec": {"finalizers": ["kubernetes"]}},
}
_CLUSTER_SCOPED = CLUSTER_SCOPED | {"Node"}  # every cluster-scoped kind fleetops renders, and nodes


class CallCounts:
    """API calls by (verb, kind), for tests and benchmarks that assert what a pass sent."""

    calls: Counter[tuple[str, str]]

    def count(self, verb: str | None = None, kind: str | None = None) -> int:
        return sum(n for (v, k), n in self.calls.items() if verb in (None, v) and kind in (None, k))

    def writes(self, exclude: Iterable[str] = ()) -> int:
        skip = set(exclude)
        return sum(n for (v, k), n in self.calls.items() if v in WRITE_VERBS and k not in skip)

    def reset_counts(self) -> None:
        self.calls.clear()


class MemoryCluster(CallCounts):
    """An API server in a dict. Thread-safe; latency sleeps only when set (default 0)."""

    def __init__(self, name: str = "memory", faults: Faults | None = None, latency: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep, unserved: Iterable[str] = ()):
        self.name = name
        self.unserved = frozenset(unserved)  # API versions whose CRDs are not installed: every call 404s
        self.faults = faults or Faults()
        self.latency = latency
        self._sleep = sleep
        self._objects: dict[Key, Manifest] = {}
        self._owners: dict[Key, dict[str, str]] = {}  # field path -> field manager
        self._version = 0
        self._lock = threading.RLock()
        self.calls: Counter[tuple[str, str]] = Counter()
        for ns in SYSTEM_NAMESPACES:  # what every new cluster has before anyone applies anything
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, manager="kube-apiserver")

    # -- accounting ---------------------------------------------------------------------------

    def _enter(self, verb: str, kind: str, api_version: str = "v1") -> None:
        if self.latency:
            self._sleep(self.latency)
        with self._lock:  # one seeded sequence of faults, whatever the threads
            self.calls[(verb, kind)] += 1
            self.faults.check(verb, kind)
        if api_version in self.unserved:  # as the real client's discovery answers for a kind it does not know
            raise ApiError(404, f"No matches found for {{'api_version': '{api_version}', 'kind': '{kind}'}}")

    # -- storage ------------------------------------------------------------------------------

    def _bump(self, obj: Manifest) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def _check_namespace(self, key: Key) -> None:
        if key[1] not in _CLUSTER_SCOPED and key[2] and ("v1", "Namespace", "", key[2]) not in self._objects:
            raise ApiError(404, f"namespaces {key[2]!r} not found")

    def _stamp_new(self, obj: Manifest) -> None:
        meta = obj["metadata"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        for path, value in _DEFAULTS.get(obj["kind"], {}).items():
            obj[path] = merge_patch(value, obj.get(path, {}))
        if obj["kind"] in ("Deployment", "DaemonSet"):
            obj["status"] = {"observedGeneration": 1}

    def _store(self, key: Key, obj: Manifest, before: Manifest | None) -> Manifest:
        if before is not None and before.get("spec") != obj.get("spec"):
            obj["metadata"]["generation"] = before["metadata"].get("generation", 1) + 1
        self._bump(obj)
        owners = self._owners.get(key, {})
        obj["metadata"]["managedFields"] = [
            {"manager": m, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(p for p, o in owners.items() if o == m)}
            for m in sorted(set(owners.values()))
        ]
        self._objects[key] = obj
        return copy.deepcopy(obj)

    def seed(self, *manifests: Manifest, manager: str = "kubectl") -> None:
        """Put objects in place as another client would have (for tests and benchmarks)."""
        for m in manifests:
            self.put(m, manager=manager)

    def put(self, manifest: Manifest, manager: str = "kubectl-edit") -> Manifest:
        """A plain write by someone else (a hand edit): replaces the object, takes every field it sends."""
        with self._lock:
            key = key_of(manifest)
            before = self._objects.get(key)
            obj = copy.deepcopy(manifest)
            obj.setdefault("metadata", {})
            if before is None:
                self._stamp_new(obj)
            else:
                for k in ("uid", "creationTimestamp", "generation"):
                    obj["metadata"][k] = before["metadata"][k]
            self._owners[key] = {**self._owners.get(key, {}), **{p: manager for p in _field_paths(obj)}}
            return self._store(key, obj, before)

    def peek(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        """Read an object without counting a call (assertions in tests)."""
        with self._lock:
            obj = self._objects.get((api_version, kind, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def objects(self, kind: str | None = None) -> list[Manifest]:
        with self._lock:
            return [copy.deepcopy(o) for k, o in sorted(self._objects.items()) if kind in (None, k[1])]

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete by hand (not counted)."""
        with self._lock:
            self._objects.pop((api_version, kind, namespace, name), None)
            self._owners.pop((api_version, kind, namespace, name), None)

    # -- the ClusterAPI interface -------------------------------------------------------------

    def list(self, api_version: str, kind: str, label_selector: str = "") -> list[Manifest]:
        self._enter("list", kind, api_version)
        match = selector_matcher(label_selector)
        with self._lock:
            return [
                copy.deepcopy(o)
                for k, o in self._objects.items()
                if k[0] == api_version and k[1] == kind and match(o["metadata"].get("labels") or {})
            ]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        self._enter("get", kind, api_version)
        return self.peek(api_version, kind, namespace, name)

    def find(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        """The product's LIST by metadata.name, counted as `find` so tests see identity look-ups apart from a kind's LIST."""
        self._enter("find", kind, api_version)
        return self.peek(api_version, kind, namespace, name)

    def apply(self, manifest: Manifest, field_manager: str, force: bool = False) -> Manifest:
        """Server-side apply: merge the fields sent, owned per manager; conflicts unless forced."""
        self._enter("apply", manifest["kind"], manifest["apiVersion"])
        with self._lock:
            key = key_of(manifest)
            self._check_namespace(key)
            before = self._objects.get(key)
            owners = dict(self._owners.get(key, {}))
            sent = {p: v for p, v in _field_paths(manifest).items()}
            current = _field_paths(before) if before else {}
            conflicts = [
                p for p, v in sent.items()
                if owners.get(p) not in (None, field_manager) and current.get(p, _MISSING) != v
            ]
            if conflicts and not force:
                raise ApiError(409, f"Apply failed with {len(conflicts)} conflict(s): {', '.join(sorted(conflicts)[:3])}",
                               causes=(FIELD_MANAGER_CONFLICT,))
            identity = {"name": key[3], **({"namespace": key[2]} if key[2] else {})}
            obj = copy.deepcopy(before) if before else {"apiVersion": key[0], "kind": key[1], "metadata": identity}
            # Fields this manager sent last time and not now are its to drop, as SSA does.
            for path, owner in list(owners.items()):
                if owner == field_manager and path not in sent:
                    _remove_path(obj, path)
                    del owners[path]
            for path, value in sent.items():
                _set_path(obj, path, value)
                owners[path] = field_manager
            if before is None:
                self._stamp_new(obj)
            self._owners[key] = owners
            return self._store(key, obj, before)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._enter("delete", kind, api_version)
        with self._lock:
            key = (api_version, kind, namespace, name)
            if key not in self._objects:
                raise ApiError(404, f"{describe(key)} not found")
            del self._objects[key]
            self._owners.pop(key, None)

    def patch_node(self, name: str, patch: Manifest) -> Manifest:
        """JSON merge patch of a node; a resourceVersion in the patch is a precondition."""
        self._enter("patch", "Node")
        with self._lock:
            key = ("v1", "Node", "", name)
            before = self._objects.get(key)
            if before is None:
                raise ApiError(404, f"nodes {name!r} not found")
            want = patch.get("metadata", {}).get("resourceVersion")
            if want is not None and want != before["metadata"]["resourceVersion"]:
                raise ApiError(409, f"the object has been modified (node {name})")
            obj = merge_patch(before, patch)
            return self._store(key, obj, before)

    def create(self, manifest: Manifest) -> Manifest:
        self._enter("create", manifest["kind"], manifest["apiVersion"])
        with self._lock:
            key = key_of(manifest)
            self._check_namespace(key)
            if key in self._objects:
                raise ApiError(409, f"{describe(key)} already exists")
            obj = copy.deepcopy(manifest)
            obj["metadata"].pop("resourceVersion", None)
            self._stamp_new(obj)
            return self._store(key, obj, None)

    def _existing(self, key: Key) -> Manifest:
        before = self._objects.get(key)
        if before is None:
            raise ApiError(404, f"{describe(key)} not found")
        return before

    def replace(self, manifest: Manifest) -> Manifest:
        """PUT with optimistic concurrency: the resourceVersion sent must be the current one."""
        self._enter("replace", manifest["kind"], manifest["apiVersion"])
        with self._lock:
            key = key_of(manifest)
            before = self._existing(key)
            if manifest["metadata"].get("resourceVersion") != before["metadata"]["resourceVersion"]:
                raise ApiError(409, f"the object has been modified; please apply your changes to the latest version ({describe(key)})")
            obj = copy.deepcopy(manifest)
            for k in ("uid", "creationTimestamp", "generation"):
                obj["metadata"][k] = before["metadata"][k]
            return self._store(key, obj, before)


    def approve(self, csr: Manifest) -> Manifest:
        """The approval subresource: only the conditions change; a decided request cannot be decided again."""
        self._enter("approve", csr["kind"])
        with self._lock:
            key = key_of(csr)
            before = self._existing(key)
            decided = [c for c in (before.get("status") or {}).get("conditions") or [] if c.get("type") in ("Approved", "Denied")]
            if decided:
                raise ApiError(409, f"{describe(key)} is already {decided[0]['type'].lower()}")
            obj = copy.deepcopy(before)
            obj.setdefault("status", {})["conditions"] = copy.deepcopy(csr["status"]["conditions"])
            return self._store(key, obj, before)


_MISSING = object()
_METADATA_MAPS = ("labels", "annotations")


def _field_paths(manifest: Manifest | None) -> dict[str, Any]:
    """The fields of an object at the granularity ownership is tracked: top-level keys, label and annotation keys."""
    if not manifest:
        return {}
    out: dict[str, Any] = {}
    for key, value in manifest.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            for mkey in _METADATA_MAPS:
                for name, v in (value.get(mkey) or {}).items():
                    out[f"metadata.{mkey}.{name}"] = v
            continue
        out[key] = value
    return out


def _fields_v1(paths: Iterable[str]) -> dict[str, Any]:
    """Owned paths as the API server writes them in managedFields (`{"f:spec": {}}`), at the twin's granularity."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path.split(".", 2) if path.startswith("metadata.") else [path]:
            node = node.setdefault(f"f:{part}", {})
    return tree


def _set_path(obj: Manifest, path: str, value: Any) -> None:
    if path.startswith("metadata."):
        _, mkey, name = path.split(".", 2)
        obj["metadata"].setdefault(mkey, {})[name] = copy.deepcopy(value)
    else:
        obj[path] = copy.deepcopy(value)


def _remove_path(obj: Manifest, path: str) -> None:
    if path.startswith("metadata."):
        _, mkey, name = path.split(".", 2)
        (obj["metadata"].get(mkey) or {}).pop(name, None)
    else:
        obj.pop(path, None)
