"""Keep the live fleet equal to Git: one pass, and the loop around it.

A pass: fetch the revision -> validate and render -> read live nodes -> gate (policy, with the live
inventory in its input) -> per cluster, in parallel: one LIST per kind by the managed-by selector,
diff on the fields fleetops sets, server-side apply in kind order, prune (only when asked, and only
what its inventory of applied objects holds), node labels/taints/quarantine/cordon, inventory and
status ConfigMaps. Anything that fails closed stops before the first write: no policy engine, an
invalid revision, a denied one. The last applied revision stays.

The loop adds metrics (errors and reachability per cluster among them), /healthz, /readyz (the last
pass worked, or why not), JSON logs and leader election through a Lease per cluster, so that several
replicas can run and only the leader of a cluster writes to it.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import functools
import gzip
import hashlib
import http.server
import json
import logging
import re
import shutil
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jsonpatch
import tenacity
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fleetops import diff, git, identity, inventory, memory, render, schema, spec
from fleetops.cluster import TIMEOUT, UNREACHABLE, ApiError, ClusterAPI, Key, Manifest, describe, field_managers, key_of
from fleetops.kube import ENVIRONMENT_LABEL, MANAGED_BY, MANAGER, PRUNE_ANNOTATION, CLUSTER_LABEL

log = logging.getLogger("fleetops.reconcile")
# A library logs only where its user asks it to (the reconcile service installs JSON logs). Set here,
# in the one module that logs, so that the commands that never log do not import logging.
logging.getLogger("fleetops").addHandler(logging.NullHandler())

STATUS_CONFIGMAP = "fleetops-status"
LEASE_NAME = "fleetops-reconciler"
NODE_KIND = ("v1", "Node")


def managed_selector(environment: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{ENVIRONMENT_LABEL}={environment}"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --- the gate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateResult:
    denied: bool
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # reported, never blocking (e.g. live capacity below quota)
    unavailable: bool = False  # denied because no decision could be made (no engine), not by a policy


class Gate(Protocol):
    def __call__(self, env: spec.Environment, state: render.DesiredState, live_nodes: dict[str, Any]) -> GateResult: ...


def default_gate(env: spec.Environment, state: render.DesiredState, live_nodes: dict[str, Any], policies_dir: Path) -> GateResult:
    """The policy gate of fleetops.policy, with the live node inventory in its input.

    `policies_dir` is the fetched revision's `policies/`, so the gate that deploys is the one `plan`
    and `check` used. Fails closed: a revision without policies, or an engine that cannot load them
    or raises, is denied.
    """
    if not policies_dir.is_dir():
        return GateResult(True, [f"the revision has no {policies_dir.name}/ folder: nothing to judge it by, nothing applied"])
    try:
        from fleetops import policy

        verdict = policy.evaluate(env, state, live=policy_inventory(live_nodes), policies_dir=policies_dir)
    except Exception as exc:  # noqa: BLE001 - any failure of the engine is a denial, never an apply
        return GateResult(True, [f"policy engine unavailable: {type(exc).__name__}: {exc}"], unavailable=True)
    warnings = [f"{d.rule}: {d.msg}" for d in verdict.warnings]
    try:  # the same record plan, check and the policy pack write; losing it does not undo the decision
        policy.log_decisions(policy.decision_log_path(), policy.verdict_record(verdict, "reconcile"))
    except policy.PolicyError as exc:
        warnings.append(f"decision not recorded: {exc}")
    return GateResult(bool(verdict.denied), [f"{d.rule}: {d.msg}" for d in verdict.denied], warnings)


def policy_inventory(live: dict[str, Any]) -> Any:
    """The reconciler's live facts as the policy input's node inventory (clusters whose nodes were read)."""
    from fleetops import policy

    def quantity(value: int | float) -> int | str:
        return value if isinstance(value, int) else str(value)

    return policy.Inventory(
        nodes=[
            policy.LiveNode(
                cluster=cluster,
                name=node["name"],
                labels=node["labels"],
                capacity={k: quantity(v) for k, v in node["allocatable"].items()},
                allocatable={k: quantity(v) for k, v in node["allocatable"].items()},
                ready=node["ready"] and not node["unschedulable"],
            )
            for cluster, facts in sorted(live["clusters"].items())
            if facts["nodes_read"]
            for node in facts["nodes"]
        ]
    )


# --- options, actions, results -------------------------------------------------------------


@dataclass
class Options:
    prune: bool = False
    dry_run: bool = False  # say what a pass would write; write nothing
    detect_only: bool = False  # report drift; write nothing
    force_conflicts: bool = False
    namespace: str | None = None  # where the status ConfigMap and the Lease live; default: the spec's reconciler.namespace
    workers: int = 4  # clusters reconciled at once
    attempts: int = 5  # per API call, for retryable errors
    backoff: float = 0.5  # first retry delay in seconds; doubles, with jitter, up to backoff_max
    backoff_max: float = 30.0
    clock: Callable[[], dt.datetime] = utcnow
    sleep: Callable[[float], None] = time.sleep

    @property
    def writes(self) -> bool:
        return not (self.dry_run or self.detect_only)


@dataclass
class Action:
    """One thing a pass found: a write it makes (or would make), or a finding it reports."""

    cluster: str
    verb: str  # create update prune | label taint quarantine release cordon uncordon | orphan protected unmatched ...
    target: str
    detail: Any = None
    write: bool = True
    kind: str = ""
    done: bool = False
    error: str | None = None
    key: Key | None = None  # the object, for writes to it
    body: Manifest | None = field(default=None, repr=False)  # what an apply sends; what a node patch sends
    changed_by: dict[str, str] = field(default_factory=dict)  # of an update: JSON pointer -> the field manager that owns it live

    def to_dict(self) -> dict[str, Any]:
        detail = ([{**c.to_dict(), "changed_by": self.changed_by.get(c.path)} for c in self.detail]  # FieldChanges
                  if self.verb == "update" else self.detail)
        return {"cluster": self.cluster, "verb": self.verb, "kind": self.kind, "target": self.target, "detail": detail,
                "write": self.write, "done": self.done, "error": self.error}

    def text(self) -> str:
        """The detail as a person reads it: an update's fields as `path: live → Git (who changed it)`."""
        if self.verb == "update" and isinstance(self.detail, list):
            return "; ".join(change_text(c, self.changed_by.get(c.path)) for c in self.detail)
        return "" if self.detail is None else str(self.detail)


VALUE_CHARS = 80  # of one value in a drift line: a changed ConfigMap or pod template is summarised, not printed whole


def field_path(pointer: str) -> str:
    """A JSON pointer as a field path: /spec/hard/requests.nvidia.com~1gpu -> spec.hard["requests.nvidia.com/gpu"]."""
    out = ""
    for part in jsonpatch.JsonPointer(pointer).parts:
        if part.isdigit():
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def change_text(change: diff.FieldChange, changed_by: str | None) -> str:
    before = "(absent)" if change.op == "add" else _value(change.old)
    after = "(absent)" if change.op == "remove" else _value(change.new)
    return f"{field_path(change.path)}: {before} → {after}" + (f" (changed by {changed_by})" if changed_by else "")


