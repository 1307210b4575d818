"""`fleetops why` and `fleetops standing` on the real Kueue and kube-apiserver.

Each scenario renders a bundled environment (or a variant), applies one cluster's objects to a real
kube-apiserver with the real Kueue, makes the cause happen for real (jobs submitted into the tenants'
queues as a user submits them, nodes and their device capacity, leases, cordons and taints written
through the API as kubelets, device plugins and the reconciler write them), then runs the `fleetops`
command as a user does and checks the cause it names and the line of the environment file it points at.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes import client

from fleetops import envelope, kube
from tests import servers
from tests.command import run
from tests.helpers import ROOT
from tests.render.test_real_kueue import Tenants, cluster_objects, condition, flavors, variant

pytestmark = pytest.mark.real

DEV = ROOT / "environments" / "dev.yaml"
SCHEMA = jsonschema.Draft202012Validator(envelope.json_schema())
SPOT = [{**kube.SPOT_TAINT, "operator": "Equal"}]


def line_of(path: Path, text: str, nth: int = 1) -> int:
    """The line of the environment file holding `text` (its nth occurrence): where the answer must point."""
    found = [i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line]
    assert len(found) >= nth, f"{text!r} not in {path}"
    return found[nth - 1]


class Asker:
    """`fleetops why` and `fleetops standing` against one Kueue cluster, as a user runs them."""

    def __init__(self, kueue: servers.KueueServer, tmp_path: Path, env: str, cluster: str, context: str,
                 environments: Path = Path("environments")):  # as a user in the repository names it (cwd ROOT)
        self.kubeconfig = kueue.api.kubeconfig(tmp_path / f"{cluster}.kubeconfig", context=context)
        self.env, self.cluster, self.environments = env, cluster, environments

    def why(self, *selector: str, code: int | None = 0) -> dict[str, Any]:
        done = run("why", "--env", self.env, "--cluster", self.cluster, *selector, "--environments", self.environments,
                   "--kubeconfig", self.kubeconfig, "--output", "json")
        assert code is None or done.returncode == code, (done.returncode, done.stdout, done.stderr)
        document = json.loads(done.stdout)
        SCHEMA.validate(document)
        return document

    def table(self, job: str) -> str:
        done = run("why", "--env", self.env, "--cluster", self.cluster, "--job", job, "--environments", self.environments,
                   "--kubeconfig", self.kubeconfig)
        assert done.returncode in (0, 1), done.stderr
        return done.stdout

    def answer(self, job: str, code: int | None = 0) -> dict[str, Any]:
        (one,) = self.why("--job", job, code=code)["answers"]
        return one

    def standing(self, tenant: str, *more: str) -> list[dict[str, Any]]:
        done = run("standing", "--env", self.env, "--tenant", tenant, "--cluster", self.cluster, "--environments", self.environments,
                   "--kubeconfig", self.kubeconfig, "--output", "json", *more)
        assert done.returncode == 0, (done.stdout, done.stderr)
        document = json.loads(done.stdout)
        SCHEMA.validate(document)
        return document["standing"]


def blocker(answer: dict[str, Any], cause: str) -> dict[str, Any]:
    found = [b for b in answer["blockers"] if b["cause"] == cause]
    assert found, f"no {cause} in {[(b['cause'], b['message']) for b in answer['blockers']]}"
    return found[0]


def node_finding(answer: dict[str, Any], cause: str) -> dict[str, Any]:
    found = [b for b in answer["nodes"] if b["cause"] == cause]
    assert found, f"no {cause} in {[(b['cause'], b['message']) for b in answer['nodes']]}"
    return found[0]


def waiting(tenants: Tenants, tenant: str, uid: str) -> str:
    """Kueue's reason for leaving the job pending, once it has decided."""
    reserved = condition(tenants.decided(tenant, uid), "QuotaReserved")
    assert reserved is not None and reserved["status"] == "False", reserved
    return reserved["message"]


GPU = "nvidia.com/gpu"


