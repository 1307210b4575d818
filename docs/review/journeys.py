"""The review journeys of `fleetops plan`, rendered as GitHub renders a PR comment (cmark-gfm), and
screenshotted with headless Chromium:

    .venv/bin/python docs/review/journeys.py [--out docs/review]     # writes NAME.md, NAME.html, NAME.png

Each journey is one change to this repository's own fleet, committed on a branch of a temporary copy.
tests/plan/test_review.py checks the same journeys' comments as HTML. The audit report's capacity chart of
prod is screenshotted beside them (audit-capacity.png), as a browser draws that section of the report.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import cmarkgfm
from cmarkgfm.cmark import Options

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: benchmarks/ is beside fleetops/
from benchmarks.generate import synthetic_yaml  # noqa: E402
from tests.metering_month import BLOCK, SCRAPE, series  # noqa: E402
from tests.servers import prometheus_server  # noqa: E402
PARTS = ("environments", "policies", "stacks", "modules", "fleetops", "Pulumi.yaml")
PROD = "environments/prod.yaml"
TODAY = dt.date.today()
WAIVER = (
    "  - rule: quota.guaranteed_over_capacity\n"
    "    scope: {environment: prod, cluster: center-sh, resource: DeviceResource/nvidia.com/gpu}\n"
    "    owner: capacity-planning@fleetops.example\n    reason: two racks land next week\n    ticket: FLEET-500\n"
    f"    created: {TODAY}\n    expires: {TODAY + dt.timedelta(days=30)}\n"
)
STYLE = """body{font:14px/1.5 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;max-width:900px;margin:16px auto;padding:0 16px}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #d1d9e0;padding:4px 10px}th{background:#f6f8fa}
code{background:#eff1f3;border-radius:4px;padding:1px 4px;font-size:85%}pre{background:#f6f8fa;padding:12px;overflow:auto;border-radius:6px}
pre code{background:none;padding:0}blockquote{border-left:4px solid #d1d9e0;margin:0;padding:0 12px;color:#59636e}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}"""


@dataclass
class Journey:
    name: str
    title: str
    edits: list[tuple[str, str, str]]  # (file, old, new) on the change branch
    args: list[str] = field(default_factory=list)
    on_main: list[tuple[str, str, str]] = field(default_factory=list)  # merged before the change (a waiver)
    env: str = "prod"
    codes: tuple[int, ...] = (0, 1)  # what `plan` may exit with: 2 for a change that cannot be judged
    height: int = 2600  # of the screenshot, in pixels
    prometheus: bool = False  # planned with --prometheus: the real one, over a month of metering series (tests/metering_month.py)


JOURNEYS = [
    Journey("add-nodes", "8 more H100 nodes (over budget)", [(PROD, "        nodes: 16", "        nodes: 24")], ["--approvals", "2"]),
    Journey("new-tenant", "a new tenant", [(PROD, "  - name: llm-pretrain\n", (
        "  - name: chatbot\n    clusters: [center-bj]\n    workloads: [inference]\n    priority_classes: [inference-critical]\n"
        "    pools: [a100-infer]\n    quota:\n      nvidia.com/gpu: {guaranteed: 16, burst: 32}\n\n  - name: llm-pretrain\n"))]),
    Journey("sharing-change", "time-slicing x4 -> x2", [(PROD, "sharing: {mode: time-slicing, replicas: 4}", "sharing: {mode: time-slicing, replicas: 2}")]),
    Journey("fingerprint-added", "one more trusted Jetson", [(PROD, "        fingerprints:\n          - sha256:4f1c",
                                                              "        fingerprints:\n          - sha256:" + "ab" * 32 + "\n          - sha256:4f1c")]),
    Journey("over-capacity", "a quota past capacity", [(PROD, "nvidia.com/gpu: {guaranteed: 48, burst: 64}", "nvidia.com/gpu: {guaranteed: 60, burst: 64}")],
            ["--approvals", "2"]),
    Journey("waiver", "the same quota under a merged waiver", [(PROD, "nvidia.com/gpu: {guaranteed: 48, burst: 64}", "nvidia.com/gpu: {guaranteed: 60, burst: 64}")],
            ["--approvals", "2"], on_main=[("policies/waivers.yaml", "", WAIVER)]),
    # The generated large fleet (benchmarks/generate.py) as a new environment: 20 clusters, 1,000 tenants, 15,348 objects.
    Journey("new-environment", "a new large environment", [("environments/large.yaml", "", synthetic_yaml(1.0))], env="large"),
    Journey("plan-utilisation", "more guarantee and nodes for a tenant and pool that sit idle", [
        (PROD, "guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}",
         "guaranteed: 140, burst: 160, guaranteed_per_pool: {h100-train: 92, a100-infer: 48}"), (PROD, "        nodes: 16", "        nodes: 18")],
            prometheus=True, height=1300),
    Journey("invalid-head", "a quota whose burst is below its guarantee", [(PROD, "nvidia.com/gpu: {guaranteed: 48, burst: 64}",
                                                                           "nvidia.com/gpu: {guaranteed: 80, burst: 64}")], codes=(2,), height=400),
]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=fleetops", "-c", "user.email=fleetops@example.com", *args], check=True, capture_output=True)


def _apply(repo: Path, edits: list[tuple[str, str, str]]) -> None:
    for file, old, new in edits:
        path = repo / file
        text = path.read_text() if path.exists() else ""
        if old and old not in text:
            raise SystemExit(f"{file}: {old!r} not found")
        path.write_text(text.replace(old, new, 1) if old else text + new)


def comment(journey: Journey, workdir: Path) -> str:
    """The PR comment `fleetops plan` writes for the journey, on a fresh copy of this repository."""
    repo = workdir / journey.name
    repo.mkdir()
    for part in PARTS:
        src = ROOT / part
        (shutil.copytree(src, repo / part, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir() else shutil.copy2(src, repo / part))
    _git(repo, "init", "-q", "-b", "main")
    _apply(repo, journey.on_main)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "fleet")
    _git(repo, "checkout", "-q", "-b", "change")
    _apply(repo, journey.edits)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", journey.title)
    with contextlib.ExitStack() as stack:
        args = journey.args
        if journey.prometheus:
            now = int(dt.datetime.now(dt.timezone.utc).timestamp()) // SCRAPE * SCRAPE
            args = [*args, "--prometheus", stack.enter_context(prometheus_server(workdir / f"{journey.name}-prometheus", series(now)[0], max_block_duration=BLOCK)).url]
        done = subprocess.run([sys.executable, "-m", "fleetops.cli", "plan", "--env", journey.env, *args], cwd=repo,
                              capture_output=True, text=True, check=False, env={**_env(), "FLEETOPS_DECISION_LOG": str(workdir / "decisions.jsonl")})
    if done.returncode not in journey.codes:
        raise SystemExit(f"{journey.name}: fleetops plan failed: {done.stderr}")
    return done.stdout


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def to_html(markdown: str, title: str) -> str:
    """As GitHub renders a comment: cmark-gfm with its extensions; raw HTML (<details>) kept."""
    body = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{STYLE}</style></head><body>{body}</body></html>"


def screenshot(html: Path, png: Path, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size=1000,{height}", f"--screenshot={png}", html.as_uri()], check=True, capture_output=True, timeout=120)


def audit_capacity(out: Path) -> None:
    """The report's own head (its styles) and its capacity section only, so the chart fills the picture."""
    done = subprocess.run([sys.executable, "-m", "fleetops", "audit", "--env", "prod"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, check=True)
    head, _, body = done.stdout.partition("<body")
    section = body[body.index('<section id="capacity"'):]
    html = out / "audit-capacity.html"
    html.write_text(head + "<body>" + section[:section.index("</section>") + len("</section>")] + "</body></html>")
    screenshot(html, out / "audit-capacity.png", 900)
    html.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for journey in JOURNEYS:
            text = comment(journey, Path(tmp))
            (args.out / f"{journey.name}.md").write_text(text)
            html = args.out / f"{journey.name}.html"
            # Every <details> opened, as a reviewer clicking through would see them.
            html.write_text(to_html(text, journey.title).replace("<details>", "<details open>"))
            screenshot(html, args.out / f"{journey.name}.png", journey.height)
            print(f"{journey.name}: {len(text):,} characters -> {journey.name}.png")
    audit_capacity(args.out)
    print("audit: capacity section -> audit-capacity.png")


if __name__ == "__main__":
    main()
