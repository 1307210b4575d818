"""What `environments/<env>.yaml` may say: the pydantic models of an environment, their field types
and name patterns, and the LIMITS one environment may hold.

No `from __future__ import annotations` here: pydantic would evaluate every field's annotation
from its string when the models are built, at every start of the command line; the two names used
before they are defined are quoted instead.
"""

import datetime
import enum
import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from fleetops import mig
from fleetops.kube import DNS_LABEL, LABEL_KEY, LABEL_VALUE, RESOURCE_NAME


# The policy input (canonical JSON) one evaluation may hand an engine: the one limit on what a fleet may be
# judged as, which every command that judges (check, plan, audit, deploy's policy pack, the reconciler's gate,
# serve), validate and benchmarks/generate.py honour. regorus takes about 15 bytes of memory per byte of input,
# linearly (measured: the generated large fleet, 15,348 objects, 13 MB -> +200 MB; 20,000 small tenants, 191 MB ->
# +2.7 GB; 55,000 tenants died at 7.8 GB): 64 MiB is about 1 GB of engine memory. More is refused, not evaluated
# in chunks: policies judge sums across tenants and clusters, which no part of the fleet shows alone.
POLICY_INPUT_BYTES = 64 << 20
# What one tenant of the generated fleet brings into the policy input, with the objects rendered for it
# (measured: 16,975,558 bytes at 1,000 tenants, scale 1; 66,646,209 at 4,000, scale 4, 16,662 a tenant): the model
# holds as many tenants as the policy input does (tests/policy/test_policy.py holds the largest fleet rendered today to it).
TENANT_INPUT_BYTES = 16_777


@dataclass(frozen=True)
class Limits:
    """What one environment may hold: past one the file is refused with one line, before the work it would
    multiply. The tenants are as many as the policy input holds (`policy_input_bytes`, the generated fleet's
    tenants: `benchmarks/generate.py` at scale 4, its largest, is 32 clusters, 1,600 groups, 4,000 tenants, about
    66,500 objects); the other counts are far above that fleet and low enough that reading, rendering and
    judging one stays within a CI runner's memory. A fleet within them whose policy input is still larger
    (more objects per tenant) is refused by validate at the limit, as by every command that judges it."""

    file_bytes: int = 8 * 1024 * 1024
    clusters: int = 500
    groups: int = 10_000  # pools and edge groups, over all clusters
    tenants: int = POLICY_INPUT_BYTES // TENANT_INPUT_BYTES  # 4,000
    policy_input_bytes: int = POLICY_INPUT_BYTES
    services: int = 10_000  # inference services: a HorizontalPodAutoscaler each
    # The pools and edge groups open to each tenant, counted in each of its clusters: each is a flavor
    # of the tenant's Kueue ClusterQueue there, so the render grows with this, not with the objects.
    placements: int = 200_000
    quotas: int = 256  # device resources in one tenant's quota: the 256 a Kueue ClusterQueue covers (KUEUE)
    objects: int = 200_000  # rendered Kubernetes objects, over all clusters


LIMITS = Limits()


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
Group = Pool | EdgeGroup


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


def named_groups(index: dict[str, list[tuple[int, G]]], names: list[str]) -> list[G]:
    """The groups of `index` that `names` names, each once, in their declaration order."""
    return [group for _, group in sorted((entry for name in set(names) for entry in index.get(name, ())), key=lambda entry: entry[0])]


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


class SpillOver(Model):
    """Kueue's MultiKueue for the tenant: its jobs are submitted on `manager`, which runs none of them
    and dispatches each to whichever of `workers` admits it first (modules/multikueue.py). The
    workers are clusters of the tenant's, each with its queues as ever; the manager's queue is the
    workers' quotas summed, derived, never declared."""

    manager: Name
    workers: list[Name] = Field(min_length=1, max_length=20)  # a MultiKueueConfig lists at most 20


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
    # Classes of its own whose work accepts being preempted at any time, as if declared `preemptible:
    # true` for this tenant alone: they too may run on the spot pools it names (placement.preemptible_classes).
    preemptible_classes: list[Name] = []
    spill_over: SpillOver | None = None


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
    # Device utilisation alerts (FleetopsGPUUtilisationLow, FleetopsNPUUtilisationLow): under this, for that long.
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
    # A cluster kept by one shard (its index, 0 .. replicas-1) while that shard's replica is live;
    # otherwise it is hashed like the others (fleetops/reconcile/shards.py), so none is left without an owner.
    pins: dict[Name, Annotated[int, Field(ge=0, le=MAX_COUNT)]] = Field(default={}, max_length=LIMITS.clusters)


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

    @functools.cached_property
    def reach_cache(self) -> dict[str, Any]:
        """The environment's network intent once computed: read it through `intent.reach`."""
        return {}
