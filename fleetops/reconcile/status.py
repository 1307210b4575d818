"""The reconciler's records in each cluster: the status ConfigMap and the inventory of applied objects."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

from fleetops import spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import FleetopsError
from fleetops.kube import MANAGER, PART_OF, STATUS_CONFIGMAP, Key, Manifest
from fleetops.reconcile.options import Options
from fleetops.reconcile.result import Action, Write
from fleetops.reconcile.retry import call

# STATUS_CONFIGMAP: named in fleetops.kube, the contract modules/ may read (the fleet API's Role names it).


class Recorded(StrEnum):
    """The `result` a status ConfigMap records of the last pass (read by people and alerts, not by fleetops)."""

    OK = "ok"  # the revision applied without errors
    ERRORS = "errors"  # some calls failed: the record keeps the revision last applied whole
    DENIED = "denied"  # the gate refused the revision: nothing written
    INVALID = "invalid"  # the revision did not load, render or pass the schema check: nothing written


# --- status ---------------------------------------------------------------------------------


def record_manifest(namespace: str, name: str, content: dict[str, Any]) -> Manifest:
    # Not labelled managed-by: it is the reconciler's record, not part of the desired state to prune.
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {PART_OF: MANAGER}},
        **content,
    }


def write_record(api: ClusterAPI, opts: Options, name: str, current: Manifest | None, content: dict[str, Any]) -> None:
    """Create or replace one of the reconciler's ConfigMaps, only when its content changes (a no-op pass writes nothing)."""
    if current is not None and all(current.get(k) == v for k, v in content.items()):
        return
    body = record_manifest(opts.namespace, name, content)
    if current is None:
        call(opts, api.create, body, conflicts=False)
    else:
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        call(opts, api.replace, body, conflicts=False)  # 409: another writer; the next pass re-reads


def status_data(environment: str, revision: str | None, result: Recorded, message: str) -> dict[str, str]:
    return {"environment": environment, "revision": revision or "", "result": result.value, "message": message[:1000]}


def write_status(api: ClusterAPI, opts: Options, current: Manifest | None, data: dict[str, str]) -> None:
    write_record(api, opts, STATUS_CONFIGMAP, current, {"data": data})


def record_deploy(env: spec.Environment, revision: str, stack: str, connect: Callable[[spec.Cluster], ClusterAPI]) -> list[str]:
    """After `pulumi up` applied `revision` whole (`fleetops deploy`), each cluster's status record says so, as a
    reconcile pass that applied it would: `reconcile`, the reconciler and the fleet API's status read the revision
    the cluster holds from the cluster itself, not from where the deploy ran. A line per cluster not recorded."""
    opts = Options(namespace=env.reconciler.namespace)
    data = status_data(env.environment, revision, Recorded.OK, f"applied by fleetops deploy (pulumi up of stack {stack})")
    missed = []
    for cluster in env.clusters:
        try:
            api = connect(cluster)
            write_status(api, opts, read_status(api, opts), data)
        except FleetopsError as exc:  # an ApiError or a kubeconfig: the deploy stands, the record is said missing
            missed.append(f"{cluster.name}: the revision deployed is not recorded in its {STATUS_CONFIGMAP} ConfigMap "
                          f"({exc.lines[0]}): reconcile says 'last applied: none' there until a pass applies")
    return missed


def read_status(api: ClusterAPI, opts: Options) -> Manifest | None:
    """The status ConfigMap, None when there is none yet; raises ApiError when it cannot be read."""
    return call(opts, api.get, "v1", "ConfigMap", opts.namespace, STATUS_CONFIGMAP)


# --- the inventory of applied objects -------------------------------------------------------
#
# What --prune may delete is what fleetops applied, never what merely carries its labels (anyone who
# can create an object can label it). Like Flux's kustomize-controller inventory, each cluster keeps
# the keys of the objects its reconciler applied, in a ConfigMap of the reconciler's namespace,
# written after the applies of a pass. Compressed: 970 objects (the largest cluster of the generated
# fleet) take 3.4 KB, so a ConfigMap's 1 MiB holds a few hundred thousand.

INVENTORY_CONFIGMAP = "fleetops-inventory"
INVENTORY_KEY = "objects.json.gz"
INVENTORY_MAX_BYTES = 64 << 20  # decompressed: a mangled record is refused, not inflated without bound


def read_applied(api: ClusterAPI, opts: Options) -> tuple[Manifest | None, set[Key]]:
    """The inventory ConfigMap and the keys it holds; raises ApiError when it cannot be read."""
    current = call(opts, api.get, "v1", "ConfigMap", opts.namespace, INVENTORY_CONFIGMAP)
    return current, applied_keys(current)


def applied_keys(configmap: Manifest | None) -> set[Key]:
    """The keys of an inventory ConfigMap; a missing or hand-mangled one holds none (nothing is pruned)."""
    try:
        packed = base64.b64decode(((configmap or {}).get("binaryData") or {})[INVENTORY_KEY], validate=True)
        inflate = zlib.decompressobj(wbits=31)
        text = inflate.decompress(packed, INVENTORY_MAX_BYTES)
        if inflate.unconsumed_tail:
            return set()
        return {(str(a), str(k), str(ns), str(n)) for a, k, ns, n in json.loads(text)}
    except (KeyError, ValueError, TypeError, zlib.error):
        return set()


def inventory_content(keys: Iterable[Key]) -> dict[str, Any]:
    text = json.dumps(sorted(list(k) for k in keys), separators=(",", ":")).encode()
    return {"binaryData": {INVENTORY_KEY: base64.b64encode(gzip.compress(text, mtime=0)).decode()}}


def applied_after(previous: set[Key], desired: Iterable[Key], live: dict[Key, Manifest], failed: set[tuple[str, str]],
                  actions: list[Action]) -> set[Key]:
    """The inventory after a pass: what Git wants that is now applied (written or found equal), and what
    the last inventory held that is still there (a LIST that failed counts as still there)."""
    failed_writes = {a.key for a in actions if a.error}
    pruned = {a.key for a in actions if a.verb is Write.PRUNE and a.done}
    now = {k for k in desired if k not in failed_writes}
    kept = {k for k in previous if k not in pruned and (k in live or (k[0], k[1]) in failed)}
    return now | kept
