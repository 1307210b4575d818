"""Drift detection over the whole fleet: `fleetops reconcile --detect-only` against `pulumi refresh --preview-only`.

    .venv/bin/python benchmarks/drift_bench.py [--runs 5] [--environment prod] [--also TREE] [--keep DIR]

The bundled environment is deployed by `pulumi up` of fleetops' own stack (the policy pack on) onto real
kube-apiservers on loopback, one per cluster, reached through one kubeconfig with a context per cluster
(each cluster's `context:` in the environment file: what both the stack's providers and the reconciler
read). Three hand edits follow, in the first cluster (benchmarks/reconcile_real_bench.py): a ResourceQuota's
values, a Namespace relabelled out of the reconciler's selector (`fleetops.io/environment`: found by its
identity, an update, never a create) and a NetworkPolicy deleted. Then, alternating, `--runs` runs of each
command as a user types it, each a subprocess timed whole (interpreter start, imports, Git, every API
call): `pulumi refresh --preview-only` of that stack, `fleetops reconcile --once --detect-only` (its
table) of a Git repository at the same revision (its clone cached, as after a first run), and
`curl .../drift` of a running reconciler (`reconcile --interval`, started before the runs and not timed:
each request is a detect-only pass run for it, at the revision fetched then). All must name the three
edits, in every run: pulumi's preview as two updates and a delete, fleetops's table as two updates and a
create, /drift's JSON (and once, untimed, the one-off's `--output json`) exactly those three actions.
Prints the median and range of each, wall and CPU, and their ratios; `--also TREE` times another tree's
fleetops (the code before a change) alternately in the same deployment. The service runs `--detect-only`
so that its own passes leave the edits in place: /drift runs the same detect pass on a writing service. Not in `make bench`: it needs the real servers
(`.tools/`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.goals import Goal, compile_sources, cpu_seconds, report  # noqa: E402
from benchmarks.reconcile_real_bench import edit_by_hand, start  # noqa: E402
from fleetops import render, spec  # noqa: E402
from tests import pulumi_stack, servers  # noqa: E402
from tests.backends import RealCluster  # noqa: E402
from tests.command import fleetops_command  # noqa: E402
from tests.deploy.test_real_pulumi import fleet_repo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


CPU: dict[str, list[float]] = {}  # CPU seconds of each timed command (and every process it waited for), by the name it is timed under


def timed(argv: list[str], cwd: Path, env: dict[str, str], name: str | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of one command; its CPU seconds (user + system, its children's included) in CPU[name]: on a
    shared machine the wall time measures the neighbours too."""
    began, cpu = time.perf_counter(), cpu_seconds()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - began
    if name is not None:
        CPU.setdefault(name, []).append(cpu_seconds() - cpu)
    return wall, done


def edited(state: render.DesiredState, cluster: str) -> dict[str, str]:
    """The three objects edit_by_hand changes, by kind: their names as both tools print them."""
    first = {kind: next(m for m in state.clusters[cluster] if m["kind"] == kind) for kind in ("ResourceQuota", "Namespace", "NetworkPolicy")}
    return {kind: "/".join(filter(None, (m["metadata"].get("namespace"), m["metadata"]["name"]))) for kind, m in first.items()}


def fleetops_found(stdout: str, cluster: str, names: dict[str, str]) -> str | None:
    """None when the detect-only report names the three edits as they are (two updates, one create); else what differs."""
    document = json.loads(stdout)
    actions = {(a["verb"], a["target"]) for a in document["clusters"][cluster]["actions"]}
    wanted = {("update", f"ResourceQuota {names['ResourceQuota']}"), ("update", f"Namespace {names['Namespace']}"),
              ("create", f"NetworkPolicy {names['NetworkPolicy']}")}
    others = [a for c, r in document["clusters"].items() for a in r["actions"] if c != cluster]
    return None if wanted <= actions and len(actions) == 3 and not others else f"fleetops found {sorted(actions)} (+{len(others)} elsewhere)"


