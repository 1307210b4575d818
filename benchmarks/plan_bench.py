"""Plan of a one-line change on the synthetic large fleet, against the work it cannot avoid.

    .venv/bin/python benchmarks/plan_bench.py [--scale 1.0] [--runs 5] [--confined]

Builds a real Git repository holding this project's program, modules, engine and policies plus
the large environment, commits it, changes one price in the working tree, then times, in this
process: building the environment's manifests (`render.render`: load, validate, render), `check`'s
work on it (load, render, schema check, the policies' judgement) and `fleetops plan` (both sides
read and rendered, head schema-checked and judged, the sides compared, costed and reviewed).

A plan must do one `check` (of head) and one build (of base); what it adds beyond them, the review
(object diff, field diff, grants, services, cost, locations), is what this benchmark holds down.
Goals: plan <= 5 s wall; plan <= 1.25x (check + build), i.e. the review costs at most a quarter of
the work it reviews. The plan / build ratio is printed for the record: it was the goal (<= 3x) until
2026-12-05, and it rose whenever the render got faster or a policy was added, which is no waste of
plan's (benchmarks/README.md, "The plan goal, measured against the work a plan must do").

With --confined the change also edits a comment of the program (`modules/`), so that head renders
by its own program in the confined render (`fleetops/isolate.py`: a fresh interpreter under Landlock,
seccomp and its limits, answering JSON that is bounded, checked and validated here): its cost is the
figure, and only the wall goal applies (the ratio is printed for the record).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from generate import synthetic_yaml  # noqa: E402
from goals import Goal, cpu_seconds, report  # noqa: E402

from fleetops import memory, plan, policy, render  # noqa: E402

GOAL_SECONDS = 5.0
GOAL_OVERHEAD = 1.25
PARTS = ("policies", "stacks", "modules", "fleetops", "Pulumi.yaml")


def make_repo(tmp: Path, scale: float, confined: bool = False) -> Path:
    repo = tmp / "fleet"
    repo.mkdir()
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, repo / part)
    (repo / "environments").mkdir()
    (repo / "environments" / "large.yaml").write_text(synthetic_yaml(scale))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "large"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    env = repo / "environments" / "large.yaml"
    env.write_text(env.read_text().replace("H100-SXM-80GB: 2.9", "H100-SXM-80GB: 3.0", 1))  # the one-line change
    if confined:  # head's program differs from the one judging: it renders confined
        program = repo / "modules" / "__init__.py"
        program.write_text(program.read_text() + "\n# changed\n")
    return repo


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of `work`."""
    started, cpu = time.perf_counter(), cpu_seconds()
    work()
    return time.perf_counter() - started, cpu_seconds() - cpu


def check(repo: Path) -> None:
    """What `fleetops check --env large` does, in this process."""
    checked = render.load_checked(repo / "environments" / "large.yaml", revision="bench")
    policy.evaluate(checked.env, checked.state, engine=policy.engine_from(), policies_dir=repo / "policies")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--confined", action="store_true", help="head's program differs too: its render is confined")
    args = parser.parse_args()
    memory.for_a_command()  # as `fleetops` runs every command (cli.main)
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp), args.scale, args.confined)
        base_times, check_times, plan_times, results = [], [], [], []
        for _ in range(args.runs):
            base_times.append(timed(lambda: render.render(repo / "environments" / "large.yaml", revision="bench")))
            check_times.append(timed(lambda: check(repo)))
            plan_times.append(timed(lambda: results.append(plan.build(repo, "large", "main", None, 0))))
    result = results[-1]
    b, b_cpu = (statistics.median(t) for t in zip(*base_times))
    c, c_cpu = (statistics.median(t) for t in zip(*check_times))
    p, p_cpu = (statistics.median(t) for t in zip(*plan_times))
    what = "one price and a program comment changed (head confined)" if args.confined else "one price changed"
    print(f"plan_bench: scale {args.scale:g}, {what}: cost delta {result.cost.delta:,.0f}, "
          f"{len(result.objects.changed)} objects changed, {len(result.decisions)} decisions")
    runs = lambda times: ", ".join(f"{wall:.2f}" for wall, _ in times)  # noqa: E731
    print(f"  build manifests {b:.2f} s ({runs(base_times)}), check {c:.2f} s ({runs(check_times)}), plan {p:.2f} s ({runs(plan_times)})")
    print(f"  CPU (user+sys): build manifests {b_cpu:.2f} s, check {c_cpu:.2f} s, plan {p_cpu:.2f} s: "
          f"{p_cpu / (c_cpu + b_cpu):.2f}x (check + build), {p_cpu / b_cpu:.2f}x build alone (for the record)")
    if args.confined:
        return report("", [Goal("plan of a one-line change, head confined, wall", p, GOAL_SECONDS, "s")])
    return report("", [
        Goal("plan of a one-line change, wall", p, GOAL_SECONDS, "s"),
        Goal("plan / (check + building its manifests)", p / (c + b), GOAL_OVERHEAD, "x"),
    ])

if __name__ == "__main__":
    sys.exit(main())