@dataclass
class ClusterResult:
    cluster: str
    actions: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed live nodes
    capacity: list[inventory.CapacityRow] = field(default_factory=list)
    shortfalls: list[dict[str, Any]] = field(default_factory=list)
    leader: bool = True
    nodes_read: bool = True  # False: the node LIST failed, so capacity is unknown (not zero)
    unreachable: str | None = None  # why the API server was taken for unreachable in this pass
    applied: set[Key] | None = None  # the inventory of applied objects after this pass; None: not known
    last_applied: str | None = None  # the revision its status ConfigMap records as applied
    measured: set[str] | None = None  # the kinds whose drift this pass measured; None: none (unreachable, denied, standby)

    @property
    def kinds(self) -> list[tuple[str, str]]:
        """The kinds the next pass lists besides Git's: those the inventory holds objects of."""
        return sorted({(k[0], k[1]) for k in self.applied or ()})

    @property
    def drift(self) -> list[Action]:
        return [a for a in self.actions if a.write]

    def drift_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.drift:
            out[a.kind] = out.get(a.kind, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "leader": self.leader,
            "drift": len(self.drift),
            "actions": [a.to_dict() for a in self.actions],
            "errors": self.errors,
            "unreachable": self.unreachable,
            "last_applied": self.last_applied,
            "problems": self.problems,
            "capacity": [r.to_dict() for r in self.capacity],
            "shortfalls": self.shortfalls,
        }


@dataclass
class PassResult:
    environment: str
    revision: str | None
    status: str  # applied | clean | drift | planned | errors | denied | standby | invalid | unavailable
    reasons: list[str] = field(default_factory=list)
    clusters: dict[str, ClusterResult] = field(default_factory=dict)
    last_applied: str | None = None
    warnings: list[str] = field(default_factory=list)
    gate_unavailable: bool = False

    @property
    def drift(self) -> int:
        return sum(len(c.drift) for c in self.clusters.values())

    @property
    def errors(self) -> list[str]:
        return [e for c in self.clusters.values() for e in c.errors]

    def exit_code(self) -> int:
        """0 ok, 1 drift left (detect-only, failed writes), denied, or another replica leads; 2 bad input (invalid revision, no source)."""
        if self.status in ("invalid", "unavailable"):
            return 2
        if self.status in ("denied", "drift", "errors", "standby"):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "revision": self.revision,
            "status": self.status,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "last_applied": self.last_applied,
            "drift": self.drift,
            "clusters": {n: c.to_dict() for n, c in self.clusters.items()},
        }


# --- retries --------------------------------------------------------------------------------


def _retryable(conflicts: bool) -> Callable[[BaseException], bool]:
    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, ApiError) and exc.retryable and (conflicts or exc.status != 409)

    return retryable


def _wait(opts: Options) -> Callable[[tenacity.RetryCallState], float]:
    jitter = tenacity.wait_exponential_jitter(multiplier=opts.backoff, max=opts.backoff_max, jitter=opts.backoff)

    def wait(state: tenacity.RetryCallState) -> float:
        # The server knows best how long to back off: Retry-After wins over our own schedule.
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            return min(exc.retry_after, opts.backoff_max)
        return jitter(state)

    return wait


