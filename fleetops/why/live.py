"""One read of a cluster for `why` and `standing`: Kueue's Workloads, ClusterQueues, Cohorts,
LocalQueues and ResourceFlavors, the nodes (with what their device plugins advertise), the nodes'
Leases (their clocks) and the reconciler's status ConfigMap, through fleetops' cluster client.

A tenant's question reads every object of these kinds once, whatever the number of its jobs: one LIST
per kind. What the cluster holds past `MAX_OBJECTS` of a kind is refused whole, never half read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetops import inventory, spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError, FleetopsError, NotFound
from fleetops.kube import STATUS_CONFIGMAP, TENANT_LABEL, Manifest
from fleetops.why.jobs import WORKLOAD, Job, read_job

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
LEASE = ("coordination.k8s.io/v1", "Lease")
NODE_LEASE_NAMESPACE = "kube-node-lease"
MAX_OBJECTS = 200_000  # of one kind: far past a fleet's queues and nodes, and 200 times 1,000 pending jobs


class LiveError(FleetopsError):
    """The cluster could not be read: `why` answers nothing rather than half an answer (exit 2)."""


@dataclass(frozen=True)
class NodeClock:
    """A node's clock against the API server's: its Lease's renewTime is written by the node's clock,
    the managedFields time of that write by the API server's."""

    node: str
    skew_seconds: float  # node's clock minus the API server's (positive: the node is ahead)


@dataclass
class Live:
    cluster: str
    jobs: list[Job]
    queues: list[Manifest]  # Kueue's ResourceFlavors, Cohorts and ClusterQueues (grants.tree reads them)
    local_queues: dict[tuple[str, str], str]  # (namespace, LocalQueue) -> ClusterQueue
    queue_tenant: dict[str, str]  # ClusterQueue -> tenant (its fleetops.io/tenant label)
    queue_usage: dict[str, dict[tuple[str, str], int]]  # ClusterQueue -> (flavor, resource) -> units its work holds
    nodes: inventory.ClusterInventory
    clocks: list[NodeClock]
    status: dict[str, str] | None  # the reconciler's status ConfigMap's data; None when it has written none
    problems: list[str] = field(default_factory=list)  # objects that could not be read, each left out


def _list(api: ClusterAPI, api_version: str, kind: str) -> list[Manifest]:
    try:
        items = api.list(api_version, kind, "")
    except NotFound:  # the kind is not served: Kueue is not installed
        raise LiveError(f"{api.name}: the API server serves no {kind} ({api_version}): is Kueue installed?") from None
    except ApiError as exc:
        raise LiveError(f"{api.name}: list {kind}: {' '.join(str(exc).split())}") from None  # one line, whatever the server said
    if len(items) > MAX_OBJECTS:
        raise LiveError(f"{api.name}: {len(items):,} {kind} objects, more than the {MAX_OBJECTS:,} fleetops reads")
    return items


def _amount(value: Any) -> int:
    try:
        return int(inventory.parse_quantity(str(value)))
    except ValueError:
        return 0


def _usage(status: Any) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> units of a ClusterQueue's status.flavorsReservation (what admitted and reserved work
    holds; flavorsUsage counts admitted work only). Its `borrowed` is the queue's, not the tenant's: a tenant's
    non-preempting queue borrows all it holds, from its own tenant's guarantee too, so borrowing is reckoned per tenant."""
    out: dict[tuple[str, str], int] = {}
    flavors = status.get("flavorsReservation") or status.get("flavorsUsage") or [] if isinstance(status, dict) else []
    for f in flavors if isinstance(flavors, list) else []:
        for r in f.get("resources") or [] if isinstance(f, dict) else []:
            if isinstance(r, dict):
                out[(str(f.get("name")), str(r.get("name")))] = _amount(r.get("total", 0))
    return out


def _clock(lease: Manifest) -> NodeClock | None:
    renew = (lease.get("spec") or {}).get("renewTime")
    holder = (lease.get("spec") or {}).get("holderIdentity") or lease["metadata"]["name"]
    stamps = [m.get("time") for m in lease["metadata"].get("managedFields") or [] if m.get("time")]
    if not renew or not stamps:
        return None
    try:
        node_time = inventory.parse_time(str(renew))
        server_time = max(inventory.parse_time(str(s)) for s in stamps)
    except ValueError:
        return None
    return NodeClock(str(holder), (node_time - server_time).total_seconds())


def read(api: ClusterAPI, env: spec.Environment, cluster: spec.Cluster, namespace: str | None = None) -> Live:
    """Everything `why` reads of one cluster, one LIST per kind. `namespace`: the jobs of that namespace, and those
    of others only while they hold quota."""
    jobs, problems = [], []
    for raw in _list(api, *WORKLOAD):
        meta = raw.get("metadata") or {}
        # Another namespace's Workload matters only while it holds quota (who holds the pools).
        if namespace is not None and meta.get("namespace") != namespace and not (raw.get("status") or {}).get("admission"):
            continue
        try:
            jobs.append(read_job(raw))
        except ValueError as exc:
            problems.append(f"{cluster.name}: Workload {meta.get('namespace')}/{meta.get('name')}: unreadable, left out: {exc}"[:400])
    queues: list[Manifest] = []
    local: dict[tuple[str, str], str] = {}
    tenants: dict[str, str] = {}
    usage: dict[str, dict[tuple[str, str], int]] = {}
    for kind in QUEUE_KINDS:
        for obj in _list(api, KUEUE, kind):
            meta = obj.get("metadata") or {}
            if kind == "LocalQueue":
                target = (obj.get("spec") or {}).get("clusterQueue")
                if isinstance(target, str):
                    local[(str(meta.get("namespace")), str(meta.get("name")))] = target
                continue
            queues.append(obj)
            if kind == "ClusterQueue":
                tenant = (meta.get("labels") or {}).get(TENANT_LABEL)
                if isinstance(tenant, str):
                    tenants[str(meta.get("name"))] = tenant
                usage[str(meta.get("name"))] = _usage(obj.get("status") or {})
    nodes = inventory.read_inventory(cluster.name, _list(api, "v1", "Node"))
    try:
        leases = api.list(*LEASE, "")
    except ApiError:
        leases = []  # the clocks are one finding among many: without them the rest is still answered
    clocks = [c for lease in leases if (lease.get("metadata") or {}).get("namespace") == NODE_LEASE_NAMESPACE and (c := _clock(lease))]
    try:
        status_map = api.get("v1", "ConfigMap", env.reconciler.namespace, STATUS_CONFIGMAP)
    except ApiError:
        status_map = None
    status = {str(k): str(v) for k, v in ((status_map or {}).get("data") or {}).items()} if status_map else None
    return Live(cluster.name, jobs, queues, local, tenants, usage, nodes, clocks, status, problems + nodes.problems)
