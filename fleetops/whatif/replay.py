"""A trace replayed on the real Kueue in simulated time: the harness plays the clock and the job controller.

The clock jumps from event to event: a job arriving (its Workload created), a job's run ending (its
Workload marked Finished after exactly its duration since it was last admitted). After each event the
harness waits until Kueue is quiescent and answers what Kueue did: an admission starts the job's run at
the event's time; an eviction is acknowledged as a job controller acknowledges it (the quota released,
the run's work thrown away) and the job waits again, to start over when admitted again.

Quiescent means no change pending, shown, not guessed: a canary Workload in a ClusterQueue of its own
(no cohort, so it never competes for the fleet's quota) is created after the event; Kueue's informer
delivers Workload events in order, so when the canary is admitted Kueue has seen the event and run a
scheduling cycle on it. Nothing Kueue decides leaves no trace (an admission, a pending reason, an
eviction is each a write), so rounds repeat until two in a row pass in which no Workload but the canary
changed. Two, because one cycle can hold the canary and another decision: the canary's admission is
written by a goroutine (kueue v0.17.0 Scheduler.admit) while the cycle goes on to write evictions and
pending reasons, so a clean first round can end before those writes land. The second canary is
created after the first was admitted, so a later cycle admits it, after the earlier cycle's writes.
Kueue retries inadmissible work one wall-clock second after quota is released (kueue v0.17.0
requeueBatchPeriod): after a job ends or is evicted while work waits in its cohort tree, the harness
also waits for that retry, shown by the tree's witness (`prepared`) being admitted in it. Every wait is
on the watch's next event, with a deadline; none is a sleep.

Evictions are acknowledged once Kueue is quiescent, one at a time in the order of the jobs' indices,
each followed by quiescence and the tree's retry. A job controller releases its victims' quota one by
one at moments no trace chooses; between two releases Kueue runs cycles on a partly freed cohort, so
releasing them as the watch delivers them made the replay depend on the machine's speed.

Kueue orders work it cannot tell apart by a timestamp with one-second resolution and then by random
UIDs or map order (kueue v0.17.0 baseCompareFunc, CandidatesOrdering, Manager.heads). So that the same
trace gives the same figures on a quiet or a busy machine, no two Workloads of one priority in a cluster
are created in the same wall-clock second (the harness waits for the next second when it must: the
order of creation is the order of arrival), and each admission's QuotaReserved time, which orders the
victims of a preemption, is rewritten to a time that follows simulated time (`_stamp`).
"""

from __future__ import annotations

import datetime as dt
import heapq
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetops.errors import WhatifError
from fleetops.whatif.trace import TraceJob

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
CANARY = "fleetops-whatif-canary"
CANARY_RESOURCE = "fleetops.io/whatif-canary"
SETTLE_SECONDS = 120.0  # one round of the canary: far above a loaded machine's, yet a hung Kueue is told
CLEAN_ROUNDS = 2  # rounds in a row with no change that make quiescence (see the module's docstring)
MAX_ROUNDS = 200  # rounds without quiescence before a Kueue that keeps changing is told
WATCH_SECONDS = 300
# QuotaReserved times written by the harness: far from wall-clock time, ordered as simulated time is.
STAMP_EPOCH = dt.datetime(1980, 1, 1, tzinfo=dt.timezone.utc)
STAMP_STRIDE = 200_000  # seconds per event: more than the jobs a trace may hold
_PREEMPTOR = re.compile(r"UID: ([0-9a-f-]{36})")


def _queue(name: str, cohort: str | None, units: int) -> list[dict[str, Any]]:
    """A ClusterQueue of `units` of the canary's resource (in `cohort`) and its LocalQueue in the canary's namespace."""
    labels = {"app.kubernetes.io/managed-by": "fleetops-whatif"}
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": CANARY}},
        "resourceGroups": [{"coveredResources": [CANARY_RESOURCE], "flavors": [{"name": CANARY, "resources": [{"name": CANARY_RESOURCE, "nominalQuota": units}]}]}]}
    if cohort is not None:
        spec["cohortName"] = cohort
    return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name, "labels": labels}, "spec": spec},
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name, "namespace": CANARY, "labels": labels},
             "spec": {"clusterQueue": name}}]


