"""Running the real `fleetops` console script as a subprocess, the way a person or CI does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def fleetops_command() -> list[str]:
    """The console script installed beside this interpreter (the venv's), else the module."""
    script = Path(sys.executable).parent / "fleetops"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fleetops.cli"]


def run(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`env` holds variables to set on top of this process's environment; `timeout` bounds the command (seconds)."""
    environ = {**os.environ, **env} if env else None
    return subprocess.run([*fleetops_command(), *map(str, args)], cwd=cwd, env=environ, capture_output=True, text=True, check=False, timeout=timeout)
