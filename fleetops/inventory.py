"""The live node inventory: what nodes say about themselves, checked before anything trusts it.

Node labels, annotations and capacity strings are written by kubelets, device plugins and people,
so they are untrusted input: each node is validated with a pydantic model and normalised into
`NodeInfo` (quantities as numbers, conditions as a Ready flag and a transition time). A malformed
node is reported and left out: the reconciler neither counts nor touches what it cannot read.

What a live node is to the policies (`input.live.nodes`) is `LiveNode`: the reconciler projects each
node it read into one (`LiveNode.of`), and `fleetops check --live FILE` reads them from a file, by
the same rules for names, labels and quantities as a node read from the API server.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError

from fleetops import spec
from fleetops.kube import DNS_SUBDOMAIN, EDGE_GROUP_LABEL, POOL_LABEL, QUARANTINE_TAINT

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
    "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def _quantity(value: object) -> Decimal:
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"not a quantity: {value!r}"[:100])
    return parse_quantity(value)


def _node_name(value: str) -> str:
    if DNS_SUBDOMAIN.fullmatch(value) is None:
        raise ValueError(f"not a node name (a DNS subdomain): {value!r}"[:300])
    return value


class _NodeRead(BaseModel):
    # Unknown fields are allowed: nodes carry much the reconciler does not read, and it trusts none of it.
    # Strict: a kubelet's "true" is not a boolean, nor 8 a quantity string.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


Quantity = Annotated[Decimal, BeforeValidator(_quantity)]
Quantities = dict[Annotated[str, Field(max_length=253)], Quantity]


class _Taint(_NodeRead):
    key: spec.LabelKey
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class _NodeCondition(_NodeRead):
    type: str
    status: Literal["True", "False", "Unknown"]
    lastTransitionTime: str | None = None  # parsed for the Ready condition only, the one read


class _NodeMetadata(_NodeRead):
    name: Annotated[str, AfterValidator(_node_name)]
    labels: spec.Labels | None = None
    annotations: dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=65536)]] | None = None
    resourceVersion: str = ""


class _NodeSpec(_NodeRead):
    unschedulable: bool | None = None
    taints: list[_Taint] | None = None


class _NodeStatus(_NodeRead):
    allocatable: Quantities | None = None
    capacity: Quantities | None = None
    conditions: list[_NodeCondition] | None = None


class LiveNodeObject(_NodeRead):
    """The fields of a Kubernetes Node that fleetops reads, each checked before it is trusted."""

    metadata: _NodeMetadata
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


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


def _written(value: Decimal) -> int | str:
    """A quantity as the policy input writes it: a whole count as a number, any other as its decimal text."""
    return int(value) if value == value.to_integral_value() else str(float(value))


def _count_or_quantity(value: str) -> str:
    if _quantity(value) < 0:
        raise ValueError(f"a negative quantity: {value!r}"[:100])
    return value


# As a --live file writes it: a count, or a Kubernetes quantity string (read as a node's own are).
WrittenQuantity = Annotated[int, Field(ge=0)] | Annotated[str, AfterValidator(_count_or_quantity)]


class LiveNode(BaseModel):
    """A live node as the policies read it (`input.live.nodes`; policies/README.md): built from a node
    read from the API server by `of`, or read from `fleetops check --live FILE`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(min_length=1)
    name: Annotated[str, AfterValidator(_node_name)]
    labels: spec.Labels = {}
    capacity: dict[str, WrittenQuantity] = {}
    allocatable: dict[str, WrittenQuantity] = {}
    ready: StrictBool

    @classmethod
    def of(cls, cluster: str, node: NodeInfo) -> LiveNode:
        """A node read from the API server (already validated: not validated again): its allocatable
        quantities stand for its capacity too, and it is ready when Ready and not cordoned."""
        allocatable = {k: _written(v) for k, v in sorted(node.allocatable.items())}
        return cls.model_construct(cluster=cluster, name=node.name, labels=node.labels, capacity=allocatable,
                                   allocatable=allocatable, ready=node.ready and not node.unschedulable)


PROBLEMS_SHOWN = 5  # of one node: a node broken everywhere is one bounded line, not hundreds


def _problems(exc: ValidationError) -> str:
    shown = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:PROBLEMS_SHOWN]]
    more = exc.error_count() - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def read_node(raw: Any) -> NodeInfo:
    """Validate and normalise one node object; ValueError with the problems found."""
    if not isinstance(raw, dict):
        raise ValueError(f"a node must be an object, got {type(raw).__name__}")
    try:
        node = LiveNodeObject.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_problems(exc)) from None
    meta, node_spec, status = node.metadata, node.spec or _NodeSpec(), node.status or _NodeStatus()
    ready, since = False, None
    for cond in status.conditions or []:
        if cond.type == "Ready":
            ready = cond.status == "True"
            if cond.lastTransitionTime:
                try:
                    since = parse_time(cond.lastTransitionTime)
                except ValueError:
                    raise ValueError(f"status.conditions.Ready.lastTransitionTime: not a time: {cond.lastTransitionTime!r}"[:300]) from None
    return NodeInfo(
        name=meta.name,
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        taints=[{"key": t.key, "value": t.value or "", "effect": t.effect} for t in node_spec.taints or []],
        unschedulable=bool(node_spec.unschedulable),
        ready=ready,
        ready_since=since,
        allocatable=dict(status.allocatable or {}),
        resource_version=meta.resourceVersion,
    )


@dataclass
class ClusterInventory:
    cluster: str
    nodes: list[NodeInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_inventory(cluster: str, raw_nodes: list[Any]) -> ClusterInventory:
    """Every readable node of a cluster; unreadable ones become one problem line each."""
    inv = ClusterInventory(cluster)
    for i, raw in enumerate(raw_nodes):
        try:
            inv.nodes.append(read_node(raw))
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
class LiveCapacity:
    """A pool's or edge group's device resource as Git declares it and as its live nodes offer it."""

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


def capacity(cluster: spec.Cluster, members: dict[str, list[NodeInfo]]) -> list[LiveCapacity]:
    """Per pool / edge group and device resource: declared vs live. `members` is group name -> nodes."""
    rows = []
    for group in groups_of(cluster):
        nodes = members.get(group.name, [])
        ready = [n for n in nodes if schedulable(n)]
        for resource, declared in spec.group_capacity(group).items():
            live = sum(int(n.allocatable.get(resource, 0)) for n in ready)
            down = sum(int(n.allocatable.get(resource, 0)) for n in nodes if not schedulable(n))
            rows.append(LiveCapacity(cluster.name, group.name, resource, group.nodes, len(ready), declared, live, down))
    return rows


def shortfalls(env: spec.Environment, cluster: str, rows: list[LiveCapacity]) -> list[dict[str, Any]]:
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
