"""The real Kueue admitting, borrowing, reclaiming and preempting as the environment file says.

Each scenario renders a bundled environment, applies one cluster's objects to a real kube-apiserver
with the real Kueue (tests/conftest.py `kueue`), submits suspended batch/v1 Jobs into the tenants'
LocalQueues as a user would, and reads Kueue's decision from the Workload: its QuotaReserved and
Admitted conditions, the flavors it was given, and why it waits or was evicted. No pod runs: no
kubelet or job controller, and Kueue's decision is all that is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kubernetes import client

from fleetops import grants, kube, render, spec
from modules.kube import quantity_name
from modules.tenant import queue_names
from tests import kueue_jobs, servers

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]


def cluster_objects(env: str, cluster: str) -> list[dict[str, Any]]:
    return render.render(ROOT / "environments" / f"{env}.yaml", revision="r1").clusters[cluster]


# Kueue's words for a workload on its way to admission, not refused: its preemptions are under way, or
# its scheduler skipped it this cycle for another that takes the same victims or the same room (kueue
# v0.17.0 pkg/scheduler/scheduler.go, setSkipped: retried with every flavor next cycle).
_ON_THE_WAY = ("Pending the preemption", "Workload has overlapping preemption targets with another workload",
               "Workload no longer fits after processing another workload")


class Tenants:
    """Jobs submitted into tenants' queues on one Kueue cluster, and Kueue's Workloads for them."""

    def __init__(self, kueue: servers.KueueServer):
        self.kueue = kueue
        self.jobs = client.BatchV1Api(kueue.api.client())
        self.objects = client.CustomObjectsApi(kueue.api.client())

    def submit(self, tenant: str, name: str, devices: dict[str, int], priority: str | None, queue: str | None = None,
               tolerations: list[dict[str, str]] | None = None) -> str:
        """A suspended Job of one pod requesting `devices`, in the tenant's queue; its uid."""
        return self.jobs.create_namespaced_job(tenant, self._job(tenant, name, devices, priority, queue, tolerations)).metadata.uid

    @staticmethod
    def _job(tenant: str, name: str, devices: dict[str, int], priority: str | None, queue: str | None,
             tolerations: list[dict[str, str]] | None) -> dict[str, Any]:
        return kueue_jobs.suspended_job(tenant, name, queue or f"{tenant}-queue", devices, priority, tolerations or ())

    def refusal(self, tenant: str, name: str, devices: dict[str, int], priority: str | None, queue: str,
                tolerations: list[dict[str, str]] | None = None) -> str | None:
        """The API server's refusal of such a job (a dry run), or None when it would be created."""
        try:
            self.jobs.create_namespaced_job(tenant, self._job(tenant, name, devices, priority, queue, tolerations), dry_run="All")
        except client.ApiException as exc:
            return json.loads(exc.body)["message"]
        return None

    def started(self, tenant: str, name: str) -> dict[str, Any]:
        """The pod template of a Job once Kueue has let it start (unsuspended), as a plain dict."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            job = self.jobs.read_namespaced_job(name, tenant)
            seen["pod"] = job.spec.template.spec.to_dict()
            return job.spec.suspend is False

        servers.wait_until(ready, f"job {name} of {tenant} started", self.kueue.process, timeout=60)
        return seen["pod"]

    def workload(self, tenant: str, uid: str) -> dict[str, Any] | None:
        found = self.objects.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", tenant, "workloads",
                                                           label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
        return found[0] if found else None

    def decided(self, tenant: str, uid: str) -> dict[str, Any]:
        """The Workload once Kueue has decided on it: quota reserved, or pending with its reason."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            wl = self.workload(tenant, uid)
            if wl is not None and condition(wl, "QuotaReserved") is not None:
                seen["wl"] = wl
                return True
            return False

        servers.wait_until(ready, f"Kueue's decision on job {uid} of {tenant}", self.kueue.process, timeout=60)
        return seen["wl"]

    def admitted(self, tenant: str, uid: str) -> dict[str, Any]:
        """The Workload once admitted; fails with Kueue's reason when it is left pending instead."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            wl = self.workload(tenant, uid)
            seen["wl"] = wl
            reserved = condition(wl, "QuotaReserved") if wl else None
            if reserved is not None and reserved["status"] == "False" and not any(words in reserved["message"] for words in _ON_THE_WAY):
                raise AssertionError(f"{tenant} job not admitted: {reserved['message']}")
            return wl is not None and is_true(wl, "Admitted")

        servers.wait_until(ready, f"admission of job {uid} of {tenant}", self.kueue.process, timeout=60)
        return seen["wl"]

    def one_more_waits(self, tenant: str, priority: str, tolerations: list[dict[str, str]] | None = None,
                       resource: str = "nvidia.com/gpu", queue: str | None = None, name: str = "beyond") -> None:
        """A job of one more unit than the tenant may reach is left pending for want of quota, not admitted."""
        uid = self.submit(tenant, name, {resource: 1}, priority, queue, tolerations)
        waiting = condition(self.decided(tenant, uid), "QuotaReserved")
        assert waiting is not None and waiting["status"] == "False" and "insufficient" in waiting["message"], waiting

    def evicted(self, tenant: str, *uids: str) -> dict[str, Any]:
        """The first Workload of these jobs that Kueue evicts."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            for uid in uids:
                wl = self.workload(tenant, uid)
                if wl is not None and is_true(wl, "Evicted"):
                    seen["wl"] = wl
                    return True
            return False

        servers.wait_until(ready, f"eviction of a job of {tenant}", self.kueue.process, timeout=60)
        return seen["wl"]


    def usage(self, cluster_queue: str, units: int) -> dict[str, dict[str, str]]:
        """flavor -> resource -> {total, borrowed} in the ClusterQueue's status, once it counts `units` in all."""
        seen: dict[str, Any] = {}

        def ready() -> bool:
            status = self.objects.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue).get("status", {})
            seen["usage"] = {f["name"]: {r["name"]: {"total": r.get("total", "0"), "borrowed": r.get("borrowed", "0")} for r in f["resources"]}
                             for f in status.get("flavorsUsage", [])}
            return sum(int(r["total"]) for f in seen["usage"].values() for r in f.values()) == units

        servers.wait_until(ready, f"{units} units used in ClusterQueue {cluster_queue}", self.kueue.process, timeout=60)
        return {flavor: used for flavor, used in seen["usage"].items() if any(r["total"] != "0" for r in used.values())}


