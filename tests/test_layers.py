"""The layering is held by import contracts (.importlinter), checked by `lint-imports` in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # The tree's own packages first on the path: grimp reads the source of the packages it imports.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)


def copy_tree(tmp_path: Path) -> Path:
    for part in ("fleetops", "modules"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.so", "crds", "schemas"))
    shutil.copy2(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_the_import_contracts_hold() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout


def test_a_component_that_reads_the_engine_breaks_a_contract(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    kube = tree / "modules" / "kube.py"
    kube.write_text(kube.read_text() + "\nfrom fleetops import plan  # noqa: E402,F401\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "The components (modules/) read the model and the contract, never the engine BROKEN" in " ".join(done.stdout.split())
    assert "modules.kube -> fleetops.plan" in done.stdout


def test_an_import_cycle_between_engine_modules_breaks_a_contract(tmp_path: Path) -> None:
    # render <-> sdk_render was such a cycle: the SDK's render raised render's error.
    tree = copy_tree(tmp_path)
    sdk = tree / "fleetops" / "sdk_render.py"
    sdk.write_text(sdk.read_text() + "\nfrom fleetops.render import DesiredState  # noqa: E402,F401\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No import cycles between the modules of a package BROKEN" in " ".join(done.stdout.split())
