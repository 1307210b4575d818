"""Reconciler replicas that share the fleet's clusters: slot Leases on a home cluster, rendezvous hashing with bounded load.

Each replica holds one of N slot Leases (`fleetops-reconciler-shard-<i>`) on the home cluster, the lowest free
or expired one; the live members are the unexpired slots. Every replica reads every slot and computes the same
assignment from it: clusters hashed to slots by highest random weight, heaviest first, no slot above
(1+epsilon) times the mean load, weighted by each cluster's measured pass seconds, which each slot publishes for
the clusters it keeps. Hashing by the slot name, not the pod's, gives a restarted pod its clusters back.
The per-cluster Lease (`lease.LeaseElector`) still guards every write: a replica writes a cluster only when the
assignment gives it the cluster and it holds the cluster's Lease; it releases the Lease of a cluster that moved
away at once, and a killed replica's Leases expire, so a takeover takes at most a Lease duration and an interval.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetops import inventory, metrics as names, spec
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError
from fleetops.kube import Manifest
from fleetops.reconcile.lease import LeaseElector
from fleetops.reconcile.options import utcnow
from fleetops.reconcile.result import PassResult

SLOT_PREFIX = "fleetops-reconciler-shard-"
COSTS_ANNOTATION = "fleetops.io/pass-seconds"  # JSON {cluster: seconds} of the clusters a slot keeps
COSTS_MAX_CHARS = 64_000  # a quarter of a Lease's annotations (256 KiB): the heaviest clusters first, the rest weigh the mean
EPSILON = 0.25  # no slot above 1.25 x the mean load
SAMPLES = 3  # a cluster's cost is the least of its last passes': a pause (a garbage collection, a slow response) only ever adds
STICKY = 2.0  # the published cost changes only when the cost has moved past this factor: the replicas' weights stay put


def slot_name(index: int) -> str:
    return f"{SLOT_PREFIX}{index}"


# --- the assignment: pure, the same on every replica ----------------------------------------


def _score(member: str, cluster: str) -> int:
    # A stable hash (not Python's salted hash()): every process ranks members alike.
    return int.from_bytes(hashlib.blake2b(f"{member}\0{cluster}".encode(), digest_size=8).digest(), "big")


def _quantized(seconds: float) -> float:
    # Quarter powers of two: a measurement's noise does not move a cluster from one pass to the next.
    return 2 ** (round(math.log2(max(seconds, 1e-3)) * 4) / 4)


def weights_of(clusters: Sequence[str], measured: Mapping[str, float]) -> dict[str, float]:
    """Each cluster's weight: its measured pass seconds, quantized; a cluster never measured weighs the mean (1 when none is)."""
    known = [measured[c] for c in clusters if c in measured and measured[c] > 0]
    mean = sum(known) / len(known) if known else 1.0
    return {c: _quantized(measured[c] if measured.get(c, 0) > 0 else mean) for c in clusters}


def assign(members: Sequence[str], clusters: Sequence[str], weights: Mapping[str, float], pins: Mapping[str, str],
           epsilon: float = EPSILON) -> dict[str, str]:
    """{cluster: member}: rendezvous hashing with bounded load, heaviest cluster first.

    A pinned cluster goes to its member when that member is live, otherwise it is hashed like the rest. Each
    other cluster goes to the highest-ranked member whose load stays within (1+epsilon) x the mean with it;
    when none does (a cluster heavier than the bound), to the least loaded. No members: no owners.
    """
    if not members:
        return {}
    live = sorted(set(members))
    cap = (1 + epsilon) * sum(weights[c] for c in clusters) / len(live)
    load = dict.fromkeys(live, 0.0)
    out: dict[str, str] = {}
    for cluster in sorted(clusters, key=lambda c: (-weights[c], c)):
        if pins.get(cluster) in load:
            out[cluster] = pins[cluster]
            load[pins[cluster]] += weights[cluster]
    for cluster in sorted((c for c in clusters if c not in out), key=lambda c: (-weights[c], c)):
        ranked = sorted(live, key=lambda m: _score(m, cluster), reverse=True)
        fits = [m for m in ranked if load[m] + weights[cluster] <= cap]
        owner = fits[0] if fits else min(ranked, key=lambda m: load[m])
        out[cluster] = owner
        load[owner] += weights[cluster]
    return out