def fill_then_wait(tenants: Tenants, fill: tuple[str, str, int], ask: tuple[str, str, int], cls: str = "training-standard",
                   ask_class: str | None = None, queue: str | None = None) -> tuple[str, str, str]:
    """The scenario most causes share: `fill` = (tenant, job, GPUs) admitted and counted in its queue's usage, then
    `ask` submitted (of `ask_class`, default `cls`, into `queue`, default the tenant's) and left pending by Kueue.
    The uids of both jobs and Kueue's reason for leaving the second pending."""
    holder, name, units = fill
    held = tenants.submit(holder, name, {GPU: units}, cls)
    tenants.admitted(holder, held)
    tenants.usage(holder, units)
    tenant, name, units = ask
    asked = tenants.submit(tenant, name, {GPU: units}, ask_class or cls, queue)
    return held, asked, waiting(tenants, tenant, asked)


# --- the quota: a pool full of others' work, the tenant's own burst, a class that never preempts ----------


def test_a_job_waiting_for_a_full_pool_names_the_pool_its_holders_and_how_much_fits_now(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:9-12 `name: dev-a100 ... nodes: 2 ... replicas: 4}` holds 32 units; platform-dev
    (line 53 `nvidia.com/gpu: {guaranteed: 16, burst: 32}`) holds 20 of them, 4 borrowed. ml-sandbox (line 60
    `{guaranteed: 8, burst: 32}`) asks 16: within its burst, the pool has 12 free. The answer: the pool's size at
    `nodes: 2`, platform-dev holding 20 (16 within its guarantee, 4 borrowed) with its job named, 12 admitted now,
    and the pool grown by a node as the change that would let it in; `standing` says the same of platform-dev. The
    reconciler's last pass on the cluster (its status ConfigMap) is said beside the answer."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    fill, _, reason = fill_then_wait(tenants, ("platform-dev", "fill", 20), ("ml-sandbox", "train", 16))
    assert flavors(tenants.admitted("platform-dev", fill)) == {"nvidia.com/gpu": "dev-a100"}
    assert "insufficient unused quota" in reason

    # The reconciler's record of its last pass in the cluster, as fleetops.reconcile writes it.
    record = {"environment": "dev", "revision": "4f1c2a9", "result": "ok", "message": ""}
    client.CoreV1Api(tenants.kueue.api.client()).create_namespaced_config_map("fleetops-system", {
        "metadata": {"name": kube.STATUS_CONFIGMAP, "labels": {kube.PART_OF: kube.MANAGER}}, "data": record})

    asker = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev")
    assert asker.why("--job", "ml-sandbox/train")["reconciler"] == record
    answer = asker.answer("ml-sandbox/train")
    assert answer["state"] == "pending" and answer["tenant"] == "ml-sandbox" and answer["can_ever"] is True
    pool = blocker(answer, "pool-size")
    assert (pool["line"], pool["path"]) == (line_of(DEV, "nodes: 2"), "clusters[dev-center].pools[dev-a100].nodes"), pool
    assert "12 free" in pool["message"], pool
    (held,) = answer["holders"]
    assert (held["tenant"], held["units"], held["borrowed"], held["within_guarantee"]) == ("platform-dev", 20, 4, 16), held
    assert held["jobs"] == [{"job": "platform-dev/fill", "priority_class": "training-standard", "units": 20}]
    remedies = {r["kind"]: r for r in answer["remedies"]}
    assert "platform-dev/fill" in remedies["wait"]["text"] and "at most 12" in remedies["fewer"]["text"]
    assert remedies["nodes"]["quote"] == {"changes": [{"op": "nodes", "cluster": "dev-center", "pool": "dev-a100", "delta": 1}]}
    table = asker.table("ml-sandbox/train")
    assert table.startswith("reconciler on dev-center: revision 4f1c2a9, last pass ok\n"), table
    assert f"at environments/dev.yaml:{pool['line']}:{pool['column']}: clusters[dev-center].pools[dev-a100].nodes" in table, table
    assert "holding: platform-dev holds 20 nvidia.com/gpu on dev-a100 (16 within its guarantee, 4 borrowed)" in table, table

    (gpu,) = [s for s in asker.standing("platform-dev") if s["resource"] == "nvidia.com/gpu"]
    assert (gpu["guaranteed"], gpu["in_use"], gpu["borrowed"], gpu["pending_jobs"]) == (16, 20, 4, 0), gpu
    (sandbox,) = [s for s in asker.standing("ml-sandbox") if s["resource"] == "nvidia.com/gpu"]
    assert (sandbox["guaranteed"], sandbox["in_use"], sandbox["lent"], sandbox["pending_jobs"], sandbox["pending_units"]) == (8, 0, 0, 1, 16), sandbox
    # Without metering's history the minutes below guarantee are unknown, and said so: never 0.
    assert (sandbox["below_guarantee_minutes"], sandbox["below_guarantee_basis"]) == (None, "unknown (no history: give --prometheus)")
    assert "unknown (no history: give --prometheus)" in run("standing", "--env", "dev", "--tenant", "ml-sandbox", "--cluster", "dev-center",
                                                            "--kubeconfig", asker.kubeconfig).stdout


def test_minutes_below_guarantee_while_others_borrowed_are_counted_from_metering_history(kueue, tmp_path: Path) -> None:
    """Metering's recorded series (fleetops:tenant_devices:physical, physical devices of running pods) in a real
    Prometheus: over the last hour platform-dev ran 5 A100s of dev-a100 (20 units at its time-slicing x4, past its
    guarantee of 16, line 53) for 30 minutes and 4 (16, within it) otherwise; ml-sandbox (guarantee 8, line 60) ran
    nothing. `standing --prometheus --window 1h` says ml-sandbox spent 30 minutes below its guarantee while others
    borrowed, platform-dev none, with the window, series and Prometheus the figure depends on."""
    import time

    from fleetops.usage import DEVICES

    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    base = int(time.time()) // 60 * 60
    labels = 'cluster="dev-center",pool="dev-a100",resource="nvidia.com/gpu",tenant="platform-dev"'
    # a sample a minute from 90 minutes ago to 10 minutes ahead; borrowing in [base-45m, base-15m): inside the hour
    # however many minutes pass before the command asks
    samples = [f"{DEVICES}{{{labels}}} {5 if base - 2700 <= t < base - 900 else 4} {t}" for t in range(base - 5400, base + 660, 60)]
    with servers.prometheus_server(tmp_path / "prometheus", "\n".join(samples) + "\n# EOF\n") as prometheus:
        asker = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev")
        history = ("--prometheus", prometheus.url, "--window", "1h")
        rows = {t: next(s for s in asker.standing(t, *history) if s["resource"] == "nvidia.com/gpu") for t in ("ml-sandbox", "platform-dev")}
    assert rows["ml-sandbox"]["below_guarantee_minutes"] == 30, rows["ml-sandbox"]
    assert rows["platform-dev"]["below_guarantee_minutes"] == 0, rows["platform-dev"]
    basis = rows["ml-sandbox"]["below_guarantee_basis"]
    assert "last 1 hour" in basis and DEVICES in basis and prometheus.url in basis, basis


def test_a_job_beyond_its_tenants_burst_names_the_burst_line_and_the_tenants_own_work(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:69 `nvidia.com/gpu: {guaranteed: 2, burst: 3}` (edge-dev, on dev-jetson's 4 devices,
    lines 28-30): edge-dev holds 3; one more waits although the group has a device free. The answer points at
    the burst, names edge-dev's own job to wait for and the quota change (+1 burst) as the fleet API's quote."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-edge")))
    fill_then_wait(tenants, ("edge-dev", "serve", 3), ("edge-dev", "more", 1), "inference-critical")

    answer = Asker(tenants.kueue, tmp_path, "dev", "dev-edge", "dev-edge").answer("edge-dev/more")
    burst = blocker(answer, "tenant-quota")
    assert (burst["line"], burst["path"]) == (line_of(DEV, "nvidia.com/gpu: {guaranteed: 2, burst: 3}"),
                                              'tenants[edge-dev].quota["nvidia.com/gpu"].burst'), burst
    assert "holds 3 of its burst of 3" in burst["message"]
    assert not [b for b in answer["blockers"] if b["cause"] == "pool-size"]
    remedies = {r["kind"]: r for r in answer["remedies"]}
    assert "edge-dev/serve" in remedies["wait"]["text"]
    assert remedies["quota-change"]["quote"] == {"changes": [{"op": "quota", "tenant": "edge-dev", "resource": "nvidia.com/gpu", "burst_delta": 1}]}


