"""The layering is held by import contracts (.importlinter), checked by `lint-imports` in CI."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # The tree's own packages first on the path: grimp reads the source of the packages it imports.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)


def copy_tree(tmp_path: Path) -> Path:
    for part in ("fleetops", "modules", "stacks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.so", "crds", "schemas"))
    shutil.copy2(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_the_import_contracts_hold() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 kept, 0 broken" in done.stdout


LAYERS = "The CLI on top, the engine below it, the model and the Kubernetes contract at the bottom"
COMPONENTS = "The components (modules/) read only the model, the contract, identities, metric names and the errors of fleetops"
CYCLES = "No import cycles between the modules of a package"


@pytest.mark.parametrize(("path", "line", "contract"), [
    ("modules/kube.py", "from fleetops import plan", COMPONENTS),
    # Not the engine, and still not fleetops's to read: only spec, kube, identity and errors are.
    ("modules/tenant.py", "from fleetops import memory", COMPONENTS),
    ("fleetops/kube.py", "from modules import fleet", "Only render (and so the engine above it) and the stack program read the components"),
    ("stacks/__main__.py", "from fleetops import render", "The stack program reads the environment and registers the components, nothing else of the product"),
    ("fleetops/reconcile/sync.py", "from tests.fakes import cluster", "The product never imports the tests (nor their fakes)"),
    # render <-> sdk_render was such a cycle: the SDK's render raised render's error.
    ("fleetops/sdk_render.py", "from fleetops.render import DesiredState", CYCLES),
    # A cycle inside a package of fleetops: the contract's ancestors reach down into fleetops.api.
    ("fleetops/api/models.py", "from fleetops.api import auth", CYCLES),
    ("fleetops/spec/fields.py", "from fleetops import policy", LAYERS),
    # A new module of fleetops is in no layer until it is named in one (the contract is exhaustive).
    ("fleetops/newjob.py", "from fleetops import kube", LAYERS),
    # The YAML walk with positions knows nothing of what an environment holds (no cycle: only this contract sees it).
    ("fleetops/spec/positions.py", "from fleetops.spec.fields import LIMITS", "The model's modules: its fields and YAML positions at the bottom, reading a document on top"),
], ids=[
    "component-reads-engine", "component-reads-memory", "contract-reads-components", "program-reads-render",
    "product-reads-tests", "cycle", "cycle-in-api", "model-reads-engine", "module-in-no-layer", "positions-read-the-fields",
])
def test_an_import_against_the_layering_breaks_its_contract(tmp_path: Path, path: str, line: str, contract: str) -> None:
    tree = copy_tree(tmp_path)
    source = tree / path
    before = source.read_text() if source.exists() else ""
    source.write_text(before + f"\n{line}  # noqa: E402,F401\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{contract} BROKEN" in " ".join(done.stdout.split())


def test_no_class_name_is_defined_twice_in_fleetops() -> None:
    """One name, one concept: a reader who finds `Verdict` finds the one thing it means (issue 40)."""
    where: dict[str, list[str]] = {}
    for path in sorted((ROOT / "fleetops").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    twice = {name: places for name, places in sorted(where.items()) if len(places) > 1}
    assert not twice, "class names defined more than once in fleetops/ (name each by what it is, or share one definition):\n" + \
        "\n".join(f"  {name}: {', '.join(places)}" for name, places in twice.items())
