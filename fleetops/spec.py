"""The environment model: what `environments/<env>.yaml` may say, and the facts derived from it.

Loading keeps the line and column of every YAML node so that each error names the place a
person has to edit: `environments/prod.yaml:42:7: tenants[3].quota["nvidia.com/gpu"].burst: ...`.

No `from __future__ import annotations` here: pydantic would evaluate every field's annotation
from its string when the models are built, at every start of the command line; the two names used
before they are defined are quoted instead.
"""

import dataclasses
import datetime
import difflib
import enum
import fnmatch
import functools
import ipaddress
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleetops import mig
from fleetops.errors import SpecError
from fleetops import kube
from fleetops.kube import DNS_LABEL, EDGE_GROUP_LABEL, LABEL_KEY, LABEL_VALUE, MIG_CONFIG_LABEL, NVIDIA_CONFIG_LABEL, POOL_LABEL, RESOURCE_NAME

HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class Limits:
    """What one environment may hold. Each is far above the generated large fleet that the benchmarks
    measure (`benchmarks/generate.py`, scale 1: 20 clusters, 392 pools and edge groups, 1,000 tenants,
    15,348 objects; scale 4: 32 clusters, 1,600 groups, 4,000 tenants, about 61,000 objects), and low enough that
    reading, rendering and judging one stays within a CI runner's memory: past them the file is refused
    with one line, before the work they would multiply."""

    file_bytes: int = 8 * 1024 * 1024
    clusters: int = 500
    groups: int = 10_000  # pools and edge groups, over all clusters
    tenants: int = 10_000
    services: int = 10_000  # inference services: a HorizontalPodAutoscaler each
    # The pools and edge groups open to each tenant, counted in each of its clusters: each is a flavor
    # of the tenant's Kueue ClusterQueue there, so the render grows with this, not with the objects.
    placements: int = 200_000
    quotas: int = 256  # device resources in one tenant's quota: the 256 a Kueue ClusterQueue covers (KUEUE)
    objects: int = 200_000  # rendered Kubernetes objects, over all clusters


LIMITS = Limits()

Loc = tuple[str | int, ...]


# --- field types -------------------------------------------------------------------------

# Every pattern is matched against the whole value (`fullmatch`): `^...$` also accepts a value that
# ends in a newline (Python's `$` matches before a final newline), which the API server refuses.
# Kubernetes's own names (DNS labels, label keys and values, resource names) are in fleetops.kube.
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
_MIG_PROFILE = re.compile(r"[1-7]g\.[0-9]+gb(\+me)?")
_CURRENCY = re.compile(r"[A-Z]{3}")
# Node names are DNS subdomains: a glob over them needs no other character (a quote would also end
# the PromQL string the offline alert writes it into).
_NODE_GLOB = re.compile(r"[-a-z0-9.*?\[\]!]{1,253}")
_IMAGE = re.compile(r"[!-~]{1,4096}")  # the API server refuses an image with white space in it
DNS_LABEL_RULE = "a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)"


def is_dns_label(value: str) -> bool:
    """Whether `value` may name a Kubernetes object, a namespace, or an environment file."""
    return DNS_LABEL.fullmatch(value) is not None