def call(opts: Options, fn: Callable[..., Any], *args: Any, conflicts: bool = True) -> Any:
    """One API call with exponential backoff and jitter on 409/429/5xx/timeouts; other errors raise at once.

    `conflicts=False` for writes that carry a resourceVersion precondition or create a named object:
    sending the same body again cannot succeed, the next pass re-reads instead.
    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(opts.attempts),
        wait=_wait(opts),
        retry=tenacity.retry_if_exception(_retryable(conflicts)),
        sleep=opts.sleep,
        reraise=True,
    )
    return retrying(fn, *args)


RBAC_HINT = ("the reconciler's RBAC lacks it: modules/reconciler.py renders its ClusterRole from the revision's kinds, "
             "and an administrator applies a new one (pulumi up): the reconciler cannot grant itself permissions")


def explain(exc: ApiError) -> str:
    """An API error as the pass reports it; a refusal says where the missing permission comes from."""
    return f"{exc}; {RBAC_HINT}" if exc.status == 403 else str(exc)


class Guard:
    """A cluster's API for the length of one pass, which stops calling a server that stopped answering.

    After `threshold` transport failures in a row (refused, timed out), every further call fails at
    once with UNREACHABLE, which is never retried: a pass over a dead or unplugged cluster ends in
    seconds with one line, instead of a timeout and a retry schedule per object.
    """

    def __init__(self, api: ClusterAPI, threshold: int = 3):
        self.api, self.name, self.threshold = api, api.name, threshold
        self.failures = 0
        self.down: str | None = None  # why the server is taken for unreachable

    def __getattr__(self, verb: str) -> Any:
        fn = getattr(self.api, verb)
        if not callable(fn):
            return fn

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.down is not None:
                raise ApiError(UNREACHABLE, f"not attempted: the API server is unreachable ({self.down})")
            try:
                out = fn(*args, **kwargs)
            except ApiError as exc:
                if exc.status == TIMEOUT:
                    self.failures += 1
                    if self.failures >= self.threshold:
                        self.down = exc.reason
                raise
            self.failures = 0
            return out

        return guarded


# --- objects --------------------------------------------------------------------------------


def kinds_of(manifests: Iterable[Manifest]) -> list[tuple[str, str]]:
    return sorted({(m["apiVersion"], m["kind"]) for m in manifests})


def read_live(api: ClusterAPI, kinds: Iterable[tuple[str, str]], environment: str, opts: Options, result: ClusterResult,
              desired: set[tuple[str, str]]) -> tuple[dict[Key, Manifest], set[tuple[str, str]], set[tuple[str, str]]]:
    """Everything fleetops owns in a cluster: one LIST per kind, by label selector. Returns objects,
    kinds whose LIST failed, and kinds Git wants that the server does not serve (404: no CRD).

    A kind only remembered from earlier passes whose type the server no longer serves holds
    nothing: it is dropped, not an error.
    """
    live: dict[Key, Manifest] = {}
    failed: set[tuple[str, str]] = set()
    unserved: set[tuple[str, str]] = set()
    selector = managed_selector(environment)
    for api_version, kind in kinds:
        try:
            for obj in call(opts, api.list, api_version, kind, selector):
                live[key_of(obj)] = obj
        except ApiError as exc:
            if exc.status == 404:
                if (api_version, kind) in desired:
                    unserved.add((api_version, kind))
                continue
            failed.add((api_version, kind))
            result.errors.append(f"{result.cluster}: list {kind}: {explain(exc)}")
    return live, failed, unserved


# What serves each API group fleetops renders beyond Kubernetes' own: a bare cluster lacks them all.
PROVIDERS = {
    "kueue.x-k8s.io": "Kueue",
    "scheduling.volcano.sh": "Volcano",
    "apps.kubeedge.io": "KubeEdge",
    "apps.openyurt.io": "OpenYurt (yurt-manager)",
    "monitoring.coreos.com": "prometheus-operator",
}


def not_served(cluster: str, desired: list[Manifest], unserved: set[tuple[str, str]]) -> list[str]:
    """One line per API version Git needs and the server lacks, naming what to install, instead of one error per object."""
    lines = []
    for api_version in sorted({v for v, _ in unserved}):
        kinds = sorted(k for v, k in unserved if v == api_version)
        count = sum(1 for m in desired if m["apiVersion"] == api_version and m["kind"] in kinds)
        group = api_version.partition("/")[0]
        provider = f"{PROVIDERS[group]} (its CRDs and controller)" if group in PROVIDERS else f"the CRDs of {group}"
        lines.append(f"{cluster}: {api_version} not served: install {provider} before fleetops applies "
                     f"{', '.join(kinds)} ({count} object(s) not applied)")
    return lines


NAMESPACE_NOT_PRUNED = "not in Git; a Namespace is never pruned (deleting it deletes everything in it): delete it by hand once empty"


def changed_by(live: Manifest, changes: list[diff.FieldChange]) -> dict[str, str]:
    """Per drifted field, the field managers other than fleetops that own it live (a removed field has none)."""
    out = {}
    for change in changes:
        managers = [m for m in field_managers(live, jsonpatch.JsonPointer(change.path).parts) if m != MANAGER]
        if change.op != "add" and managers:
            out[change.path] = ", ".join(sorted(set(managers)))
    return out


NOT_APPLIED = "carries fleetops' labels but fleetops never applied it (not in its inventory): never pruned"


def object_actions(cluster: str, desired: list[Manifest], live: dict[Key, Manifest], failed: set[tuple[str, str]], opts: Options,
                   applied: set[Key] | None) -> list[Action]:
    """Creates and updates in apply order, then prunes (workloads before namespaces).

    Only an object of the last inventory (`applied`; None when it could not be read), in a namespace
    fleetops manages, is pruned: its labels alone prove nothing.
    """
    actions: list[Action] = []
    wanted: set[Key] = set()
    for manifest in sorted(desired, key=render.kind_rank):
        key = key_of(manifest)
        wanted.add(key)
        current = live.get(key)
        if current is None:
            # A kind whose LIST failed is unknown, not absent: apply it anyway (apply is idempotent).
            verb = "apply" if (key[0], key[1]) in failed else "create"
            actions.append(Action(cluster, verb, describe(key), None, kind=key[1], key=key, body=manifest))
        elif changes := diff.drift(manifest, current):
            actions.append(Action(cluster, "update", describe(key), changes, kind=key[1], key=key, body=manifest,
                                  changed_by=changed_by(current, changes)))
    known = applied or set()
    # Namespaces fleetops creates, or created, and those Git puts objects in (kube-system for a plugin).
    managed = {k[3] for k in wanted | known if k[1] == "Namespace"} | {k[2] for k in wanted if k[2]}
    extra = sorted((k for k in live if k not in wanted), key=lambda k: -render.kind_rank({"kind": k[1]}))
    for key in extra:
        meta = live[key].get("metadata", {})
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(MANAGED_BY) != MANAGER:
            continue  # never touch what fleetops does not own, whatever the server returned
        if labels.get(CLUSTER_LABEL, cluster) != cluster:
            actions.append(Action(cluster, "foreign", describe(key), f"labelled for cluster {labels[CLUSTER_LABEL]}", write=False, kind=key[1]))
        elif notes.get(PRUNE_ANNOTATION) == "disabled":
            actions.append(Action(cluster, "protected", describe(key), f"{PRUNE_ANNOTATION}: disabled", write=False, kind=key[1]))
        elif key[1] == "Namespace":
            # Deleting a namespace deletes everything in it, objects fleetops does not own and protected
            # ones included; its managed contents are pruned one by one, the namespace is left to a person.
            actions.append(Action(cluster, "orphan", describe(key), NAMESPACE_NOT_PRUNED, write=False, kind=key[1]))
        elif applied is None:
            actions.append(Action(cluster, "orphan", describe(key), "not in Git; the inventory could not be read: not pruned this pass", write=False, kind=key[1]))
        elif key not in applied:
            actions.append(Action(cluster, "unowned", describe(key), NOT_APPLIED, write=False, kind=key[1]))
        elif key[2] and key[2] not in managed:
            actions.append(Action(cluster, "unowned", describe(key), f"in namespace {key[2]}, which fleetops does not manage: never pruned",
                                  write=False, kind=key[1]))
        elif opts.prune:
            actions.append(Action(cluster, "prune", describe(key), None, kind=key[1], key=key))
        else:
            actions.append(Action(cluster, "orphan", describe(key), "not in Git; --prune deletes it", write=False, kind=key[1]))
    return actions


# --- nodes ----------------------------------------------------------------------------------


def _has(taints: list[dict[str, str]], taint: dict[str, str]) -> bool:
    return any(t["key"] == taint["key"] and t["effect"] == taint["effect"] and t.get("value", "") == taint.get("value", "") for t in taints)


def node_plan(group: spec.Group, node: inventory.NodeInfo, now: dt.datetime,
              record: dict[str, str] | None = None) -> tuple[Manifest, list[tuple[str, str, bool]]]:
    """The merge patch that makes a member node meet its group's contract, and what it means.

    Returns (patch, [(verb, detail, write)]). Labels merge key by key; taints are sent whole, with
    the node's resourceVersion as a precondition, so a taint another controller added since the
    read is not lost (the write gets 409 and the next pass starts from a fresh read).
    """
    notes: list[tuple[str, str, bool]] = []
    labels = {k: v for k, v in spec.node_labels(group).items() if node.labels.get(k) != v}
    if labels:
        notes.append(("label", ", ".join(f"{k}={v}" for k, v in labels.items()), True))
    taints = [dict(t) for t in node.taints]
    for taint in (t.model_dump() for t in spec.taints(group)):
        if not _has(taints, taint):
            taints = [t for t in taints if not (t["key"] == taint["key"] and t["effect"] == taint["effect"])] + [taint]
            notes.append(("taint", f"{taint['key']}={taint['value']}:{taint['effect']}", True))
    annotations: dict[str, str | None] = {}
    unschedulable: bool | None = None
    guarded = isinstance(group, spec.EdgeGroup) and bool(group.fingerprints)
    if not guarded and _has(taints, inventory.QUARANTINE_TAINT):
        # Quarantined while it claimed a group it did not match, or two groups matched it: one member now.
        taints = [t for t in taints if t["key"] != inventory.QUARANTINE_TAINT["key"]]
        notes.append(("release", f"a member of {group.name} by its match alone", True))
    if isinstance(group, spec.EdgeGroup):
        if group.fingerprints and record is None:
            notes.append(("identity", "the identity record could not be read: quarantine left as it is", False))
        elif group.fingerprints:
            # The kubelet key fleetops approved for this node, from a record nodes cannot write.
            recorded = record.get(node.name)
            known = recorded in group.fingerprints
            why = (f"its kubelet key {recorded} is not in the allow list of {group.name}" if recorded
                   else f"fleetops approved no kubelet key of this node (a certificate from another approver is no proof of a device in {group.name})")
            quarantined = _has(taints, inventory.QUARANTINE_TAINT)
            if not known and not quarantined:
                taints.append(dict(inventory.QUARANTINE_TAINT))
                notes.append(("quarantine", why, True))
            elif not known:
                notes.append(("quarantined", why, False))
            elif quarantined:
                taints = [t for t in taints if t["key"] != inventory.QUARANTINE_TAINT["key"]]
                notes.append(("release", f"its kubelet key is allowed in {group.name}", True))
        if not node.ready:
            offline = (now - node.ready_since).total_seconds() if node.ready_since else None
            if offline is not None and offline > group.offline_grace_seconds and not node.unschedulable:
                unschedulable = True
                annotations[inventory.CORDON_ANNOTATION] = "offline"
                notes.append(("cordon", f"NotReady for {int(offline)}s, more than the {group.offline_grace_seconds}s grace of {group.name}", True))
            else:
                since = f"{int(offline)}s" if offline is not None else "an unknown time"
                notes.append(("offline", f"NotReady for {since} (grace {group.offline_grace_seconds}s)", False))
        elif node.unschedulable and node.annotations.get(inventory.CORDON_ANNOTATION) == "offline":
            unschedulable = False
            annotations[inventory.CORDON_ANNOTATION] = None
            notes.append(("uncordon", "Ready again; fleetops cordoned it while offline", True))
    patch: Manifest = {}
    if labels or annotations:
        patch["metadata"] = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    if taints != node.taints or unschedulable is not None:
        patch.setdefault("metadata", {})["resourceVersion"] = node.resource_version
        patch["spec"] = {k: v for k, v in (("taints", taints if taints != node.taints else None), ("unschedulable", unschedulable)) if v is not None}
    return patch, notes


def quarantine(cluster: str, node: inventory.NodeInfo, why: str) -> Action:
    """The quarantine taint on a node that is no group's member, or the finding that it has it already."""
    target = f"Node {node.name}"
    if _has(node.taints, inventory.QUARANTINE_TAINT):
        return Action(cluster, "quarantined", target, why, write=False, kind="Node")
    patch = {"metadata": {"resourceVersion": node.resource_version}, "spec": {"taints": [*node.taints, dict(inventory.QUARANTINE_TAINT)]}}
    return Action(cluster, "quarantine", target, why, kind="Node", key=("v1", "Node", "", node.name), body=patch)


