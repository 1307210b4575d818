"""Leader election through a Lease per cluster, so that only one replica writes to it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from fleetops import inventory
from fleetops.cluster import ClusterAPI
from fleetops.errors import ApiError, Conflict, Unanswered
from fleetops.kube import Manifest
from fleetops.reconcile.options import utcnow
from fleetops.reconcile.result import ClusterResult, Failure

LEASE_NAME = "fleetops-reconciler"


# --- leader election ------------------------------------------------------------------------


def lease_failure(cluster: str, elector: LeaseElector) -> ClusterResult:
    """A cluster whose Lease could not be read or written: a server that failed us, not another leader."""
    if isinstance(elector.last_failure, Unanswered):
        return ClusterResult(cluster, leader=False, unreachable=elector.last_error,
                             failures=[Failure(f"{cluster}: API server unreachable ({elector.last_error}): nothing read or written this pass")])
    return ClusterResult(cluster, leader=False, failures=[Failure(f"{cluster}: cannot take the Lease: {elector.last_error}")])


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
        self.last_failure: ApiError | None = None  # the last failed call: NotFound means the namespace is not there yet
        self.last_error: str | None = None  # that call's error, when it was not a lost race (409)
        self.holder: str | None = None  # who held the Lease at the last read
        self.annotations: dict[str, str] = {}  # written with every renewal (a shard's slot Lease carries its clusters' pass costs)

    def _body(self, now: dt.datetime, transitions: int, acquired: str) -> Manifest:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, **({"annotations": dict(self.annotations)} if self.annotations else {})},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
                     "acquireTime": acquired, "renewTime": _micro_time(now), "leaseTransitions": transitions},
        }

    def acquire(self) -> bool:
        """True when this candidate holds the Lease after the call."""
        now = self.clock()
        self.last_failure = self.last_error = None
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
            if not mine and not expired:  # a released Lease has no renewTime: expired, free at once
                return False
            transitions = held.get("leaseTransitions", 0) + (0 if mine else 1)
            body = self._body(now, transitions, held.get("acquireTime") if mine else _micro_time(now))
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            self.api.replace(body)
            return True
        except ApiError as exc:
            self.last_failure = exc
            self.last_error = None if isinstance(exc, Conflict) else str(exc)
            return False  # a conflict, or the API is unreachable: not the leader this round

    def release(self) -> bool:
        """Give the Lease up at once when this candidate holds it (a planned move need not wait for it to
        expire); True when it was released. Written with the resourceVersion read, so a Lease another
        candidate took meanwhile is left alone."""
        self.last_failure = self.last_error = None
        try:
            lease = self.api.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
            if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
                return False
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {k: v for k, v in lease["spec"].items() if k not in ("holderIdentity", "renewTime")}}
            self.api.replace(body)
            return True
        except ApiError as exc:
            self.last_failure = exc
            self.last_error = None if isinstance(exc, Conflict) else str(exc)
            return False
