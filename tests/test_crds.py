"""The CRD schemas fleetops validates against are the upstream files, unedited."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fleetops import schema

CRDS = Path(schema.__file__).resolve().parent / "crds"


def blob(path: Path) -> str:
    return subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()


def test_each_shipped_crd_has_its_upstream_blob_id() -> None:
    table = (CRDS / "SOURCES.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+\.yaml) \|.*\| ([0-9a-f]{40}) \|", table, re.MULTILINE)}
    files = sorted(p.name for p in CRDS.glob("*.yaml"))
    assert files and sorted(rows) == files
    for name in files:
        assert blob(CRDS / name) == rows[name], f"{name} differs from upstream"


@pytest.mark.real
def test_the_kueue_crds_render_checks_against_are_those_of_the_kueue_the_tests_run() -> None:
    # The objects render checks must be what the real Kueue's API (tests/test_real_kueue.py) accepts.
    from tests import servers

    served = servers.kueue_assets() / "crds"
    shipped = sorted(CRDS.glob("kueue.x-k8s.io_*.yaml"))
    assert shipped and all(p.read_bytes() == (served / p.name).read_bytes() for p in shipped), [p.name for p in shipped]


def test_every_custom_kind_rendered_has_a_schema() -> None:
    kinds = set(schema.crd_schemas(CRDS))
    for needed in [
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
        ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
        ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
        ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"),
        ("apps.kubeedge.io/v1alpha1", "NodeGroup"),
        ("apps.openyurt.io/v1beta2", "NodePool"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
    ]:
        assert needed in kinds, needed