def test_a_class_that_never_preempts_waits_for_borrowers_within_its_tenants_guarantee(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:95 `{name: batch-low, ... preemption: Never, ...}`: platform-dev borrows dev-a100 whole
    (32, line 53 `burst: 32`), ml-sandbox's guarantee of 8 included (line 60). ml-sandbox's batch-low job of 8, within
    its guarantee, goes through its non-preempting queue and waits: the answer names the class's line, not a quota,
    and `standing` says ml-sandbox lends 8. Then its training-standard job of 8 reclaims the guarantee: Kueue evicts
    platform-dev's job, whose answer says it was evicted by a reclamation and who holds the pool now."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    fill, _, _ = fill_then_wait(tenants, ("platform-dev", "fill", 32), ("ml-sandbox", "batch", 8), ask_class="batch-low",
                                queue="ml-sandbox-non-preempting-queue")

    asker = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev")
    answer = asker.answer("ml-sandbox/batch")
    never = blocker(answer, "class-never-preempts")
    assert (never["line"], never["path"]) == (line_of(DEV, "name: batch-low"), "priority_classes[batch-low].preemption"), never
    assert "within its guarantee" in never["message"] and "platform-dev borrows 16" in never["message"], never
    (held,) = answer["holders"]
    assert (held["tenant"], held["units"], held["borrowed"]) == ("platform-dev", 32, 16)
    (sandbox,) = [s for s in asker.standing("ml-sandbox") if s["resource"] == "nvidia.com/gpu"]
    assert (sandbox["in_use"], sandbox["lent"], sandbox["pending_units"]) == (0, 8, 8), sandbox

    # Its class that preempts takes the guarantee back: Kueue evicts platform-dev's borrowing job, and says so.
    train = tenants.submit("ml-sandbox", "train", {"nvidia.com/gpu": 8}, "training-standard")
    tenants.admitted("ml-sandbox", train)
    tenants.evicted("platform-dev", fill)
    evicted = asker.answer("platform-dev/fill")
    assert evicted["state"] == "evicted" and "reclamation" in evicted["preemption"], evicted
    assert any(h["tenant"] == "ml-sandbox" and h["within_guarantee"] >= 8 for h in evicted["holders"]), evicted["holders"]