def prepared(objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[tuple[str, str], str], dict[str, str]]:
    """A cluster's objects as a replay applies them, (namespace, LocalQueue) -> the root of its cohort tree, and
    root -> the LocalQueue of its witness.

    Kueue retries the work it found inadmissible one second (of wall time, kueue v0.17.0 requeueBatchPeriod,
    not configurable) after quota is released in its cohort tree. To know that retry has happened, each
    tree gets a witness: a ClusterQueue of one unit of the canary's resource (nothing of the fleet's) in the
    tree's root, whose one pending Workload Kueue admits only in such a retry. A ClusterQueue outside every
    cohort is given a Cohort of its own, holding nothing (it lends and borrows nothing, so it admits as before)."""
    parents = {o["metadata"]["name"]: o["spec"].get("parentName") for o in objects if o["kind"] == "Cohort"}

    def root(cohort: str) -> str:
        seen = set()
        while parents.get(cohort) and cohort not in seen:
            seen.add(cohort)
            cohort = parents[cohort]
        return cohort

    out: list[dict[str, Any]] = []
    queue_root: dict[str, str] = {}
    for o in objects:
        if o["kind"] == "ClusterQueue" and not o["spec"].get("cohortName"):
            alone = f"whatif-alone-{o['metadata']['name']}"
            out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cohort", "metadata": {"name": alone}, "spec": {}})
            o = {**o, "spec": {**o["spec"], "cohortName": alone}}
        if o["kind"] == "ClusterQueue":
            queue_root[o["metadata"]["name"]] = root(o["spec"]["cohortName"])
        out.append(o)
    roots = sorted(set(queue_root.values()))
    witnesses = {r: f"whatif-witness-{i}" for i, r in enumerate(roots)}
    canary = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CANARY}},
              {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": CANARY}, "spec": {}},
              *_queue(CANARY, None, 1_000_000), *(o for r in roots for o in _queue(witnesses[r], r, 1))]
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]): queue_root[o["spec"]["clusterQueue"]]
             for o in objects if o["kind"] == "LocalQueue" and o["spec"]["clusterQueue"] in queue_root}
    return out + canary, local, witnesses


@dataclass(frozen=True)
class Submission:
    """How one job is submitted on one side: its LocalQueue, its class's priority, the taints it tolerates."""

    queue: str
    priority: int
    priority_ref: dict[str, str]
    tolerations: tuple[tuple[str, str, str], ...] = ()


def workload(job: TraceJob, how: Submission) -> dict[str, Any]:
    """The Workload Kueue's Job integration makes of the job's suspended batch/v1 Job: one pod set of
    `pods` pods each requesting `units` of the resource, in the tenant's queue, at the class's priority."""
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "whatif", "resources": {"requests": {job.resource: str(job.units)}, "limits": {job.resource: str(job.units)}}}]}
    if how.tolerations:
        pod["tolerations"] = [{"key": k, "operator": "Equal", "value": v, "effect": e} for k, v, e in how.tolerations]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": {"name": job.name, "namespace": job.tenant, "labels": {"fleetops.io/whatif-job": str(job.index)}},
            "spec": {"queueName": how.queue, "priority": how.priority, "priorityClassRef": how.priority_ref,
                     "podSets": [{"name": "main", "count": job.pods, "template": {"spec": pod}}]}}


@dataclass
class Run:
    """One admission of a job: from `start` to `end` (None while running), on `flavor`."""

    start: float
    flavor: str
    end: float | None = None
    preempted_by: int | None = None  # the job whose admission evicted it
    reason: str = ""  # Kueue's Preempted reason (InClusterQueue, InCohortReclamation, ...)


@dataclass
class Record:
    """What became of one job on one side."""

    job: TraceJob
    runs: list[Run] = field(default_factory=list)
    finished: float | None = None

    @property
    def running(self) -> bool:
        return bool(self.runs) and self.runs[-1].end is None

    @property
    def first_admitted(self) -> float | None:
        return self.runs[0].start if self.runs else None


def _true(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"), None)


def _decided(obj: dict[str, Any], reserved: bool) -> bool:
    """Admitted, or (not `reserved`) found inadmissible: Kueue said why it waits."""
    if reserved:
        return _true(obj, "QuotaReserved") is not None
    return any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in obj.get("status", {}).get("conditions", []))


