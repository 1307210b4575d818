"""`make setup` as a newcomer sees it: one line per step while pip works, pip's noise only in its log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import ROOT

# What pip prints on a fresh machine, shortened: the virtual environment's python stands in for it.
PIP = """\
Obtaining file:///fleetops
  Installing build dependencies: started
Collecting typer==0.29.1 (from fleetops==0.1.0)
  Downloading typer-0.29.1-py3-none-any.whl (50 kB)
Building wheels for collected packages: fleetops
  Building editable for fleetops (pyproject.toml): started
Installing collected packages: typer, rich, fleetops
Successfully installed fleetops-0.1.0 rich-15.0.0 typer-0.29.1
"""


def setup(tmp_path: Path, pip_exit: int) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pip.txt").write_text(PIP)
    (venv / "bin" / "python").write_text(f"#!/bin/sh\ncat {venv / 'pip.txt'}\nexit {pip_exit}\n")
    (venv / "bin" / "fleetops").write_text("#!/bin/sh\necho fleetops 0.1.0\n")
    for tool in ("python", "fleetops"):
        (venv / "bin" / tool).chmod(0o755)
    return subprocess.run(["make", "--no-print-directory", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)


def test_setup_says_each_step_and_keeps_pips_output_in_its_log(tmp_path: Path) -> None:
    # It ran `pip --quiet`: three minutes with nothing on the screen.
    done = setup(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "venv" / "setup.log"
    assert done.stdout.splitlines() == [
        f"setup: installing fleetops into {tmp_path / 'venv'} (a few minutes on a fresh machine; pip's log: {log})",
        "setup: downloading fleetops's pinned dependencies from PyPI",
        "setup: compiling the YAML writer (fleetops/_yamlwriter.pyx) with Cython",
        f"setup: installing 3 packages into {tmp_path / 'venv'}",
        "setup: ready: fleetops 0.1.0",
    ]
    assert "Downloading typer" in log.read_text()


def test_a_failed_install_shows_pips_own_words_and_fails(tmp_path: Path) -> None:
    done = setup(tmp_path, 1)
    assert done.returncode != 0
    assert "Downloading typer-0.29.1" in done.stdout and f"setup: pip failed: {tmp_path / 'venv' / 'setup.log'}" in done.stdout
    assert not list((tmp_path / "venv").glob(".installed-*"))  # set-up runs again next time