def loads(assignment: Mapping[str, str], weights: Mapping[str, float], members: Sequence[str]) -> dict[str, float]:
    out = dict.fromkeys(members, 0.0)
    for cluster, member in assignment.items():
        out[member] += weights[cluster]
    return out


# --- membership: the slot Leases on the home cluster ----------------------------------------


@dataclass
class Members:
    """What one read of the slot Leases found."""

    live: list[str]  # the slot names of unexpired slot Leases, this replica's among them
    mine: str | None  # this replica's slot; None: every slot is held by another replica, or the home cluster failed
    published: dict[str, dict[str, float]]  # per live slot, the pass seconds it publishes per cluster
    error: str | None = None  # why the slot Leases could not be read or written

    @property
    def costs(self) -> dict[str, float]:
        """Per cluster, the cost the live slots publish (the highest, where two do during a handover)."""
        out: dict[str, float] = {}
        for costs in self.published.values():
            for cluster, seconds in costs.items():
                out[cluster] = max(seconds, out.get(cluster, 0.0))
        return out


def _costs(annotation: str | None) -> dict[str, float]:
    """A slot's published costs; what is oversized or not {name: seconds} counts as nothing published."""
    if not annotation or len(annotation) > COSTS_MAX_CHARS:
        return {}
    try:
        raw = json.loads(annotation)
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0}


def encode_costs(costs: Mapping[str, float]) -> str:
    """The costs annotation, the heaviest clusters first, cut to COSTS_MAX_CHARS."""
    kept: dict[str, float] = {}
    size = 2
    for cluster, seconds in sorted(costs.items(), key=lambda kv: (-kv[1], kv[0])):
        size += len(json.dumps(cluster)) + len(f"{seconds:.3f}") + 2
        if size > COSTS_MAX_CHARS:
            break
        kept[cluster] = round(seconds, 3)
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


class Membership:
    """This replica's slot Lease on the home cluster, and the live slots of all."""

    def __init__(self, api: ClusterAPI, namespace: str, identity: str, shards: int, duration: int, clock: Callable[[], dt.datetime]):
        self.api, self.namespace, self.identity, self.duration, self.clock = api, namespace, identity, duration, clock
        self.electors = [LeaseElector(api, namespace, identity, duration, clock, name=slot_name(i)) for i in range(shards)]
        self.mine: int | None = None
        self.last_failure: ApiError | None = None  # NotFound: the namespace is not there yet

    def _live(self, lease: Manifest | None, now: dt.datetime) -> bool:
        held = (lease or {}).get("spec", {})
        renewed = held.get("renewTime")
        return bool(held.get("holderIdentity")) and renewed is not None and \
            (now - inventory.parse_time(renewed)).total_seconds() <= held.get("leaseDurationSeconds", self.duration)

    def step(self, costs: Mapping[str, float]) -> Members:
        """Renew this replica's slot (or take the lowest free one), publishing `costs`; read every slot."""
        now = self.clock()
        self.last_failure = None
        try:
            leases = [self.api.get("coordination.k8s.io/v1", "Lease", self.namespace, e.name) for e in self.electors]
        except ApiError as exc:
            self.mine, self.last_failure = None, exc
            return Members([], None, {}, f"cannot read the slot Leases: {exc}")
        annotation = encode_costs(costs)
        own = [i for i, lease in enumerate(leases) if (lease or {}).get("spec", {}).get("holderIdentity") == self.identity]
        candidates = ([self.mine] if self.mine is not None else []) + own + \
            [i for i, lease in enumerate(leases) if not self._live(lease, now)]
        self.mine = None
        for index in dict.fromkeys(candidates):  # in order, once each: the slot held, then the lowest free
            elector = self.electors[index]
            elector.annotations = {COSTS_ANNOTATION: annotation}
            if elector.acquire():
                self.mine = index
                break
            if elector.last_error:  # not a lost race: the home cluster failed us
                self.last_failure = elector.last_failure
                return Members([], None, {}, f"cannot take a slot Lease: {elector.last_error}")
        live = [e.name for i, (e, lease) in enumerate(zip(self.electors, leases)) if i == self.mine or (self._live(lease, now) and lease_holder(lease) != self.identity)]
        published = {self.electors[i].name: _costs(annotation if i == self.mine else ((lease or {}).get("metadata", {}).get("annotations") or {}).get(COSTS_ANNOTATION))
                     for i, lease in enumerate(leases) if self.electors[i].name in live}
        return Members(live, None if self.mine is None else self.electors[self.mine].name, published)

    def leave(self) -> None:
        """Give the slot up (the pod stops): the others take its clusters at their next pass."""
        if self.mine is not None:
            self.electors[self.mine].release()
            self.mine = None