# --- what can never be admitted as asked --------------------------------------------------------------


def test_jobs_that_can_never_be_admitted_as_asked_point_at_the_line_to_change_and_exit_1(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml, dev-center: ml-sandbox's 33 GPUs in one pool, beyond the 32 it may ever hold there
    (line 60 `burst: 32`); its Ascend job (it has no quota for huawei.com/Ascend910: line 59 `quota:`); data-prep's
    Ascend job (no pool it may use has the device: line 76 `pools: [dev-a100, dev-spot]`); a MIG profile no pool of
    the cluster offers (line 8 `pools:`). `--tenant` answers every pending job of the tenant; exit 1."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    jobs = [("ml-sandbox", "huge", {"nvidia.com/gpu": 33}), ("ml-sandbox", "npu", {"huawei.com/Ascend910": 1}),
            ("ml-sandbox", "slice", {"nvidia.com/mig-1g.5gb": 1}), ("data-prep", "npu", {"huawei.com/Ascend910": 1})]
    for tenant, name, devices in jobs:
        waiting(tenants, tenant, tenants.submit(tenant, name, devices, "training-standard"))
    asker = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev")

    answers = {a["job"]: a for a in asker.why("--tenant", "ml-sandbox", code=1)["answers"]}
    assert set(answers) == {"ml-sandbox/huge", "ml-sandbox/npu", "ml-sandbox/slice"}
    assert not any(a["can_ever"] for a in answers.values())
    huge = blocker(answers["ml-sandbox/huge"], "larger-than-burst")
    assert (huge["line"], huge["path"]) == (line_of(DEV, "nvidia.com/gpu: {guaranteed: 8, burst: 32}"), 'tenants[ml-sandbox].quota["nvidia.com/gpu"].burst')
    assert "the most ml-sandbox may hold of one on dev-center is 32 (dev-a100)" in huge["message"]
    assert any(r["kind"] == "fewer" and "at most 32" in r["text"] for r in answers["ml-sandbox/huge"]["remedies"])
    npu = blocker(answers["ml-sandbox/npu"], "no-quota")
    assert (npu["line"], npu["path"]) == (line_of(DEV, "quota:", nth=2), "tenants[ml-sandbox].quota")
    mig = blocker(answers["ml-sandbox/slice"], "no-pool-offers-mig-profile")
    assert (mig["line"], mig["path"]) == (line_of(DEV, "pools:"), "clusters[dev-center].pools")

    outside = blocker(asker.answer("data-prep/npu", code=1), "no-pool-has-device")
    assert (outside["line"], outside["path"]) == (line_of(DEV, "pools: [dev-a100, dev-spot]"), "tenants[data-prep].pools")
    assert "dev-ascend" in outside["message"]