def node_actions(cluster: spec.Cluster, inv: inventory.Inventory, now: dt.datetime,
                 record: dict[str, str] | None = None) -> tuple[list[Action], dict[str, list[inventory.NodeInfo]]]:
    """Per node: its actions (writes carry the node's patch); and the members of each group (for capacity)."""
    out: list[Action] = []
    members: dict[str, list[inventory.NodeInfo]] = {}
    for node in inv.nodes:
        groups = inventory.match_groups(cluster, node)
        impostor = [g.name for g in inventory.claimed_groups(cluster, node) if g not in groups]
        if impostor or len(groups) > 1:
            # Workloads find a group's nodes by its label: a node that claims a group it does not match,
            # or that two groups claim, must run none of them.
            why = (f"carries the label of {', '.join(impostor)} but does not match its match" if impostor
                   else f"matches several groups ({', '.join(g.name for g in groups)})")
            out.append(quarantine(cluster.name, node, why))
            continue
        if not groups:
            out.append(Action(cluster.name, "unmatched", f"Node {node.name}", "matches no pool or edge group; left alone", write=False, kind="Node"))
            continue
        members.setdefault(groups[0].name, []).append(node)
        patch, notes = node_plan(groups[0], node, now, record)
        for verb, detail, write in notes:
            # One patch per node carries all its writes; its actions share the outcome.
            out.append(Action(cluster.name, verb, f"Node {node.name}", detail, write=write, kind="Node",
                              key=("v1", "Node", "", node.name), body=patch if write else None))
    return out, members


CSR_KIND = ("certificates.k8s.io/v1", "CertificateSigningRequest")


def identity_actions(api: ClusterAPI, cluster: spec.Cluster, opts: Options, result: ClusterResult) -> tuple[list[Action], dict[str, str] | None]:
    """Decide every pending kubelet client certificate request of a guarded cluster; the identity
    record as it stands once they are approved. None for the record when it could not be read."""
    try:
        record_map = call(opts, api.get, "v1", "ConfigMap", opts.namespace, identity.RECORD_CONFIGMAP)
        requests = call(opts, api.list, *CSR_KIND, "")
    except ApiError as exc:
        result.errors.append(f"{cluster.name}: read kubelet certificate requests: {explain(exc)}")
        return [], None
    record = identity.read_record(record_map)
    before = dict(record)
    actions = []
    for csr in sorted(requests, key=lambda c: c["metadata"]["name"]):
        if not identity.pending(csr):
            continue
        verdict = identity.judge(cluster, identity.read_request(csr), record)
        if verdict is None:  # not an edge device's: Kubernetes' own approver decides it
            continue
        if verdict.approve:
            record[verdict.request.node] = verdict.request.fingerprint
        actions.append(Action(cluster.name, "approve" if verdict.approve else "deny", f"CertificateSigningRequest {csr['metadata']['name']}",
                              f"node {verdict.request.node}: {verdict.reason}", kind="CertificateSigningRequest",
                              key=(*CSR_KIND, "", csr["metadata"]["name"]), body=identity.approval(csr, verdict)))
    if record != before:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "data": identity.record_data(record),
                "metadata": {"name": identity.RECORD_CONFIGMAP, "namespace": opts.namespace, "labels": {"app.kubernetes.io/part-of": MANAGER},
                             **({"resourceVersion": record_map["metadata"]["resourceVersion"]} if record_map else {})}}
        actions.append(Action(cluster.name, "record", f"ConfigMap {opts.namespace}/{identity.RECORD_CONFIGMAP}",
                              "approved " + ", ".join(f"{node}={key}" for node, key in sorted(set(record.items()) - set(before.items()))),
                              kind="ConfigMap", key=("v1", "ConfigMap", opts.namespace, identity.RECORD_CONFIGMAP), body=body))
    return actions, record


def read_nodes(api: ClusterAPI, cluster: spec.Cluster, opts: Options) -> tuple[inventory.Inventory, str | None]:
    try:
        raw = call(opts, api.list, *NODE_KIND, "")
    except ApiError as exc:
        return inventory.Inventory(cluster.name), f"{cluster.name}: list nodes: {exc}"
    return inventory.read_inventory(cluster.name, raw), None


def live_input(env: spec.Environment, inventories: dict[str, inventory.Inventory], results: dict[str, ClusterResult]) -> dict[str, Any]:
    """The live facts the policy sees: nodes, capacity per group and shortfalls against guaranteed quota."""
    return {
        "clusters": {
            name: {
                "nodes": [n.to_dict() for n in inv.nodes],
                "nodes_read": results[name].nodes_read,
                "problems": inv.problems,
                "capacity": [r.to_dict() for r in results[name].capacity],
                "shortfalls": results[name].shortfalls,
            }
            for name, inv in inventories.items()
        },
        "warnings": [s["msg"] for r in results.values() for s in r.shortfalls],
    }


# --- status ---------------------------------------------------------------------------------


def record_manifest(namespace: str, name: str, content: dict[str, Any]) -> Manifest:
    # Not labelled managed-by: it is the reconciler's record, not part of the desired state to prune.
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": MANAGER}},
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


def write_status(api: ClusterAPI, opts: Options, current: Manifest | None, data: dict[str, str]) -> None:
    write_record(api, opts, STATUS_CONFIGMAP, current, {"data": data})


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
    pruned = {a.key for a in actions if a.verb == "prune" and a.done}
    now = {k for k in desired if k not in failed_writes}
    kept = {k for k in previous if k not in pruned and (k in live or (k[0], k[1]) in failed)}
    return now | kept