def lease_holder(lease: Manifest | None) -> str | None:
    return (lease or {}).get("spec", {}).get("holderIdentity")


# --- one replica's share, pass after pass ---------------------------------------------------


@dataclass
class Shards:
    """The `shards` option of ReconcileLoop: share the environment's clusters with the other replicas."""

    home: str  # the cluster holding the slot Leases
    count: int | None = None  # slots; None: the environment's reconciler.replicas
    epsilon: float = EPSILON
    members: Members | None = None
    assignment: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # the last SAMPLES pass seconds of each cluster this replica keeps
    published: dict[str, float] = field(default_factory=dict)  # what its slot Lease says of them (changed past STICKY only)
    objects: dict[str, int] = field(default_factory=dict)  # desired objects of the clusters this replica keeps
    assigned_at: dict[str, float] = field(default_factory=dict)  # when each kept cluster came to this replica (time.time)
    reconciled_at: dict[str, float] = field(default_factory=dict)  # when this replica last reconciled it
    waiting: dict[str, str] = field(default_factory=dict)  # kept clusters whose Lease another holds past its duration: who
    duration: int = 15
    membership: Membership | None = None
    clock: Callable[[], dt.datetime] = utcnow

    def now(self) -> float:
        return self.clock().timestamp()

    @property
    def mine(self) -> str | None:
        return self.members.mine if self.members else None

    @property
    def owned(self) -> set[str]:
        return {c for c, m in self.assignment.items() if m == self.mine and self.mine is not None}

    def plan(self, env: spec.Environment, clusters: Sequence[str], home: ClusterAPI, identity: str, duration: int,
             clock: Callable[[], dt.datetime]) -> set[str]:
        """Renew the slot, read the members and their costs, assign: the clusters this replica keeps now."""
        count = self.count or env.reconciler.replicas
        if self.membership is None or len(self.membership.electors) != count or self.membership.api is not home:
            self.membership = Membership(home, env.reconciler.namespace, identity, count, duration, clock)
        self.duration, self.clock = duration, clock
        self.members = self.membership.step(self._publish())
        pins = {c: slot_name(i) for c, i in env.reconciler.pins.items()}
        weights = weights_of(clusters, self.members.costs)
        self.assignment = assign(self.members.live, clusters, weights, pins, self.epsilon)
        owned, now = self.owned, self.now()
        for cluster in set(self.assigned_at) - owned:
            for record in (self.assigned_at, self.reconciled_at, self.samples, self.objects, self.waiting):
                record.pop(cluster, None)
        others = {c for slot, costs in self.members.published.items() if slot != self.mine for c in costs}
        for cluster in set(self.published) - owned:
            # Published until its new owner publishes it: meanwhile every replica weighs it alike, not as the mean.
            if cluster in others or cluster not in self.assignment:
                del self.published[cluster]
        for cluster in owned - set(self.assigned_at):
            self.assigned_at[cluster] = now
            if self.members.costs.get(cluster):  # measured by its last owner: the starting point
                self.published[cluster] = self.members.costs[cluster]
        return owned

    def cost(self, cluster: str) -> float:
        """The cluster's pass seconds as this replica measured them (0: not yet)."""
        return min(self.samples.get(cluster) or [0.0])

    def _publish(self) -> dict[str, float]:
        """The costs for the slot Lease: the kept clusters' (each moves only past a factor of STICKY), and those handed over."""
        for cluster in self.owned:
            cost, shown = self.cost(cluster), self.published.get(cluster, 0.0)
            if cost > 0 and not (shown / STICKY <= cost <= shown * STICKY):
                self.published[cluster] = cost
        return dict(self.published)

    def holders(self, leading: set[str], electors: Mapping[str, LeaseElector]) -> None:
        """Note the kept clusters whose Lease another replica still holds, past a Lease duration since they came here."""
        now = self.now()
        self.waiting = {c: electors[c].holder or "another replica" for c in sorted(self.owned - leading)
                        if c in electors and not electors[c].last_error and now - self.assigned_at.get(c, now) > self.duration}

    def observe(self, result: PassResult, desired: Mapping[str, int]) -> None:
        """What the pass measured of the clusters this replica kept: their costs, objects, when they were reconciled."""
        now = self.now()
        for name in self.owned:
            cluster = result.clusters.get(name)
            if cluster is None or not cluster.leader:
                continue
            self.objects[name] = desired.get(name, 0)
            if cluster.seconds > 0:
                self.samples[name] = [*self.samples.get(name, [])[1 - SAMPLES:], cluster.seconds]
            if not cluster.errors:
                self.reconciled_at[name] = now

    def problems(self, clusters: Sequence[str]) -> list[str]:
        """What /readyz names: clusters no live member owns, and kept clusters whose Lease nobody hands over."""
        if self.members is None:
            return []
        out = []
        if not self.members.live:
            why = f" ({self.members.error})" if self.members.error else ""
            out.append(f"no live shard on {self.home}{why}: no replica owns {', '.join(sorted(clusters))}")
        for cluster, holder in sorted(self.waiting.items()):
            out.append(f"{cluster}: assigned to {self.mine} more than {self.duration} s ago (a Lease duration), but {holder} still holds its Lease; nothing written there")
        return out