def test_a_dedicated_pools_taint_the_job_does_not_tolerate_is_named_at_the_taint(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml with dev-ascend (lines 14-17) dedicated to inference: `taints: [{key: dedicated, value:
    inference, effect: NoSchedule}]`. platform-dev's Ascend job (line 54 `huawei.com/Ascend910: {guaranteed: 4,
    burst: 8}`) tolerating nothing waits with Kueue's "untolerated taint": the answer points at the taints line and
    says what to tolerate; the same job tolerating it is admitted."""
    path = variant(tmp_path, "dev", {"        nodes: 1\n        match: {name_pattern: \"dev-ascend-*\"}":
                                     "        nodes: 1\n        taints: [{key: dedicated, value: inference, effect: NoSchedule}]\n"
                                     "        match: {name_pattern: \"dev-ascend-*\"}"})
    from fleetops import render

    tenants = Tenants(kueue(render.render(path, revision="r1").clusters["dev-center"]))
    plain = tenants.submit("platform-dev", "npu", {"huawei.com/Ascend910": 4}, "training-standard")
    assert "untolerated taint" in waiting(tenants, "platform-dev", plain)

    answer = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev", path.parent).answer("platform-dev/npu", code=1)
    taint = blocker(answer, "taint-not-tolerated")
    assert (taint["line"], taint["path"]) == (line_of(path, "taints: [{key: dedicated"), "clusters[dev-center].pools[dev-ascend].taints")
    assert any(r["kind"] == "tolerate" and "dedicated=inference:NoSchedule" in r["text"] for r in answer["remedies"])
    tolerant = tenants.submit("platform-dev", "npu-ok", {"huawei.com/Ascend910": 4}, "training-standard",
                              tolerations=[{"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}])
    assert flavors(tenants.admitted("platform-dev", tolerant)) == {"huawei.com/Ascend910": "dev-ascend"}


def test_a_spot_pool_with_room_is_named_when_the_jobs_class_may_not_go_there(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:18-22 `name: dev-spot ... spot: {price: 0.5}` is open to data-prep (line 76); dev-a100 is
    full (platform-dev's 32). data-prep's training-standard job waits: dev-spot has the room, but training-standard
    (line 94) is not preemptible, so it may not go there: the answer names the full pool and the class's line."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    fill_then_wait(tenants, ("platform-dev", "fill", 32), ("data-prep", "train", 2))

    answer = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev").answer("data-prep/train")
    spot = blocker(answer, "spot-not-accepted")
    assert (spot["line"], spot["path"]) == (line_of(DEV, "{name: training-standard"), "priority_classes[training-standard]"), spot
    assert "dev-spot" in spot["message"] and "not preemptible" in spot["message"]
    assert blocker(answer, "pool-size")["path"] == "clusters[dev-center].pools[dev-a100].nodes"
    # Its preemptible class may go there: admitted on dev-spot, as the answer implies.
    batch = tenants.submit("data-prep", "batch", {"nvidia.com/gpu": 2}, "batch-low", "data-prep-non-preempting-queue", tolerations=SPOT)
    assert flavors(tenants.admitted("data-prep", batch)) == {"nvidia.com/gpu": "dev-spot"}


# --- node-level causes ---------------------------------------------------------------------------------


def _ago(seconds: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_pool_nodes_advertising_less_than_declared_are_named_at_the_sharing_and_device_lines(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:9-13: dev-a100's 2 nodes of 4 A100 time-sliced x4 (line 12 `sharing: {mode: time-slicing,
    replicas: 4}`) should advertise 16 nvidia.com/gpu each; dev-a100-1 advertises 4 (the sharing config not applied).
    dev-ascend (lines 14-17, line 15 `device: {resource: huawei.com/Ascend910 ... per_node: 8}`) has its node without
    any Ascend advertised (the device plugin not running). Kueue admits by quota; the answers for the admitted jobs
    name why their pods cannot all start, at those lines."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-center")))
    kubelets = servers.Kubelets(tenants.kueue.api)  # registered, never renewed: no clock runs here
    kubelets.register("dev-a100-0", {"nvidia.com/gpu": "16", "cpu": "64", "memory": "512Gi", "pods": "110"})
    kubelets.register("dev-a100-1", {"nvidia.com/gpu": "4", "cpu": "64", "memory": "512Gi", "pods": "110"})
    kubelets.register("dev-ascend-0", {"cpu": "64", "memory": "512Gi", "pods": "110"})
    gpu = tenants.submit("platform-dev", "gpu", {"nvidia.com/gpu": 16}, "training-standard")
    npu = tenants.submit("platform-dev", "npu", {"huawei.com/Ascend910": 4}, "training-standard")
    tenants.admitted("platform-dev", gpu)
    tenants.admitted("platform-dev", npu)
    asker = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev")
    gpu_answer, npu_answer = asker.answer("platform-dev/gpu"), asker.answer("platform-dev/npu")
    assert gpu_answer["state"] == "admitted"
    sharing = blocker(gpu_answer, "nodes-advertise-less")
    assert (sharing["line"], sharing["path"]) == (line_of(DEV, "sharing: {mode: time-slicing, replicas: 4}"),
                                                  "clusters[dev-center].pools[dev-a100].sharing"), sharing
    assert "dev-a100-1 4" in sharing["message"] and "not applied" in sharing["message"]
    plugin = blocker(npu_answer, "nodes-advertise-less")
    assert (plugin["line"], plugin["path"]) == (line_of(DEV, "device: {resource: huawei.com/Ascend910"),
                                                "clusters[dev-center].pools[dev-ascend].device"), plugin
    assert "device plugin" in plugin["message"]


def test_edge_nodes_not_ready_cordoned_quarantined_or_with_a_skewed_clock_are_named_at_the_group(kueue, tmp_path: Path) -> None:
    """environments/dev.yaml:28-45 `name: dev-jetson ... nodes: 4 ... offline_grace_seconds: 120 ... fingerprints:`
    (dev-edge): of its four Jetsons, dev-orin-1 is NotReady, dev-orin-2 cordoned by fleetops (offline past the
    grace), dev-orin-3 quarantined by fleetops, and dev-orin-0's clock runs ten minutes behind the API server's (its
    Lease renewed with its own time). edge-dev's admitted job (line 69) is told each, at the group's lines."""
    tenants = Tenants(kueue(cluster_objects("dev", "dev-edge")))
    core = client.CoreV1Api(tenants.kueue.api.client())
    leases = client.CoordinationV1Api(tenants.kueue.api.client())
    kubelets = servers.Kubelets(tenants.kueue.api)  # registered, never renewed: each Lease keeps the time it is given
    for i in range(4):
        kubelets.register(f"dev-orin-{i}", {"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi", "pods": "110"})
    leases.patch_namespaced_lease("dev-orin-0", servers.NODE_LEASE_NAMESPACE, {"spec": {"renewTime": _ago(600)}})
    core.patch_node_status("dev-orin-1", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastHeartbeatTime": _ago(60), "lastTransitionTime": _ago(60)}]}})
    core.patch_node("dev-orin-2", {"metadata": {"annotations": {kube.CORDON_ANNOTATION: "offline"}}, "spec": {"unschedulable": True}})
    core.patch_node("dev-orin-3", {"spec": {"taints": [dict(kube.QUARANTINE_TAINT)]}})
    job = tenants.submit("edge-dev", "serve", {"nvidia.com/gpu": 2}, "inference-critical")
    tenants.admitted("edge-dev", job)
    answer = Asker(tenants.kueue, tmp_path, "dev", "dev-edge", "dev-edge").answer("edge-dev/serve")
    group = "clusters[dev-edge].edge_groups[dev-jetson]"
    grace = line_of(DEV, "offline_grace_seconds: 120")
    down = blocker(answer, "nodes-not-ready")
    assert (down["line"], down["path"]) == (grace, f"{group}.offline_grace_seconds") and "dev-orin-1" in down["message"], down
    cordoned = blocker(answer, "nodes-cordoned")
    assert (cordoned["line"], cordoned["path"]) == (grace, f"{group}.offline_grace_seconds") and "fleetops cordoned dev-orin-2" in cordoned["message"]
    quarantined = blocker(answer, "nodes-quarantined")
    assert (quarantined["line"], quarantined["path"]) == (line_of(DEV, "fingerprints:"), f"{group}.fingerprints") and "dev-orin-3" in quarantined["message"]
    skew = node_finding(answer, "clock-skew")
    assert (skew["line"], skew["path"]) == (line_of(DEV, "name: dev-jetson"), group), skew
    seconds = int(re.search(r"dev-orin-0 ([-+][0-9]+)s", skew["message"]).group(1))
    assert -620 < seconds < -580, skew  # ten minutes behind, give or take the seconds the test took


# --- the fleet API's own rights: what `serve` answers `why` with -------------------------------------------


def test_the_fleet_apis_service_account_answers_why_and_standing_and_writes_nothing(kueue, tmp_path: Path) -> None:
    """dev.yaml with an `api:` section on dev-center: the ServiceAccount, roles and bindings rendered for the fleet API
    (modules/api.py), applied to the real kube-apiserver; a token of that ServiceAccount (TokenRequest, as its pod
    gets one) answers `why` and `standing` as the admin's does, and is refused every write of what it reads."""
    from kubernetes import dynamic

    from fleetops import render
    from modules.api import NAME
    from tests.reconcile.test_real_kube import service_account_token

    path = variant(tmp_path, "dev", {"\nprices:": "\napi: {cluster: dev-center, allow_from: [10.20.0.0/16]}\n\nprices:"})
    state = render.render(path, revision="r1").clusters["dev-center"]
    tenants = Tenants(kueue(state))
    _, asked, reason = fill_then_wait(tenants, ("platform-dev", "fill", 20), ("ml-sandbox", "train", 16))
    assert "insufficient unused quota" in reason
    servers.Kubelets(tenants.kueue.api).register("dev-a100-0", {"nvidia.com/gpu": "16", "cpu": "64", "memory": "512Gi", "pods": "110"})

    # kueue() applied every object of the cluster: the API's own are among them, as the reconciler applies them
    kinds = {m["kind"] for m in state if m["metadata"]["name"] == NAME}
    assert {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} <= kinds, kinds
    namespace = next(m for m in state if m["kind"] == "ServiceAccount" and m["metadata"]["name"] == NAME)["metadata"]["namespace"]
    server = tenants.kueue.api
    token = service_account_token(server, namespace, NAME)
    as_api = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev", path.parent)
    as_api.kubeconfig = servers.write_kubeconfig(tmp_path / "api.kubeconfig", {"dev": (server, token)})
    admin = Asker(tenants.kueue, tmp_path, "dev", "dev-center", "dev", path.parent)
    answer = as_api.answer("ml-sandbox/train")
    assert answer == admin.answer("ml-sandbox/train")
    assert blocker(answer, "pool-size")["path"] == "clusters[dev-center].pools[dev-a100].nodes"
    assert [h["tenant"] for h in answer["holders"]] == ["platform-dev"]
    assert as_api.standing("platform-dev") == admin.standing("platform-dev")

    dyn = dynamic.DynamicClient(server.client(token=token))
    workload = next(w for w in client.CustomObjectsApi(server.client()).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "ml-sandbox", "workloads")["items"] if w["metadata"]["ownerReferences"][0]["uid"] == asked)
    writes = [
        lambda: dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload").delete(name=workload["metadata"]["name"], namespace="ml-sandbox"),
        lambda: dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue").patch(
            name="ml-sandbox", body={"metadata": {"labels": {"x": "y"}}}, content_type="application/merge-patch+json"),
        lambda: dyn.resources.get(api_version="v1", kind="Node").patch(name="dev-a100-0", body={"spec": {"unschedulable": True}},
                                                                      content_type="application/merge-patch+json"),
        lambda: dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease").delete(name="dev-a100-0", namespace=servers.NODE_LEASE_NAMESPACE),
        lambda: dyn.resources.get(api_version="v1", kind="ConfigMap").get(namespace=namespace),  # reads beyond its one ConfigMap, too
        lambda: dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload").get(name=workload["metadata"]["name"], namespace="ml-sandbox"),
    ]
    for write in writes:
        with pytest.raises(client.exceptions.ApiException) as refused:
            write()
        assert refused.value.status == 403, refused.value