def condition(wl: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in wl.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def is_true(wl: dict[str, Any], kind: str) -> bool:
    found = condition(wl, kind)
    return found is not None and found["status"] == "True"


def flavors(wl: dict[str, Any]) -> dict[str, str]:
    """resource -> flavor Kueue assigned to the Workload's one pod set."""
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    return assignment["flavors"]


# --- what an environment declares for one cluster, as a tenant's user submits it --------------------


class Stage(NamedTuple):
    """One cluster of a bundled environment: its model and the objects fleetops renders for it."""

    env: spec.Environment
    cluster: spec.Cluster
    objects: list[dict[str, Any]]

    @classmethod
    def of(cls, env: str, cluster: str) -> Stage:
        model = spec.load_environment(ROOT / "environments" / f"{env}.yaml")
        return cls(model, spec.cluster_by_name(model, cluster), cluster_objects(env, cluster))

    def tenant(self, name: str) -> spec.Tenant:
        return next(t for t in self.env.tenants if t.name == name)

    def groups(self, *names: str) -> list[spec.Group]:
        """The cluster's pools and edge groups of these names (every one when none is named)."""
        return [g for g in (*self.cluster.pools, *self.cluster.edge_groups) if not names or g.name in names]

    def work(self, tenant: spec.Tenant, *pools: str) -> Work:
        """How a user of `tenant` submits work meant for `pools`: in a class the tenant may use (one that
        preempts where it has one, since only such work reclaims a guarantee; a preemptible one for a spot
        pool), through the queue its admission policy requires for that class, tolerating the pools' taints."""
        groups = self.groups(*pools)
        classes = tenant.priority_classes or [pc.name for pc in self.env.priority_classes]
        if any(spec.is_spot(g) for g in groups):
            classes = spec.preemptible_classes(tenant, self.env)
        never = spec.non_preempting_classes(tenant, self.env)
        priority = next((c for c in classes if c not in never), classes[0])
        return Work(priority, kueue_jobs.queue_for(tenant, self.env, priority),
                    kueue_jobs.tolerating(t for g in groups for t in spec.taints(g)))

    def guarantees(self) -> list[tuple[spec.Tenant, str, str, int]]:
        """(tenant, resource, pool, units) of every share of a guarantee on the cluster, where
        spec.guarantee_placement holds it (Kueue's nominalQuota)."""
        held = spec.guarantee_placement(self.env, self.cluster).held
        return [(t, resource, pool, units) for t in self.env.tenants if self.cluster.name in t.clusters
                for resource in sorted(t.quota) for pool, units in held.get((t.name, resource), {}).items() if units]


def reachable(granted: dict[str, Any], tenant: str, resource: str, flavor: str) -> int:
    """What grants.facts says `tenant` may hold of `resource` on `flavor` on an idle cluster."""
    return granted.get(tenant, {}).get(resource, {}).get("flavors", {}).get(flavor, {}).get("reachable", 0)


def pool_shares(grant: dict[str, Any]) -> list[tuple[str, int]]:
    """(flavor, units) a tenant may hold of one resource on each pool (grants.facts), the largest first:
    a job of the larger share fits only its own pool, so each lands where its share is."""
    return sorted(((f, g["reachable"]) for f, g in grant["flavors"].items() if g["reachable"]), key=lambda s: -s[1])


class Work(NamedTuple):
    priority: str
    queue: str
    tolerations: list[dict[str, str]]


def test_the_rendered_configuration_sets_every_field_upstreams_install_sets() -> None:
    """modules/scheduler.py: fleetops owns Kueue's ConfigMap, so what Kueue's own install sets must be
    set there too. The reconcilers' workers (`controller.groupKindConcurrency`) were left out, and Kueue
    then ran one worker per reconciler: 1,000 jobs waited twice as long (benchmarks/README.md)."""
    import yaml

    upstream = yaml.safe_load((servers.kueue_assets() / "controller_manager_config.yaml").read_text())
    rendered = servers.rendered_kueue_configuration(cluster_objects("prod", "center-bj"))
    assert set(upstream) <= set(rendered), sorted(set(upstream) - set(rendered))
    assert rendered["controller"] == upstream["controller"]


# --- defect 1: every tenant job stayed pending ("resource cpu unavailable in ClusterQueue") -------------


@pytest.mark.parametrize("env, cluster", [("dev", "dev-center"), ("staging", "stg-center"), ("staging", "stg-edge")])
def test_a_job_of_each_guarantee_is_admitted_on_the_pool_that_holds_it_without_borrowing(kueue, env: str, cluster: str) -> None:
    """Every tenant of the cluster submits, at once, one job per share of each guarantee, in a class it
    may use and tolerating the taints of the pool that holds the share (spec.guarantee_placement): each
    is admitted on that pool, although the tenant's LimitRange gives its containers cpu and memory
    requests, and a preempting queue holds it without borrowing (so it cannot be reclaimed).
    environments/dev.yaml:53 `nvidia.com/gpu: {guaranteed: 16, burst: 32}` and line 54
    `huawei.com/Ascend910: {guaranteed: 4, burst: 8}` (platform-dev), line 60 `{guaranteed: 8, burst: 32}`
    (ml-sandbox), on dev-a100 and dev-ascend (lines 9-17 `name: dev-a100 ... name: dev-ascend`).
    environments/staging.yaml:51 `guaranteed: 16, burst: 32, guaranteed_per_pool: {stg-h100: 8, stg-a100-infer: 8}`
    (vision: 8 on the H100 pool, tainted by line 12 `taints: [{key: dedicated, value: training,
    effect: NoSchedule}]`, and 8 on stg-a100-infer, line 24 `sharing: {mode: time-slicing, replicas: 2}`),
    line 52 `huawei.com/Ascend910: {guaranteed: 4, burst: 8}` on stg-ascend; line 58 `pools:
    [stg-a100-infer, stg-a100-mig]` and line 60 `nvidia.com/gpu: {guaranteed: 8, burst: 16}` (speech, on the
    MIG pool of line 19 `mig: {strategy: single, profiles: {1g.5gb: 7}}` as placed); line 64
    `priority_classes: [batch-low]` and line 66 `nvidia.com/gpu: {guaranteed: 4, burst: 16}` (research,
    through its non-preempting queue); on stg-edge, line 73 `nvidia.com/gpu: {guaranteed: 4, burst: 6}`
    (factory-vision) on line 35 `name: stg-jetson`."""
    stage = Stage.of(env, cluster)
    shares = stage.guarantees()
    assert shares, f"no guarantee on {cluster}"
    tenants = Tenants(kueue(stage.objects))
    submitted = []
    for i, (tenant, resource, pool, units) in enumerate(shares):
        work = stage.work(tenant, pool)
        uid = tenants.submit(tenant.name, f"guarantee-{i}", {resource: units}, work.priority, work.queue, work.tolerations)
        submitted.append((tenant.name, resource, pool, units, work.queue, uid))
    held: dict[str, dict[str, int]] = {}  # preempting ClusterQueue -> pool -> units its jobs hold
    for tenant_name, resource, pool, units, queue, uid in submitted:
        assert flavors(tenants.admitted(tenant_name, uid)) == {resource: pool}
        if queue == queue_names(stage.tenant(tenant_name))[0]:  # the non-preempting queue holds none: it borrows its tenant's
            held.setdefault(tenant_name, {})[pool] = held.get(tenant_name, {}).get(pool, 0) + units
    for queue, pools in held.items():
        used = tenants.usage(queue, sum(pools.values()))
        assert {pool: sum(int(r["total"]) for r in used[pool].values()) for pool in used} == pools, used
        assert all(r["borrowed"] == "0" for pool in used.values() for r in pool.values()), used


def test_prod_jobs_within_guarantee_are_admitted_on_mig_profiles_and_a_tainted_fpga_pool(kueue) -> None:
    """environments/prod.yaml:141-145 `name: recsys ... clusters: [center-sh] ... pools: [a100-mig,
    fpga-arria10]`: line 147 `nvidia.com/mig-3g.20gb: {guaranteed: 16, burst: 24}` and line 148
    `nvidia.com/mig-2g.10gb: {guaranteed: 32, burst: 48}` on a100-mig (line 48 `mig: {strategy: mixed,
    profiles: {3g.20gb: 1, 2g.10gb: 2}}`, on 4x8 GPUs) in one job, and line 149 `{guaranteed: 4, burst: 8}`
    FPGA regions on fpga-arria10, whose taint (line 53 `taints: [{key: fpga.intel.com/region, value:
    present, effect: NoSchedule}]`) the job tolerates."""
    tenants = Tenants(kueue(cluster_objects("prod", "center-sh")))
    mig = tenants.submit("recsys", "mig", {"nvidia.com/mig-3g.20gb": 16, "nvidia.com/mig-2g.10gb": 32}, "training-standard")
    fpga = "fpga.intel.com/region-ce48969398f05f33946d560708be108a"
    region = tenants.submit("recsys", "fpga", {fpga: 4}, "inference-standard",
                            tolerations=[{"key": "fpga.intel.com/region", "operator": "Exists", "effect": "NoSchedule"}])
    assert flavors(tenants.admitted("recsys", mig)) == {"nvidia.com/mig-3g.20gb": "a100-mig", "nvidia.com/mig-2g.10gb": "a100-mig"}
    assert flavors(tenants.admitted("recsys", region)) == {fpga: "fpga-arria10"}


# --- defect 3: preemption: Never reached only the PriorityClass -----------------------------------------


def test_a_non_preempting_class_never_evicts_and_a_lender_still_reclaims(kueue) -> None:
    """environments/dev.yaml:95 `{name: batch-low, value: 100, workload: batch, preemption: Never`, line 60
    `nvidia.com/gpu: {guaranteed: 8, burst: 32}` (ml-sandbox), line 53 `nvidia.com/gpu: {guaranteed: 16,
    burst: 32}` (platform-dev), line 97 `scheduler: {backend: kueue}` (reclaim_within_cohort Any, the
    default): with ml-sandbox borrowing platform-dev's idle guarantee, platform-dev's batch-low job waits
    rather than evict; its inference-critical job reclaims."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    borrower = tenants.submit("ml-sandbox", "train", {"nvidia.com/gpu": 24}, "training-standard")
    tenants.admitted("ml-sandbox", borrower)  # its 8, and 16 borrowed
    filler = tenants.submit("ml-sandbox", "fill", {"nvidia.com/gpu": 8}, "training-standard")
    tenants.decided("ml-sandbox", filler)  # whatever capacity is left: the cluster is now full
    # A user submits into the tenant's queue; the admission policy names the queue for the class.
    refused = tenants.refusal("platform-dev", "batch-probe", {"nvidia.com/gpu": 4}, "batch-low", "platform-dev-queue")
    queue = "platform-dev-non-preempting-queue" if refused else "platform-dev-queue"
    low = tenants.submit("platform-dev", "batch", {"nvidia.com/gpu": 4}, "batch-low", queue)
    pending = condition(tenants.decided("platform-dev", low), "QuotaReserved")
    # The guarantee platform-dev lent is what reclaiming is for: inference-critical takes it back.
    critical = tenants.submit("platform-dev", "serve", {"nvidia.com/gpu": 4}, "inference-critical")
    evicted = condition(tenants.evicted("ml-sandbox", borrower, filler), "Evicted")
    assert evicted["reason"] == "Preempted" and f"JobUID: {critical}" in evicted["message"], evicted["message"]
    assert pending["status"] == "False" and "Pending the preemption" not in pending["message"], pending["message"]
    assert flavors(tenants.admitted("platform-dev", critical)) == {"nvidia.com/gpu": "dev-a100"}
    assert refused and "set the label kueue.x-k8s.io/queue-name: platform-dev-non-preempting-queue" in refused


def test_work_of_a_non_preempting_class_gives_way_to_guarantees_in_its_tenant_and_beyond(kueue) -> None:
    """environments/dev.yaml:95 `preemption: Never`: batch-low never preempts but may be preempted; line 53
    `nvidia.com/gpu: {guaranteed: 16, burst: 32}` and line 60 `nvidia.com/gpu: {guaranteed: 8, burst: 32}`:
    the guarantees of platform-dev (16) and ml-sandbox (8) on dev-a100 (32 units, lines 9-12 `name:
    dev-a100 ... per_node: 4} ... nodes: 2 ... replicas: 4}`). platform-dev's
    batch-low job borrows the whole idle pool through its non-preempting queue; platform-dev's own
    inference-critical job and ml-sandbox's job, each within its guarantee, take theirs back."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    low = tenants.submit("platform-dev", "batch", {"nvidia.com/gpu": 32}, "batch-low", "platform-dev-non-preempting-queue")
    assert flavors(tenants.admitted("platform-dev", low)) == {"nvidia.com/gpu": "dev-a100"}
    own = tenants.submit("platform-dev", "serve", {"nvidia.com/gpu": 16}, "inference-critical")
    other = tenants.submit("ml-sandbox", "train", {"nvidia.com/gpu": 8}, "training-standard")
    evicted = condition(tenants.evicted("platform-dev", low), "Evicted")
    assert evicted["reason"] == "Preempted", evicted
    assert flavors(tenants.admitted("platform-dev", own)) == {"nvidia.com/gpu": "dev-a100"}
    assert flavors(tenants.admitted("ml-sandbox", other)) == {"nvidia.com/gpu": "dev-a100"}


def test_a_tenant_whose_only_class_never_preempts_works_through_its_non_preempting_queue_even_naming_no_class(kueue) -> None:
    """environments/staging.yaml:79 `{name: batch-low, value: 100, workload: batch, preemption: Never,
    global_default: true}` and line 64 `priority_classes: [batch-low]` (research): every job of research
    goes through its non-preempting queue, one naming no class too (Kueue gives it the default,
    batch-low), and the admission policy refuses the preempting one naming that queue; within line 66
    `nvidia.com/gpu: {guaranteed: 4, burst: 16}` such a job is admitted on the pool that holds the
    guarantee (spec.guarantee_placement), which the tenant's preempting queue lends it. vision (line 49
    `priority_classes: [training-high, inference-critical]`) may not use the default at all."""
    stage = Stage.of("staging", "stg-center")
    research = stage.tenant("research")
    preempting, never = queue_names(research)
    ((pool, units),) = spec.guarantee_placement(stage.env, stage.cluster).held[("research", "nvidia.com/gpu")].items()
    tolerations = stage.work(research, pool).tolerations
    tenants = Tenants(kueue(stage.objects))
    for priority in ("batch-low", None):
        refused = tenants.refusal("research", "probe", {"nvidia.com/gpu": units}, priority, preempting, tolerations)
        assert refused and f"set the label kueue.x-k8s.io/queue-name: {never}" in refused, refused
    classless = tenants.submit("research", "classless", {"nvidia.com/gpu": units}, None, never, tolerations)
    wl = tenants.admitted("research", classless)
    assert flavors(wl) == {"nvidia.com/gpu": pool}
    assert (wl["spec"]["priorityClassRef"]["name"], wl["spec"]["priority"]) == ("batch-low", 100)
    refused = tenants.refusal("vision", "classless", {"nvidia.com/gpu": 1}, None, "vision-queue")
    assert refused and "the default, batch-low, is not allowed for tenant vision" in refused, refused


LENDERS = [("dev", "dev-center", "platform-dev"), ("staging", "stg-center", "vision"), ("staging", "stg-center", "speech"),
           ("staging", "stg-center", "research")]


@pytest.mark.parametrize("env, cluster, lender", LENDERS, ids=["-".join(b) for b in LENDERS])
def test_a_guarantee_is_admitted_however_the_other_tenants_burst_reclaiming_it_where_they_could_borrow_it(
        kueue, env: str, cluster: str, lender: str) -> None:
    """The lender idle, every other tenant of the cluster bursts: one job of each pool's share of its
    burst (as grants reads it), the larger first. Then the lender's guarantee, one job per share where
    spec.guarantee_placement holds it, is admitted on that pool. Where the others may hold more of a
    pool than its guarantees leave them, Kueue took the guarantee back from a borrower (its Workload
    Preempted, InCohortReclamation, by the lender's job); where they may not, the lender evicted nobody.
    environments/dev.yaml:97 `scheduler: {backend: kueue}` (reclaim_within_cohort Any, the default);
    line 53 `nvidia.com/gpu: {guaranteed: 16, burst: 32}` (platform-dev, the lender), line 60
    `nvidia.com/gpu: {guaranteed: 8, burst: 32}` (ml-sandbox) and line 78 `nvidia.com/gpu: {guaranteed: 0,
    burst: 16}` (data-prep) on dev-a100's 32 units (lines 9-13 `name: dev-a100 ... nodes: 2`): ml-sandbox
    alone may take all 32, so platform-dev reclaims.
    environments/staging.yaml:81 `scheduler: {backend: kueue}`; line 51 `guaranteed: 16, burst: 32,
    guaranteed_per_pool: {stg-h100: 8, stg-a100-infer: 8}` (vision), line 60 `nvidia.com/gpu:
    {guaranteed: 8, burst: 16}` (speech), line 66 `nvidia.com/gpu: {guaranteed: 4, burst: 16}` (research,
    line 64 `priority_classes: [batch-low]`: it never preempts, line 79 `preemption: Never`): what each
    may borrow is split over the pools by their capacity, and no pool's borrowers may reach another's
    guarantee, so the lender evicts nobody there (had they, research could never take its back)."""
    stage = Stage.of(env, cluster)
    granted = grants.facts({cluster: stage.objects})[cluster]
    capacity = {(g.name, r): units for g in stage.groups() for r, units in spec.group_capacity(g).items()}
    others = [t for t in stage.env.tenants if cluster in t.clusters and t.name != lender]
    shares = [(resource, pool, units) for t, resource, pool, units in stage.guarantees() if t.name == lender]
    # What the others may hold of each pool of the lender's guarantee, however the lender lends it.
    reach = {(pool, resource): sum(reachable(granted, t.name, resource, pool) for t in others) for resource, pool, _ in shares}
    reclaims = any(reach[(pool, resource)] > capacity[(pool, resource)] - units for resource, pool, units in shares)
    tenants = Tenants(kueue(stage.objects))
    bursts = []
    for tenant in others:
        for resource, grant in sorted(granted.get(tenant.name, {}).items()):
            for flavor, share in pool_shares(grant):
                work = stage.work(tenant, flavor)
                uid = tenants.submit(tenant.name, f"burst-{len(bursts)}", {resource: share}, work.priority, work.queue, work.tolerations)
                bursts.append((tenant.name, uid))
                tenants.decided(tenant.name, uid)
    mine = []
    for i, (resource, pool, units) in enumerate(shares):
        work = stage.work(stage.tenant(lender), pool)
        uid = tenants.submit(lender, f"guarantee-{i}", {resource: units}, work.priority, work.queue, work.tolerations)
        mine.append((uid, resource, pool))
    for uid, resource, pool in mine:
        assert flavors(tenants.admitted(lender, uid)) == {resource: pool}
    # A burst may itself reclaim its tenant's guarantee from an earlier burst (each reclaims rather than
    # borrows on another pool): only the lender's evictions are what this proves.
    preempted = {}
    for tenant, uid in bursts:
        wl = tenants.workload(tenant, uid)
        if wl is not None and is_true(wl, "Preempted"):
            found = condition(wl, "Preempted")
            if any(f"JobUID: {lender_uid}" in found["message"] for lender_uid, _, _ in mine):
                preempted[uid] = found
    assert bool(preempted) == reclaims, (reach, preempted)
    for found in preempted.values():
        assert found["reason"] == "InCohortReclamation", found


# --- defect 5: each flavor tolerated its own taints -----------------------------------------------------


def test_tenants_land_only_on_pools_whose_taints_they_tolerate(kueue) -> None:
    """environments/prod.yaml:14 `taints: [{key: dedicated, value: training, effect: NoSchedule}]`
    (h100-train), line 23 `name: a100-infer` untainted, line 31 `taints: [{key: huawei.com/Ascend910,
    value: present, effect: NoSchedule}]` (ascend-910b, tainted by its own device resource); line 112
    `pools: [h100-train, a100-infer, ascend-910b]` (tenant vision): an inference job goes to
    a100-infer, only a job that tolerates dedicated=training to h100-train, and Ascend jobs to
    ascend-910b without asking."""
    tenants = Tenants(kueue(cluster_objects("prod", "center-bj")))
    serve = tenants.submit("vision", "serve", {"nvidia.com/gpu": 4}, "inference-critical")
    train = tenants.submit("vision", "train", {"nvidia.com/gpu": 8}, "training-high",
                           tolerations=[{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}])
    npu = tenants.submit("vision", "npu", {"huawei.com/Ascend910": 8}, "training-high")
    assert flavors(tenants.admitted("vision", serve)) == {"nvidia.com/gpu": "a100-infer"}
    assert flavors(tenants.admitted("vision", train)) == {"nvidia.com/gpu": "h100-train"}
    assert flavors(tenants.admitted("vision", npu)) == {"huawei.com/Ascend910": "ascend-910b"}
    # What Kueue started: pinned to the pool, with no toleration the job did not ask for.
    pod = tenants.started("vision", "serve")
    assert pod["node_selector"] == {"fleetops.io/pool": "a100-infer"}
    assert not [t for t in pod["tolerations"] or [] if t["key"] == "dedicated"]
    # Nor through the default class (dev.yaml/prod.yaml: batch-low, global_default), which vision may not use.
    refused = tenants.refusal("vision", "classless", {"nvidia.com/gpu": 4}, None, "vision-queue")
    assert refused and "the default, batch-low, is not allowed for tenant vision" in refused


# --- defect 2: burst stopped at what the other tenants' guarantees lend ---------------------------------


def test_an_edge_tenant_reaches_its_burst_on_its_edge_group_and_its_offline_work_has_its_own_device(kueue) -> None:
    """environments/dev.yaml:28-30 `name: dev-jetson ... per_node: 1} ... nodes: 4` (dev-edge), line 36
    `offline_work: {tenants: [edge-dev], priority_classes: [batch-low], devices: 1}`; line 69
    `nvidia.com/gpu: {guaranteed: 2, burst: 3}` (edge-dev): 3 in one job and one more waits; the offline
    queue's device is still there for batch-low."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-edge")))
    burst = tenants.submit("edge-dev", "serve", {"nvidia.com/gpu": 3}, "inference-critical")
    assert flavors(tenants.admitted("edge-dev", burst)) == {"nvidia.com/gpu": "dev-jetson"}
    tenants.one_more_waits("edge-dev", "inference-critical")
    offline = tenants.submit("edge-dev", "reindex", {"nvidia.com/gpu": 1}, "batch-low", queue="dev-jetson-offline")
    assert flavors(tenants.admitted("edge-dev", offline)) == {"nvidia.com/gpu": "dev-jetson"}


# --- spot pools: only preemptible work, and a critical class never there --------------------------------

SPOT = kube.SPOT_TAINT


def tolerated(tolerations: list[dict[str, Any]] | None, taint: dict[str, str]) -> bool:
    """Whether the scheduler would place a pod with these tolerations on a node with `taint` (Kubernetes'
    ToleratesTaint: an empty key with Exists tolerates every taint, an empty effect every effect)."""
    return any((not t.get("key") and t.get("operator") == "Exists"
                or t.get("key") == taint["key"] and (t.get("operator") == "Exists" or t.get("value") == taint["value"]))
               and t.get("effect") in (None, "", taint["effect"])
               for t in tolerations or [])


def test_spot_capacity_takes_preemptible_work_only(kueue) -> None:
    """environments/dev.yaml:18-22 `name: dev-spot ... per_node: 4} ... nodes: 2 ... spot: {price: 0.5}`;
    line 95 `preemptible: true` (batch-low), training-standard (line 94 `{name: training-standard, value:
    5000, workload: training}`) not; lines 76-78 `pools: [dev-a100, dev-spot] ... nvidia.com/gpu:
    {guaranteed: 0, burst: 16}` (data-prep); line 53 `nvidia.com/gpu: {guaranteed: 16, burst: 32}`
    (platform-dev bursting to 32 on dev-a100, lines 9-13 `name: dev-a100 ... nodes: 2`). data-prep's
    training-standard job lands on dev-a100 and could not be scheduled on a spot node; with dev-a100 full,
    its batch-low job lands on dev-spot, its only room, while its training-standard job waits with
    Kueue's reason and may not tolerate the spot taint at all."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    elsewhere = tenants.submit("data-prep", "train", {"nvidia.com/gpu": 1}, "training-standard")
    assert flavors(tenants.admitted("data-prep", elsewhere)) == {"nvidia.com/gpu": "dev-a100"}
    pod = tenants.started("data-prep", "train")
    assert pod["node_selector"] == {"fleetops.io/pool": "dev-a100"} and not tolerated(pod["tolerations"], SPOT), pod
    fill = tenants.submit("platform-dev", "burst", {"nvidia.com/gpu": 31}, "training-standard")
    assert flavors(tenants.admitted("platform-dev", fill)) == {"nvidia.com/gpu": "dev-a100"}  # dev-a100 is full

    spot = tenants.submit("data-prep", "batch", {"nvidia.com/gpu": 3}, "batch-low", "data-prep-non-preempting-queue",
                          tolerations=[{**SPOT, "operator": "Equal"}])
    assert flavors(tenants.admitted("data-prep", spot)) == {"nvidia.com/gpu": "dev-spot"}
    pod = tenants.started("data-prep", "batch")
    assert pod["node_selector"] == {"fleetops.io/pool": "dev-spot"} and tolerated(pod["tolerations"], SPOT), pod

    critical = tenants.submit("data-prep", "train-more", {"nvidia.com/gpu": 1}, "training-standard")
    waiting = condition(tenants.decided("data-prep", critical), "QuotaReserved")
    assert waiting["status"] == "False" and "untolerated taint" in waiting["message"] and "dev-spot" in waiting["message"], waiting
    for toleration in ({**SPOT, "operator": "Equal"}, {"operator": "Exists"}):
        refused = tenants.refusal("data-prep", "sneak", {"nvidia.com/gpu": 1}, "training-standard", "data-prep-queue", [toleration])
        assert refused and "priority class training-standard is not preemptible" in refused, refused


def variant(tmp_path: Path, env: str, edits: dict[str, str]) -> Path:
    """A bundled environment with each text of `edits` replaced, written to tmp_path/environments/."""
    folder = tmp_path / "environments"
    folder.mkdir()
    text = (ROOT / "environments" / f"{env}.yaml").read_text()
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    (folder / f"{env}.yaml").write_text(text)
    return folder / f"{env}.yaml"


def test_spot_capacity_takes_the_classes_a_tenant_accepts_preemption_for_and_not_another_tenants(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml with tenant data-prep (lines 72-77 `name: data-prep ... pools: [dev-a100, dev-spot]`)
    accepting preemption for its training-standard (added: `preemptible_classes: [training-standard]`), and
    ml-sandbox (lines 55-58 `name: ml-sandbox ... priority_classes: [training-standard, batch-low]`) naming
    dev-spot too, accepting nothing: training-standard is not preemptible (line 94 `name: training-standard, value: 5000`).
    With dev-a100 full, data-prep's training-standard job tolerating the spot taint lands on dev-spot;
    ml-sandbox's job of the same class may not tolerate it (the API server refuses it)."""
    path = variant(tmp_path, "dev", {
        "    pools: [dev-a100, dev-spot]   # a spot pool is open only to tenants that name it\n":
            "    pools: [dev-a100, dev-spot]   # a spot pool is open only to tenants that name it\n    preemptible_classes: [training-standard]\n",
        "    priority_classes: [training-standard, batch-low]\n    quota:\n      nvidia.com/gpu: {guaranteed: 8, burst: 32}":
            "    priority_classes: [training-standard, batch-low]\n    pools: [dev-a100, dev-spot]\n    quota:\n      nvidia.com/gpu: {guaranteed: 8, burst: 32}",
    })
    tenants = Tenants(kueue(render.render(path, revision="r1").clusters["dev-center"]))
    fill = tenants.submit("platform-dev", "burst", {"nvidia.com/gpu": 32}, "training-standard")
    assert flavors(tenants.admitted("platform-dev", fill)) == {"nvidia.com/gpu": "dev-a100"}  # dev-a100 is full

    # data-prep may borrow 3 of dev-spot (its burst of 16 spread over its pools by capacity: 13 + 3).
    accepted = tenants.submit("data-prep", "train", {"nvidia.com/gpu": 3}, "training-standard", tolerations=[{**SPOT, "operator": "Equal"}])
    assert flavors(tenants.admitted("data-prep", accepted)) == {"nvidia.com/gpu": "dev-spot"}
    pod = tenants.started("data-prep", "train")
    assert pod["node_selector"] == {"fleetops.io/pool": "dev-spot"} and tolerated(pod["tolerations"], SPOT), pod

    refused = tenants.refusal("ml-sandbox", "train", {"nvidia.com/gpu": 4}, "training-standard", "ml-sandbox-queue", [{**SPOT, "operator": "Equal"}])
    assert refused and "priority class training-standard is not preemptible: only work of batch-low may tolerate the taint" in refused, refused
    # ml-sandbox's preemptible class may go there as before.
    assert tenants.refusal("ml-sandbox", "batch", {"nvidia.com/gpu": 4}, "batch-low", "ml-sandbox-non-preempting-queue", [{**SPOT, "operator": "Equal"}]) is None


# --- where a guarantee sits: on a pool its jobs can use -------------------------------------------------


def test_a_guarantee_sits_on_an_untainted_pool_every_job_of_the_tenant_can_use(kueue) -> None:
    """environments/staging.yaml:9-12 `name: stg-h100 ... taints: [{key: dedicated, value: training, effect:
    NoSchedule}]` is stg-center's first pool; tenant research (lines 61-66 `name: research ... priority_classes:
    [batch-low] ... nvidia.com/gpu: {guaranteed: 4, burst: 16}`) names no pools, so it may use every one. Its
    guarantee sat on stg-h100, where only jobs tolerating the taint can use it. Now it sits on a pool without
    taints, so a batch job of the whole guarantee, tolerating nothing, is admitted there (through its
    non-preempting queue, which holds no quota of its own and uses its tenant's guarantee)."""
    env = spec.load_environment(ROOT / "environments" / "staging.yaml")
    cluster = spec.cluster_by_name(env, "stg-center")
    [(pool, units)] = spec.guarantee_placement(env, cluster).held[("research", "nvidia.com/gpu")].items()
    group = next(g for g in cluster.pools if g.name == pool)
    assert units == 4 and not spec.restricting_taints(group), (pool, group.taints)
    research = next(t for t in env.tenants if t.name == "research")
    tenants = Tenants(kueue(cluster_objects("staging", "stg-center")))
    job = tenants.submit("research", "batch", {"nvidia.com/gpu": 4}, "batch-low", kueue_jobs.queue_for(research, env, "batch-low"))
    assert flavors(tenants.admitted("research", job)) == {"nvidia.com/gpu": pool}


# --- what plan and validate say Kueue will grant (fleetops/grants.py), against Kueue itself ------------

TRAINING = [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]


def test_the_reachable_burst_fleetops_computes_is_what_kueue_admits_and_no_more(kueue, tmp_path: Path) -> None:
    """environments/prod.yaml with line 204 `lend_fraction: 1.0` made 0.5 (as it was before validate refused
    it): on center-sh, a100-train (lines 38-40 `name: a100-train ... per_node: 8} ... nodes: 8`) holds
    llm-pretrain's guarantee of 48 (line 126 `nvidia.com/gpu: {guaranteed: 48, burst: 64}`) and research's
    8 (line 157 `nvidia.com/gpu: {guaranteed: 8, burst: 48}`), each keeping half of it from lending.
    grants computes that llm-pretrain can hold 60 of its declared burst of 64: Kueue admits 60 and leaves
    one more GPU pending."""
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "prod.yaml").write_text((ROOT / "environments" / "prod.yaml").read_text().replace("lend_fraction: 1.0", "lend_fraction: 0.5"))
    objects = render.render(folder / "prod.yaml", revision="r1").clusters["center-sh"]
    granted = grants.facts({"center-sh": objects})["center-sh"]["llm-pretrain"]["nvidia.com/gpu"]
    assert granted["reachable"] == 60 and granted["guaranteed"] == 48  # below the declared burst of 64
    tenants = Tenants(kueue(objects))
    burst = tenants.submit("llm-pretrain", "burst", {"nvidia.com/gpu": granted["reachable"]}, "training-high", tolerations=TRAINING)
    assert flavors(tenants.admitted("llm-pretrain", burst)) == {"nvidia.com/gpu": "a100-train"}
    tenants.one_more_waits("llm-pretrain", "training-high", tolerations=TRAINING)


BURSTS = [("dev", "dev-center", "platform-dev"), ("prod", "center-bj", "research"), ("staging", "stg-center", "vision"),
          ("staging", "stg-center", "speech"), ("staging", "stg-center", "research"), ("staging", "stg-edge", "factory-vision")]


@pytest.mark.parametrize("env, cluster, tenant", BURSTS, ids=["-".join(b) for b in BURSTS])
def test_on_an_idle_cluster_a_tenant_reaches_its_declared_burst_one_job_per_pool_and_one_unit_more_waits(
        kueue, env: str, cluster: str, tenant: str) -> None:
    """What grants reads from the rendered queues as the most the tenant may hold on each pool (its
    guarantee there and its share of what it may borrow) adds up to the declared burst; one job of each
    pool's share, tolerating that pool's taints, is admitted there, the larger first (it fits only its
    own pool); then one unit more of each resource waits: the tenant holds its burst, no single job more
    than one pool's share.
    environments/dev.yaml:53 `nvidia.com/gpu: {guaranteed: 16, burst: 32}` and line 54
    `huawei.com/Ascend910: {guaranteed: 4, burst: 8}` (platform-dev) on an idle dev-a100 (32 units, lines
    9-13 `name: dev-a100 ... nodes: 2 ... replicas: 4}`) and dev-ascend (8, lines 14-16 `name: dev-ascend
    ... per_node: 8} ... nodes: 1`).
    environments/prod.yaml:155 `pools: [h100-mig, a100-infer, a100-train]` and line 157
    `nvidia.com/gpu: {guaranteed: 8, burst: 48}` (research, on center-bj: h100-mig and a100-infer).
    environments/staging.yaml:51 `guaranteed: 16, burst: 32` and line 52 `huawei.com/Ascend910:
    {guaranteed: 4, burst: 8}` (vision, on every pool of stg-center; stg-h100 tainted, line 12 `taints: [{key: dedicated`); line 60
    `nvidia.com/gpu: {guaranteed: 8, burst: 16}` (speech, on its two pools, line 58 `pools: [stg-a100-infer, stg-a100-mig]`); line 66
    `nvidia.com/gpu: {guaranteed: 4, burst: 16}` (research, whose only class, line 64 `priority_classes:
    [batch-low]`, goes through its non-preempting queue); on stg-edge line 73 `nvidia.com/gpu:
    {guaranteed: 4, burst: 6}` (factory-vision) on stg-jetson's 6 devices (line 37 `nodes: 6`)."""
    stage = Stage.of(env, cluster)
    declared = stage.tenant(tenant)
    granted = grants.facts({cluster: stage.objects})[cluster][tenant]
    assert {r: g["reachable"] for r, g in granted.items()} == {r: q.burst for r, q in declared.quota.items()}
    tenants = Tenants(kueue(stage.objects))
    for resource, grant in sorted(granted.items()):
        shares = dict(pool_shares(grant))
        landed = {}
        for flavor, share in shares.items():
            work = stage.work(declared, flavor)
            uid = tenants.submit(tenant, f"burst-{len(landed)}-{quantity_name(resource)}", {resource: share},
                                 work.priority, work.queue, work.tolerations)
            landed[flavor] = flavors(tenants.admitted(tenant, uid))[resource]
        assert landed == {flavor: flavor for flavor in shares}
        work = stage.work(declared, *shares)
        tenants.one_more_waits(tenant, work.priority, work.tolerations, resource, work.queue, f"beyond-{quantity_name(resource)}")


# --- defect 4: a guarantee split over pools could not be used by one job --------------------------------


def test_a_guarantee_held_by_one_pool_admits_a_job_of_all_of_it_without_borrowing(kueue) -> None:
    """environments/prod.yaml:151-157 `name: research ... pools: [h100-mig, a100-infer, a100-train] ...
    nvidia.com/gpu: {guaranteed: 8, burst: 48}` (on center-bj): held whole by a100-infer (line 23 `name:
    a100-infer`: 128 units, 80 left after vision's share, line 114 `a100-infer: 48}`), the pool with the
    least room that holds it (h100-mig, line 16 `name: h100-mig`, keeps 104 after speech's 120, line 136
    `nvidia.com/gpu: {guaranteed: 120, burst: 200}`), not split 5 + 3 by capacity, so a job of 8 is admitted without borrowing (and so
    cannot be reclaimed)."""
    tenants = Tenants(kueue(cluster_objects("prod", "center-bj")))
    job = tenants.submit("research", "train", {"nvidia.com/gpu": 8}, "training-standard")
    assert flavors(tenants.admitted("research", job)) == {"nvidia.com/gpu": "a100-infer"}
    assert tenants.usage("research", 8) == {"a100-infer": {"nvidia.com/gpu": {"total": "8", "borrowed": "0"}}}
