"""The wheel users install holds the product only: no test double, no tests package."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetops import revisions, schema
from modules import dashboards
from tests.helpers import ROOT


def top_level_definitions(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(errors="replace")).body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_installed_wheel_holds_no_test_only_code(tmp_path: Path) -> None:
    # Offline: the build uses this environment's setuptools; a pure wheel needs no compiler.
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    env = {**os.environ, "FLEETOPS_PURE_PYTHON": "1", "PIP_NO_INDEX": "1"}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # Built from a copy of the sources: setuptools reuses the tree's build/ folder, where a package pyproject
    # no longer names would still be found.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("fleetops", "modules", "stacks"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(source)],
                           capture_output=True, text=True, env=env, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    installed = subprocess.run([*pip, "install", "--no-deps", "--target", str(site), *map(str, wheels.glob("fleetops-*.whl"))],
                               capture_output=True, text=True, env=env, timeout=600, check=False)
    assert installed.returncode == 0, installed.stderr[-2000:]

    assert (site / "fleetops" / "cluster.py").is_file() and (site / "fleetops" / "reconcile" / "loop.py").is_file()  # the product is there
    # pyproject names each package: one left out (fleetops.output was) is missing from the wheel and the image.
    packages = {p.parent.relative_to(ROOT) for top in ("fleetops", "modules", "stacks") for p in (ROOT / top).rglob("__init__.py")}
    assert sorted(str(p) for p in packages if not (site / p / "__init__.py").is_file()) == []
    assert not (site / "tests").exists()
    # What validate reads as written (`make generated`) ships with the code: without it every render fails.
    generated = [schema.STRICT_SCHEMAS, dashboards.SHIPPED]
    assert [str(p.relative_to(ROOT)) for p in generated if not (site / p.relative_to(ROOT)).is_file()] == []
    # The installed program is the checkout's, file for file (revisions.survey compares every file, data too):
    # the image's `serve` takes a revision of this program for its own.
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *revisions.RENDERED], capture_output=True, text=True, check=True)
    assert sorted(set(revisions.rendered_files(site)) ^ set(filter(None, tracked.stdout.split("\0")))) == []
    # No class or function of the test doubles is defined anywhere in the wheel, under whatever module name.
    doubles = {name for path in (ROOT / "tests" / "fakes").glob("*.py") for name in top_level_definitions(path)}
    shipped = sorted(f"{p.relative_to(site)}: {name}" for p in site.rglob("*.py") for name in top_level_definitions(p) & doubles)
    assert shipped == []
    # Imported from the installed copy alone (not this checkout): the twin is nowhere to be found.
    probe = ("import importlib.util, fleetops.cluster as c; "
             "print(hasattr(c, 'MemoryCluster'), importlib.util.find_spec('tests') is not None)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {probe}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]
