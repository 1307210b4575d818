"""Admission latency of the real Kueue under load: prod's queues as fleetops renders them, beside one flat queue.

    .venv/bin/python benchmarks/kueue_bench.py [--jobs 1000] [--repeat 3] [--cluster center-bj]

For each layout, a fresh kube-apiserver (on one etcd) with the real Kueue (`make tools`), started as
the test suite starts it (tests/servers.py `kueue_cluster`), holding one cluster's rendered objects of
environments/prod.yaml; then `--jobs` suspended Jobs submitted as fast as four clients can, and each
Workload's admission taken from a watch. The two layouts:

- fleetops: the rendered Cohorts (the cluster's, and one per tenant under it) and ClusterQueues;
- flat: one ClusterQueue holding the same quota per flavor (the sum of every rendered ClusterQueue's
  and Cohort's), every rendered LocalQueue pointing at it; everything else as rendered.

The jobs (`generate`) cycle over the cluster's tenants and each device resource of their quota, the
classes each tenant may use (batch-low into its non-preempting queue, as its admission policy
requires), sizes 1, 2, 4 and 8 up to a quarter of the tenant's guarantee, tolerating the taints of
the tenant's pools. No pod runs (no kubelet or job controller): an admitted job is finished at once,
as Kueue's Job integration does when a Job completes (its Workload's Finished condition), so its
quota goes to the next and all are admitted; with each job within a quarter of its tenant's
guarantee the jobs not yet finished seldom fill it, and the bench measures Kueue's scheduling, not
capacity (center-bj holds 528 device units; the 1,000 jobs ask for 3,150).

Per job: admission latency = the watch's delivery of its Workload's first Admitted=True minus the
moment its Job's create call began (Kueue's timestamps have one-second resolution); p50, p99, and
throughput = admitted jobs over first submission to last admission. Each repeat runs both layouts,
alternating which goes first; the goals compare the medians of the per-repeat ratios:
fleetops' latency <= 1.2x the flat one's, and its throughput >= the flat one's / 1.2.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import math
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.goals import Goal, report  # noqa: E402
from fleetops import render, spec  # noqa: E402
from fleetops.whatif.sides import pooled  # noqa: E402
from tests.kueue_jobs import queue_for, suspended_job, tolerating  # noqa: E402

ENVIRONMENT = ROOT / "environments" / "prod.yaml"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
SIZES = (1, 2, 4, 8)
# A job takes at most this share of its tenant's guarantee, so that the jobs admitted and not yet
# finished seldom fill it: the bench measures Kueue's scheduling, not waiting for quota.
SHARE = 4
FINISHERS = 4  # threads marking admitted Workloads Finished: one fell behind on a loaded machine
SUBMITTERS = 4  # concurrent create calls: the load of several users, not one client's round trips
STALL_SECONDS = 60.0
WATCH_SECONDS = 2  # no admission for this long: report what is still pending instead of waiting
GOAL_RATIO = 1.2
# Each goal: fleetops' figure against the flat one's, as a ratio where more is worse.
RATIOS: dict[str, Callable[[Figures, Figures], float]] = {
    "admission latency p50, fleetops / flat": lambda ours, flat: ours.p50 / flat.p50,
    "admission latency p99, fleetops / flat": lambda ours, flat: ours.p99 / flat.p99,
    "throughput, flat / fleetops": lambda ours, flat: flat.throughput / ours.throughput,
    "Workload to admission p50, fleetops / flat": lambda ours, flat: ours.queued_p50 / flat.queued_p50,
    "Workload to admission p99, fleetops / flat": lambda ours, flat: ours.queued_p99 / flat.queued_p99,
}


class Layout(enum.Enum):
    FLEETOPS = "fleetops"
    FLAT = "flat"


@dataclass(frozen=True)
class Job:
    """One suspended Job of one pod requesting `size` of one device resource."""

    namespace: str
    name: str
    queue: str
    priority: str
    resource: str
    size: int
    tolerations: tuple[spec.Taint, ...] = ()

    def manifest(self) -> dict[str, Any]:
        return suspended_job(self.namespace, self.name, self.queue, {self.resource: self.size}, self.priority,
                             tolerating(self.tolerations))


def generate(env: spec.Environment, cluster: spec.Cluster, count: int) -> list[Job]:
    """`count` jobs, one tenant's device resource after another, each slot stepping through the tenant's
    classes and, once per round of classes, through SIZES."""
    tenants = [t for t in env.tenants if cluster.name in t.clusters]
    slots = [(t, resource) for t in tenants for resource in t.quota]
    jobs = []
    for i in range(count):
        tenant, resource = slots[i % len(slots)]
        turn = i // len(slots)
        classes = tenant.priority_classes or [pc.name for pc in env.priority_classes]
        priority = classes[turn % len(classes)]
        pools = [g for g in spec.eligible_groups(tenant, [cluster]) if resource in spec.group_capacity(g)]
        jobs.append(Job(
            namespace=tenant.name, name=f"{tenant.name}-{i:05d}",
            queue=queue_for(tenant, env, priority),
            priority=priority, resource=resource,
            size=min(SIZES[(turn // len(classes)) % len(SIZES)], max(1, tenant.quota[resource].guaranteed // SHARE)),
            tolerations=tuple(dict.fromkeys(t for g in pools for t in g.taints)),
        ))
    return jobs


def flat(manifests: list[dict[str, Any]], cluster: spec.Cluster) -> list[dict[str, Any]]:
    """The cluster's objects with one ClusterQueue in place of its Cohorts and ClusterQueues, holding
    the quota they hold together, and every LocalQueue pointing at it: whatif's pooled side, preempting
    by priority within it."""
    return pooled(manifests, cluster, {"withinClusterQueue": "LowerPriority"})


@dataclass
class Figures:
    """One layout's run: latencies in seconds, throughput in admitted jobs per second."""

    layout: Layout
    submitted: int
    admitted: int
    p50: float
    p99: float
    throughput: float
    submit_seconds: float = 0.0  # first create call begun to last answered
    queued_p50: float = math.nan  # from the Workload's creation (as the watch saw it) to its admission: Kueue's queues alone
    queued_p99: float = math.nan
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    pending: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        cpu = ", ".join(f"{name} {self.cpu_seconds[name]:.1f} s" for name in self.cpu_seconds)
        rss = ", ".join(f"{name} {self.peak_rss_mib[name]:.0f} MiB" for name in self.peak_rss_mib)
        return (f"  {self.layout.value:<8} admitted {self.admitted}/{self.submitted}: p50 {self.p50:.2f} s, p99 {self.p99:.2f} s, "
                f"{self.throughput:.1f} jobs/s; Workload to admission p50 {self.queued_p50:.2f} s, p99 {self.queued_p99:.2f} s; submitted in {self.submit_seconds:.0f} s; CPU {cpu}; peak RSS {rss}")


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile (0 < q <= 1) of sorted values: the smallest value at least q of them reach."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def latencies(began: dict[str, float], ended: dict[str, float]) -> list[float]:
    """Sorted, for each key in both."""
    return sorted(ended[key] - at for key, at in began.items() if key in ended)


