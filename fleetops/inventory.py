"""The live node inventory: what nodes say about themselves, checked before anything trusts it.

Node labels, annotations and capacity strings are written by kubelets, device plugins and people,
so they are untrusted input: each node is validated with a cerberus schema and normalised into
`NodeInfo` (quantities as numbers, conditions as a Ready flag and a transition time). A malformed
node is reported and left out: the reconciler neither counts nor touches what it cannot read.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from cerberus import Validator

from fleetops import spec
# The node contract (fleetops.kube), also read through here by the reconciler (`inventory.QUARANTINE_TAINT`).
from fleetops.kube import CORDON_ANNOTATION, DNS_SUBDOMAIN, EDGE_GROUP_LABEL, LABEL_KEY, LABEL_VALUE, POOL_LABEL, QUARANTINE_TAINT  # noqa: F401

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
    "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_STRING_MAP = {"type": "dict", "keysrules": {"type": "string", "maxlength": 317}, "valuesrules": {"type": "string", "maxlength": 65536}}
_LABEL_MAP = {
    "type": "dict",
    "keysrules": {"type": "string", "regex": LABEL_KEY.pattern},
    "valuesrules": {"type": "string", "regex": LABEL_VALUE.pattern},
}
_QUANTITY_MAP = {
    "type": "dict",
    "keysrules": {"type": "string", "maxlength": 253},
    "valuesrules": {"type": "string", "regex": _QUANTITY.pattern, "maxlength": 64},
}


def _object(fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    # Unknown fields are allowed: nodes carry much the reconciler does not read, and it trusts none of it.
    return {"type": "dict", "allow_unknown": True, "schema": fields, **extra}


def _list_of(fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "list", "nullable": True, "schema": _object(fields)}


NODE_SCHEMA: dict[str, Any] = {
    "metadata": _object({
        "name": {"type": "string", "required": True, "regex": DNS_SUBDOMAIN.pattern},
        "labels": {**_LABEL_MAP, "nullable": True},
        "annotations": {**_STRING_MAP, "nullable": True},
        "resourceVersion": {"type": "string"},
    }, required=True),
    "spec": _object({
        "unschedulable": {"type": "boolean", "nullable": True},
        "taints": _list_of({
            "key": {"type": "string", "required": True, "regex": LABEL_KEY.pattern},
            "value": {"type": "string", "nullable": True},
            "effect": {"type": "string", "required": True, "allowed": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        }),
    }, nullable=True),
    "status": _object({
        "allocatable": {**_QUANTITY_MAP, "nullable": True},
        "capacity": {**_QUANTITY_MAP, "nullable": True},
        "conditions": _list_of({
            "type": {"type": "string", "required": True},
            "status": {"type": "string", "required": True, "allowed": ["True", "False", "Unknown"]},
            "lastTransitionTime": {"type": "string", "nullable": True},
        }),
    }, nullable=True),
}


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity ("8", "500m", "16Gi", "1e3") as a number; ValueError if it is not one."""
    m = _QUANTITY.match(text.strip())
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        value = Decimal(number)
        if suffix[:1] in ("e", "E"):
            return value * Decimal(10) ** int(suffix[1:])
        return value * Decimal(_SUFFIX[suffix])
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class NodeInfo:
    """One live node, validated and normalised. `raw` keeps the resourceVersion for preconditions."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    taints: list[dict[str, str]]
    unschedulable: bool
    ready: bool
    ready_since: dt.datetime | None  # last transition of the Ready condition
    allocatable: dict[str, Decimal]
    resource_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "labels": self.labels,
            "annotations": {k: v for k, v in self.annotations.items() if k.startswith("fleetops.io/")},
            "taints": self.taints,
            "unschedulable": self.unschedulable,
            "ready": self.ready,
            "allocatable": {k: _number(v) for k, v in sorted(self.allocatable.items())},
        }


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _errors(errors: Any, prefix: str = "") -> list[str]:
    """cerberus' nested error tree as `path: message` lines."""
    out: list[str] = []
    for key, items in sorted(errors.items(), key=lambda kv: str(kv[0])):
        path = f"{prefix}.{key}" if prefix else str(key)
        for item in items:
            if isinstance(item, dict):
                out += _errors(item, path)
            else:
                out.append(f"{path}: {item}")
    return out