def table_found(stdout: str, cluster: str, names: dict[str, str]) -> str | None:
    """None when the table (what a user reads) has the three edits' rows, two updates and a create, and drift 3."""
    rows = {tuple(cell.strip() for cell in line.split("│")[1:4]) for line in stdout.splitlines() if line.startswith("│ ")}
    wanted = {(cluster, "update", f"ResourceQuota {names['ResourceQuota']}"), (cluster, "update", f"Namespace {names['Namespace']}"),
              (cluster, "create", f"NetworkPolicy {names['NetworkPolicy']}")}
    return None if wanted <= rows and "drift: 3, errors: 0" in stdout else f"the table lacks {sorted(wanted - rows)}:\n{stdout[-3000:]}"


# A step of the preview's final listing: `~  kubernetes:core/v1:Namespace center-bj/_/fleetops-system update [diff: ~metadata]`.
STEP = re.compile(r"^\s*[~+-]\s+kubernetes:[^:]+:(\w+) (\S+) (update|delete|create)\b", re.MULTILINE)


def pulumi_found(stdout: str, cluster: str, names: dict[str, str]) -> str | None:
    """None when the refresh preview's steps are the three edits (two updates, the deleted one a delete from the state)."""
    steps = set(STEP.findall(stdout))

    def resource(kind: str) -> str:
        namespace, _, name = names[kind].rpartition("/")
        return f"{cluster}/{namespace or '_'}/{name}"

    wanted = {("ResourceQuota", resource("ResourceQuota"), "update"), ("Namespace", resource("Namespace"), "update"),
              ("NetworkPolicy", resource("NetworkPolicy"), "delete")}
    return None if steps == wanted else f"pulumi refresh's steps: {sorted(steps)}; expected {sorted(wanted)}"