# --- one cluster ----------------------------------------------------------------------------


def _execute(api: ClusterAPI, action: Action, opts: Options) -> None:
    assert action.key is not None
    try:
        if action.kind == "Node":
            precondition = "resourceVersion" in (action.body or {}).get("metadata", {})
            call(opts, api.patch_node, action.key[3], action.body, conflicts=not precondition)
        elif action.kind == "CertificateSigningRequest":
            call(opts, api.approve, action.body, conflicts=False)  # 409: decided elsewhere since the read
        elif action.verb == "record":
            write = api.replace if "resourceVersion" in action.body["metadata"] else api.create
            call(opts, write, action.body, conflicts=False)
        elif action.verb == "prune":
            try:
                call(opts, api.delete, *action.key)
            except ApiError as exc:
                if exc.status != 404:  # already gone is what pruning wanted
                    raise
        else:
            call(opts, api.apply, action.body, MANAGER, opts.force_conflicts)
        action.done = True
    except ApiError as exc:
        action.error = explain(exc)
        if exc.field_conflict:
            action.error += "; another field manager owns it (a hand edit?): --force-conflicts takes it back for Git, or change Git to match"


def reconcile_cluster(
    api: ClusterAPI,
    env: spec.Environment,
    cluster: spec.Cluster,
    desired: list[Manifest],
    result: ClusterResult,
    node_work: list[Action],
    applied: set[Key] | None,
    opts: Options,
) -> None:
    """Objects (apply in kind order, then prune) and nodes of one cluster. One failure never stops the rest.

    `applied` is the inventory of the last pass (None: it could not be read, so nothing is pruned).
    """
    # Kinds applied last time are listed too, so that a kind Git dropped entirely is still pruned.
    wanted = set(kinds_of(desired))
    kinds = sorted(wanted | {(k[0], k[1]) for k in applied or ()})
    live, failed, unserved = read_live(api, kinds, env.environment, opts, result, wanted)
    result.errors += not_served(cluster.name, desired, unserved)
    result.measured = {k for v, k in kinds if (v, k) not in unserved} | {NODE_KIND[1]}
    desired = [m for m in desired if (m["apiVersion"], m["kind"]) not in unserved]
    result.actions += object_actions(cluster.name, desired, live, failed, opts, applied)
    result.actions += node_work
    if opts.writes:
        outcome: dict[Key, Action] = {}
        for action in result.actions:
            if not action.write:
                continue
            if action.kind == "Node" and action.key in outcome:
                first = outcome[action.key]
                action.done, action.error = first.done, first.error
                continue
            if action.verb == "record" and any(a.error for a in result.actions if a.kind == "CertificateSigningRequest"):
                action.error = "not recorded: an approval failed; the next pass decides again"
                continue
            _execute(api, action, opts)
            outcome[action.key] = action
    result.errors += [f"{a.cluster}: {a.verb} {a.target}: {a.error}" for a in result.actions if a.error]
    if applied is not None:
        result.applied = applied_after(applied, (key_of(m) for m in desired), live, failed, result.actions)


# --- one pass over every cluster ------------------------------------------------------------


def _status_data(env: spec.Environment, revision: str | None, result: str, message: str) -> dict[str, str]:
    return {"environment": env.environment, "revision": revision or "", "result": result, "message": message[:1000]}


def run_pass(
    env: spec.Environment,
    state: render.DesiredState,
    apis: dict[str, ClusterAPI],
    gate: Gate,
    opts: Options | None = None,
    last_applied: str | None = None,
) -> PassResult:
    """One reconcile pass of a rendered revision over the clusters in `apis` (others are not touched).

    Nodes are read first because the gate judges the revision with the live inventory in view;
    a denial stops the pass before any object is read or written.
    """
    opts = dataclasses.replace(opts or Options(), namespace=(opts and opts.namespace) or env.reconciler.namespace)
    clusters = [c for c in env.clusters if c.name in apis]
    results = {c.name: ClusterResult(c.name) for c in clusters}
    guards = {name: Guard(api) for name, api in apis.items()}
    apis = dict(guards)
    now = opts.clock()

    def survey(cluster: spec.Cluster) -> tuple[inventory.Inventory, list[Action]]:
        inv, error = read_nodes(apis[cluster.name], cluster, opts)
        result = results[cluster.name]
        if guards[cluster.name].down is not None:
            # Nothing more is asked of a server that does not answer: one line, no guessed actions.
            result.unreachable = guards[cluster.name].down
            result.errors.append(f"{cluster.name}: API server unreachable ({result.unreachable}): nothing read or written this pass")
            result.nodes_read = False
            return inv, []
        result.problems = inv.problems
        approvals, record = identity_actions(apis[cluster.name], cluster, opts, result) if identity.guarded(cluster) else ([], {})
        work, members = node_actions(cluster, inv, now, record)
        work = approvals + work  # a node approved in this pass is known to the quarantine decision
        if error:
            # Unknown is not zero: no capacity figures, no shortfall warnings from a failed read.
            result.errors.append(error)
            result.nodes_read = False
            return inv, work
        result.capacity = inventory.capacity(cluster, members)
        result.shortfalls = inventory.shortfalls(env, cluster.name, result.capacity)
        return inv, work

    with ThreadPoolExecutor(max_workers=max(1, opts.workers)) as pool:
        surveyed = dict(zip((c.name for c in clusters), pool.map(survey, clusters)))
        inventories = {name: inv for name, (inv, _) in surveyed.items()}
        verdict = gate(env, state, live_input(env, inventories, results))
        if verdict.denied:
            return PassResult(env.environment, state.revision, "denied", verdict.reasons, results, last_applied, verdict.warnings,
                              gate_unavailable=verdict.unavailable)

        def one(cluster: spec.Cluster) -> None:
            api, result = apis[cluster.name], results[cluster.name]
            if result.unreachable is not None:
                return
            desired = state.clusters.get(cluster.name, [])
            try:
                status, known = read_status(api, opts), True
                result.last_applied = (status or {}).get("data", {}).get("revision") or None
            except ApiError as exc:
                status, known = None, False  # unknown: reconcile anyway, but do not overwrite the record blind
                result.errors.append(f"{cluster.name}: read status ConfigMap: {exc}")
            try:
                inventory_map, applied = read_applied(api, opts)
            except ApiError as exc:
                inventory_map, applied = None, None  # unknown: apply, but prune nothing and keep the record
                result.errors.append(f"{cluster.name}: read inventory ConfigMap: {explain(exc)}")
            try:
                reconcile_cluster(api, env, cluster, desired, result, surveyed[cluster.name][1], applied, opts)
            except Exception as exc:  # noqa: BLE001 - one cluster's failure is reported, the others go on
                result.errors.append(f"{cluster.name}: {type(exc).__name__}: {exc}")
                return
            if (down := guards[cluster.name].down) is not None:
                # The server stopped answering part-way: one line for what was not attempted.
                skipped = [e for e in result.errors if "not attempted: the API server is unreachable" in e]
                result.unreachable = down
                result.errors = [e for e in result.errors if e not in skipped]
                result.errors.append(f"{cluster.name}: API server stopped answering during the pass ({down}): "
                                     f"{len(skipped)} call(s) not attempted; the next pass converges")
                return
            if opts.writes and result.applied is not None:
                try:
                    write_record(api, opts, INVENTORY_CONFIGMAP, inventory_map, inventory_content(result.applied))
                except ApiError as exc:
                    result.errors.append(f"{cluster.name}: inventory ConfigMap: {explain(exc)}")
            if opts.writes and known:
                ok = not result.errors
                data = _status_data(env, state.revision if ok else (status or {}).get("data", {}).get("revision") or last_applied,
                                    "ok" if ok else "errors", "; ".join(result.errors))
                try:
                    write_status(api, opts, status, data)
                    result.last_applied = data["revision"] or None
                except ApiError as exc:
                    result.errors.append(f"{cluster.name}: status ConfigMap: {exc}")

        list(pool.map(one, clusters))
    shortfalls = [s["msg"] for r in results.values() for s in r.shortfalls]
    out = PassResult(env.environment, state.revision, "clean", shortfalls, results, last_applied, verdict.warnings)
    if out.errors:
        out.status = "errors"
    elif out.drift and opts.writes:
        out.status = "applied"
    elif out.drift:
        out.status = "planned" if opts.dry_run else "drift"
    if opts.writes and not out.errors:
        out.last_applied = state.revision
    elif len(recorded := {c.last_applied for c in results.values()}) == 1 and None not in recorded:
        out.last_applied = recorded.pop()  # what every cluster's status records, read even when nothing is written
    return out


