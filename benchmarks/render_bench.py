"""Render speed and memory on the generated large environment: direct, under the Pulumi SDK, and to files.

    .venv/bin/python benchmarks/render_bench.py [--scale 1] [--repeat 5] [--json]

Each figure comes from a fresh subprocess, so its peak RSS (ru_maxrss) is that measurement's own;
medians of `--repeat` runs (the SDK render, ~40 s of CPU, runs once).
- render: `fleetops.render.render()`, the direct walk of the fleet's parts that plan, check and the
  reconciler use: load and validate the environment, build every object, engine checks, sorting.
- render under the SDK: the same with `engine="pulumi"`: `stacks/__main__.py` under the SDK's mocks,
  what render was before; tests/render/test_render.py proves both give byte-identical files.
- render -o: what `fleetops render -o DIR` does: render, each cluster's YAML file written by the
  C writer as soon as that cluster is rendered, all renamed into place at the end, over the files
  of the run before (each run replaces them: on ext4 a rename over a file starts writing it out,
  ~0.5 ms a file, that a first write does not pay). Where the C writer was not built
  (`emit.native()`; FLEETOPS_PURE_PYTHON=1 times that case), yamltext writes them.
- render -o --output json: the same, the files holding orjson's text (written by the same C writer).
- as the command does it: `commands.base.render_or_fail` (load, render, schema check: all `fleetops render`
  does before it writes), without and with the files.
- schema: `fleetops.schema.validate_objects()` over every rendered object (render and check run it).
Goals: render -o <= 1.2x render alone; peak RSS < 1 GiB; >= 5,000 resources/s.
"""

from __future__ import annotations

import argparse
import json
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
from benchmarks.goals import Goal, compile_sources, peak_rss_mib, report  # noqa: E402

GOALS = {"write_to_render": 1.2, "max_rss_mib": 1024, "resources_per_second": 5000}


def measure(what: str, env_file: Path, out_dir: Path) -> dict[str, Any]:
    from fleetops import emit, memory, output, render, schema
    from fleetops.commands import base

    memory.for_a_command()  # as `fleetops` runs every command (cli.main)

    fmt = output.ObjectFormat.json if what == "json" else output.ObjectFormat.yaml
    started = time.perf_counter()
    if what in ("write", "json", "command-o"):  # as `render -o` does it: files written by the writer's thread while the rest renders
        with emit.Files("bench") as files:
            def add(cluster: str, objects: list[dict[str, Any]]) -> None:
                files.put(out_dir / f"{cluster}.{fmt.value}", output.dump(objects, fmt))

            if what == "command-o":
                state = base.render_or_fail(env_file, "bench", each_cluster=add)[1]
            else:
                state = render.render(env_file, revision="bench", each_cluster=add)
            files.commit()
    elif what == "command":  # what the command does before it writes anything: load, render, schema check
        state = base.render_or_fail(env_file, "bench")[1]
    else:
        state = render.render(env_file, revision="bench", engine="pulumi" if what == "sdk" else "direct")
    rendered = time.perf_counter() - started
    if what == "schema":
        started = time.perf_counter()
        problems = schema.validate_objects(state.objects())
        if problems:
            raise SystemExit(f"the generated environment should validate, got: {problems[0]}")
    return {"seconds": time.perf_counter() - started, "render_seconds": rendered, "resources": state.resources,
            "objects": state.object_count, "max_rss_mib": peak_rss_mib(), "writer": "C" if emit.native() else "yamltext (Python)"}


def _run(what: str, env_file: Path, out_dir: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "measure", what, str(env_file), str(out_dir)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measurement {what} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def bench(scale: float, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env_file, out_dir = Path(tmp) / "large.yaml", Path(tmp) / "out"
        env_file.write_text(synthetic_yaml(scale))
        out_dir.mkdir()
        _run("direct", env_file, out_dir)  # warm the page cache and .pyc files
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeat):  # alternating: a busy machine slows all alike
            for what in ("direct", "write", "json", "command", "command-o"):
                runs.setdefault(what, []).append(_run(what, env_file, out_dir))
        renders, writes = runs["direct"], runs["write"]
        sdk = _run("sdk", env_file, out_dir)
        schema = _run("schema", env_file, out_dir)
    render_s = statistics.median(r["seconds"] for r in renders)
    write_s = statistics.median(w["seconds"] for w in writes)
    json_s, command_s, command_o_s = (statistics.median(r["seconds"] for r in runs[w]) for w in ("json", "command", "command-o"))
    return {
        "json_seconds": json_s, "json_to_render": json_s / render_s,
        "command_seconds": command_s, "command_write_seconds": command_o_s, "command_write_to_command": command_o_s / command_s,
        "scale": scale, "repeat": repeat, "resources": renders[0]["resources"], "objects": renders[0]["objects"],
        "render_seconds": render_s, "write_seconds": write_s, "sdk_seconds": sdk["seconds"],
        "schema_seconds": schema["seconds"],
        "resources_per_second": renders[0]["resources"] / render_s,
        "write_to_render": write_s / render_s, "sdk_to_direct": sdk["seconds"] / render_s,
        "max_rss_mib": max(r["max_rss_mib"] for r in renders + writes),
        "sdk_max_rss_mib": sdk["max_rss_mib"], "writer": writes[0]["writer"],
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["measure"]:
        print(json.dumps(measure(argv[1], Path(argv[2]), Path(argv[3]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="size of the generated environment (1: ~15,000 objects)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    compile_sources()
    f = bench(args.scale, args.repeat)
    if args.json:
        print(json.dumps(f, indent=2))
    print(f"render_bench: generated environment, scale {f['scale']:g}: {f['resources']:,} resources, {f['objects']:,} objects; medians of {f['repeat']}; YAML writer: {f['writer']}")
    print(f"  render {f['render_seconds']:.2f} s, render -o {f['write_seconds']:.2f} s, render under the Pulumi SDK {f['sdk_seconds']:.2f} s "
          f"({f['sdk_to_direct']:.1f}x, peak RSS {f['sdk_max_rss_mib']:.0f} MiB), schema validation {f['schema_seconds']:.2f} s")
    print(f"  render -o --output json {f['json_seconds']:.2f} s ({f['json_to_render']:.2f}x render); as the command does it, with the "
          f"schema check: render {f['command_seconds']:.2f} s, render -o {f['command_write_seconds']:.2f} s ({f['command_write_to_command']:.2f}x)")
    return report("", [
        Goal("render -o / render", f["write_to_render"], GOALS["write_to_render"], "x"),
        Goal("render, resources per second", f["resources_per_second"], GOALS["resources_per_second"], "/s", at_least=True),
        Goal("peak RSS of render and render -o", f["max_rss_mib"], GOALS["max_rss_mib"], "MiB"),
    ])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