class ShardCollector(Collector):
    """The shard's metrics, computed when scraped: its clusters, objects, pass seconds and each kept cluster's lag."""

    def __init__(self, shards: Shards):
        self.shards = shards

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.shards
        shard = s.mine
        clusters = GaugeMetricFamily(names.SHARD_CLUSTERS, "Clusters this replica's shard keeps", labels=["shard"])
        objects = GaugeMetricFamily(names.SHARD_OBJECTS, "Objects Git wants on the shard's clusters", labels=["shard"])
        seconds = GaugeMetricFamily(names.SHARD_PASS_SECONDS, "The shard's clusters' pass seconds (each the least of its last passes'), summed: its load", labels=["shard"])
        lag = GaugeMetricFamily(names.SHARD_LAG, "Seconds since this replica last reconciled the cluster, or since it was assigned it", labels=["shard", "cluster"])
        if shard is not None:
            owned = sorted(s.owned)
            clusters.add_metric([shard], len(owned))
            objects.add_metric([shard], sum(s.objects.get(c, 0) for c in owned))
            seconds.add_metric([shard], sum(s.cost(c) for c in owned))
            now = s.now()
            for c in owned:
                lag.add_metric([shard, c], now - s.reconciled_at.get(c, s.assigned_at.get(c, now)))
        yield from (clusters, objects, seconds, lag)