def _whole(pattern: re.Pattern[str], rule: str) -> AfterValidator:
    def check(value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise ValueError(f"must be {rule}, got {value!r}")
        return value

    return AfterValidator(check)


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"must be a CIDR block like 10.20.0.0/16, got {value!r} ({exc})") from None
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if not LABEL_KEY.fullmatch(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if not LABEL_VALUE.fullmatch(val):
            raise ValueError(f"label value {val!r} of {key!r} is not a valid Kubernetes label value")
    return value


Name = Annotated[str, _whole(DNS_LABEL, DNS_LABEL_RULE)]
ResourceName = Annotated[str, _whole(RESOURCE_NAME, "an extended resource name like 'nvidia.com/gpu'")]
Fingerprint = Annotated[str, _whole(_FINGERPRINT, "'sha256:' and 64 lowercase hex digits")]
LabelKey = Annotated[str, _whole(LABEL_KEY, "a Kubernetes label key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.')")]
LabelValue = Annotated[str, _whole(LABEL_VALUE, "a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.')")]
MigProfile = Annotated[str, _whole(_MIG_PROFILE, "a MIG profile like '1g.10gb' or '1g.10gb+me'")]
Currency = Annotated[str, _whole(_CURRENCY, "a three-letter ISO 4217 code like 'USD'")]
NodeGlob = Annotated[str, _whole(_NODE_GLOB, "a glob over node names: lowercase letters, digits, '-', '.', and '*', '?', '[...]'")]
Image = Annotated[str, _whole(_IMAGE, "a container image reference without spaces, like 'ghcr.io/org/name:tag'")]
Cidr = Annotated[str, AfterValidator(_cidr)]
Labels = Annotated[dict[str, str], AfterValidator(_labels)]
# Every count travels as a JSON number (policy input, Rego, the API server): beyond 2^53 - 1 those
# are no longer exact, and the fast JSON writer refuses integers beyond 64 bits.
MAX_COUNT = 2**53 - 1
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Positive = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Workload = Literal["training", "inference", "batch"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# --- devices -------------------------------------------------------------------------------

PluginKind = Literal["nvidia", "ascend", "fpga"]


def plugin_kind(resource: str) -> PluginKind | None:
    """Which device plugin advertises a device resource."""
    if resource.startswith("nvidia.com/"):
        return "nvidia"
    if resource.startswith("huawei.com/Ascend"):
        return "ascend"
    if resource.startswith(("fpga.intel.com/", "amd.com/xilinx", "xilinx.com/")):
        return "fpga"
    return None


def is_mig_capable(model: str) -> bool:
    return mig.family_of(model) is not None


class Device(Model):
    resource: ResourceName
    model: str = Field(min_length=1, max_length=63)
    per_node: Positive


class Mig(Model):
    strategy: Literal["single", "mixed"] = "single"
    # MIG profile -> instances per GPU, e.g. {"1g.10gb": 7} or {"3g.40gb": 1, "2g.20gb": 2}; checked
    # against the GPU model's profiles and placement rules (fleetops.mig).
    profiles: dict[MigProfile, Positive] = Field(min_length=1)


class Sharing(Model):
    mode: Literal["exclusive", "time-slicing", "mig"] = "exclusive"
    replicas: Annotated[int, Field(le=MAX_COUNT)] | None = None
    mig: Mig | None = None


class Taint(Model):
    key: LabelKey
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeMatch(Model):
    """How the reconciler recognises a live node as a member: by name glob and/or labels."""

    name_pattern: NodeGlob | None = None
    labels: Labels = {}


class Spot(Model):
    """A pool of spot (preemptible) instances: the provider may reclaim its nodes at any time."""

    # Per device-hour: the pool's own price, in place of its device model's in `prices`.
    price: Annotated[float, Field(ge=0)]


class Pool(Model):
    name: Name
    device: Device
    nodes: Count
    sharing: Sharing = Sharing()
    labels: Labels = {}
    taints: list[Taint] = []
    match: NodeMatch = NodeMatch()
    spot: Spot | None = None


# The API server's DefaultTolerationSeconds admission gives every pod that names none 300 s on the
# unreachable and not-ready taints (--default-unreachable-toleration-seconds): what `autonomy: false`
# left a group's pods with, and so what it means now.
DEFAULT_TOLERATION_SECONDS = 300


class Disconnect(Model):
    """What happens to a group's pods when a node loses the control plane (its Ready condition goes
    Unknown or False and the node lifecycle controller taints it NoExecute): `stay` keeps them bound
    however long (the edge runtime runs them on), `move` lets the taint evict them `after_seconds`
    after the taint, so their controllers place replacements on the group's other nodes."""

    action: Literal["stay", "move"]
    after_seconds: Positive | None = None

    @model_validator(mode="after")
    def _seconds_with_move_only(self) -> "Disconnect":
        if self.action == "move" and self.after_seconds is None:
            raise ValueError("action move needs after_seconds: how long after the node goes unreachable its pods are moved")
        if self.action == "stay" and self.after_seconds is not None:
            raise ValueError("action stay keeps pods bound however long the node is away: remove after_seconds, or use action: move")
        return self


Url = Annotated[str, _whole(re.compile(r"https?://[^\s'\"\\]{1,2000}"), "an http(s) URL without spaces or quotes")]


class CachedModel(Model):
    """A model file every node of the group holds before workloads need it."""

    name: Name
    size_gb: Positive
    source: Url
    digest: Fingerprint  # sha256 of the file: the prefetch refuses anything else


class OfflineWork(Model):
    """Low-priority batch work the group runs while disconnected from its center: a ClusterQueue of
    its own over the group's devices, for these tenants and priority classes only."""

    tenants: list[Name] = Field(min_length=1)
    priority_classes: list[Name] = Field(min_length=1)
    devices: Positive  # device units of the group the queue holds


class EdgeGroup(Model):
    name: Name
    device: Device
    nodes: Count
    heartbeat_seconds: Positive
    offline_grace_seconds: Positive
    latency_ms: Positive
    disconnect: Disconnect = Disconnect(action="stay")
    disk_gb: Positive | None = None  # each node's disk for the model cache
    model_cache: list[CachedModel] = []  # prefetched onto every node of the group (modules/edge_group.py)
    offline_work: OfflineWork | None = None
    fingerprints: list[Fingerprint] = []
    labels: Labels = {}
    taints: list[Taint] = []
    match: NodeMatch = NodeMatch()

    @model_validator(mode="before")
    @classmethod
    def _autonomy(cls, data: Any) -> Any:
        """`autonomy: true|false` is the old spelling: true is `disconnect: {action: stay}` (OpenYurt's
        autonomy duration "0"), false what it left the pods with, the API server's default eviction."""
        if not isinstance(data, dict) or "autonomy" not in data:
            return data
        autonomy = data["autonomy"]
        if "disconnect" in data:
            raise ValueError("autonomy is the old spelling of disconnect: keep disconnect only")
        if not isinstance(autonomy, bool):
            raise ValueError("autonomy must be true or false (or say disconnect: {action: stay | move, after_seconds: N})")
        rest = {k: v for k, v in data.items() if k != "autonomy"}
        rest["disconnect"] = {"action": "stay"} if autonomy else {"action": "move", "after_seconds": DEFAULT_TOLERATION_SECONDS}
        return rest


G = TypeVar("G", Pool, EdgeGroup)


class Cluster(Model):
    name: Name
    role: Literal["center", "edge"]
    context: str = Field(min_length=1)
    kubeconfig: str | None = None
    edge_runtime: Literal["kubeedge", "openyurt"] = "kubeedge"
    pools: list[Pool] = []
    edge_groups: list[EdgeGroup] = []

    @functools.cached_property
    def group_names_cache(self) -> "GroupNames":
        """Its pools and edge groups by name: read it through `group_names`."""
        return GroupNames.of(self)


class GroupNames(NamedTuple):
    """A cluster's pools and edge groups by name, each with its place in the declaration (a name
    given twice is reported by `cross_checks`; both count until then). A tenant names a few of its
    clusters' many pools: they are found by name, not by a walk over all of them for each tenant,
    which grew as tenants x pools (load, render and the policy input)."""

    pools: list[Pool]
    edge_groups: list[EdgeGroup]
    pool: dict[str, list[tuple[int, Pool]]]
    edge_group: dict[str, list[tuple[int, EdgeGroup]]]

    @classmethod
    def of(cls, cluster: Cluster) -> "GroupNames":
        return cls(cluster.pools, cluster.edge_groups, _by_name(cluster.pools), _by_name(cluster.edge_groups))


def group_names(cluster: Cluster) -> GroupNames:
    names = cluster.group_names_cache
    if names.pools is cluster.pools and names.edge_groups is cluster.edge_groups:
        return names
    return GroupNames.of(cluster)  # a copy made with other groups (model_copy(update=...)) carries its original's


def _by_name(groups: list[G]) -> dict[str, list[tuple[int, G]]]:
    out: dict[str, list[tuple[int, G]]] = {}
    for place, group in enumerate(groups):
        out.setdefault(group.name, []).append((place, group))
    return out


# --- tenants, priorities, scheduling ------------------------------------------------------


class Quota(Model):
    guaranteed: Count
    burst: Count
    # How the guarantee splits over the tenant's pools (and edge groups), where it is not held whole
    # by one: Kueue admits one job in one pool, so a job within the guarantee is then bounded by its
    # pool's share. Per cluster, the shares of its pools sum to `guaranteed` (guarantee_placement).
    guaranteed_per_pool: dict[Name, Count] | None = None


class TenantNetwork(Model):
    egress_cidrs: list[Cidr] = []
    allow_from_tenants: list[Name] = []
    allow_to_endpoints: list[Name] = []


class TopUp(Model):
    """Money a prepaid tenant paid in, usable from `date` (00:00 UTC), in the budget's currency.
    (`date`, not `on`: YAML 1.1 reads a bare `on` key as the boolean true.)"""

    date: datetime.date
    amount: Annotated[float, Field(gt=0)]


class Billing(Model):
    """How a tenant pays for the device-hours it uses (fleetops statements, the metering alerts).
    Postpaid: invoiced after each month. Prepaid: its top-ups less its spend is a balance, and
    falling below `low_balance_at` alerts at run time."""

    mode: Literal["postpaid", "prepaid"] = "postpaid"
    top_ups: list[TopUp] = []
    low_balance_at: Annotated[float, Field(ge=0)] | None = None


class Tenant(Model):
    name: Name
    clusters: list[Name] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    priority_classes: list[Name] = []
    quota: dict[ResourceName, Quota] = Field(default={}, max_length=LIMITS.quotas)
    pools: list[Name] | None = None
    edge_groups: list[Name] = []
    isolation: Literal["shared", "strict"] = "shared"
    network: TenantNetwork = TenantNetwork()
    billing: Billing = Billing()


class PriorityClass(Model):
    name: Name
    value: Annotated[int, Field(ge=-2147483648, le=1000000000)]
    workload: Workload
    preemption: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    # Its work accepts being preempted at any time, by the provider reclaiming a node as by a higher
    # class: only such work may run on spot pools.
    preemptible: bool = False
    global_default: bool = False
    description: str = ""


class Scheduler(Model):
    # volcano was offered before; it is named so that a file still asking for it is told what to use (cross_checks).
    backend: Literal["kueue", "volcano"] = "kueue"
    # Share of a tenant's guaranteed quota that idle capacity may lend to its cohort.
    lend_fraction: Annotated[float, Field(ge=0, le=1)] = 1.0
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Any"
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "LowerPriority"


class Endpoint(Model):
    name: Name
    cidr: Cidr
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(min_length=1)


class Network(Model):
    default_deny: bool = True
    allow_dns: bool = True
    center_endpoints: list[Endpoint] = []


class Grafana(Model):
    """How the environment's Grafana picks dashboards up: its dashboard sidecar (kube-prometheus-stack's
    `grafana.sidecar.dashboards`) loads every ConfigMap labelled `label: label_value`, into the folder
    that the annotation `folder_annotation` names (the sidecar's `folderAnnotation`)."""

    label: LabelKey = "grafana_dashboard"
    label_value: LabelValue = "1"
    folder_annotation: LabelKey = "grafana_folder"
    folder: str = Field(default="fleetops", min_length=1, max_length=253)


class Monitoring(Model):
    namespace: Name = "monitoring"
    # Where the exporters run (deployed by the GPU operator, MindCluster, or the site): fleetops scrapes them there.
    dcgm_namespace: Name = "gpu-monitoring"
    # The ConfigMap (in `namespace`) that prometheus-adapter reads its rules from (`config.yaml`): the
    # metrics each service's HorizontalPodAutoscaler asks the custom metrics API for (modules/autoscaling.py).
    adapter_config_map: Name = "prometheus-adapter"
    npu_exporter_namespace: Name = "npu-exporter"
    jetson_exporter_namespace: Name = "jetson-exporter"
    # The labels the environment's Prometheus selects PrometheusRules, ServiceMonitors and PodMonitors by
    # (its ruleSelector, serviceMonitorSelector, podMonitorSelector; kube-prometheus-stack: `release: <its release>`).
    prometheus_selector: Labels = {}
    grafana: Grafana = Grafana()
    # Device utilisation alerts (FleetGPUUtilisationLow, FleetNPUUtilisationLow): under this, for that long.
    gpu_utilisation_low_percent: Annotated[int, Field(ge=1, le=100)] = 30
    gpu_utilisation_for_minutes: Positive = 30
    quota_exhaustion_percent: Annotated[int, Field(ge=1, le=100)] = 90
    # A ClusterQueue with workloads pending this long (Kueue's oldest wait) is alerted on.
    kueue_pending_minutes: Positive = 30


class Devices(Model):
    """What one replica of a service asks for: `count` units of one device resource."""

    resource: ResourceName
    count: Positive


# A HorizontalPodAutoscaler's replica counts are int32; its minReplicas is at least 1 unless the alpha
# HPAScaleToZero gate is on, which fleetops does not assume.
Replica = Annotated[int, Field(ge=1, le=2**31 - 1)]


class Replicas(Model):
    min: Replica
    max: Replica


class Server(str, enum.Enum):
    """The inference server a service runs: it chooses the Prometheus series of its queue (modules/autoscaling.QUEUES)."""

    VLLM = "vllm"
    TRITON = "triton"


class Targets(Model):
    """What the HorizontalPodAutoscaler holds each replica at: at least one is declared (cross_checks)."""

    gpu_utilisation_percent: Annotated[int, Field(ge=1, le=100)] | None = None
    requests_waiting_per_replica: Positive | None = None


class Service(Model):
    """An inference service the tenant runs as Deployment `name` in its namespace, scaled by a HorizontalPodAutoscaler."""

    name: Name
    tenant: Name
    cluster: Name
    pools: list[Name] = Field(min_length=1)
    devices: Devices
    replicas: Replicas
    server: Annotated[Server, Field(strict=False)] | None = None  # written as its value: 'vllm'
    targets: Targets
    # The HorizontalPodAutoscaler's behavior.scaleDown.stabilizationWindowSeconds, which the API server bounds to an hour.
    scale_down_stabilisation_seconds: Annotated[int, Field(ge=0, le=3600)] = 300


class Budget(Model):
    monthly: Annotated[float, Field(gt=0)]
    currency: Currency
    alert_at: list[Fraction] = []


class Reconciler(Model):
    image: Image = "ghcr.io/fleetops/fleetops:0.1.0"
    namespace: Name = "fleetops-system"
    replicas: Positive = 2
    interval_seconds: Positive = 60


class Api(Model):
    """The fleet API (`fleetops serve`), deployed to one cluster beside its reconciler, with the reconciler's image."""

    cluster: Name
    replicas: Positive = 2
    port: Annotated[int, Field(ge=1024, le=65535)] = 8443
    tokens_secret: Name = "fleetops-api-tokens"  # key `tokens.json`: the bearer tokens and their scopes
    tls_secret: Name = "fleetops-api-tls"  # a kubernetes.io/tls Secret
    allow_from: list[Cidr] = Field(default=[], max_length=64)  # the platforms that may call it; none: no one outside the cluster
    # The Prometheus holding the metering series (in `monitoring.namespace`): with it the API answers each
    # tenant's use and statements (`fleetops serve --prometheus`); without it, "metering not configured".
    prometheus: Url | None = None


class Environment(Model):
    environment: Name
    clusters: list[Cluster] = Field(min_length=1, max_length=LIMITS.clusters)
    tenants: list[Tenant] = Field(default=[], max_length=LIMITS.tenants)
    services: list[Service] = Field(default=[], max_length=LIMITS.services)
    priority_classes: list[PriorityClass] = []
    scheduler: Scheduler = Scheduler()
    network: Network = Network()
    monitoring: Monitoring = Monitoring()
    prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    budget: Budget
    reconciler: Reconciler = Reconciler()
    api: Api | None = None

    @functools.cached_property
    def placement_cache(self) -> dict[str, tuple[list["Tenant"], "Cluster", "Placement"]]:
        """Each cluster's guarantee placement once computed: read it through `guarantee_placement`."""
        return {}


# --- loading with positions ---------------------------------------------------------------


@dataclass(frozen=True)
class Positions:
    """Line/column (1-based) of every node, by its path in the document."""

    file: str
    nodes: dict[Loc, tuple[int, int]]
    # The data the nodes were read from, when a problem should name list items by their name
    # (`tenants[vision]`) as plan's spec_changes paths do; None names them by index.
    data: Any = None
    named: dict[int, dict[int, str]] = dataclasses.field(default_factory=dict, repr=False, compare=False)  # by id of the list

    def at(self, loc: Loc) -> tuple[int, int]:
        # A missing field has no node of its own: point at the nearest ancestor that exists.
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.nodes:
                return self.nodes[loc[:end]]
        return (1, 1)

    def error(self, loc: Loc, msg: str) -> str:
        line, col = self.at(loc)
        path = format_loc(loc, self.item_name)
        return f"{self.file}:{line}:{col}: {path + ': ' if path else ''}{msg}"

    def item_name(self, loc: Loc) -> str | int:
        """The last part of `loc`, a list index, as the name of the item there: kept as the index when
        the items of that list are not all mappings with a distinct one-line name (a name must say which)."""
        index = loc[-1]
        container = self.data
        for part in loc[:-1]:
            if isinstance(container, dict) and part in container or isinstance(container, list) and isinstance(part, int) and part < len(container):
                container = container[part]
            else:
                return index
        if not isinstance(container, list):
            return index
        if id(container) not in self.named:  # once per list: a large fleet's problems share a few lists
            self.named[id(container)] = _list_names(container)
        return self.named[id(container)].get(index, index)


_ITEM_NAME = re.compile(r'[^\s\[\]":]+')


def _list_names(items: list[Any]) -> dict[int, str]:
    named = [item.get("name") if isinstance(item, dict) else None for item in items]
    # A name that could not be read back from the path (space, bracket, quote, colon) leaves every index.
    usable = all(isinstance(n, str) and _ITEM_NAME.fullmatch(n) for n in named)
    return dict(enumerate(named)) if usable and len(set(named)) == len(named) else {}


def format_loc(loc: Loc, item_name: Callable[[Loc], str | int] | None = None) -> str:
    out = ""
    for end, part in enumerate(loc, start=1):
        if isinstance(part, int):
            out += f"[{item_name(loc[:end]) if item_name else part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:  # quoted as JSON: a key holding a newline or a quote stays one line and one key
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


# libyaml where PyYAML was built with it: the pure-Python parser is ~10x slower.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_TAG = "tag:yaml.org,2002:"
# Scalar tags the walk builds with PyYAML's own function for each (binary only when written `!!binary`).
_SCALAR_TAGS = frozenset(_TAG + name for name in ("int", "float", "bool", "null", "timestamp", "binary"))


class _Unusual(Exception):
    """What the walk leaves to PyYAML's constructor: merge keys (`<<`), value keys (`=`), `!!set`,
    `!!omap`, `!!pairs`, unknown tags and collections as keys."""


class _Tree:
    """One walk over the composed nodes that notes each node's place by its path and the first
    duplicate key and, when `construct`, builds the data as PyYAML's safe constructor does.

    PyYAML's constructor and a second walk for the places took 3x as long as this walk (0.17 s
    against 0.05 s for the large generated fleet). The walk takes one call per level, as the places
    walk it replaces did: the nesting Python's recursion limit allows is unchanged.
    """

    def __init__(self, loader: Any, construct: bool) -> None:
        self.loader = loader
        self.construct = construct
        self.nodes: dict[Loc, tuple[int, int]] = {}
        # An alias (*name) is the anchored node itself: an aliased collection is walked once and
        # shared, as PyYAML shares it. Walked again, a node that contains its own alias would
        # recurse forever and a few nested aliases would multiply the walk exponentially.
        self.walked: dict[int, Any] = {}
        self.duplicate: tuple[yaml.Mark, Loc] | None = None

    def walk(self, node: yaml.Node, loc: Loc) -> Any:
        self.nodes[loc] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if type(node) is yaml.ScalarNode:
            return self._scalar(node) if self.construct else None
        if id(node) in self.walked:
            return self.walked[id(node)]
        mapping = type(node) is yaml.MappingNode
        if self.construct and node.tag != _TAG + ("map" if mapping else "seq"):
            raise _Unusual
        out: Any = ({} if mapping else []) if self.construct else None
        self.walked[id(node)] = out
        if not mapping:
            for i, item in enumerate(node.value):
                value = self.walk(item, loc + (i,))
                if out is not None:
                    out.append(value)
            return out
        names: set[str] = set()
        for key_node, value_node in node.value:
            name = self._name(key_node, names, loc)
            key = self._key(key_node) if out is not None else None
            value = self.walk(value_node, loc + (name,))
            if out is not None:
                out[key] = value
            # Errors about a field point at its key, where a person reads the field's name.
            self.nodes[loc + (name,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag == _TAG + "str":
            return node.value
        if node.tag in _SCALAR_TAGS:
            return self.loader.yaml_constructors[node.tag](self.loader, node)
        raise _Unusual

    def _key(self, node: yaml.Node) -> Any:
        if type(node) is not yaml.ScalarNode:
            raise _Unusual
        return self._scalar(node)

    def _name(self, key_node: yaml.Node, names: set[str], loc: Loc) -> str:
        """A key's name in paths; the first key written twice in a mapping is noted."""
        mark = key_node.start_mark
        if type(key_node) is not yaml.ScalarNode:  # its text would expand every alias inside it
            return f"<key at {mark.line + 1}:{mark.column + 1}>"
        name = str(key_node.value)
        if key_node.tag == _TAG + "merge":  # `<<` may be written more than once; what it merges is checked where written
            return name
        if name in names and self.duplicate is None:
            self.duplicate = (mark, loc + (name,))
        names.add(name)
        return name


def _yaml_problem(exc: yaml.MarkedYAMLError, file: str) -> str:
    """`file:line:col: invalid YAML: what`, at the place the parser stopped, naming where the construct began."""
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem, context, start = exc.problem or "", exc.context or "", exc.context_mark
    if problem.startswith("but "):  # "expected a single document in the stream" "but found another document"
        what = f"{context} {problem}"
    elif context and start is not None and (start.line + 1, start.column + 1) != (line, col):
        what = f"{problem} ({context} at line {start.line + 1}, column {start.column + 1})"
    else:
        what = ": ".join(p for p in (context, problem) if p) or "unreadable"
    return f"{file}:{line}:{col}: invalid YAML: {what}"


def parse_yaml(text: str, file: str) -> tuple[Any, Positions]:
    """YAML text -> plain data and the position of each node; errors carry file:line:col."""
    loader = YAML_LOADER(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, Positions(file, {})
        tree = _Tree(loader, construct=True)
        try:
            data = tree.walk(root, ())
        except Exception:  # noqa: BLE001 - whatever the walk cannot build, PyYAML builds or reports as it always did
            # The places are taken first: merging keys (`<<: *base`) rewrites the nodes it merges into.
            tree = _Tree(loader, construct=False)
            tree.walk(root, ())
            data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise SpecError([_yaml_problem(exc, file)]) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:  # e.g. an unreadable timestamp scalar
        raise SpecError([f"{file}:1:1: invalid YAML: {exc}"]) from None
    except (KeyError, IndexError, AttributeError) as exc:  # PyYAML's builders on a tagged scalar they cannot read: `!!bool maybe`
        raise SpecError([f"{file}:1:1: invalid YAML: a tagged value cannot be read ({type(exc).__name__}: {exc})"]) from None
    finally:
        loader.dispose()
    if tree.duplicate is not None:
        mark, loc = tree.duplicate
        raise SpecError([f"{file}:{mark.line + 1}:{mark.column + 1}: {format_loc(loc)}: duplicate key"])
    return data, Positions(file, tree.nodes)


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def _yaml_repr(value: Any) -> str:
    """A scalar as the person wrote it in YAML: true, null, 4, 'text'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value)


def _message(err: Any, fields: list[str]) -> str:
    """One pydantic error as a short sentence in the file's own terms, without pydantic's phrasing."""
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1)
        return f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_NAMES:
        msg = f"must be {_TYPE_NAMES[kind]}"
    elif kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        msg = f"must be {op} {ctx[key]}"
    elif kind == "literal_error":
        msg = f"must be one of {ctx['expected']}"
    elif kind == "too_long":  # only the LIMITS set a longest list
        msg = f"at most {ctx['max_length']:,} items (fleetops.spec.LIMITS), got {len(err['input']):,}"
    elif kind in ("too_short", "string_too_short"):
        msg = "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {ctx['min_length']} items"
    elif kind == "string_too_long":
        msg = f"must be at most {ctx['max_length']} characters"
    elif kind == "string_pattern_mismatch":
        msg = f"must match {ctx['pattern']}"
    elif kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
    else:
        msg = err["msg"].replace("Input should be", "must be", 1)
    if "got" not in msg and not isinstance(err.get("input"), (dict, list)) and "input" in err:
        msg = f"{msg}, got {_yaml_repr(err['input'])}"
    return msg


def _model_fields(loc: Loc) -> list[str]:
    """The field names of the model at `loc` (for 'did you mean'): walks Environment's annotations."""
    model: Any = Environment
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        field = model.model_fields.get(part)
        if field is None:  # a key of a mapping field (quota: {nvidia.com/gpu: Quota}): stay on its values
            continue
        model = field.annotation
        for arg in getattr(model, "__args__", ()):  # list[Pool], Sharing | None
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _pydantic_problems(exc: ValidationError, pos: Positions) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p != "[key]")
        fields = _model_fields(loc) if err["type"] == "extra_forbidden" else []
        problems.append(pos.error(loc, _message(err, fields)))
    return problems


@dataclass(frozen=True)
class Document:
    """An environment file as read: the validated model, and the data and positions it came from
    (plan compares the data field by field and points decisions at their lines without reading it again)."""

    env: Environment
    data: dict[str, Any]
    positions: Positions


def parse_environment(text: str, file: str, name: str | None = None) -> Document:
    """Validate an environment document (of the file named `name`, when given); raises SpecError with
    every problem found in one pass: the schema's, then the cross-field checks on every item that
    passed the schema."""
    data, pos = parse_yaml(text, file)
    if data is None:
        raise SpecError([f"{file}:1:1: the file is empty; an environment needs at least 'environment', 'clusters' and 'budget'"])
    if not isinstance(data, dict):
        raise SpecError([pos.error((), f"the document must be a mapping, got {type(data).__name__}")])
    pos = dataclasses.replace(pos, data=data)
    # Objects are labelled and pruned by environment name: a file that names another environment
    # would act on that one's objects.
    written = data.get("environment")
    problems = [pos.error(("environment",), f"must equal the file name {name!r}, got {written!r}")] if name and isinstance(written, str) and written != name else []
    try:
        env = Environment.model_validate(data)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, pos)
        try:
            valid = _valid_part(data, exc)
        except RecursionError:  # data that holds itself (an alias of its own anchor): its schema errors say enough
            valid = None
        if valid is not None:
            part, kept, dropped_names = valid
            checks = _checks(part, lambda loc: format_loc(_original(loc, kept), pos.item_name))
            problems += [pos.error(_original(loc, kept), msg) for loc, msg in checks
                         if not any(re.search(rf"(?<![-\w.]){re.escape(n)}(?![-\w.])", msg) for n in dropped_names)]
        raise SpecError(problems) from None
    problems += [pos.error(loc, msg) for loc, msg in _checks(env, lambda loc: format_loc(loc, pos.item_name))]
    if problems:
        raise SpecError(problems)
    return Document(env, data, pos)


def _checks(env: Environment, where: Callable[[Loc], str]) -> list[tuple[Loc, str]]:
    """The LIMITS, then the cross checks, which grow with what the limits bound."""
    return list(_over_limits(env)) or list(cross_checks(env, where))


MAX_PRUNES = 4  # rounds of leaving out invalid items (one usually does: an item left out takes its errors with it)


def _valid_part(data: dict[str, Any], exc: ValidationError) -> tuple[Environment, dict[Loc, list[int]], set[str]] | None:
    """The environment without the list items that fail the schema, so the cross checks can judge the
    rest in the same run: the model, which original indices each shortened list kept, and the names
    of the items left out and of the items holding them (a check that names one cannot be judged).
    None when an error is not inside a list item: nothing can stand in for what is missing."""
    dropped: set[Loc] = set()
    kept: dict[Loc, list[int]] = {}
    for _ in range(MAX_PRUNES):
        for err in exc.errors(include_url=False):
            loc = _original(tuple(p for p in err["loc"] if p != "[key]"), kept)
            items = [end for end, part in enumerate(loc, start=1) if isinstance(part, int)]
            if not items:
                return None
            dropped.add(loc[: items[-1]])
        kept = {}
        pruned = _without(data, (), dropped, kept)
        try:
            env = Environment.model_validate(pruned)
        except ValidationError as again:
            exc = again
            continue
        # The name as written and as it reads trimmed ("center-a\n" is refused; "center-a" is what references say).
        return env, kept, {form for loc in dropped for name in _names_along(data, loc) for form in (name, name.strip()) if form}
    return None


def _without(value: Any, loc: Loc, dropped: set[Loc], kept: dict[Loc, list[int]]) -> Any:
    """`value` without the list items at `dropped`; `kept` gets the original indices of each list shortened."""
    if isinstance(value, dict):
        return {key: _without(item, loc + (key,), dropped, kept) for key, item in value.items()}
    if isinstance(value, list):
        indices = [i for i in range(len(value)) if loc + (i,) not in dropped]
        if len(indices) != len(value):
            kept[loc] = indices
        return [_without(value[i], loc + (i,), dropped, kept) for i in indices]
    return value


def _original(loc: Loc, kept: dict[Loc, list[int]]) -> Loc:
    """A place in the shortened data as a place in the file."""
    out: Loc = ()
    for part in loc:
        out += (kept[out][part] if isinstance(part, int) and out in kept else part,)
    return out


def _names_along(data: Any, loc: Loc) -> Iterator[str]:
    """The names of the items on the way to `loc` (a pool's and its cluster's)."""
    for part in loc:
        if isinstance(data, dict) and part in data or isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return
        if isinstance(part, int) and isinstance(data, dict) and isinstance(data.get("name"), str):
            yield data["name"]


def _over_limits(env: Environment) -> Iterator[tuple[Loc, str]]:
    """The LIMITS that no one field's bound expresses (clusters and tenants are bounded where declared)."""
    groups = sum(len(c.pools) + len(c.edge_groups) for c in env.clusters)
    if groups > LIMITS.groups:
        yield ("clusters",), f"{groups:,} pools and edge groups, more than the {LIMITS.groups:,} one environment may hold (fleetops.spec.LIMITS)"
        return  # the count below grows with the groups: this line says enough
    clusters = {c.name: c for c in reversed(env.clusters)}  # a name declared twice resolves to the first
    placements = 0
    for tenant in env.tenants:
        placements += sum(_open_groups(tenant, clusters[name]) for name in set(tenant.clusters) if name in clusters)
        if placements > LIMITS.placements:
            yield ("tenants",), (f"the tenants may use more than {LIMITS.placements:,} pools and edge groups, counted in each "
                                 f"of their clusters (fleetops.spec.LIMITS): name fewer in their pools")
            return


def _open_groups(tenant: Tenant, cluster: Cluster) -> int:
    """How many of the cluster's pools and edge groups the tenant may use, counted without listing them."""
    names = group_names(cluster)
    pools = len(cluster.pools) if tenant.pools is None else sum(len(names.pool.get(n, ())) for n in set(tenant.pools))
    return pools + sum(len(names.edge_group.get(n, ())) for n in set(tenant.edge_groups))


_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def read_bounded(path: Path, limit: int, file: str, what: str) -> bytes:
    """The bytes of a regular file (a link is followed), at most `limit` of them; anything else is one
    SpecError at `file:1:1`. A device, pipe or socket is refused before a byte is read (its size says
    nothing of what it yields: /dev/zero never ends, a pipe blocks), and a file that grows past its
    size while read, or a /proc file that reports none, is cut at limit + 1 bytes and refused."""
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer; a regular file reads as ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise SpecError([f"{file}:1:1: no such file"]) from None
    except OSError as exc:  # no permission, a dangling link, a loop of links
        raise SpecError([f"{file}:1:1: cannot read {what}: {exc.strerror}"]) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if stat.S_ISREG(info.st_mode):
            raise SpecError([f"{file}:1:1: file is {info.st_size} bytes, more than the {limit} byte limit for {what}"])
        kind = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "of another kind")
        raise SpecError([f"{file}:1:1: is {kind}, not a regular file: {what} is read from a regular file only"])
    with os.fdopen(fd, "rb") as stream:
        try:
            data = stream.read(limit + 1)
        except OSError as exc:
            raise SpecError([f"{file}:1:1: cannot read {what}: {exc.strerror}"]) from None
    if len(data) > limit:
        raise SpecError([f"{file}:1:1: more than the {limit} byte limit for {what}"])
    return data


ENVIRONMENTS = Path("environments")  # the folder of environment files, in a fleet's repository


def environment_path(name: str, folder: Path = ENVIRONMENTS) -> Path:
    """The file of environment `name` (a DNS label, never a path) in `folder`."""
    return folder / f"{name}.yaml"


def load_environment(path: str | Path, display: str | None = None) -> Environment:
    """Read and validate `environments/<env>.yaml`."""
    return read_environment(path, display).env


def read_environment(path: str | Path, display: str | None = None) -> Document:
    """`load_environment`, keeping the data and positions the model was validated from."""
    path = Path(path)
    file = display or str(path)
    data = read_bounded(path, LIMITS.file_bytes, file, "an environment")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError([f"{file}:{line}:{col}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    return parse_environment(text, file, path.stem)


# --- cross-field checks ----------------------------------------------------------------------


def _duplicates(items: Iterable[tuple[Loc, str]], what: str, where: Callable[[Loc], str], named: bool = True) -> Iterator[tuple[Loc, str]]:
    """Repeated names: `named` items are objects with a `name` field, else the names themselves."""
    seen: dict[str, Loc] = {}
    for loc, name in items:
        if name in seen:
            yield (loc + ("name",) if named else loc), f"duplicate {what} name {name!r} (first at {where(seen[name])})"
        else:
            seen[name] = loc


def _sharing_checks(loc: Loc, device: Device, sharing: Sharing) -> Iterator[tuple[Loc, str]]:
    sloc = loc + ("sharing",)
    if sharing.mode == "time-slicing":
        if sharing.replicas is None:
            yield sloc + ("replicas",), "time-slicing needs replicas (>= 2)"
        elif sharing.replicas < 2:
            yield sloc + ("replicas",), f"time-slicing replicas must be >= 2, got {sharing.replicas}"
    elif sharing.replicas is not None:
        yield sloc + ("replicas",), f"replicas only applies to time-slicing, not {sharing.mode}"
    if sharing.mode == "mig":
        if plugin_kind(device.resource) != "nvidia" or not is_mig_capable(device.model):
            yield sloc + ("mode",), f"MIG is not available on {device.model} ({device.resource})"
        if sharing.mig is None:
            yield sloc + ("mig",), "mode mig needs a mig section with profiles"
        elif sharing.mig.strategy == "single" and len(sharing.mig.profiles) != 1:
            yield sloc + ("mig", "profiles"), "MIG strategy single takes exactly one profile"
        elif is_mig_capable(device.model) and (problem := mig.layout_problem(device.model, dict(sharing.mig.profiles))):
            layout = ", ".join(f"{name}: {count}" for name, count in sorted(sharing.mig.profiles.items()))
            yield sloc + ("mig", "profiles"), f"{{{layout}}} is not a layout of one GPU: {problem}"
    elif sharing.mig is not None:
        yield sloc + ("mig",), f"a mig section only applies to mode mig, not {sharing.mode}"
    if sharing.mode != "exclusive" and plugin_kind(device.resource) != "nvidia":
        yield sloc + ("mode",), f"{sharing.mode} is only supported by the NVIDIA device plugin, not {device.resource}"


def _dangling_placement(loc: Loc, tenant: Tenant, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """The tenant's clusters, pools and edge groups that name nothing declared."""
    for k, name in enumerate(tenant.clusters):
        if name not in clusters:
            yield loc + ("clusters", k), f"unknown cluster {name!r}"
    mine = [clusters[n] for n in tenant.clusters if n in clusters]
    for k, name in enumerate(tenant.pools or []):
        if not any(name in group_names(c).pool for c in mine):
            yield loc + ("pools", k), f"unknown pool {name!r} in the tenant's clusters {tenant.clusters}"
    for k, name in enumerate(tenant.edge_groups):
        if not any(name in group_names(c).edge_group for c in mine):
            yield loc + ("edge_groups", k), f"unknown edge group {name!r} in the tenant's clusters {tenant.clusters}"


def _edge_continuity_checks(loc: Loc, cluster: Cluster, group: EdgeGroup, env: Environment,
                            where: Callable[[Loc], str]) -> Iterator[tuple[Loc, str]]:
    """The model cache fits the nodes' disk; offline work names tenants and classes that may run there."""
    if group.model_cache:
        yield from _duplicates(((loc + ("model_cache", k), m.name) for k, m in enumerate(group.model_cache)), "cached model", where)
        needed = sum(m.size_gb for m in group.model_cache)
        if group.disk_gb is None:
            yield loc + ("model_cache",), f"a model cache of {needed} GB needs the nodes' disk: declare disk_gb on the edge group"
        elif needed > group.disk_gb:
            yield loc + ("model_cache",), (f"the cached models need {needed} GB on every node, more than its disk_gb {group.disk_gb}: "
                                           "remove a model or raise disk_gb")
    work = group.offline_work
    if work is None:
        return
    wloc = loc + ("offline_work",)
    tenants = {t.name: t for t in env.tenants}
    declared = {pc.name for pc in env.priority_classes}
    for k, name in enumerate(work.tenants):
        tenant = tenants.get(name)
        if tenant is None:
            yield wloc + ("tenants", k), f"unknown tenant {name!r}"
        elif cluster.name not in tenant.clusters or group.name not in tenant.edge_groups:
            yield wloc + ("tenants", k), f"tenant {name} may not use edge group {group.name}: list {cluster.name} in its clusters and {group.name} in its edge_groups"
        else:
            allowed = tenant_classes(tenant, env, lambda pc: True)
            for c, cls_name in enumerate(work.priority_classes):
                if cls_name in declared and cls_name not in allowed:
                    yield wloc + ("priority_classes", c), f"tenant {name} may not use priority class {cls_name} (its classes: {', '.join(allowed) or 'none'})"
    for c, cls_name in enumerate(work.priority_classes):
        if cls_name not in declared:
            yield wloc + ("priority_classes", c), f"unknown priority class {cls_name!r}"
    capacity = group_capacity(group).get(group.device.resource, 0)
    if work.devices > capacity:
        yield wloc + ("devices",), f"{work.devices} {group.device.resource} for offline work, more than the group's {capacity}"


def _overlapping_matches(ci: int, cluster: Cluster) -> Iterator[tuple[Loc, str]]:
    """Two groups of a cluster whose matches can claim one node (fleetops.nodematch decides it exactly)."""
    from fleetops import nodematch

    def labels(group: Pool | EdgeGroup) -> dict[str, str]:
        # A device allow list admits by node name alone, and a node writes its own labels: no label
        # may take a name of such a group into another group.
        return {} if isinstance(group, EdgeGroup) and group.fingerprints else group.match.labels

    groups = [(kind, gi, g) for kind, members in (("pools", cluster.pools), ("edge_groups", cluster.edge_groups)) for gi, g in enumerate(members)]
    for m, n in nodematch.prefix_pairs([g.match.name_pattern for _, _, g in groups]):
        (kind, gi, group), earlier = groups[n], groups[m][2]
        name = nodematch.overlap(earlier.match.name_pattern, labels(earlier), group.match.name_pattern, labels(group))
        if name is not None:
            example = f"a node named {name!r}" if name else "any node name"
            yield ("clusters", ci, kind, gi, "match"), (f"overlaps the match of {earlier.name} ({example} matches both): "
                                                        "a node must belong to one group; make the name patterns or labels disjoint")


def cross_checks(env: Environment, where: Callable[[Loc], str] = format_loc) -> Iterator[tuple[Loc, str]]:
    """Rules that span fields: unique names, references that resolve, sharing valid for the device."""
    yield from _duplicates(((("clusters", i), c.name) for i, c in enumerate(env.clusters)), "cluster", where)
    yield from _duplicates(((("tenants", i), t.name) for i, t in enumerate(env.tenants)), "tenant", where)
    yield from _duplicates(((("priority_classes", i), p.name) for i, p in enumerate(env.priority_classes)), "priority class", where)
    yield from _duplicates(((("network", "center_endpoints", i), e.name) for i, e in enumerate(env.network.center_endpoints)), "endpoint", where)
    # Pools and edge groups become Kueue ResourceFlavors and node labels: unique fleet-wide.
    groups = [
        (("clusters", ci, kind, gi), g.name)
        for ci, c in enumerate(env.clusters)
        for kind, members in (("pools", c.pools), ("edge_groups", c.edge_groups))
        for gi, g in enumerate(members)
    ]
    yield from _duplicates(groups, "pool or edge group", where)
    if env.api is not None and env.api.cluster not in {c.name for c in env.clusters}:
        yield ("api", "cluster"), f"no cluster named {env.api.cluster!r} to deploy the fleet API to"

    for ci, cluster in enumerate(env.clusters):
        for pi, pool in enumerate(cluster.pools):
            loc: Loc = ("clusters", ci, "pools", pi)
            yield from _sharing_checks(loc, pool.device, pool.sharing)
            if plugin_kind(pool.device.resource) is None:
                yield loc + ("device", "resource"), f"no device plugin is known for {pool.device.resource}"
        for kind, members in (("pools", cluster.pools), ("edge_groups", cluster.edge_groups)):
            for gi, group in enumerate(members):
                for key in sorted(set(group.labels) & RESERVED_LABELS):
                    yield ("clusters", ci, kind, gi, "labels", key), f"{key} is set by fleetops from the {kind[:-1].replace('_', ' ')} itself"
                for k, taint in enumerate(group.taints):
                    if taint.key == SPOT_TAINT.key:
                        yield ("clusters", ci, kind, gi, "taints", k, "key"), f"{taint.key} is set by fleetops on spot pools (spot: {{price: ...}})"
        yield from _overlapping_matches(ci, cluster)
        for gi, group in enumerate(cluster.edge_groups):
            loc = ("clusters", ci, "edge_groups", gi)
            if cluster.role != "edge":
                yield loc, f"edge groups belong to clusters with role edge; {cluster.name} has role {cluster.role}"
            if group.fingerprints and not group.match.name_pattern:
                # A kubelet's certificate request shows the node name only: that is what admits a device.
                yield loc + ("match",), "an edge group with fingerprints needs match.name_pattern: a device is admitted by the node name its certificate request asks for"
            yield from _edge_continuity_checks(loc, cluster, group, env, where)
            if plugin_kind(group.device.resource) is None:
                yield loc + ("device", "resource"), f"no device plugin is known for {group.device.resource}"

    models = {g.device.model for c in env.clusters for g in (*c.pools, *c.edge_groups) if not is_spot(g)}  # a spot pool has its own
    for model in sorted(models - set(env.prices)):
        yield ("prices",), f"no price per device-hour for device model {model!r}"

    clusters: dict[str, Cluster] = {}
    for c in env.clusters:  # a duplicate name is reported above; resolve references to the first
        clusters.setdefault(c.name, c)
    classes = {p.name for p in env.priority_classes}
    endpoints = {e.name for e in env.network.center_endpoints}
    tenant_names = {t.name for t in env.tenants}
    yield from _unused_spot_pools(env)
    reserved = {*SYSTEM_NAMESPACES, env.reconciler.namespace, env.monitoring.namespace, env.monitoring.dcgm_namespace,
                env.monitoring.npu_exporter_namespace, env.monitoring.jetson_exporter_namespace}
    for ti, tenant in enumerate(env.tenants):
        loc = ("tenants", ti)
        if tenant.name in reserved:
            # The tenant's namespace gets default-deny and fleetops' ownership: never a system or fleetops one.
            yield loc + ("name",), f"{tenant.name!r} is a reserved namespace ({', '.join(sorted(reserved))}); pick another tenant name"
        for field_name, names in (("clusters", tenant.clusters), ("pools", tenant.pools or []), ("edge_groups", tenant.edge_groups)):
            yield from _duplicates((((*loc, field_name, k), n) for k, n in enumerate(names)), field_name.rstrip("s").replace("_", " "), where, named=False)
        dangling = list(_dangling_placement(loc, tenant, clusters))
        yield from dangling
        yield from _spot_without_preemptible_class(loc, tenant, clusters, set(preemptible_classes(tenant, env)))
        for k, name in enumerate(tenant.priority_classes):
            if name not in classes:
                yield loc + ("priority_classes", k), f"unknown priority class {name!r}"
        for k, name in enumerate(tenant.network.allow_from_tenants):
            if name not in tenant_names:
                yield loc + ("network", "allow_from_tenants", k), f"unknown tenant {name!r}"
        for k, name in enumerate(tenant.network.allow_to_endpoints):
            if name not in endpoints:
                yield loc + ("network", "allow_to_endpoints", k), f"unknown center endpoint {name!r}"
        yield from _billing_checks(loc + ("billing",), tenant.billing)
        mine = [clusters[n] for n in tenant.clusters if n in clusters]
        # What each cluster offers the tenant, taken once: not a walk over its groups for each resource.
        offered = {c.name: {r for g in eligible_groups(tenant, [c]) for r in group_capacity(g)} for c in mine} if tenant.quota else {}
        firm = {c.name: {r for g in eligible_groups(tenant, [c]) if not is_spot(g) for r in group_capacity(g)} for c in mine} if tenant.quota else {}
        for resource, quota in tenant.quota.items():
            qloc = loc + ("quota", resource)
            if quota.burst < quota.guaranteed:
                yield qloc + ("burst",), f"must be >= guaranteed ({quota.guaranteed}), got {quota.burst}"
            if dangling:  # which pools offer what is unknowable until the placement names real ones
                continue
            # The quota applies in every cluster of the tenant, so each must offer the resource.
            for cluster in mine:
                if resource not in offered[cluster.name]:
                    yield qloc, f"no pool or edge group of cluster {cluster.name} open to this tenant offers {resource}"
                elif quota.guaranteed and resource not in firm[cluster.name]:
                    # Guarantees are held on the tenant's other pools (modules/tenant.py): here there is none.
                    yield qloc + ("guaranteed",), (f"{quota.guaranteed} cannot be guaranteed: cluster {cluster.name} offers {resource} to this "
                                                   "tenant only on spot pools, which the provider may reclaim; set guaranteed: 0 and use burst, "
                                                   "or name a pool that is not spot")

            if quota.guaranteed_per_pool is not None:
                yield from _split_checks(qloc, resource, quota, tenant, mine)
    for cluster in clusters.values():
        for ti, resource, why in guarantee_placement(env, cluster).unsplit:
            yield ("tenants", ti, "quota", resource, "guaranteed"), why
    if env.scheduler.backend == "volcano":
        # Volcano's queues promised `deserved` through a capacity plugin whose scheduler configuration was
        # never rendered, and no real Volcano in the tests proved what they do: Kueue's are proven.
        yield ("scheduler", "backend"), ("volcano is no longer offered: fleetops proves what its quotas do on the real Kueue only; "
                                         "use backend: kueue")
    yield from _kueue_checks(env, clusters)
    yield from _service_checks(env, clusters, where)


def _service_checks(env: Environment, clusters: dict[str, Cluster], where: Callable[[Loc], str]) -> Iterator[tuple[Loc, str]]:
    """What no HorizontalPodAutoscaler could honour: a service of no tenant, on pools its tenant may not
    use or that lack its device, replicas the wrong way round, nothing to scale on. Whether its max fits
    the tenant's burst and the budget is the policies' to judge (policies/autoscaling.rego)."""
    # Each is Deployment and HorizontalPodAutoscaler `name` in its tenant's namespace on its cluster.
    yield from _duplicates(((("services", i), f"{s.tenant}/{s.cluster}/{s.name}") for i, s in enumerate(env.services)), "service", where)
    tenants: dict[str, Tenant] = {}
    for t in env.tenants:
        tenants.setdefault(t.name, t)
    for si, service in enumerate(env.services):
        loc: Loc = ("services", si)
        tenant = tenants.get(service.tenant)
        if tenant is None:
            yield loc + ("tenant",), f"unknown tenant {service.tenant!r}"
            continue
        if "inference" not in tenant.workloads:
            yield loc + ("tenant",), f"tenant {tenant.name} does not run inference (its workloads: {', '.join(tenant.workloads)}): add inference to them"
        if service.cluster not in tenant.clusters or service.cluster not in clusters:
            yield loc + ("cluster",), f"{service.cluster!r} is not a cluster of tenant {tenant.name} (its clusters: {', '.join(tenant.clusters)})"
        else:
            open_to = {g.name: g for g in eligible_groups(tenant, [clusters[service.cluster]])}
            for k, name in enumerate(service.pools):
                group = open_to.get(name)
                if group is None:
                    yield loc + ("pools", k), f"{name} is no pool of {service.cluster} open to tenant {tenant.name} (open: {', '.join(open_to) or 'none'})"
                elif service.devices.resource not in group_capacity(group):
                    yield loc + ("pools", k), f"{name} offers no {service.devices.resource} (it offers {', '.join(group_capacity(group))})"
        if service.devices.resource not in tenant.quota:
            yield loc + ("devices", "resource"), f"tenant {tenant.name} has no quota for {service.devices.resource}, so Kueue admits none of its replicas: add it to the tenant's quota"
        if service.replicas.min > service.replicas.max:
            yield loc + ("replicas", "min"), f"must be <= max ({service.replicas.max}), got {service.replicas.min}"
        targets = service.targets
        if targets.gpu_utilisation_percent is None and targets.requests_waiting_per_replica is None:
            yield loc + ("targets",), "declare gpu_utilisation_percent or requests_waiting_per_replica (or both): the autoscaler needs a metric"
        if targets.requests_waiting_per_replica is not None and service.server is None:
            yield loc + ("server",), f"requests_waiting_per_replica needs the inference server (one of {', '.join(s.value for s in Server)}): it chooses the queue's series"


def _billing_checks(loc: Loc, billing: Billing) -> Iterator[tuple[Loc, str]]:
    """Top-ups and a low-balance threshold mean something for prepaid tenants only, and prepaid needs money in."""
    if billing.mode == "postpaid":
        if billing.top_ups:
            yield loc + ("top_ups",), "top-ups are for prepaid tenants; this one is postpaid (set mode: prepaid, or remove them)"
        if billing.low_balance_at is not None:
            yield loc + ("low_balance_at",), "a low-balance alert is for prepaid tenants; this one is postpaid"
    elif not billing.top_ups:
        yield loc + ("top_ups",), "a prepaid tenant needs at least one top-up (top_ups: [{date: 2026-11-01, amount: ...}])"


def _within_kueue(resources: int, flavors: int) -> bool:
    """Whether any resource groups of so many resources and flavors are within Kueue's limits."""
    return resources <= KUEUE.groups and flavors <= KUEUE.per_group and resources * flavors <= KUEUE.combinations


def _kueue_checks(env: Environment, clusters: dict[str, Cluster]) -> Iterator[tuple[Loc, str]]:
    """What the API server or Kueue would refuse at apply: resource groups past Kueue's limits (the
    cluster's Cohort, each tenant's Cohort and ClusterQueues), and a tenant whose ClusterQueue takes
    the name of another tenant's non-preempting one."""
    for ci, cluster in enumerate(env.clusters):
        groups = [*cluster.pools, *cluster.edge_groups]
        problem = kueue_limit_problem(bundles(sorted({r for g in groups for r in group_capacity(g)}), groups))
        if problem:
            yield ("clusters", ci, "pools"), f"{problem} (the cluster's Cohort {cluster.name}): move pools to another cluster"
    owners: dict[tuple[str, str], str] = {}  # (cluster, ClusterQueue) -> the tenant whose non-preempting queue it is
    for tenant in env.tenants:
        if non_preempting_classes(tenant, env):
            for name in tenant.clusters:
                owners.setdefault((name, f"{tenant.name}-{NON_PREEMPTING}"), tenant.name)
    for ti, tenant in enumerate(env.tenants):
        for name in dict.fromkeys(tenant.clusters):
            if (owner := owners.get((name, tenant.name))) is not None:
                yield ("tenants", ti, "name"), (f"{tenant.name!r} is the name of tenant {owner}'s non-preempting ClusterQueue on {name} "
                                                "(for its classes declared preemption: Never): pick another tenant name")
                break
        # Few resources on few pools cannot reach a limit: only a larger tenant is grouped as Kueue would.
        if tenant.quota and any(not _within_kueue(len(tenant.quota), _open_groups(tenant, clusters[name])) for name in tenant.clusters if name in clusters):
            for name in dict.fromkeys(tenant.clusters):
                if name in clusters and (problem := kueue_limit_problem(bundles(sorted(tenant.quota), eligible_groups(tenant, [clusters[name]])))):
                    yield ("tenants", ti, "quota"), f"{problem} (its ClusterQueue on {name}): name fewer pools, or fewer device resources"
                    break


def _split_checks(loc: Loc, resource: str, quota: Quota, tenant: Tenant, clusters: list[Cluster]) -> Iterator[tuple[Loc, str]]:
    """A declared split names only pools open to the tenant that offer the resource, and adds up to
    the guarantee in each of its clusters."""
    shares = quota.guaranteed_per_pool or {}
    offering = {c.name: [g.name for g in eligible_groups(tenant, [c]) if resource in group_capacity(g) and not is_spot(g)] for c in clusters}
    known = {name for names in offering.values() for name in names}
    for name in shares:
        if name not in known:
            yield loc + ("guaranteed_per_pool", name), f"{name} is no pool or edge group open to this tenant that offers {resource} (open: {', '.join(sorted(known)) or 'none'})"
    for cluster in clusters:
        total = sum(units for name, units in shares.items() if name in offering[cluster.name])
        if total != quota.guaranteed:
            yield loc + ("guaranteed_per_pool",), (f"the shares of {cluster.name}'s pools ({', '.join(offering[cluster.name])}) add up to {total}, "
                                                   f"not the guarantee {quota.guaranteed}: the guarantee applies in each cluster of the tenant")


def _spot_without_preemptible_class(loc: Loc, tenant: Tenant, clusters: dict[str, Cluster], preemptible: set[str]) -> Iterator[tuple[Loc, str]]:
    """The spot pools a tenant names although none of its priority classes may run there."""
    if preemptible:
        return
    for k, name in enumerate(tenant.pools or []):
        if any(is_spot(p) for n in tenant.clusters if n in clusters for _, p in group_names(clusters[n]).pool.get(name, ())):
            yield loc + ("pools", k), (f"{name} is a spot pool, but none of the tenant's priority classes is preemptible: its work "
                                       "could never run there; mark a class it uses `preemptible: true`, or remove the pool")


def _unused_spot_pools(env: Environment) -> Iterator[tuple[Loc, str]]:
    """Spot pools that no tenant names: spot capacity is opened to a tenant only by naming it (eligible_groups)."""
    named = {(c, p) for t in env.tenants for c in t.clusters for p in t.pools or []}
    for ci, cluster in enumerate(env.clusters):
        for pi, pool in enumerate(cluster.pools):
            if is_spot(pool) and (cluster.name, pool.name) not in named:
                yield ("clusters", ci, "pools", pi, "spot"), (f"no tenant may use spot pool {pool.name}: name it in the pools of a "
                                                              f"tenant of cluster {cluster.name} with a preemptible priority class")


# --- derived facts ----------------------------------------------------------------------------

Group = Pool | EdgeGroup


def physical_devices(group: Group) -> int:
    return group.nodes * group.device.per_node


def group_capacity(group: Group) -> dict[str, int]:
    """Schedulable units per device resource, after sharing: what quotas are drawn from."""
    devices = physical_devices(group)
    sharing = group.sharing if isinstance(group, Pool) else Sharing()
    if sharing.mode == "time-slicing":
        return {group.device.resource: devices * (sharing.replicas or 1)}
    if sharing.mode == "mig" and sharing.mig is not None:
        if sharing.mig.strategy == "single":
            (count,) = sharing.mig.profiles.values()
            return {group.device.resource: devices * count}
        return {mig_resource(profile): devices * count for profile, count in sorted(sharing.mig.profiles.items())}
    return {group.device.resource: devices}


def mig_resource(profile: str) -> str:
    """The resource the NVIDIA device plugin advertises for a profile with strategy mixed ("+" becomes ".")."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def eligible_groups(tenant: Tenant, clusters: Iterable[Cluster]) -> list[Group]:
    """The pools (and edge groups) a tenant's workloads may land on, in declaration order. A tenant that
    names no pools gets every pool but the spot ones: spot capacity is taken only by naming it."""
    out: list[Group] = []
    for cluster in clusters:
        names = group_names(cluster)
        out += [p for p in cluster.pools if p.spot is None] if tenant.pools is None else _named(names.pool, tenant.pools)
        out += _named(names.edge_group, tenant.edge_groups)
    return out


def bundles(resources: list[str], groups: list[Group]) -> list[tuple[list[str], list[str]]]:
    """(resources, flavors) of each Kueue resource group covering `resources` on `groups`.

    Kueue lets a flavor appear in only one resource group, so resources that share a pool (the MIG
    profiles of one GPU) are covered together; each flavor then lists every covered resource.
    """
    out: list[tuple[list[str], list[str]]] = []
    for resource in resources:
        flavors = {g.name for g in groups if resource in group_capacity(g)}
        joined = [b for b in out if set(b[1]) & flavors]
        covered = sorted({resource, *(r for b in joined for r in b[0])})
        names = {f for b in joined for f in b[1]} | flavors
        out = [b for b in out if b not in joined] + [(covered, [g.name for g in groups if g.name in names])]
    return out


@dataclass(frozen=True)
class KueueLimits:
    """What Kueue v0.17.0 holds in the resourceGroups of one ClusterQueue or Cohort: its CRDs' maxItems
    (apis/kueue/v1beta2/clusterqueue_types.go, cohort_types.go) and, for a ClusterQueue, its webhook's
    totals (pkg/webhooks/clusterqueue_webhook.go). Past them the API server refuses the object at apply."""

    groups: int = 16
    per_group: int = 64  # covered resources, and flavors, in one resource group
    total: int = 256  # covered resources, and flavors, over a ClusterQueue's resource groups
    combinations: int = 512  # flavors x covered resources in one resource group of a ClusterQueue


KUEUE = KueueLimits()


def kueue_limit_problem(groups: list[tuple[list[str], list[str]]]) -> str | None:
    """What in these resource groups (`bundles`) Kueue refuses, or None."""
    if len(groups) > KUEUE.groups:
        return f"{len(groups)} Kueue resource groups (device resources that share no pool), more than the {KUEUE.groups} Kueue holds"
    for resources, flavors in groups:
        what = f"{resources[0]}{f' and {len(resources) - 1} more resources sharing its pools' if len(resources) > 1 else ''}"
        if len(resources) > KUEUE.per_group:
            return f"{what}: {len(resources)} resources in one Kueue resource group, more than the {KUEUE.per_group} it covers"
        if len(flavors) > KUEUE.per_group:
            return f"{what}: {len(flavors)} pools and edge groups in one Kueue resource group, more than the {KUEUE.per_group} flavors it holds"
        if len(flavors) * len(resources) > KUEUE.combinations:
            return (f"{what}: {len(flavors)} pools x {len(resources)} resources in one Kueue resource group, more than the "
                    f"{KUEUE.combinations} flavor-resource combinations it holds")
    for kind, count in (("resources", sum(len(r) for r, _ in groups)), ("pools and edge groups", sum(len(f) for _, f in groups))):
        if count > KUEUE.total:
            return f"{count} {kind} over the Kueue resource groups, more than the {KUEUE.total} a ClusterQueue holds"
    return None


NON_PREEMPTING = "non-preempting"


def tenant_classes(tenant: Tenant, env: Environment, keep: Callable[[PriorityClass], bool]) -> list[str]:
    """The classes `keep` picks that the tenant's workloads may carry (all of them when it names none)."""
    allowed = set(tenant.priority_classes) or {pc.name for pc in env.priority_classes}
    return sorted(pc.name for pc in env.priority_classes if keep(pc) and pc.name in allowed)


def non_preempting_classes(tenant: Tenant, env: Environment) -> list[str]:
    """The classes declared never to preempt that the tenant's workloads may carry (a workload naming
    none carries the default, refused where the tenant may not use it: modules/tenant.admission_manifests);
    they go through a second ClusterQueue, `<tenant>-non-preempting`."""
    return tenant_classes(tenant, env, lambda pc: pc.preemption == "Never")


def preemptible_classes(tenant: Tenant, env: Environment) -> list[str]:
    """The classes declared preemptible that the tenant's workloads may carry: the only ones on spot pools."""
    return tenant_classes(tenant, env, lambda pc: pc.preemptible)


def _named(index: dict[str, list[tuple[int, G]]], names: list[str]) -> list[G]:
    """The groups of `index` that `names` names, each once, in their declaration order."""
    return [group for _, group in sorted((entry for name in set(names) for entry in index.get(name, ())), key=lambda entry: entry[0])]


@dataclass(frozen=True)
class Placement:
    """Which pools and edge groups of one cluster hold each tenant's guarantee there."""

    held: dict[tuple[str, str], dict[str, int]]  # (tenant, resource) -> pool or edge group -> units
    unsplit: list[tuple[int, str, str]]  # (tenant index, resource, why): no one pool holds it, no split declared


def guarantee_placement(env: Environment, cluster: Cluster) -> Placement:
    """Where each tenant's guarantee on `cluster` is held (Kueue's nominalQuota per flavor).

    Kueue gives each flavor its own quota and admits a job's pods in one flavor, so a guarantee split
    over pools cannot be used by one job, and a job larger than its pool's share borrows and can be
    reclaimed although it is within the guarantee. So a guarantee is held whole by one pool: the first
    open to the tenant (in the cluster's order) with room for it after the guarantees of the tenants
    declared above it. A split is only ever declared (`guaranteed_per_pool`); a guarantee that fits
    no one pool's room while the tenant's pools have room for it together is refused (`unsplit`).
    """
    cached = env.placement_cache.get(cluster.name)
    if cached is None or cached[0] is not env.tenants or cached[1] is not cluster:
        for name, (placed_on, placement) in _place(env).items():  # every cluster in one walk over the tenants
            env.placement_cache[name] = (env.tenants, placed_on, placement)
        cached = env.placement_cache.get(cluster.name)
        if cached is None or cached[1] is not cluster:  # a cluster not in env: no tenant placed there
            return Placement({}, [])
    return cached[2]


def _place(env: Environment) -> dict[str, tuple[Cluster, Placement]]:
    clusters: dict[str, Cluster] = {}
    for c in env.clusters:  # a duplicate name is reported by cross_checks; references resolve to the first
        clusters.setdefault(c.name, c)
    used: dict[tuple[str, str, str], int] = {}  # (cluster, pool or edge group, resource) -> units guaranteed
    out = {name: (cluster, Placement({}, [])) for name, cluster in clusters.items()}
    for ti, tenant in enumerate(env.tenants):
        if not tenant.quota:
            continue
        for cname in dict.fromkeys(tenant.clusters):
            if cname not in clusters:
                continue
            groups = eligible_groups(tenant, [clusters[cname]])
            placement = out[cname][1]
            for resource, quota in sorted(tenant.quota.items()):
                # No guarantee is held on a spot pool, whose nodes the provider may take back: the tenant
                # borrows spot capacity within its burst from the cluster's Cohort (modules/scheduler.py).
                room = {g.name: units - used.get((cname, g.name, resource), 0) for g in groups
                        if not is_spot(g) and (units := group_capacity(g).get(resource)) is not None}
                if quota.guaranteed_per_pool is not None:
                    shares = {name: units for name, units in quota.guaranteed_per_pool.items() if name in room}
                else:
                    shares, why = _one_pool(quota.guaranteed, room)
                    if why:
                        placement.unsplit.append((ti, resource, f"{quota.guaranteed} {resource} on {cname} {why}"))
                for name, units in shares.items():
                    used[(cname, name, resource)] = used.get((cname, name, resource), 0) + units
                placement.held[(tenant.name, resource)] = shares
    return out


def _one_pool(guaranteed: int, room: dict[str, int]) -> tuple[dict[str, int], str | None]:
    """The one pool that holds the guarantee, and why it cannot be held so, if it cannot."""
    if guaranteed == 0 or not room:
        return {}, None
    fits = next((name for name, left in room.items() if left >= guaranteed), None)
    if fits is not None:
        return {fits: guaranteed}, None
    most = max(room, key=lambda name: room[name])
    if sum(max(left, 0) for left in room.values()) < guaranteed:
        # More than the pools have room for, however split: the policies judge the cluster's
        # guarantees against its capacity (quota.guaranteed_over_capacity), and may waive it.
        return {most: guaranteed}, None
    split: dict[str, int] = {}
    rest = guaranteed
    for name, left in room.items():
        if rest and left > 0:
            split[name] = min(left, rest)
            rest -= split[name]
    return {most: guaranteed}, (
        f"fits no one pool's room ({', '.join(f'{n} {left}' for n, left in room.items())} left after the tenants above), and Kueue "
        f"admits a job in one pool: declare the split, e.g. guaranteed_per_pool: {{{', '.join(f'{n}: {u}' for n, u in split.items())}}}, "
        f"so that a job within it is bounded by its pool's share, or lower guaranteed to {max(room[most], 0)}")


def cluster_by_name(env: Environment, name: str) -> Cluster:
    return next(c for c in env.clusters if c.name == name)


def _per_resource(env: Environment, amount: Callable[[Group, int], int]) -> dict[str, dict[str, int]]:
    """cluster -> device resource -> the sum over its groups of `amount(group, schedulable units)`."""
    out: dict[str, dict[str, int]] = {}
    for cluster in env.clusters:
        per = out.setdefault(cluster.name, {})
        for group in (*cluster.pools, *cluster.edge_groups):
            for resource, count in group_capacity(group).items():
                per[resource] = per.get(resource, 0) + amount(group, count)
    return out


def capacity(env: Environment) -> dict[str, dict[str, int]]:
    """cluster -> device resource -> schedulable units."""
    return _per_resource(env, lambda group, units: units)


def physical(env: Environment) -> dict[str, dict[str, float]]:
    """cluster -> device resource -> physical devices behind its units; summed over a cluster's
    resources, each device counts once (`physical_shares`)."""
    out: dict[str, dict[str, float]] = {}
    for cluster in env.clusters:
        per = out.setdefault(cluster.name, {})
        for group in (*cluster.pools, *cluster.edge_groups):
            for resource, share in physical_shares(group).items():
                per[resource] = round(per.get(resource, 0) + share, 2)
    return out


def physical_shares(group: Group) -> dict[str, float]:
    """The group's physical devices per resource it offers. A GPU cut into several MIG profiles
    (strategy mixed) is shared between their resources by the memory slices each takes, so that the
    GPU is counted once, not once per profile."""
    devices = physical_devices(group)
    units = group_capacity(group)
    family = mig.family_of(group.device.model)
    if len(units) == 1 or not isinstance(group, Pool) or group.sharing.mig is None or family is None:
        return dict.fromkeys(units, devices)
    slices = {mig_resource(name): family.profiles[name].memory * count for name, count in group.sharing.mig.profiles.items()}
    total = sum(slices.values())
    return {resource: devices * taken / total for resource, taken in slices.items()}


def quota_sums(env: Environment) -> dict[str, dict[str, dict[str, int]]]:
    """cluster -> device resource -> {"guaranteed": sum, "burst": sum} over tenants placed there."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for tenant in env.tenants:
        for cluster in tenant.clusters:
            for resource, quota in tenant.quota.items():
                slot = out.setdefault(cluster, {}).setdefault(resource, {"guaranteed": 0, "burst": 0})
                slot["guaranteed"] += quota.guaranteed
                slot["burst"] += quota.burst
    return out


def capacity_rows(env: Environment) -> list[dict[str, Any]]:
    """Per cluster and device resource: physical devices, schedulable units (after time-slicing or MIG)
    and their ratio, guaranteed and burst sums, headroom %."""
    sums, devices = quota_sums(env), physical(env)
    rows = []
    for cluster, per in capacity(env).items():
        for resource, units in sorted(per.items()):
            q = sums.get(cluster, {}).get(resource, {"guaranteed": 0, "burst": 0})
            real = devices[cluster][resource]
            rows.append(
                {
                    "cluster": cluster,
                    "resource": resource,
                    "physical": int(real) if real == int(real) else real,
                    "capacity": units,
                    "sharing_factor": round(units / real, 2) if real else 0.0,
                    "guaranteed": q["guaranteed"],
                    "burst": q["burst"],
                    "headroom_percent": round(100 * (units - q["guaranteed"]) / units, 1) if units else 0.0,
                }
            )
    return rows


def is_spot(group: Group) -> bool:
    return isinstance(group, Pool) and group.spot is not None


def device_hour_price(env: Environment, group: Group) -> float:
    """What one of the group's devices costs per hour: a spot pool's own price, else its model's."""
    if isinstance(group, Pool) and group.spot is not None:
        return group.spot.price
    return env.prices.get(group.device.model, 0.0)


def group_monthly_cost(env: Environment, group: Group) -> float:
    """A group's physical devices priced per device-hour, for a 730-hour month (not rounded: sums round once)."""
    return physical_devices(group) * device_hour_price(env, group) * HOURS_PER_MONTH


def monthly_cost(env: Environment) -> float:
    """Every declared physical device priced per device-hour, for a 730-hour month."""
    return round(sum(group_monthly_cost(env, g) for c in env.clusters for g in (*c.pools, *c.edge_groups)), 2)


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
RESERVED_LABELS = {POOL_LABEL, EDGE_GROUP_LABEL, NVIDIA_CONFIG_LABEL, MIG_CONFIG_LABEL}
# Every node of a spot pool carries it, and so does its Kueue ResourceFlavor: Kueue admits to the pool,
# and the scheduler places on it, only pods that tolerate it, which the tenant's admission policy
# allows to preemptible classes alone (modules/tenant.py).
SPOT_TAINT = Taint(**kube.SPOT_TAINT)


def taints(group: Group) -> list[Taint]:
    """The taints every member node of a pool or edge group carries: its own, and a spot pool's."""
    return [*group.taints, SPOT_TAINT] if is_spot(group) else list(group.taints)


def node_labels(group: Group) -> dict[str, str]:
    """The labels every member node of a pool or edge group carries: the pool contract."""
    key = POOL_LABEL if isinstance(group, Pool) else EDGE_GROUP_LABEL
    labels = {**group.labels, key: group.name}  # the contract's own keys win (validation rejects them too)
    if plugin_kind(group.device.resource) == "nvidia":
        labels[NVIDIA_CONFIG_LABEL] = group.name
    if isinstance(group, Pool) and group.sharing.mode == "mig":
        labels[MIG_CONFIG_LABEL] = group.name
    return dict(sorted(labels.items()))


def matches_node(group: Group, name: str, labels: dict[str, str]) -> bool:
    """Whether a live node belongs to a group by its declared selectors."""
    match = group.match
    if match.name_pattern is None and not match.labels:
        return False
    if match.name_pattern is not None and not fnmatch.fnmatchcase(name, match.name_pattern):
        return False
    return all(labels.get(k) == v for k, v in match.labels.items())


def service_pools(env: Environment, service: Service) -> list[Pool]:
    """The declared pools a service names on its cluster (validation refuses one that is not there)."""
    cluster = next((c for c in env.clusters if c.name == service.cluster), None)
    return _named(group_names(cluster).pool, service.pools) if cluster is not None else []


def unit_hour_price(env: Environment, group: Group, resource: str) -> float:
    """What one schedulable unit of `resource` costs per hour on the group: its device's price times the
    share of a device the unit is (a quarter on a 4-way time-sliced GPU, a seventh of a 1g.10gb MIG slice)."""
    units = group_capacity(group).get(resource, 0)
    return device_hour_price(env, group) * physical_shares(group).get(resource, 0) / units if units else 0.0


def replica_monthly_cost(env: Environment, service: Service) -> float:
    """One replica's devices for a 730-hour month, on the dearest of its pools (where the scheduler may put it)."""
    price = max((unit_hour_price(env, p, service.devices.resource) for p in service_pools(env, service)), default=0.0)
    return service.devices.count * price * HOURS_PER_MONTH