def figures(layout: Layout, submitted: dict[str, float], admitted: dict[str, float]) -> Figures:
    """Latency and throughput from when each job (by uid) was submitted and admitted (monotonic seconds)."""
    waits = latencies(submitted, admitted)
    if not waits:
        return Figures(layout, len(submitted), 0, math.inf, math.inf, 0.0)
    span = max(admitted[uid] for uid in submitted if uid in admitted) - min(submitted.values())
    return Figures(layout, len(submitted), len(waits), percentile(waits, 0.5), percentile(waits, 0.99),
                   len(waits) / span if span > 0 else math.inf)


# --- the run, on the real servers -----------------------------------------------------------------


def is_true(wl: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in wl.get("status", {}).get("conditions", []))


class Admissions:
    """Each Workload's first admission, by its Job's uid, as a watch delivers it; each admitted Workload
    is then marked Finished (what Kueue's Job integration writes when the Job completes), which
    releases its quota."""

    def __init__(self, api: Any):
        from kubernetes import client

        self.objects = client.CustomObjectsApi(api)
        self.at: dict[str, float] = {}
        self.created: dict[str, float] = {}  # when the watch first delivered each job's Workload
        self.seen = threading.Condition()
        self.stopped = threading.Event()
        self.failed: BaseException | None = None
        self.finishing: queue.Queue[tuple[str, str] | None] = queue.Queue()
        version = self.objects.list_cluster_custom_object(GROUP, VERSION, "workloads", limit=1)["metadata"]["resourceVersion"]
        self.threads = [threading.Thread(target=self._guarded, args=(self._watch, version)),
                        *(threading.Thread(target=self._guarded, args=(self._finish,)) for _ in range(FINISHERS))]
        for thread in self.threads:
            thread.start()

    def _watch(self, version: str) -> None:
        from kubernetes import watch

        # The server ends each watch after WATCH_SECONDS, so that this thread sees `stopped` soon after it is set.
        while not self.stopped.is_set():
            for event in watch.Watch().stream(self.objects.list_cluster_custom_object, GROUP, VERSION, "workloads",
                                              resource_version=version, timeout_seconds=WATCH_SECONDS):
                wl = event["object"]
                version = wl["metadata"]["resourceVersion"]
                uid = wl["metadata"].get("labels", {}).get(JOB_UID_LABEL)
                with self.seen:
                    self.created.setdefault(uid, time.monotonic())
                if event["type"] in ("ADDED", "MODIFIED") and is_true(wl, "Admitted"):
                    self._admitted(uid, wl)

    def _admitted(self, uid: str | None, wl: dict[str, Any]) -> None:
        with self.seen:
            if uid is None or uid in self.at:
                return
            self.at[uid] = time.monotonic()
            self.seen.notify_all()
        self.finishing.put((wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def _guarded(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except BaseException as exc:  # handed to stop(): a thread's exception would only be printed
            self.failed = exc
            self.stopped.set()

    def _finish(self) -> None:
        while (item := self.finishing.get()) is not None:
            namespace, name = item
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            finished = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "finished by the benchmark",
                        "lastTransitionTime": now}
            self.objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "workloads", name, [{"op": "add", "path": "/status/conditions/-", "value": finished}],
                _content_type="application/json-patch+json")

    def wait(self, count: int) -> None:
        """Until `count` Workloads were admitted, none was for STALL_SECONDS, or a thread failed."""
        with self.seen:
            progress, last = len(self.at), time.monotonic()
            while len(self.at) < count and not self.stopped.is_set() and time.monotonic() - last < STALL_SECONDS:
                self.seen.wait(1.0)
                if len(self.at) > progress:
                    progress, last = len(self.at), time.monotonic()

    def pending(self) -> Counter[str]:
        """Why the Workloads not admitted wait: Kueue's QuotaReserved message, counted."""
        reasons: Counter[str] = Counter()
        for wl in self.objects.list_cluster_custom_object(GROUP, VERSION, "workloads")["items"]:
            if not is_true(wl, "Admitted") and not is_true(wl, "Finished"):
                found = [c["message"] for c in wl.get("status", {}).get("conditions", []) if c["type"] == "QuotaReserved"]
                reasons[found[0] if found else "no decision yet"] += 1
        return reasons

    def stop(self) -> None:
        """End both threads: the finishing of what was admitted first, while the servers still run."""
        self.stopped.set()
        for _ in range(FINISHERS):
            self.finishing.put(None)
        for thread in self.threads:
            thread.join()
        if self.failed is not None:
            raise RuntimeError(f"watching or finishing Workloads failed: {self.failed}") from self.failed


def submit(api: Any, jobs: list[Job]) -> dict[str, float]:
    """Create every job, SUBMITTERS at a time; when each create call began, by the Job's uid."""
    from kubernetes import client

    batch = client.BatchV1Api(api)

    def create(job: Job) -> tuple[str, float]:
        began = time.monotonic()
        response = batch.create_namespaced_job(job.namespace, job.manifest(), _preload_content=False)
        return json.loads(response.data)["metadata"]["uid"], began

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        return dict(pool.map(create, jobs))


def usage(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB of a running process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return cpu, peak / 1024


def run(layout: Layout, manifests: list[dict[str, Any]], jobs: list[Job], etcd: Any, directory: Path) -> Figures:
    """`jobs` on a fresh API server and Kueue holding `manifests`; the servers' CPU time over the jobs."""
    from tests import servers

    with contextlib.ExitStack() as stack:
        server = servers.ApiServer(layout.value, directory / "kube", etcd)
        stack.callback(server.stop)
        server.start()
        kueue = servers.kueue_cluster(server, directory / "kueue", manifests)
        stack.callback(kueue.stop)
        pids = {"kube-apiserver": server.process.popen.pid, "kueue": kueue.process.popen.pid, "etcd": etcd.process.popen.pid}
        before = {name: usage(pid)[0] for name, pid in pids.items()}
        api = server.client()
        admissions = Admissions(api)
        stack.callback(admissions.stop)  # before the servers stop: what was admitted is finished first
        submitted = submit(api, jobs)
        submit_seconds = time.monotonic() - min(submitted.values())
        admissions.wait(len(submitted))
        with admissions.seen:
            result = figures(layout, submitted, dict(admissions.at))
            queued = latencies(admissions.created, admissions.at)
        if queued:
            result.queued_p50, result.queued_p99 = percentile(queued, 0.5), percentile(queued, 0.99)
        result.submit_seconds = submit_seconds
        for name, pid in pids.items():
            cpu, peak = usage(pid)
            result.cpu_seconds[name], result.peak_rss_mib[name] = cpu - before[name], peak
        if result.admitted < result.submitted:
            result.pending = admissions.pending()
        return result


def layouts(order: int) -> Iterator[Layout]:
    """Both layouts, the first of them alternating with each repeat."""
    both = list(Layout)
    yield from both[order % 2:] + both[: order % 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cluster", default="center-bj")
    parser.add_argument("--keep", type=Path, help="the servers' folders and logs go here and stay (default: a temporary folder)")
    args = parser.parse_args()
    from tests import servers

    absent = [name for name in ("etcd", "kube-apiserver", "kueue") if not (servers.BIN / name).exists()]
    if absent:
        print(f"kueue_bench: no {', '.join(absent)} in .tools/bin: `make tools` builds the real servers", file=sys.stderr)
        return 2
    env = spec.load_environment(ENVIRONMENT)
    cluster = next((c for c in env.clusters if c.name == args.cluster), None)
    if cluster is None:
        print(f"kueue_bench: --cluster: no cluster {args.cluster!r} in {ENVIRONMENT.relative_to(ROOT)}", file=sys.stderr)
        return 2
    manifests = render.render(ENVIRONMENT, revision="bench").clusters[cluster.name]
    objects = {Layout.FLEETOPS: manifests, Layout.FLAT: flat(manifests, cluster)}
    jobs = generate(env, cluster, args.jobs)
    print(f"{len(jobs)} jobs on {cluster.name}: " + ", ".join(f"{t} {n}" for t, n in Counter(j.namespace for j in jobs).items()))
    ratios: dict[str, list[float]] = {name: [] for name in RATIOS}
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="kueue-bench-")) as tmp, \
            servers.etcd_server(Path(tmp) / "etcd") as etcd:
        for repeat in range(args.repeat):
            print(f"repeat {repeat + 1}, load average {os.getloadavg()[0]:.1f}", flush=True)
            measured = {}
            for layout in layouts(repeat):
                measured[layout] = run(layout, objects[layout], jobs, etcd, Path(tmp) / f"{repeat}-{layout.value}")
                print(measured[layout].line(), flush=True)
                for reason, count in measured[layout].pending.most_common(3):
                    print(f"    {count} pending: {reason}")
            for name, ratio in RATIOS.items():
                ratios[name].append(ratio(measured[Layout.FLEETOPS], measured[Layout.FLAT]))
            print("  " + ", ".join(f"{name} {ratios[name][-1]:.2f}x" for name in RATIOS), flush=True)
    return report("fleetops' queues against one flat ClusterQueue, medians over repeats",
                  [Goal(name, statistics.median(values), GOAL_RATIO, "x") for name, values in ratios.items()])


if __name__ == "__main__":
    sys.exit(main())
