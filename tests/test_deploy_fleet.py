"""`fleetops deploy` on clusters that lack what the fleet needs: said before Pulumi starts, nothing changed.

One `up` of the bundled dev fleet, a preview with nothing to change and no drift after it are the README's
steps (tests/test_real_pulumi.py); a generated fleet's first `up` at scale is measured in
benchmarks/deploy_bench.py (at scale 0.04, 1,059 objects, it took 223 s here: too long for the suite).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import servers
from tests.cli import run

pytestmark = pytest.mark.real


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
