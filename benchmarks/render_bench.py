"""Render speed and memory on the generated large environment, against the bare Pulumi SDK.

    python benchmarks/render_bench.py [--scale 1] [--repeat 3]

Each figure comes from a fresh subprocess, so its peak RSS (ru_maxrss) is that measurement's own.
Render and the baseline alternate, so a busy machine slows both alike; medians are reported.
- render: `fleetops.render.render()` on the generated environment (load + program + checks).
- bare SDK: `benchmarks/bare_program.py`, the same manifests registered straight with their
  pulumi_kubernetes classes, one Provider per cluster, no components, under the same mocks.
- schema: `fleetops.schema.validate_objects()` over every rendered object.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generate import synthetic_yaml  # noqa: E402

BARE_PROGRAM = ROOT / "benchmarks" / "bare_program.py"
GOALS = {"resources_per_second": 1000, "max_rss_mib": 1024, "render_to_bare": 1.3}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _figures(started: float, cpu: float, resources: int, objects: int) -> dict[str, Any]:
    return {
        "seconds": time.perf_counter() - started,
        "cpu_seconds": _cpu_seconds() - cpu,
        "resources": resources,
        "objects": objects,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
    }


def measure_render(env_file: Path, dump: Path | None) -> dict[str, Any]:
    from fleetops import render

    started, cpu = time.perf_counter(), _cpu_seconds()
    state = render.render(env_file, revision="bench")
    figures = _figures(started, cpu, state.resources, state.object_count)
    if dump is not None:
        dump.write_text(json.dumps(state.clusters))
    return figures


def measure_bare(manifests: Path) -> dict[str, Any]:
    from fleetops import render

    started, cpu = time.perf_counter(), _cpu_seconds()
    recorder, _ = render.run_program(BARE_PROGRAM, {"manifests": str(manifests), "revision": "bench"}, "large")
    return _figures(started, cpu, recorder.count, len(recorder.objects))


def measure_schema(env_file: Path) -> dict[str, Any]:
    from fleetops import render, schema

    state = render.render(env_file, revision="bench")
    started, cpu = time.perf_counter(), _cpu_seconds()
    problems = schema.validate_objects(state.objects())
    if problems:
        raise SystemExit(f"the generated environment should validate, got: {problems[0]}")
    return _figures(started, cpu, state.object_count, state.object_count)


def _run(*args: str) -> dict[str, Any]:
    """One measurement in a fresh interpreter: its JSON line."""
    done = subprocess.run([sys.executable, __file__, "measure", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measurement {args} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench(scale: float, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env_file, manifests = Path(tmp) / "large.yaml", Path(tmp) / "manifests.json"
        env_file.write_text(synthetic_yaml(scale))
        _run("render", str(env_file), str(manifests))  # warm caches (.pyc, page cache) and write the baseline's input
        renders, bares = [], []
        for _ in range(repeat):
            renders.append(_run("render", str(env_file)))
            bares.append(_run("bare", str(manifests)))
        schema = _run("schema", str(env_file))
    if bares[0]["objects"] != renders[0]["objects"]:
        raise SystemExit(f"the baseline registered {bares[0]['objects']} objects, render {renders[0]['objects']}")
    resources = renders[0]["resources"]
    return {
        "scale": scale,
        "repeat": repeat,
        "resources": resources,
        "objects": renders[0]["objects"],
        "bare_resources": bares[0]["resources"],
        "render_seconds": _median(renders, "seconds"),
        "render_cpu_seconds": _median(renders, "cpu_seconds"),
        "bare_seconds": _median(bares, "seconds"),
        "bare_cpu_seconds": _median(bares, "cpu_seconds"),
        "resources_per_second": resources / _median(renders, "seconds"),
        "resources_per_cpu_second": resources / _median(renders, "cpu_seconds"),
        "bare_resources_per_second": bares[0]["resources"] / _median(bares, "seconds"),
        "render_to_bare": _median(renders, "seconds") / _median(bares, "seconds"),
        "render_to_bare_cpu": _median(renders, "cpu_seconds") / _median(bares, "cpu_seconds"),
        "max_rss_mib": max(r["max_rss_mib"] for r in renders),
        "bare_max_rss_mib": max(r["max_rss_mib"] for r in bares),
        "schema_seconds": schema["seconds"],
        "schema_objects_per_second": schema["objects"] / schema["seconds"],
    }


def report(figures: dict[str, Any]) -> str:
    def verdict(ok: bool) -> str:
        return "goal met" if ok else "GOAL MISSED"

    f = figures
    return "\n".join(
        [
            f"render_bench: generated environment, scale {f['scale']}: {f['resources']:,} resources, {f['objects']:,} objects; medians of {f['repeat']} runs",
            f"  render      {f['render_seconds']:6.2f} s wall {f['render_cpu_seconds']:6.2f} s CPU  {f['resources_per_second']:6.0f} resources/s"
            f"  ({verdict(f['resources_per_second'] >= GOALS['resources_per_second'])}: >= {GOALS['resources_per_second']})",
            f"  bare SDK    {f['bare_seconds']:6.2f} s wall {f['bare_cpu_seconds']:6.2f} s CPU  {f['bare_resources_per_second']:6.0f} resources/s ({f['bare_resources']:,} resources)",
            f"  render / bare SDK  {f['render_to_bare']:.2f} wall, {f['render_to_bare_cpu']:.2f} CPU"
            f"  ({verdict(f['render_to_bare'] <= GOALS['render_to_bare'])}: <= {GOALS['render_to_bare']})",
            f"  peak RSS    render {f['max_rss_mib']:.0f} MiB, bare SDK {f['bare_max_rss_mib']:.0f} MiB"
            f"  ({verdict(f['max_rss_mib'] < GOALS['max_rss_mib'])}: < {GOALS['max_rss_mib']} MiB)",
            f"  schema      {f['schema_seconds']:6.2f} s for {f['objects']:,} objects ({f['schema_objects_per_second']:.0f} objects/s)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["measure"]:
        what, *rest = argv[1:]
        if what == "render":
            figures = measure_render(Path(rest[0]), Path(rest[1]) if len(rest) > 1 else None)
        elif what == "bare":
            figures = measure_bare(Path(rest[0]))
        else:
            figures = measure_schema(Path(rest[0]))
        print(json.dumps(figures))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="size of the generated environment (1: ~12,900 resources)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of render and of the baseline, alternating")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = bench(args.scale, args.repeat)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    main()
