"""The layering is held by import contracts (.importlinter), checked by `lint-imports` in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "4 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(("path", "line", "contract"), [
    ("modules/kube.py", "from fleetops import plan", "The components (modules/) read the model and the contract, never the engine"),
    # render <-> sdk_render was such a cycle: the SDK's render raised render's error.
    ("fleetops/sdk_render.py", "from fleetops.render import DesiredState", "No import cycles between the modules of a package"),
    ("fleetops/spec/fields.py", "from fleetops import policy", "The CLI on top, the engine below it, the model and the Kubernetes contract at the bottom"),
    # The YAML walk with positions knows nothing of what an environment holds (no cycle: only this contract sees it).
    ("fleetops/spec/positions.py", "from fleetops.spec.fields import LIMITS", "The model's modules: its fields and YAML positions at the bottom, reading a document on top"),
], ids=["component-reads-engine", "cycle", "model-reads-engine", "positions-read-the-fields"])
def test_an_import_against_the_layering_breaks_its_contract(tmp_path: Path, path: str, line: str, contract: str) -> None:
    tree = copy_tree(tmp_path)
    source = tree / path
    source.write_text(source.read_text() + f"\n{line}  # noqa: E402,F401\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{contract} BROKEN" in " ".join(done.stdout.split())