def summary(seconds: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3), "max_s": round(max(seconds), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--environment", default="prod")
    parser.add_argument("--keep", type=Path, help="work in DIR and leave it (servers' logs, the stack's state)")
    parser.add_argument("--also", type=Path, help="another tree's fleetops (e.g. a checkout of main), timed alternately beside this one: a before/after")
    args = parser.parse_args(argv)
    path = spec.environment_path(args.environment, ROOT / spec.ENVIRONMENTS)
    env = spec.load_environment(path)
    compile_sources()  # as an installed fleetops is: this machine sets PYTHONDONTWRITEBYTECODE
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        return measure(env, work, args.runs, args.also)


@dataclass
class Fleet:
    """The deployed stack with its three hand edits, and the two commands that look for them."""

    cluster: str  # where the edits are
    names: dict[str, str]
    refresh: list[str]
    refresh_cwd: Path
    refresh_env: dict[str, str]
    detect: list[str]
    detect_cwd: Path
    detect_env: dict[str, str]
    cli: Path
    objects: int
    pulumi_up_s: float
    service: list[str]  # curl of the running reconciler's /drift
    service_cpu: Callable[[], float]  # the running reconciler's CPU seconds so far, its finished children's (git) included


@contextlib.contextmanager
def deployed(env: spec.Environment, work: Path) -> Iterator[Fleet]:
    """`pulumi up` of the stack onto one real kube-apiserver per cluster, checked clean by both tools, then edited by hand."""
    with servers.etcd_server(work / "etcd") as etcd:
        started: list[servers.ApiServer] = []
        try:
            def up(c: spec.Cluster) -> servers.ApiServer:
                server = start(c.name, work / "kube", etcd)
                started.append(server)
                servers.install_crds(server)
                server.start_controllers("resourcequota")  # fills in quota status, which `pulumi up` waits for
                return server

            with ThreadPoolExecutor(max_workers=len(env.clusters)) as pool:
                by_name = dict(zip((c.name for c in env.clusters), pool.map(up, env.clusters)))
            kubeconfig = servers.write_kubeconfig(work / "kubeconfig", {c.context: (by_name[c.name], by_name[c.name].admin_token) for c in env.clusters})
            repo, revision = fleet_repo(work / "fleet", (ROOT / "environments" / "dev.yaml").read_text())
            os.chdir(repo)  # an inline program's project folder is the process's: the policy pack judges the repository there
            stack = pulumi_stack.stack(work / "pulumi", repo, kubeconfig, name=env.environment)
            began = time.perf_counter()
            done = stack.up(policy_packs=[str(pulumi_stack.PACK)])
            assert done.summary.result == "succeeded", done.summary
            up_s = round(time.perf_counter() - began, 1)
            state = render.render(repo / "environments" / f"{env.environment}.yaml", revision=revision)

            engine = pulumi_stack.engine(work / "pulumi", kubeconfig)
            first = env.clusters[0].name
            service = running_reconciler(env, repo, kubeconfig, work)
            fleet = Fleet(
                first, edited(state, first),
                [str(engine.cli), "refresh", "--preview-only", "--stack", env.environment, "--non-interactive", "--color", "never"],
                engine.state / "work", {**os.environ, **engine.env},
                [*fleetops_command(), "reconcile", "--env", env.environment, "--repo", str(repo), "--once", "--detect-only",
                 "--kubeconfig", str(kubeconfig), "--cache-dir", str(work / "cache")],
                # This tree's fleetops (the shared venv's editable install may point at another checkout), its decisions beside the run.
                repo, {**os.environ, "PYTHONPATH": str(ROOT), "FLEETOPS_DECISION_LOG": str(work / "decisions.jsonl")},
                engine.cli, state.object_count, up_s, ["curl", "--silent", "--show-error", "--fail", f"{service.url}/drift"],
                service.cpu)
            _, clean = timed([*fleet.detect, "--output", "json"], fleet.detect_cwd, fleet.detect_env)  # the first pass clones the repository
            assert clean.returncode == 0 and json.loads(clean.stdout)["drift"] == 0, clean.stdout[-2000:] + clean.stderr[-2000:]
            _, unchanged = timed(fleet.refresh, fleet.refresh_cwd, fleet.refresh_env)
            assert unchanged.returncode == 0 and not STEP.findall(unchanged.stdout), unchanged.stdout[-2000:] + unchanged.stderr[-2000:]
            edit_by_hand(state, first, RealCluster(first, by_name[first], work / "edit.kubeconfig"))
            service.wait_ready()
            _, found = timed([*fleet.detect, "--output", "json"], fleet.detect_cwd, fleet.detect_env)
            assert found.returncode == 1, found.stdout[-2000:] + found.stderr[-2000:]
            problem = fleetops_found(found.stdout, first, fleet.names)  # the exact actions, once; the timed runs read the table
            assert problem is None, problem
            yield fleet
        finally:
            if "service" in locals():
                service.stop()
            for server in started:
                server.stop()


@dataclass
class Service:
    """`fleetops reconcile --interval` over every cluster, serving /drift."""

    process: subprocess.Popen[bytes]
    url: str

    def wait_ready(self, seconds: float = 120) -> None:
        """Its first pass done (/readyz answers 200), so that /drift finds the clients and the revision warm."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the reconciler exited {self.process.returncode}"
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise SystemExit(f"the reconciler at {self.url} was not ready in {seconds:.0f} s")

    def cpu(self) -> float:
        """User and system seconds of the process and the children it waited for (/proc/PID/stat, fields 14-17)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def running_reconciler(env: spec.Environment, repo: Path, kubeconfig: Path, work: Path) -> Service:
    port = servers.free_port()
    log = (work / "reconciler.log").open("wb")
    argv = [*fleetops_command(), "reconcile", "--env", env.environment, "--repo", str(repo), "--interval", "1h", "--detect-only",
            "--kubeconfig", str(kubeconfig), "--cache-dir", str(work / "service-cache"), "--metrics-host", "127.0.0.1", "--metrics-port", str(port)]
    process = subprocess.Popen(argv, cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT)
    return Service(process, f"http://127.0.0.1:{port}")


def measure(env: spec.Environment, work: Path, runs: int, also: Path | None) -> int:
    seconds: dict[str, list[float]] = {"fleetops": [], "fleetops service": [], "pulumi": [], **({f"fleetops at {also}": []} if also else {})}
    load_before = [round(x, 2) for x in os.getloadavg()]
    with deployed(env, work) as fleet:
        for _ in range(runs):
            wall, done = timed(fleet.refresh, fleet.refresh_cwd, fleet.refresh_env, "pulumi")
            (work / "pulumi-refresh.txt").write_text(done.stdout + done.stderr)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            problem = pulumi_found(done.stdout, fleet.cluster, fleet.names)
            assert problem is None, problem
            seconds["pulumi"].append(wall)
            wall, done = timed(fleet.detect, fleet.detect_cwd, fleet.detect_env, "fleetops")
            (work / "fleetops-detect.txt").write_text(done.stdout + done.stderr)
            assert done.returncode == 1, f"exit {done.returncode}: " + done.stdout[-2000:] + done.stderr[-2000:]
            problem = table_found(done.stdout, fleet.cluster, fleet.names)
            assert problem is None, problem
            seconds["fleetops"].append(wall)
            served = fleet.service_cpu()
            wall, done = timed(fleet.service, fleet.detect_cwd, fleet.detect_env, "fleetops service")
            CPU["fleetops service"][-1] += fleet.service_cpu() - served  # curl's, and the pass's in the reconciler
            assert done.returncode == 0, f"exit {done.returncode}: " + done.stdout[-2000:] + done.stderr[-2000:]
            problem = fleetops_found(done.stdout, fleet.cluster, fleet.names)
            assert problem is None, problem
            seconds["fleetops service"].append(wall)
            if also is not None:
                wall, done = timed(fleet.detect, fleet.detect_cwd, {**fleet.detect_env, "PYTHONPATH": str(also.resolve())}, f"fleetops at {also}")
                assert done.returncode == 1 and table_found(done.stdout, fleet.cluster, fleet.names) is None, done.stdout[-2000:] + done.stderr[-2000:]
                seconds[f"fleetops at {also}"].append(wall)
    figures: dict[str, Any] = {"environment": env.environment, "objects": fleet.objects, "pulumi_up_s": fleet.pulumi_up_s,
                               "edits": fleet.names, "runs": runs}
    figures.update({tool: summary(s) for tool, s in seconds.items()})
    figures["runs_s"] = {tool: [round(x, 3) for x in s] for tool, s in seconds.items()}
    figures["cpu_s"] = {tool: summary(s) for tool, s in CPU.items()}
    figures["cpu_ratio"] = round(statistics.median(CPU["pulumi"]) / statistics.median(CPU["fleetops"]), 2)
    ratio = statistics.median(seconds["pulumi"]) / statistics.median(seconds["fleetops"])
    figures["ratio"] = round(ratio, 2)
    figures["ratio_range"] = [round(min(seconds["pulumi"]) / max(seconds["fleetops"]), 2), round(max(seconds["pulumi"]) / min(seconds["fleetops"]), 2)]
    service = statistics.median(seconds["pulumi"]) / statistics.median(seconds["fleetops service"])
    figures["ratio_service"] = round(service, 2)
    figures["cpu_ratio_service"] = round(statistics.median(CPU["pulumi"]) / statistics.median(CPU["fleetops service"]), 2)
    if also is not None:
        figures["ratio_at_also"] = round(statistics.median(seconds["pulumi"]) / statistics.median(seconds[f"fleetops at {also}"]), 2)
    figures["pulumi_version"] = subprocess.run([str(fleet.cli), "version"], capture_output=True, text=True, check=False).stdout.strip()
    figures["load"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}  # 1, 5 and 15 minutes
    print(json.dumps(figures))
    # The goal is the running reconciler's: drift is what it looks for, and how fast it answers when asked is what
    # a user waits for. The one-off command pays an interpreter and its imports first (benchmarks/README.md).
    return report("drift_bench: fleetops against pulumi refresh --preview-only, three hand edits", [
        Goal("pulumi refresh / the reconciler's /drift (medians)", service, 10, "x", at_least=True),
        Goal("pulumi refresh / reconcile --once --detect-only (medians)", ratio, 10, "x", at_least=True),
    ])


if __name__ == "__main__":
    sys.exit(main())