def record_refusal(apis: dict[str, ClusterAPI], opts: Options, result: str, message: str) -> None:
    """Write a denied/invalid outcome to each status ConfigMap, keeping the last applied revision it holds."""
    for api in apis.values():
        try:
            status = read_status(api, opts)
            if status is None:
                continue  # nothing was ever applied here: nothing to keep, nowhere to write
            data = dict(status.get("data") or {})
            data.update(result=result, message=message[:1000])
            write_status(api, opts, status, data)
        except ApiError:
            pass  # the record is best effort; the refusal itself already held


# --- the revision ---------------------------------------------------------------------------


_CREDENTIALS = re.compile(r"(\w+://)[^/\s]*@")


def redact(text: str) -> str:
    """URLs without their user:token part, for logs and reports."""
    return _CREDENTIALS.sub(r"\1***@", text)


@dataclass
class Fetched:
    path: Path | None
    revision: str | None
    error: str | None = None


def credentials(url: str) -> tuple[str, dict[str, str]]:
    """An http(s) URL without its user:token part, and the Git environment that sends them instead.

    Git would store a URL's credentials in the clone's .git/config. Given as configuration in the
    environment of each command (GIT_CONFIG_COUNT/KEY/VALUE), they are neither stored nor in the
    command line, and the header goes to this URL only, not to a host a redirect names.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, {}
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host))
    basic = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()).decode()
    return clean, {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"http.{clean}.extraHeader", "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}


class GitSource:
    """A clone of the repository in a cache folder, fetched each pass; on failure the last good checkout stays."""

    def __init__(self, repo: str, ref: str = "main", cache_dir: Path | None = None):
        local = Path(repo).expanduser()
        given = str(local.resolve()) if local.is_dir() else repo
        self.repo, self._env = credentials(given)
        # A refused credential is an error of the pass, never a prompt; a server that stops sending ends the fetch.
        self._env.update(GIT_TERMINAL_PROMPT="0", GIT_HTTP_LOW_SPEED_LIMIT="1", GIT_HTTP_LOW_SPEED_TIME="60")
        self.ref = ref
        root = cache_dir or Path.home() / ".cache" / "fleetops" / "repos"
        # Named by the URL as given, so that a cache an earlier version cloned with credentials is found and cleaned.
        self.path = root / hashlib.sha256(given.encode()).hexdigest()[:16]

    @property
    def _marker(self) -> Path:
        return self.path / ".git" / "fleetops-checked-out"

    def _current(self) -> str | None:
        # Recorded after each successful checkout: a fresh clone's HEAD was never checked out.
        try:
            return self._marker.read_text().strip() or None
        except OSError:
            return None

    def fetch(self) -> Fetched:
        try:
            if not (self.path / ".git").is_dir():
                shutil.rmtree(self.path, ignore_errors=True)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                git.run(self.path.parent, "clone", "--quiet", "--no-checkout", self.repo, str(self.path), env=self._env)
            else:
                git.run(self.path, "remote", "set-url", "origin", self.repo)  # drops credentials an older clone stored
                git.run(self.path, "fetch", "--quiet", "--prune", "--force", "origin",
                        "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*", env=self._env)
            sha = self._resolve()
            git.run(self.path, "checkout", "--quiet", "--force", "--detach", sha)
            self._marker.write_text(sha)
            return Fetched(self.path, sha)
        except (git.GitError, OSError) as exc:
            good = self._current()
            error = redact(str(exc))
            if good is None:
                return Fetched(None, None, f"{redact(self.repo)}: {error}")
            return Fetched(self.path, good, f"{redact(self.repo)}: {error}; keeping the last good revision {good[:12]}")

    def _resolve(self) -> str:
        for candidate in (f"origin/{self.ref}", self.ref):
            try:
                return git.run(self.path, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}").strip()
            except git.GitError:
                continue
        raise git.GitError(f"no branch, tag or commit {self.ref!r}")


# --- leader election ------------------------------------------------------------------------


def lease_failure(cluster: str, elector: LeaseElector) -> ClusterResult:
    """A cluster whose Lease could not be read or written: a server that failed us, not another leader."""
    if elector.last_status == TIMEOUT:
        return ClusterResult(cluster, leader=False, unreachable=elector.last_error,
                             errors=[f"{cluster}: API server unreachable ({elector.last_error}): nothing read or written this pass"])
    return ClusterResult(cluster, leader=False, errors=[f"{cluster}: cannot take the Lease: {elector.last_error}"])


def _micro_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Leader election through a coordination.k8s.io/v1 Lease: take it when free or expired, renew it while held.

    Every write carries the resourceVersion that was read, so two candidates racing for an expired
    Lease cannot both win: the second write gets 409 and that candidate stays a follower.
    """

    def __init__(self, api: ClusterAPI, namespace: str, identity: str, duration: int = 15,
                 clock: Callable[[], dt.datetime] = utcnow, name: str = LEASE_NAME):
        self.api, self.namespace, self.identity, self.duration, self.clock, self.name = api, namespace, identity, duration, clock, name
        self.last_status: int | None = None  # of the last failed call: 404 means the namespace is not there yet
        self.last_error: str | None = None  # that call's error, when it was not a lost race (409)
        self.holder: str | None = None  # who held the Lease at the last read

    def _body(self, now: dt.datetime, transitions: int, acquired: str) -> Manifest:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
                     "acquireTime": acquired, "renewTime": _micro_time(now), "leaseTransitions": transitions},
        }

    def acquire(self) -> bool:
        """True when this candidate holds the Lease after the call."""
        now = self.clock()
        self.last_status = self.last_error = None
        try:
            lease = self.api.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
            if lease is None:
                self.api.create(self._body(now, 0, _micro_time(now)))
                return True
            held = lease.get("spec", {})
            self.holder = held.get("holderIdentity")
            renewed = held.get("renewTime")
            expired = renewed is None or (now - inventory.parse_time(renewed)).total_seconds() > held.get("leaseDurationSeconds", self.duration)
            mine = held.get("holderIdentity") == self.identity
            if not mine and not expired:
                return False
            transitions = held.get("leaseTransitions", 0) + (0 if mine else 1)
            body = self._body(now, transitions, held.get("acquireTime") if mine else _micro_time(now))
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            self.api.replace(body)
            return True
        except ApiError as exc:
            self.last_status = exc.status
            self.last_error = None if exc.status == 409 else str(exc)
            return False  # a conflict, or the API is unreachable: not the leader this round


