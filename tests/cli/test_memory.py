"""The process's memory settings (fleetops/memory.py): made by the CLI's entry point, never by library code."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetops import memory, policy, render, spec
from tests.helpers import ROOT


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_library_code_leaves_the_collector_as_its_host_set_it(collector_restored: None) -> None:
    # Pulumi's language host and the policy pack run fleetops's library code: their collector
    # settings are theirs (it was paused and objects frozen out of its sight by decorators here).
    gc.enable()
    gc.set_threshold(1234, 11, 12)
    frozen = gc.get_freeze_count()
    state = render.render(ROOT / "environments" / "dev.yaml", revision="r")
    policy.evaluate(spec.load_environment(ROOT / "environments" / "dev.yaml"), state)
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == (True, (1234, 11, 12), frozen)


def test_a_command_runs_with_the_collector_off() -> None:
    probe = ("import atexit, gc, sys\nfrom fleetops import cli\n"
             "atexit.register(lambda: print('collector on' if gc.isenabled() else 'collector off'))\n"
             "sys.argv = ['fleetops', 'validate', '--env', 'dev']\ncli.main()")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (0, "collector off"), done.stdout + done.stderr


@pytest.mark.parametrize("start", [["fleetops"], ["-m", "fleetops"], ["-m", "fleetops.cli"]], ids=" ".join)
def test_a_command_imports_its_modules_with_the_collector_off(start: list[str], tmp_path: Path) -> None:
    # Each way of starting a command turns the collector off before the CLI imports typer, pydantic
    # and the model: building their objects, it collected 66 times during `validate`'s imports.
    (tmp_path / "sitecustomize.py").write_text(  # imported at start-up, before the command's own imports
        "import gc, sys\n"
        "def heavy(event, args):\n"
        "    if event == 'import' and args[0] in ('typer', 'pydantic', 'fleetops.spec'):\n"
        "        sys.stderr.write(f\"{args[0]}: collector {'on' if gc.isenabled() else 'off'}\\n\")\n"
        "sys.addaudithook(heavy)\n")
    command = [str(Path(sys.executable).parent / "fleetops")] if start == ["fleetops"] else [sys.executable, *start]
    done = subprocess.run([*command, "validate", "--env", "dev"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert sorted(done.stderr.splitlines()) == ["fleetops.spec: collector off", "pydantic: collector off", "typer: collector off"]


def test_the_reconcile_loop_frees_cycles_although_the_collector_is_off(collector_restored: None) -> None:
    class Node:
        pass

    memory.for_a_command()
    node = Node()
    node.itself = node  # a cycle: only the collector frees it
    alive = weakref.ref(node)
    del node
    assert alive() is not None
    memory.release()  # what the loop does before each pass
    assert alive() is None
