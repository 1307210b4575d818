"""The CRD schemas fleetops validates against are the upstream files, unedited."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetops import schema
from tests.command import run
from tests.helpers import small_env, write_env

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
    # The objects render checks must be what the real Kueue's API (tests/render/test_real_kueue.py) accepts.
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


def test_the_shipped_strict_schemas_are_those_the_shipped_crds_give() -> None:
    # validate reads the strict schemas from this JSON while the CRDs are those it was written from:
    # a CRD updated without `make generated` is caught here, not by a slower validate.
    assert schema.STRICT_SCHEMAS.read_text() == schema.strict_schemas_json(CRDS), "the CRDs changed: run `make generated`"


def nine_taints(tmp_path: Path) -> Path:
    """An environments folder whose ResourceFlavor has 9 taints: the model accepts them, Kueue's CRD takes 8."""
    env = small_env()
    env["clusters"][0]["pools"][0]["taints"] = [{"key": f"k{i}", "value": "v", "effect": "NoSchedule"} for i in range(9)]
    (tmp_path / "environments").mkdir()
    write_env(tmp_path / "environments", env)
    return tmp_path / "environments"


def test_a_changed_crd_changes_what_validate_refuses(tmp_path: Path) -> None:
    envs, crds = nine_taints(tmp_path), tmp_path / "crds"
    crds.mkdir()
    for path in CRDS.glob("*.yaml"):
        shutil.copy(path, crds)
    refused = run("validate", "--env", "test", "--environments", envs, env={"FLEETOPS_CRD_DIR": str(crds)})
    assert refused.returncode == 2 and refused.stderr.rstrip().endswith("has more than 8 items"), refused.stderr
    flavors = crds / "kueue.x-k8s.io_resourceflavors.yaml"
    flavors.write_text(flavors.read_text().replace("maxItems: 8", "maxItems: 16"))
    done = run("validate", "--env", "test", "--environments", envs, env={"FLEETOPS_CRD_DIR": str(crds)})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kind", ["a named pipe", "too large"])
def test_a_crd_folder_holding_no_readable_crd_is_one_line_naming_the_file(kind: str, tmp_path: Path) -> None:
    # The files of FLEETOPS_CRD_DIR were read whole: a pipe blocked validate for ever, a large file was read into memory.
    envs, crds = nine_taints(tmp_path), tmp_path / "crds"
    crds.mkdir()
    if kind == "a named pipe":
        os.mkfifo(crds / "widgets.yaml")
    else:
        with (crds / "widgets.yaml").open("wb") as big:
            big.truncate(3 * 1024 * 1024 + 1)
    done = run("validate", "--env", "test", "--environments", envs, env={"FLEETOPS_CRD_DIR": str(crds)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{crds / 'widgets.yaml'}:1:1: ") and ("is a named pipe, not a regular file" in line if kind == "a named pipe" else "more than the 3145728 byte limit for a CRD" in line)


@pytest.mark.parametrize(("text", "where", "what"), [
    ("kind: CustomResourceDefinition\nspec: {group: x.io\n", ":3:1: ", "invalid YAML"),
    ("kind: CustomResourceDefinition\nspec: {group: x.io}\n", ":1:1: ", "a CustomResourceDefinition without spec.group"),
])
def test_a_crd_folder_holding_a_broken_crd_is_one_line_naming_the_file(text: str, where: str, what: str, tmp_path: Path) -> None:
    # A CRD of FLEETOPS_CRD_DIR that is no YAML, or no CRD a schema can be read from, ended in a traceback.
    envs, crds = nine_taints(tmp_path), tmp_path / "crds"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(text)
    done = run("validate", "--env", "test", "--environments", envs, env={"FLEETOPS_CRD_DIR": str(crds)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{crds / 'widgets.yaml'}{where}") and what in line, line