def read_node(raw: Any, validator: Validator | None = None) -> NodeInfo:
    """Validate and normalise one node object; ValueError with every problem found."""
    if not isinstance(raw, dict):
        raise ValueError(f"a node must be an object, got {type(raw).__name__}")
    # A cerberus Validator keeps state per call: one per thread of work, not a shared global.
    validator = validator or Validator(NODE_SCHEMA, allow_unknown=True)
    if not validator.validate(raw):
        raise ValueError("; ".join(_errors(validator.errors)))
    meta, node_spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    problems: list[str] = []
    allocatable: dict[str, Decimal] = {}
    for resource, text in (status.get("allocatable") or {}).items():
        try:
            allocatable[resource] = parse_quantity(text)
        except ValueError as exc:
            problems.append(f"status.allocatable.{resource}: {exc}")
    ready, since = False, None
    for cond in status.get("conditions") or []:
        if cond["type"] == "Ready":
            ready = cond["status"] == "True"
            if cond.get("lastTransitionTime"):
                try:
                    since = parse_time(cond["lastTransitionTime"])
                except ValueError:
                    problems.append(f"status.conditions.Ready.lastTransitionTime: not a time: {cond['lastTransitionTime']!r}")
    if problems:
        raise ValueError("; ".join(problems))
    return NodeInfo(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        taints=[{"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]} for t in node_spec.get("taints") or []],
        unschedulable=bool(node_spec.get("unschedulable")),
        ready=ready,
        ready_since=since,
        allocatable=allocatable,
        resource_version=str(meta.get("resourceVersion", "")),
    )


@dataclass
class Inventory:
    cluster: str
    nodes: list[NodeInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_inventory(cluster: str, raw_nodes: list[Any]) -> Inventory:
    """Every readable node of a cluster; unreadable ones become one problem line each."""
    inv = Inventory(cluster)
    validator = Validator(NODE_SCHEMA, allow_unknown=True)
    for i, raw in enumerate(raw_nodes):
        try:
            inv.nodes.append(read_node(raw, validator))
        except ValueError as exc:
            name = raw.get("metadata", {}).get("name") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else None
            inv.problems.append(f"{cluster}: node {name if isinstance(name, str) else f'#{i}'}: malformed, left out: {exc}")
    return inv


# --- members and capacity -------------------------------------------------------------------


def groups_of(cluster: spec.Cluster) -> list[spec.Group]:
    return [*cluster.pools, *cluster.edge_groups]


def match_groups(cluster: spec.Cluster, node: NodeInfo) -> list[spec.Group]:
    return [g for g in groups_of(cluster) if spec.matches_node(g, node.name, node.labels)]


def claimed_groups(cluster: spec.Cluster, node: NodeInfo) -> list[spec.Group]:
    """The groups of the cluster a node's own pool or edge-group label names."""
    pool, edge = node.labels.get(POOL_LABEL), node.labels.get(EDGE_GROUP_LABEL)
    return [*(p for p in cluster.pools if p.name == pool), *(g for g in cluster.edge_groups if g.name == edge)]


def schedulable(node: NodeInfo) -> bool:
    """Whether a node's devices count as live capacity: Ready, not cordoned, not quarantined."""
    quarantined = any(t["key"] == QUARANTINE_TAINT["key"] for t in node.taints)
    return node.ready and not node.unschedulable and not quarantined


@dataclass(frozen=True)
class CapacityRow:
    cluster: str
    group: str
    resource: str
    declared_nodes: int
    ready_nodes: int
    declared: int  # schedulable units Git promises (after sharing)
    allocatable: int  # units on Ready, schedulable member nodes
    unavailable: int  # units on member nodes that are NotReady, cordoned or quarantined

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def capacity(cluster: spec.Cluster, members: dict[str, list[NodeInfo]]) -> list[CapacityRow]:
    """Per pool / edge group and device resource: declared vs live. `members` is group name -> nodes."""
    rows = []
    for group in groups_of(cluster):
        nodes = members.get(group.name, [])
        ready = [n for n in nodes if schedulable(n)]
        for resource, declared in spec.group_capacity(group).items():
            live = sum(int(n.allocatable.get(resource, 0)) for n in ready)
            down = sum(int(n.allocatable.get(resource, 0)) for n in nodes if not schedulable(n))
            rows.append(CapacityRow(cluster.name, group.name, resource, group.nodes, len(ready), declared, live, down))
    return rows


def shortfalls(env: spec.Environment, cluster: str, rows: list[CapacityRow]) -> list[dict[str, Any]]:
    """Device resources whose live capacity is below the sum of guaranteed quotas in a cluster."""
    live: dict[str, int] = {}
    for row in rows:
        live[row.resource] = live.get(row.resource, 0) + row.allocatable
    out = []
    for resource, sums in sorted(spec.quota_sums(env).get(cluster, {}).items()):
        have = live.get(resource, 0)
        if have < sums["guaranteed"]:
            out.append({"cluster": cluster, "resource": resource, "guaranteed": sums["guaranteed"], "allocatable": have,
                        "msg": f"{cluster}: live {resource} capacity {have} is below the guaranteed quota {sums['guaranteed']}"})
    return out
