"""Build the reconciler's container image as an OCI image layout, without a container engine.

    python image/build.py [--out build/image] [--tag 0.1.0]

A Debian root filesystem (debootstrap: python3, git, CA certificates), fleetops and its pinned
dependencies installed into /opt/fleetops from a wheel of this checkout, packed as one layer with
fixed timestamps and owners, and described by an OCI config, manifest and index. The result,
`build/image/layout/` (and `build/image/fleetops-<tag>.tar`, the same as an oci-archive), is what
`skopeo copy oci:build/image/layout:<tag> docker://REGISTRY/fleetops:<tag>` pushes, or
`docker load`/`podman load` loads. image/Dockerfile builds the same image where an engine runs.

Needs root (debootstrap and chroot), debootstrap and network access to Debian and PyPI.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"  # Debian 12: python3 is 3.11, as pyproject requires
PACKAGES = ["python3", "python3-venv", "git", "ca-certificates"]
PREFIX = "/opt/fleetops"
USER = "65532:65532"  # modules/reconciler.py runs the pod as this user
CACHE = "/var/cache/fleetops"  # the pod's writable volume (HOME, TMPDIR, the Git checkout)
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def run(*argv: str, **kw: object) -> None:
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]


def base(rootfs: Path, mirror: str) -> None:
    """The Debian base, built once per suite and package set (it is the slow step)."""
    marker = rootfs / ".fleetops-base"
    wanted = json.dumps({"suite": SUITE, "packages": PACKAGES, "mirror": mirror})
    if marker.is_file() and marker.read_text() == wanted:
        return
    shutil.rmtree(rootfs, ignore_errors=True)
    run("debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), mirror, stdout=subprocess.DEVNULL)
    marker.write_text(wanted)


def install(rootfs: Path) -> None:
    """fleetops from a wheel of this checkout, with the exact dependency pins of pyproject.toml.

    The wheels are fetched here, with this machine's pip settings, and installed in the root
    filesystem without a network: nothing of this machine's configuration lands in the image."""
    wheels = rootfs / "tmp" / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    # A pure fleetops wheel: the compiled YAML writer serves `render -o`, which the reconciler never runs.
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), str(ROOT), env={**os.environ, "FLEETOPS_PURE_PYTHON": "1"})
    try:
        shutil.rmtree(rootfs / PREFIX.lstrip("/"), ignore_errors=True)
        run("chroot", str(rootfs), "python3", "-m", "venv", PREFIX)
        run("chroot", str(rootfs), f"{PREFIX}/bin/pip", "install", "--quiet", "--no-index", "--find-links", "/tmp/wheels",
            "--no-cache-dir", "--disable-pip-version-check", "fleetops")
        run("chroot", str(rootfs), f"{PREFIX}/bin/python", "-m", "compileall", "-q", PREFIX)  # the root filesystem is read-only in the pod
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / leftover).glob("*"):
            if path.is_file():
                path.unlink()
    (rootfs / CACHE.lstrip("/")).mkdir(parents=True, exist_ok=True)
    os.chown(rootfs / CACHE.lstrip("/"), 65532, 65532)


def layer(rootfs: Path) -> tuple[bytes, str]:
    """The root filesystem as a gzipped tar with fixed order, times and owners; (blob, diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            name = path.relative_to(rootfs).as_posix()
            if name == ".fleetops-base" or name.startswith(("proc/", "sys/", "dev/")):
                continue
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime = EPOCH
            if not name.startswith(CACHE.lstrip("/")):
                info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    return gzip.compress(data, compresslevel=6, mtime=EPOCH), diff_id


def blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_layout(layout: Path, layer_blob: bytes, diff_id: str, tag: str) -> dict[str, object]:
    shutil.rmtree(layout, ignore_errors=True)
    layout.mkdir(parents=True)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layout, layer_blob)}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": [f"{PREFIX}/bin/fleetops"],
            "Env": [f"PATH={PREFIX}/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1", f"HOME={CACHE}", f"TMPDIR={CACHE}"],
            "WorkingDir": CACHE,
            "Labels": {"org.opencontainers.image.title": "fleetops", "org.opencontainers.image.version": tag},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"image/build.py: debootstrap {SUITE} {' '.join(PACKAGES)}; pip install fleetops"}],
    }
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(layout, json.dumps(config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config_desc, "layers": [layer_desc]}
    manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **blob(layout, json.dumps(manifest, sort_keys=True).encode()),
                     "annotations": {"org.opencontainers.image.ref.name": tag}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]}
    (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
    return index


def archive(layout: Path, target: Path) -> None:
    with tarfile.open(target, "w") as tar:
        for path in sorted(layout.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(layout).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            if info.isfile():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "image")
    parser.add_argument("--tag", default="0.1.0")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        print("image/build.py: needs root and debootstrap (apt-get install debootstrap)", file=sys.stderr)
        return 2
    rootfs = args.out / "rootfs"
    args.out.mkdir(parents=True, exist_ok=True)
    base(rootfs, args.mirror)
    install(rootfs)
    layer_blob, diff_id = layer(rootfs)
    write_layout(args.out / "layout", layer_blob, diff_id, args.tag)
    archive(args.out / "layout", args.out / f"fleetops-{args.tag}.tar")
    print(f"wrote {args.out / 'layout'} and {args.out / f'fleetops-{args.tag}.tar'} ({len(layer_blob) // 2**20} MiB layer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
