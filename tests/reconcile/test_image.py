"""The reconciler's image (image/build.py): a valid OCI image that runs a reconcile pass as its own user.

Built without a container engine (none runs here), read back by skopeo and unpacked by umoci (both
verify every digest), and run from the unpacked root filesystem with chroot against a real API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers
from tests.reconcile_support import DEV, commit, new_repo

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".tools" / "image"  # keeps the Debian base between runs


def need(*commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    if os.geteuid() != 0:
        missing.append("root")
    if missing:
        reason = f"the image build needs {', '.join(missing)} (.ci/run installs them)"
        if os.environ.get("FLEETOPS_REAL_SERVERS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def image() -> Path:
    need("debootstrap", "chroot", "skopeo", "umoci", "mount")
    done = subprocess.run(["python", str(ROOT / "image" / "build.py"), "--out", str(OUT)], capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-3000:]
    return OUT / "layout"


@contextlib.contextmanager
def runtime_mounts(rootfs: Path) -> Iterator[None]:
    """/dev and /proc, which a container runtime mounts into every container (the image has neither)."""
    mounted = []
    try:
        for source, target, args in (("/dev", "dev", ["--bind"]), ("proc", "proc", ["-t", "proc"])):
            (rootfs / target).mkdir(exist_ok=True)
            subprocess.run(["mount", *args, source, str(rootfs / target)], check=True, capture_output=True)
            mounted.append(rootfs / target)
        yield
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def test_the_image_is_a_valid_oci_image_of_the_reconciler(image: Path, tmp_path: Path) -> None:
    inspected = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci:{image}:0.1.0"], capture_output=True, text=True, check=True).stdout)
    config = inspected["config"]
    assert config["Entrypoint"] == ["/opt/fleetops/bin/fleetops"] and config["User"] == "65532:65532"
    # The image as a runtime bundle: umoci checks every blob against its digest while unpacking.
    subprocess.run(["umoci", "unpack", "--image", f"{image}:0.1.0", str(tmp_path / "bundle")], check=True, capture_output=True)
    process = json.loads((tmp_path / "bundle" / "config.json").read_text())["process"]
    assert process["args"] == ["/opt/fleetops/bin/fleetops"] and process["user"]["uid"] == 65532


def test_the_image_runs_a_reconcile_pass_as_its_own_user(image: Path, api_servers, tmp_path: Path) -> None:
    subprocess.run(["umoci", "unpack", "--image", f"{image}:0.1.0", str(tmp_path / "bundle")], check=True, capture_output=True)
    rootfs = tmp_path / "bundle" / "rootfs"
    cache = rootfs / "var" / "cache" / "fleetops"
    server = api_servers("dev-center")["dev-center"]
    shutil.copy(server.ca_file, cache / "ca.crt")
    kubeconfig = server.kubeconfig(cache / "kubeconfig", context="dev")
    kubeconfig.write_text(kubeconfig.read_text().replace(str(server.ca_file), "/var/cache/fleetops/ca.crt"))
    repo = new_repo(cache / "fleet")
    shutil.copytree(ROOT / "policies", repo / "policies", ignore=shutil.ignore_patterns("pack"))
    commit(repo, DEV.read_text(), "fleet")
    for path in [cache, *cache.rglob("*")]:
        os.lchown(path, 65532, 65532)
    command = ["chroot", "--userspec=65532:65532", str(rootfs), "/usr/bin/env", "-i", "PATH=/opt/fleetops/bin:/usr/bin:/bin",
               "HOME=/var/cache/fleetops", "TMPDIR=/var/cache/fleetops", "PYTHONDONTWRITEBYTECODE=1",
               "/opt/fleetops/bin/fleetops", "reconcile", "--env", "dev", "--repo", "/var/cache/fleetops/fleet", "--once",
               "--cluster", "dev-center", "--kubeconfig", "/var/cache/fleetops/kubeconfig", "--cache-dir", "/var/cache/fleetops/repos",
               "--output", "json"]
    with runtime_mounts(rootfs):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] == "applied" and result["clusters"]["dev-center"]["errors"] == []
