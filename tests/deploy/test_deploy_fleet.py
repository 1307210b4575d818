"""`fleetops deploy` at fleet scale onto real kube-apiservers (issue 42), and on clusters that lack what
the fleet needs: said before Pulumi starts, nothing changed.

Pulumi creates objects in parallel; before the program declared each object's prerequisites
(modules.kube.prerequisites) a tenant's objects raced its Namespace and the first `up` of a generated
fleet failed with "namespaces ... not found" (tests/deploy/test_deploy_order.py refuses that program). One `up`
of over 3,000 objects now succeeds, a preview after it has nothing to change, and the reconciler finds no
drift. Times at the generated fleet's own shape (20 clusters) are in benchmarks/deploy_bench.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from benchmarks import generate
from tests import servers
from tests.command import run
from tests.reconcile_support import commit, new_repo

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
# The generated fleet at scale 0.2 on one center and one edge cluster (two API servers, not twenty):
# 3,022 objects, 2,377 of them on center-0.
SCALE, CENTERS, EDGES = 0.2, 1, 1
DEPLOY_TIMEOUT = 1200  # seconds for one `fleetops deploy` of the whole fleet: benchmarks/README.md has the times


def generated_repo(path: Path) -> tuple[Path, str, dict]:
    doc = generate.synthetic_environment(SCALE, "dev", center_clusters=CENTERS, edge_clusters=EDGES)
    repo = new_repo(path)
    for folder in ("stacks", "policies"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return repo, commit(repo, yaml.safe_dump(doc, sort_keys=False), "generated fleet"), doc


def test_a_fleet_of_3000_objects_deploys_in_one_up_then_previews_no_change_and_has_no_drift(api_servers, tmp_path: Path) -> None:
    repo, revision, doc = generated_repo(tmp_path / "fleet")
    started = api_servers(*[c["name"] for c in doc["clusters"]])  # with the CRDs fleetops ships: the documented prerequisite
    for server in started.values():
        server.start_controllers("resourcequota")  # fills in quota status, which `pulumi up` waits for
    kubeconfig = servers.write_kubeconfig(tmp_path / "kubeconfig", {n: (s, s.admin_token) for n, s in started.items()})
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("fleetops-test\n")
    deploy = ("deploy", "--env", "dev", "--repo", repo, "--state", tmp_path / "state", "--kubeconfig", kubeconfig,
              "--passphrase-file", passphrase, "--pulumi", servers.tool("pulumi"),
              "--provider", servers.tool("pulumi-resource-kubernetes"), "--output", "json")

    up = run(*deploy, cwd=repo, timeout=DEPLOY_TIMEOUT)
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    document = json.loads(up.stdout)
    assert document["ok"] and document["outputs"]["revision"] == revision
    assert document["changes"]["create"] >= 3000, document["changes"]

    again = run(*deploy, "--preview", "--diff", cwd=repo, timeout=DEPLOY_TIMEOUT)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    preview = json.loads(again.stdout)
    assert preview["changes"] == {}
    unchanged = re.search(r"(\d+) unchanged", preview["diff"])  # Pulumi's own summary, as `pulumi preview --diff` ends
    assert unchanged and int(unchanged[1]) >= 3000, preview["diff"][-2000:]

    detect = run("reconcile", "--env", "dev", "--repo", repo, "--once", "--detect-only", "--kubeconfig", kubeconfig,
                 "--cache-dir", tmp_path / "cache", "--output", "json")
    assert detect.returncode == 0, detect.stdout + detect.stderr
    assert json.loads(detect.stdout)["drift"] == 0


def test_a_preview_on_bare_clusters_names_the_missing_apis_and_what_installs_them(api_servers, tmp_path: Path) -> None:
    contexts = {"dev-center": "dev", "dev-edge": "dev-edge"}  # the dev environment's kubeconfig contexts
    started = api_servers(*contexts, crds=False)
    kubeconfig = servers.write_kubeconfig(tmp_path / "kubeconfig", {contexts[n]: (s, s.admin_token) for n, s in started.items()})
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("fleetops-test\n")
    out = run("deploy", "--env", "dev", "--preview", "--state", tmp_path / "state", "--kubeconfig", kubeconfig,
              "--passphrase-file", passphrase, "--pulumi", servers.tool("pulumi"),
              "--provider", servers.tool("pulumi-resource-kubernetes"))
    assert out.returncode == 2, out.stdout + out.stderr
    # Not "172 to create; done": nothing would be created, and each cluster's missing CRDs are named.
    assert "pulumi preview of stack dev (environment dev): no changes; failed" in out.stdout
    lines = out.stderr.splitlines()
    assert lines[0] == "the clusters lack APIs the fleet's objects need; nothing was changed:"
    assert any(line.startswith("dev-center (context dev): ClusterQueue.kueue.x-k8s.io is not served (no CRD clusterqueues.kueue.x-k8s.io): "
                               "install Kueue v0.17.0") and line.endswith("or `fleetops deploy --install-crds`") for line in lines), out.stderr
    assert any(line.startswith("dev-center (context dev): PrometheusRule.monitoring.coreos.com is not served") for line in lines), out.stderr
    assert any(line.startswith("dev-edge (context dev-edge): ") for line in lines), out.stderr