# --- metrics, health, logs ------------------------------------------------------------------


class Metrics:
    """The reconciler's Prometheus metrics, in a registry of their own (one per Reconciler)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.duration = Histogram("fleetops_reconcile_duration_seconds", "Time of one reconcile pass", registry=r)
        self.drift = Gauge("fleetops_drift_objects", "Objects and nodes that differed from Git in the last pass that compared them (0: equal)", ["cluster", "kind"], registry=r)
        self.apply_errors = Counter("fleetops_apply_errors", "Writes that failed after retries", ["cluster", "kind"], registry=r)
        self.denials = Counter("fleetops_policy_denials", "Revisions the policy gate denied", registry=r)
        self.capacity = Gauge("fleetops_capacity_devices", "Device units per cluster, resource and state (declared, ready, unavailable)", ["cluster", "resource", "state"], registry=r)
        self.last_success = Gauge("fleetops_last_success_timestamp_seconds", "When a pass last ended without errors", registry=r)
        self.cluster_errors = Counter("fleetops_reconcile_errors", "Errors of reconcile passes per cluster (reads, writes, an unreachable API server)", ["cluster"], registry=r)
        self.cluster_up = Gauge("fleetops_cluster_up", "1 when the last pass reached the cluster's API server, 0 when it did not", ["cluster"], registry=r)
        self.capacity_read = Gauge("fleetops_capacity_read_timestamp_seconds", "When the cluster's nodes were last read (fleetops_capacity_devices is as of then)", ["cluster"], registry=r)
        self._series: dict[tuple[Gauge, str], set[tuple[str, ...]]] = {}

    def observe(self, result: PassResult, seconds: float, now: float) -> None:
        """Per cluster, what this pass learnt; what it could not learn keeps its last value (see `replace`)."""
        self.duration.observe(seconds)
        if result.status == "denied":
            self.denials.inc()
        for name, cluster in result.clusters.items():
            self.cluster_errors.labels(name).inc(len(cluster.errors))  # present at 0 from the first pass
            self.cluster_up.labels(name).set(0 if cluster.unreachable else 1)
            for action in cluster.actions:
                if action.error:
                    self.apply_errors.labels(name, action.kind).inc()
            if cluster.measured is not None:  # every kind it compared, at 0 when equal to Git
                counts = {kind: 0 for kind in cluster.measured} | cluster.drift_by_kind()
                self.replace(self.drift, name, {(kind,): n for kind, n in counts.items()})
            if cluster.leader and cluster.nodes_read and cluster.unreachable is None:
                totals: dict[tuple[str, str], int] = {}
                for row in cluster.capacity:
                    for state, n in (("declared", row.declared), ("ready", row.allocatable), ("unavailable", row.unavailable)):
                        totals[(row.resource, state)] = totals.get((row.resource, state), 0) + n
                self.replace(self.capacity, name, totals)
                self.capacity_read.labels(name).set(now)
        if result.status in ("applied", "clean", "drift", "planned"):
            self.last_success.set(now)

    def replace(self, gauge: Gauge, cluster: str, values: dict[tuple[str, ...], float]) -> None:
        """Set one cluster's series of a gauge to `values` and remove those it no longer has.

        Only a pass that read the cluster calls it: a series that vanished while its API server was
        down would silence every alert on it (`ready < declared` has nothing to compare) exactly when
        it matters; `fleetops_cluster_up` and `fleetops_capacity_read_timestamp_seconds` say how old it is.
        """
        for labels in self._series.get((gauge, cluster), set()) - values.keys():
            gauge.remove(cluster, *labels)
        for labels, n in values.items():
            gauge.labels(cluster, *labels).set(n)
        self._series[(gauge, cluster)] = set(values)


@dataclass(frozen=True)
class Readiness:
    """What /readyz answers: ready, or the short reason it is not."""

    reason: str | None = None

    def __bool__(self) -> bool:
        return self.reason is None


READY_REASON_CHARS = 1000


def readiness(result: PassResult | None) -> Readiness:
    """Ready when the last pass judged a valid revision and reached every cluster without an error
    (applied, clean, drift found, denied by a policy, or another replica leads)."""
    if result is None:
        return Readiness("no pass has completed")
    revision = (result.revision or "")[:12]
    if result.status == "unavailable":
        why = f"no revision to reconcile: {'; '.join(result.reasons)}"
    elif result.status == "invalid":
        why = f"revision {revision} is invalid: {'; '.join(result.reasons)}"
    elif result.gate_unavailable:
        why = f"the policy gate could not judge revision {revision}: {'; '.join(result.reasons)}"
    elif result.errors:
        failing = sorted(n for n, c in result.clusters.items() if c.errors)
        why = f"the last pass failed in {len(failing)} cluster(s): " + "; ".join(result.clusters[n].errors[0] for n in failing)
    else:
        return Readiness()
    why = redact(why)
    return Readiness(why if len(why) <= READY_REASON_CHARS else why[:READY_REASON_CHARS] + "...")


def serve_http(host: str, port: int, metrics: Metrics, ready: Callable[[], Readiness]) -> http.server.ThreadingHTTPServer:
    """/metrics, /healthz (the process answers) and /readyz (the last pass worked, or why not), in a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                self._send(200, b"ok\n")
            elif self.path == "/readyz":
                state = ready()
                self._send(200 if state else 503, b"ok\n" if state else f"not ready: {state.reason}\n".encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds are not news
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="fleetops-http", daemon=True).start()
    return server


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra={"fields": {...}}` adds keys. Messages are redacted of URL credentials."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        entry.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            entry["error"] = redact(f"{record.exc_info[0].__name__}: {record.exc_info[1]}") if record.exc_info[0] else None
        return json.dumps(entry, default=str, sort_keys=True)


def json_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("fleetops")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


# --- the loop -------------------------------------------------------------------------------


Connect = Callable[[spec.Cluster], ClusterAPI]
LOG_ITEMS = 20  # objects and reasons a pass's log line names; the rest is a count (a first pass drifts in thousands)


class Reconciler:
    """Fetch, validate, render, gate and reconcile, pass after pass; keeps the last good and last applied revisions."""

    def __init__(
        self,
        environment: str,
        source: GitSource,
        connect: Connect,
        gate: Gate | None = None,
        opts: Options | None = None,
        only: list[str] | None = None,
        metrics: Metrics | None = None,
        identity: str | None = None,
        validate: Callable[[Iterable[tuple[str, Manifest]]], list[Any]] = schema.validate_objects,
    ):
        self.environment = environment
        self.source = source
        self.connect = connect
        self.gate = gate
        self.opts = opts or Options()
        self.only = only
        self.metrics = metrics or Metrics()
        self.identity = identity  # set: write only where this identity holds the cluster's Lease; None: no election
        self.validate = validate
        self.last_applied: str | None = None
        self.last_status: str | None = None
        self.last_result: PassResult | None = None
        self.failure: str | None = None  # why the last pass raised instead of ending with a result
        self.lease_seconds = 15  # longer than the interval in service mode, or leadership flaps between passes
        self.passes = 0
        self._apis: dict[str, ClusterAPI] = {}
        self._electors: dict[str, LeaseElector] = {}
        self._rendered: dict[str, tuple[spec.Environment, render.DesiredState] | list[str]] = {}

    def load(self, checkout: Path, revision: str) -> tuple[spec.Environment, render.DesiredState] | list[str]:
        """The revision validated and rendered, or its problems (file:line); cached, a revision renders the same every time."""
        if revision not in self._rendered:
            self._rendered.clear()  # keep one: memory stays flat over a long-running loop
            display = f"environments/{self.environment}.yaml"
            path = checkout / display
            try:
                env = spec.load_environment(path, display=display)
                state = render.render_environment(env, path, revision=revision)
                problems = [f"{display}: rendered object fails its schema: {p}" for p in self.validate(state.objects())]
                self._rendered[revision] = problems or (env, state)
            except spec.SpecError as exc:
                self._rendered[revision] = exc.problems
            except render.RenderError as exc:
                self._rendered[revision] = [str(exc)]
        return self._rendered[revision]

    def _apis_for(self, env: spec.Environment) -> dict[str, ClusterAPI]:
        unknown = sorted(set(self.only or []) - {c.name for c in env.clusters})
        if unknown:
            raise ValueError(f"no cluster {', '.join(unknown)} in environment {env.environment}")
        for cluster in env.clusters:
            if (self.only is None or cluster.name in self.only) and cluster.name not in self._apis:
                self._apis[cluster.name] = self.connect(cluster)
        return self._apis

    def _leaders(self, state: render.DesiredState, apis: dict[str, ClusterAPI]) -> dict[str, ClusterAPI]:
        """The clusters this replica leads; without an identity it is the only writer of all."""
        if self.identity is None:
            return apis
        leading = {}
        for name, api in apis.items():
            elector = self._electors.setdefault(name, LeaseElector(api, self.opts.namespace or "", self.identity, self.lease_seconds, self.opts.clock))
            held = elector.acquire()
            if not held and elector.last_status == 404:
                self._ensure_namespace(api, state, name)
                held = elector.acquire()
            if held:
                leading[name] = api
        return leading

    def _held(self) -> dict[str, ClusterAPI]:
        """Clusters reached in earlier passes that this replica may write to now (no bootstrap)."""
        if self.identity is None:
            return dict(self._apis)
        return {n: api for n, api in self._apis.items() if n in self._electors and self._electors[n].acquire()}

    def _ensure_namespace(self, api: ClusterAPI, state: render.DesiredState, name: str) -> None:
        # The Lease lives in the reconciler's namespace, which the first apply creates: bootstrap it.
        rendered = [m for m in state.clusters.get(name, []) if m["kind"] == "Namespace" and m["metadata"]["name"] == self.opts.namespace]
        body = rendered[0] if rendered else {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.opts.namespace}}
        try:
            call(self.opts, api.apply, body, MANAGER, self.opts.force_conflicts)
        except ApiError:
            pass

    def run_once(self) -> PassResult:
        started = time.perf_counter()
        result = self._pass()
        self.passes += 1
        self.last_status, self.last_result, self.failure = result.status, result, None
        self.metrics.observe(result, time.perf_counter() - started, time.time())
        level = logging.INFO if result.status in ("applied", "clean", "drift", "planned") else logging.WARNING
        drifted = [f"{a.cluster}: {a.verb} {a.target}" for c in result.clusters.values() for a in c.drift]
        log.log(
            level,
            "reconcile pass",
            extra={"fields": {"environment": self.environment, "revision": result.revision, "status": result.status,
                              "drift": result.drift, "drifted": drifted[:LOG_ITEMS], "drifted_more": max(0, len(drifted) - LOG_ITEMS),
                              "errors": len(result.errors), "reasons": result.reasons[:LOG_ITEMS], "last_applied": result.last_applied}},
        )
        return result

    def _pass(self) -> PassResult:
        fetched = self.source.fetch()
        notes = [fetched.error] if fetched.error else []
        if fetched.path is None or fetched.revision is None:
            return PassResult(self.environment, None, "unavailable", notes, last_applied=self.last_applied)
        loaded = self.load(fetched.path, fetched.revision)
        if isinstance(loaded, list):
            if self.opts.writes:
                record_refusal(self._held(), self.opts, "invalid", "; ".join(loaded))
            return PassResult(self.environment, fetched.revision, "invalid", notes + loaded, last_applied=self.last_applied)
        env, state = loaded
        self.opts.namespace = self.opts.namespace or env.reconciler.namespace
        try:
            apis = self._apis_for(env)
        except (ValueError, ApiError) as exc:
            return PassResult(self.environment, fetched.revision, "unavailable", notes + [str(exc)], last_applied=self.last_applied)
        if self.opts.writes:
            leaders = self._leaders(state, apis)
            if not leaders:  # a follower: no gate, no reads, no writes until the Lease is free
                failed = {n: e for n, e in sorted(self._electors.items()) if n in apis and e.last_error}
                if failed:  # an unreachable or forbidden API server is not another leader
                    errors = {n: lease_failure(n, e) for n, e in failed.items()}
                    return PassResult(self.environment, fetched.revision, "errors", notes + [r.errors[0] for r in errors.values()], errors, self.last_applied)
                held = [f"{n}: {self._electors[n].holder or 'another replica'} holds the Lease; nothing written" for n in sorted(apis)]
                standby = {n: ClusterResult(n, leader=False) for n in sorted(apis)}
                return PassResult(self.environment, fetched.revision, "standby", notes + held, standby, self.last_applied)
            apis = leaders
        policies = fetched.path / "policies"
        gate = self.gate or functools.partial(default_gate, policies_dir=policies)
        result = run_pass(env, state, apis, gate, self.opts, self.last_applied)
        result.reasons = notes + result.reasons
        if result.status == "denied" and self.opts.writes:
            record_refusal(apis, self.opts, "denied", "; ".join(result.reasons))
        for name in sorted(set(self._apis) - set(apis)):
            elector = self._electors.get(name)
            if elector is not None and elector.last_error:  # not another leader: a server that failed us
                result.clusters[name] = lease_failure(name, elector)
                result.reasons.append(result.clusters[name].errors[0])
                result.status = "errors"
            else:
                result.clusters[name] = ClusterResult(name, leader=False)
        if result.last_applied:
            self.last_applied = result.last_applied
        result.last_applied = self.last_applied
        return result

    @property
    def ready(self) -> Readiness:
        return Readiness(self.failure) if self.failure else readiness(self.last_result)

    def serve(self, interval: float, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set; a failing pass is logged and the next one starts on time."""
        while not stop.is_set():
            memory.release()
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - the loop outlives any one pass
                error = redact(f"{type(exc).__name__}: {exc}")
                self.failure = f"the last pass failed: {error}"[:READY_REASON_CHARS]
                log.error("reconcile pass failed", extra={"fields": {"error": error}})
            stop.wait(interval)