def _time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Replay:
    """One cluster of one side: its jobs replayed on a started Kueue (`api`, fleetops.whatif.servers)."""

    def __init__(self, api: Any, jobs: list[TraceJob], submissions: Callable[[TraceJob], Submission], window: float,
                 roots: dict[tuple[str, str], str], witnesses: dict[str, str]):
        from kubernetes import client

        self.objects = client.CustomObjectsApi(api)
        self.jobs, self.submission, self.window = jobs, submissions, window
        self.records = {j.index: Record(j) for j in jobs}
        self.by_uid: dict[str, int] = {}
        self.events: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()
        self.echoes: set[str] = set()  # resourceVersions of the harness's own writes
        self.created: dict[int, float] = {}  # priority -> creation second of the last Workload of it
        self.clock = 0.0
        self.event_no = 0
        self.canary = 0
        self.witnessed = 0
        self.finishing: list[tuple[float, int, int]] = []  # (time, job, run number) heap
        self.roots, self.witnesses = roots, witnesses  # (namespace, LocalQueue) -> tree root; root -> its witness's queue
        self.held: dict[str, str] = {}  # root -> the admitted Workload holding its witness queue's unit
        self.pending: dict[str, str] = {}  # root -> the witness Workload waiting for Kueue's retry of the tree
        self.released: set[str] = set()  # roots where quota was released since their last retry was seen
        self.evicted: dict[int, dict[str, Any]] = {}  # job -> its evicted Workload, not yet acknowledged
        self.submitted: set[int] = set()
        self.stop = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="whatif-watch", daemon=True)

    # --- the watch -------------------------------------------------------------------------------

    def _watch(self) -> None:
        from kubernetes import watch

        try:
            version = self.objects.list_cluster_custom_object(GROUP, VERSION, "workloads", limit=1)["metadata"]["resourceVersion"]
            self.events.put({"type": "STARTED", "version": version})
            while not self.stop.is_set():
                for event in watch.Watch().stream(self.objects.list_cluster_custom_object, GROUP, VERSION, "workloads",
                                                  resource_version=version, timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.events.put(event)
                    if self.stop.is_set():
                        return
        except BaseException as exc:  # handed to the replay, which raises it: a thread's exception would only be printed
            self.events.put(exc)

    def _next(self, deadline: float, what: str) -> dict[str, Any]:
        try:
            item = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise WhatifError(f"whatif: Kueue did not {what} within {SETTLE_SECONDS:.0f} s of wall time") from None
        if isinstance(item, BaseException):
            raise WhatifError(f"whatif: watching Workloads failed: {item}") from item
        return item

    # --- the run ---------------------------------------------------------------------------------

    def run(self) -> dict[int, Record]:
        self.watcher.start()
        try:
            self._next(time.monotonic() + SETTLE_SECONDS, "list Workloads")
            self._settle()  # the first canary: Kueue holds the queues
            for root in sorted(self.witnesses):
                self.held[root] = self._witness(root, reserved=True)
                self.pending[root] = self._witness(root, reserved=False)
            arrivals = iter(self.jobs)
            upcoming = next(arrivals, None)
            while True:
                due = self.finishing[0][0] if self.finishing else None
                if upcoming is not None and (due is None or upcoming.arrival < due):
                    if upcoming.arrival >= self.window:
                        upcoming = None
                        continue
                    self.clock = upcoming.arrival
                    self._submit(upcoming)
                    upcoming = next(arrivals, None)
                elif due is not None and due < self.window:
                    _, index, number = heapq.heappop(self.finishing)
                    self.clock = due
                    self._finish(index, number)
                else:
                    break
                self.event_no += 1
                self._settle()
        finally:
            self.stop.set()
        return self.records

    def _submit(self, job: TraceJob) -> None:
        how = self.submission(job)
        last = self.created.get(how.priority)
        if last is not None:
            _next_second_after(last)
        made = self.objects.create_namespaced_custom_object(GROUP, VERSION, job.tenant, "workloads", workload(job, how))
        second = _time(made["metadata"]["creationTimestamp"])
        if last is not None and second <= last:
            raise WhatifError(f"whatif: {job.name}: the API server's clock read {second:.0f}, not past {last:.0f}: did the clock go back?")
        self.created[how.priority] = second
        self.submitted.add(job.index)
        self.by_uid[made["metadata"]["uid"]] = job.index
        self.echoes.add(made["metadata"]["resourceVersion"])

    def _finish(self, index: int, number: int) -> None:
        record = self.records[index]
        if number != len(record.runs) or not record.running:
            return  # that run was preempted: this end is not its
        record.runs[-1].end = self.clock
        record.finished = self.clock
        self._mark_finished(record.job.tenant, record.job.name)
        self.released.add(self._root(record.job))

    def _mark_finished(self, namespace: str, name: str) -> None:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        finished = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "finished by the replay", "lastTransitionTime": now}
        done = self.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "workloads", name, [{"op": "add", "path": "/status/conditions/-", "value": finished}],
            _content_type="application/json-patch+json")
        self.echoes.add(done["metadata"]["resourceVersion"])

    def _root(self, job: TraceJob) -> str:
        return self.roots[(job.tenant, self.submission(job).queue)]

    # --- quiescence ------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Until Kueue is quiescent, every tree that released quota while work waits in it has been retried,
        and every eviction is acknowledged (each release quiesced and retried before the next)."""
        clean = rounds = 0
        while True:
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise WhatifError(f"whatif: Kueue did not settle after {MAX_ROUNDS} rounds at simulated second {self.clock:.0f}")
            clean = 0 if self._round() else clean + 1
            if clean < CLEAN_ROUNDS:
                continue
            clean = rounds = 0
            waiting = [root for root in sorted(self.released) if self._waits_in(root)]
            self.released.clear()
            if waiting:
                for root in waiting:
                    self._retried(root)
            elif self.evicted:
                self._release(min(self.evicted))
            else:
                return

    def _waits_in(self, root: str) -> bool:
        """Whether a submitted job that is not running and not finished waits in `root`'s cohort tree."""
        return any(self._root(self.records[i].job) == root and not self.records[i].running and self.records[i].finished is None
                   for i in self.submitted)

    def _release(self, index: int) -> None:
        """Acknowledge one job's eviction: its quota is released in its tree."""
        self._acknowledge(self.evicted.pop(index))
        self.released.add(self._root(self.records[index].job))

    def _round(self) -> bool:
        """One canary: whether any Workload but it changed (other than by the harness's own writes) before it was admitted."""
        if self.canary:
            self.objects.delete_namespaced_custom_object(GROUP, VERSION, CANARY, "workloads", f"canary-{self.canary:07d}")
        self.canary += 1
        return self._await(self._create_canary(f"canary-{self.canary:07d}", CANARY), reserved=True)

    def _retried(self, root: str) -> None:
        """Quota was released in `root`'s tree while work waits there: until Kueue's retry of the tree's
        inadmissible work has run, shown by the tree's witness being admitted in it."""
        self._mark_finished(CANARY, self.held[root])
        self._await(self.pending[root], reserved=True)
        # The finished holder stays: deleting a Workload is a release too, and would start another retry a
        # wall second later, at a moment no event of the trace chose.
        self.held[root] = self.pending[root]
        self.pending[root] = self._witness(root, reserved=False)

    def _witness(self, root: str, reserved: bool) -> str:
        """A Workload in `root`'s witness queue, once Kueue has admitted it (`reserved`) or found it inadmissible."""
        self.witnessed += 1
        name = self._create_canary(f"witness-{self.witnessed:07d}", self.witnesses[root])
        self._await(name, reserved)
        return name

    def _create_canary(self, name: str, queue: str) -> str:
        self.objects.create_namespaced_custom_object(GROUP, VERSION, CANARY, "workloads", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name, "namespace": CANARY},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "whatif", "resources": {"requests": {CANARY_RESOURCE: "1"}}}]}}}]}})
        return name

    def _await(self, name: str, reserved: bool) -> bool:
        """Until Kueue admits the canary-namespace Workload `name` (`reserved`) or says why it waits; whether
        any job's Workload changed meanwhile (other than by the harness's own writes), each answered."""
        changed = False
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            event = self._next(deadline, f"{'admit' if reserved else 'decide on'} its canary {name}")
            obj = event["object"]
            if obj["metadata"]["namespace"] == CANARY:
                if obj["metadata"]["name"] == name and event["type"] != "DELETED" and _decided(obj, reserved):
                    return changed
                continue
            version = obj["metadata"]["resourceVersion"]
            if version in self.echoes:
                self.echoes.discard(version)
                continue
            changed = True
            if event["type"] != "DELETED":
                self._observe(obj)

    def _observe(self, obj: dict[str, Any]) -> None:
        """Answer what Kueue did to one job's Workload: an admission starts a run, an eviction ends it."""
        index = int(obj["metadata"].get("labels", {}).get("fleetops.io/whatif-job", -1))
        record = self.records.get(index)
        if record is None or _true(obj, "Finished"):
            return
        reserved = _true(obj, "QuotaReserved")
        evicted = _true(obj, "Evicted")
        if reserved and evicted:
            if record.running:
                run = record.runs[-1]
                run.end = self.clock
                preempted = _true(obj, "Preempted")
                found = _PREEMPTOR.search(evicted.get("message", ""))
                run.preempted_by = self.by_uid.get(found.group(1)) if found else None
                run.reason = (preempted or evicted).get("reason", "")
            self.evicted[index] = obj
        elif reserved and not record.running:
            flavors = [f for ps in obj["status"]["admission"]["podSetAssignments"] for f in (ps.get("flavors") or {}).values()]
            record.runs.append(Run(self.clock, flavors[0] if flavors else ""))
            heapq.heappush(self.finishing, (self.clock + record.job.duration, index, len(record.runs)))
            self._stamp(obj)

    def _stamp(self, obj: dict[str, Any]) -> None:
        """Rewrite the admission's QuotaReserved time to one that follows simulated time: Kueue preempts
        the most recently admitted of equals first, and its own second-resolution wall time ties."""
        from kubernetes import client

        index = int(obj["metadata"]["labels"]["fleetops.io/whatif-job"])
        at = (STAMP_EPOCH + dt.timedelta(seconds=self.event_no * STAMP_STRIDE + index)).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        for _ in range(5):
            conditions = obj["status"]["conditions"]
            i = next(n for n, c in enumerate(conditions) if c["type"] == "QuotaReserved")
            try:
                done = self.objects.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, "workloads", name,
                    [{"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]},
                     {"op": "replace", "path": f"/status/conditions/{i}/lastTransitionTime", "value": at}],
                    _content_type="application/json-patch+json")
            except client.ApiException as exc:
                if exc.status not in (409, 422):
                    raise
                obj = self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", name)
                if not _true(obj, "QuotaReserved") or _true(obj, "Evicted"):
                    return  # evicted meanwhile: the eviction, still to come on the watch, ends this run
                continue
            self.echoes.add(done["metadata"]["resourceVersion"])
            return
        raise WhatifError(f"whatif: {name}: its admission time could not be written (5 conflicts)")

    def _acknowledge(self, obj: dict[str, Any]) -> None:
        """What a job controller does when Kueue evicts its job: the job stops and its quota is released
        (QuotaReserved and Admitted false, no admission), kueue v0.17.0 UnsetQuotaReservationWithCondition."""
        from kubernetes import client

        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for _ in range(5):
            conditions = [c for c in obj["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted")]
            conditions += [{"type": kind, "status": "False", "reason": "Pending", "message": "evicted: stopped by the replay",
                            "lastTransitionTime": now} for kind in ("QuotaReserved", "Admitted")]
            try:
                done = self.objects.patch_namespaced_custom_object_status(
                    GROUP, VERSION, obj["metadata"]["namespace"], "workloads", obj["metadata"]["name"],
                    {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": {"conditions": conditions, "admission": None}},
                    _content_type="application/merge-patch+json")
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                obj = self.objects.get_namespaced_custom_object(GROUP, VERSION, obj["metadata"]["namespace"], "workloads", obj["metadata"]["name"])
                if not _true(obj, "QuotaReserved"):
                    return
                continue
            self.echoes.add(done["metadata"]["resourceVersion"])
            return
        raise WhatifError(f"whatif: {obj['metadata']['name']}: the eviction could not be acknowledged (5 conflicts)")


def _next_second_after(second: float) -> None:
    """Until the wall clock is past `second`: Kueue's timestamps have one-second resolution."""
    remaining = second + 1 - time.time()
    if remaining > 0:
        time.sleep(remaining + 0.002)  # a clock boundary, verified on the object the server returns

