"""`fleetops deploy` of a generated fleet onto real kube-apiservers: first up, no-change up, preview of a one-line change.

    nice -n 19 .venv/bin/python benchmarks/deploy_bench.py --scale 0.05
    nice -n 19 .venv/bin/python benchmarks/deploy_bench.py --scale 0.05 --parallelism 8 64   # Pulumi's knob
    nice -n 19 .venv/bin/python benchmarks/deploy_bench.py --scale 0.2
    nice -n 19 .venv/bin/python benchmarks/deploy_bench.py --scale 0.05 --step-checkpoints         # Pulumi's default checkpoints

Each operation is one `fleetops deploy` process (the Automation API: the program runs in it, the Pulumi
CLI, one Kubernetes provider per cluster and the policy pack below it). Per operation: wall time; CPU
time of the whole process tree (user + system, from the kernel's accounting of waited children); and
peak memory, the largest sum of the tree's resident sets, sampled every 0.2 s (a lower bound: a spike
shorter than that is missed). The API servers run on this machine (loopback, one etcd): wall time
includes theirs, CPU and memory do not. On a shared machine, CPU is the figure to compare.
`--centers`/`--edges` keep the generator's fleet but on fewer clusters (one API server each): the
fleet's objects per cluster grow, their total does not change much.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from benchmarks import generate  # noqa: E402
from tests import servers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and every descendant now."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text().split()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[int(entry)] = int(statm[1]) * PAGE
    members, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in members]
        members.update(children)
        frontier += children
    return sum(rss.get(p, 0) for p in members)


def measured(args: list[str], cwd: Path) -> dict[str, float | str]:
    """Run `fleetops *args`: its wall, tree CPU, peak tree memory and what it reported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "fleetops"), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, tree_rss(proc.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, err = proc.communicate(timeout=3600)
    done.set()
    sampler.join()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = json.loads(out) if out.strip().startswith("{") else {"ok": False, "messages": [err[-2000:]]}
    if not report.get("ok"):
        raise SystemExit(f"fleetops {' '.join(args[:4])} failed: {report.get('messages')}")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_mib": round(peak / 2**20), "changes": report["changes"]}


def fleet_repo(path: Path, scale: float, centers: int, edges: int) -> tuple[Path, dict]:
    doc = generate.synthetic_environment(scale, "dev", center_clusters=centers, edge_clusters=edges)
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    for folder in ("stacks", "policies"):
        shutil.copytree(ROOT / folder, path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (path / "environments").mkdir()
    (path / "environments" / "dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    git = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@e"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fleet"], check=True)
    return path, doc


def one_line_change(repo: Path, doc: dict) -> None:
    """A tenant's burst raised by one: the kind of one-line change a pull request makes."""
    tenant = doc["tenants"][0]
    quota = next(iter(tenant["quota"].values()))
    quota["burst"] += 1
    (repo / "environments" / "dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def bench(scale: float, centers: int, edges: int, parallelism: int | None, step_checkpoints: bool, work: Path) -> dict:
    repo, doc = fleet_repo(work / "fleet", scale, centers, edges)
    names = [c["name"] for c in doc["clusters"]]
    with servers.etcd_server(work / "etcd") as etcd:
        started = [servers.ApiServer(n, work / "kube" / n, etcd) for n in names]
        try:
            for server in started:
                server.start()
                servers.install_crds(server)
                server.start_controllers("resourcequota")  # quota status, which `pulumi up` waits for
            kubeconfig = servers.write_kubeconfig(work / "kubeconfig", {s.name: (s, s.admin_token) for s in started})
            (work / "passphrase").write_text("bench\n")
            deploy = ["deploy", "--env", "dev", "--repo", str(repo), "--state", str(work / "state"), "--kubeconfig", str(kubeconfig),
                      "--passphrase-file", str(work / "passphrase"), "--pulumi", str(servers.tool("pulumi")),
                      "--provider", str(servers.tool("pulumi-resource-kubernetes")), "--output", "json"]
            if parallelism:
                deploy += ["--parallelism", str(parallelism)]
            if step_checkpoints:
                deploy.append("--step-checkpoints")
            rows = {"first up": measured(deploy, repo), "no-change up": measured(deploy, repo)}
            one_line_change(repo, doc)
            rows["preview, one-line change"] = measured([*deploy, "--preview"], repo)
        finally:
            for server in started:
                server.stop()
    return {"scale": scale, "clusters": len(names), "parallelism": parallelism or "default", "checkpoints": "every step" if step_checkpoints else "at the end", "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--centers", type=int, default=generate.CENTER_CLUSTERS)
    parser.add_argument("--edges", type=int, default=generate.EDGE_CLUSTERS)
    parser.add_argument("--parallelism", type=int, nargs="*", default=[0], help="Pulumi's parallelism (0: fleetops' default)")
    parser.add_argument("--step-checkpoints", action="store_true", help="the engine writes its state after every step (Pulumi's default), not once at the end")
    args = parser.parse_args()
    for parallelism in args.parallelism:
        with tempfile.TemporaryDirectory(prefix="deploy-bench-") as work:
            result = bench(args.scale, args.centers, args.edges, parallelism, args.step_checkpoints, Path(work))
        print(f"scale {result['scale']}, {result['clusters']} clusters, parallelism {result['parallelism']}, checkpoints {result['checkpoints']}")
        for name, row in result["rows"].items():
            print(f"  {name:26} wall {row['wall_s']:7.1f} s  cpu {row['cpu_s']:7.1f} s  peak {row['peak_mib']:6} MiB  {row['changes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
