"""Time to answer `fleetops why`: one job, and a tenant with 1,000 pending jobs, on the real Kueue.

    .venv/bin/python benchmarks/why_bench.py [--jobs 1000] [--runs 5] [--keep DIR]

A fresh kube-apiserver with the real Kueue (`make tools`), started as the test suite starts it
(tests/servers.py `kueue_cluster`), holding environments/dev.yaml's dev-center as fleetops renders it.
ml-sandbox fills its burst (one job of 32 GPUs on dev-a100), then submits `--jobs` jobs of one GPU that
stay pending (its burst is in use); four pool nodes are registered. Once Kueue has a Workload for every
job, each figure is the median of `--runs`:

- `fleetops why --job` and `fleetops why --tenant` as a user runs them: the console script in a
  process of its own, its CPU seconds from start to exit (its start-up, the environment file read, one
  LIST per kind from the API server, every answer, the JSON printed);
- the same two answers in process (`why.live.read` + `why.answer.explain_all`), CPU seconds of this
  process: what the command adds to its start-up and what the fleet API's route costs per request.

CPU, not wall time, is the goal: on this shared machine the wall time measures the neighbours (it is
printed beside, with the load average).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.goals import Goal, report  # noqa: E402
from fleetops import cluster as cluster_mod, render, spec  # noqa: E402
from fleetops.why import answer, live  # noqa: E402
from tests import servers  # noqa: E402
from tests.command import fleetops_command  # noqa: E402
from tests.kueue_jobs import suspended_job  # noqa: E402

ENVIRONMENT = ROOT / "environments" / "dev.yaml"
CLUSTER, TENANT, CONTEXT = "dev-center", "ml-sandbox", "dev"
# CPU seconds of fleetops (the command's process, or this one in process), not wall time: on this shared machine
# the wall time mostly measures the neighbours (benchmarks/README.md, "What pays"); wall is printed beside.
GOALS = {"why --job, command CPU": 2.5, "why --tenant, 1,000 pending, command CPU": 4.0,
         "one job, in process CPU": 0.5, "1,000 pending jobs, in process CPU": 1.5}


def submit(server: servers.ApiServer, kueue: servers.KueueServer, count: int) -> None:
    """The tenant's burst filled by one job, admitted before the others are submitted (else Kueue admits 32 of them
    first and the filler waits), then `count` jobs of one GPU that wait for it."""
    from kubernetes import client

    jobs = client.BatchV1Api(server.client())
    jobs.create_namespaced_job(TENANT, suspended_job(TENANT, "fill", f"{TENANT}-queue", {"nvidia.com/gpu": 32}, "training-standard"))
    servers.wait_until(lambda: jobs.read_namespaced_job("fill", TENANT).spec.suspend is False, "the filler admitted", kueue.process, timeout=120)

    def create(i: int) -> None:
        jobs.create_namespaced_job(TENANT, suspended_job(TENANT, f"wait-{i:05d}", f"{TENANT}-queue", {"nvidia.com/gpu": 1}, "training-standard"),
                                   _preload_content=False)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(count)))


def workloads_decided(server: servers.ApiServer, count: int) -> bool:
    from kubernetes import client

    items = client.CustomObjectsApi(server.client()).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads")["items"]
    decided = [w for w in items if any(c["type"] == "QuotaReserved" for c in (w.get("status") or {}).get("conditions", []))]
    return len(decided) >= count + 1


def command(kubeconfig: Path, *selector: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `fleetops why` run as a user runs it."""
    cpu, began = _children_cpu(), time.perf_counter()
    done = subprocess.run([*fleetops_command(), "why", "--env", "dev", "--cluster", CLUSTER, *selector, "--kubeconfig", str(kubeconfig),
                           "--output", "json"], cwd=ROOT, capture_output=True, text=True, check=False)
    took = (_children_cpu() - cpu, time.perf_counter() - began)
    if done.returncode not in (0, 1):
        raise SystemExit(f"why_bench: fleetops why failed: {done.stderr.strip()}")
    json.loads(done.stdout)
    return took


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def in_process(document: spec.Document, kubeconfig: Path, job: str | None) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, answers) of one read and its answers in this process."""
    found = spec.cluster_by_name(document.env, CLUSTER)
    cpu, began = time.process_time(), time.perf_counter()
    api = cluster_mod.connect(CLUSTER, str(kubeconfig), CONTEXT)
    read = live.read(api, document.env, found, TENANT)
    jobs = [j for j in read.jobs if j.name == job] if job else [j for j in read.jobs if not j.holds]
    answers = answer.explain_all(document, found, read, jobs)
    return time.process_time() - cpu, time.perf_counter() - began, len(answers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the servers' folders here")
    args = parser.parse_args()
    document = spec.read_environment(ENVIRONMENT, "environments/dev.yaml")
    manifests = render.render(ENVIRONMENT, revision="bench").clusters[CLUSTER]
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in GOALS}
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="why-bench-")) as tmp, \
            servers.etcd_server(Path(tmp) / "etcd") as etcd:
        server = servers.ApiServer(CLUSTER, Path(tmp) / "kube", etcd)
        with contextlib.ExitStack() as stack:
            stack.callback(server.stop)
            server.start()
            kueue = servers.kueue_cluster(server, Path(tmp) / "kueue", manifests)
            stack.callback(kueue.stop)
            kubelets = stack.enter_context(servers.Kubelets(server))
            for i in range(2):
                kubelets.register(f"dev-a100-{i}", {"nvidia.com/gpu": "16", "cpu": "64", "memory": "512Gi", "pods": "110"})
                kubelets.register(f"dev-spot-{i}", {"nvidia.com/gpu": "4", "cpu": "64", "memory": "512Gi", "pods": "110"})
            began = time.perf_counter()
            submit(server, kueue, args.jobs)
            servers.wait_until(lambda: workloads_decided(server, args.jobs), f"Kueue's decision on {args.jobs} jobs", kueue.process, timeout=600)
            print(f"{args.jobs} pending jobs of {TENANT} and its 32-GPU job in {time.perf_counter() - began:.0f} s", flush=True)
            kubeconfig = server.kubeconfig(Path(tmp) / "kubeconfig", context=CONTEXT)
            counted = 0
            for _ in range(args.runs):
                figures["why --job, command CPU"].append(command(kubeconfig, "--job", f"{TENANT}/wait-00000"))
                figures["why --tenant, 1,000 pending, command CPU"].append(command(kubeconfig, "--tenant", TENANT))
                figures["one job, in process CPU"].append(in_process(document, kubeconfig, "wait-00000")[:2])
                *took, counted = in_process(document, kubeconfig, None)
                figures["1,000 pending jobs, in process CPU"].append((took[0], took[1]))
            print(f"answers for the tenant: {counted}")
            if counted != args.jobs:
                raise SystemExit(f"why_bench: {counted} answers for {args.jobs} pending jobs")
    for name, values in figures.items():
        print(f"  {name}: wall median {statistics.median(w for _, w in values):.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return report(f"fleetops why on the real Kueue, {args.jobs} pending jobs, CPU seconds, medians of {args.runs}",
                  [Goal(name, statistics.median(c for c, _ in values), GOALS[name], " s") for name, values in figures.items()])


if __name__ == "__main__":
    sys.exit(main())
