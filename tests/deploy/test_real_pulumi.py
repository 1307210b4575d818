"""`pulumi preview` and `pulumi up` of the dev stack with the policy pack, on real API servers.

One program, two consumers: after `pulumi up` the reconciler finds no drift, and after the
reconciler repairs a hand edit `pulumi preview` finds nothing to change (no fight over fields or
annotations). A stack that breaks a deny rule fails its preview with the rule named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from fleetops import envelope, render
from fleetops.cluster import KubeCluster
from tests import pulumi_stack, servers
from tests.command import run
from tests.reconcile_support import commit, git, new_repo

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
CONTEXTS = {"dev-center": "dev", "dev-edge": "dev-edge"}  # the dev environment's kubeconfig contexts


def fleet_repo(path: Path, text: str) -> tuple[Path, str]:
    """A fleet repository: the program, environments and policies of this one, with dev.yaml as given."""
    repo = new_repo(path)
    shutil.copytree(ROOT / "stacks", repo / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "environments", repo / "environments")
    shutil.copytree(ROOT / "policies", repo / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    return repo, commit(repo, text, "fleet")


def dev_clusters(api_servers, tmp_path: Path) -> tuple[dict[str, servers.ApiServer], Path]:
    started = api_servers(*CONTEXTS)
    for server in started.values():
        server.start_controllers("resourcequota")  # fills in quota status, which `pulumi up` waits for
    kubeconfig = servers.write_kubeconfig(tmp_path / "kubeconfig", {CONTEXTS[n]: (s, s.admin_token) for n, s in started.items()})
    return started, kubeconfig


def changes(preview) -> dict[str, int]:
    return {op: n for op, n in preview.change_summary.items() if op != "same"}


def test_pulumi_up_and_the_reconciler_agree_on_every_object(api_servers, tmp_path: Path, monkeypatch) -> None:
    started, kubeconfig = dev_clusters(api_servers, tmp_path)
    repo, revision = fleet_repo(tmp_path / "fleet", (ROOT / "environments" / "dev.yaml").read_text())
    monkeypatch.chdir(repo)  # an inline program's project folder is the process's: the policy pack judges the repository there
    stack = pulumi_stack.stack(tmp_path / "pulumi", repo, kubeconfig)
    state = render.render(repo / "environments" / "dev.yaml", revision=revision)

    preview = stack.preview(policy_packs=[str(pulumi_stack.PACK)])
    assert changes(preview)["create"] >= state.object_count, preview.change_summary
    up = stack.up(policy_packs=[str(pulumi_stack.PACK)])
    assert up.summary.result == "succeeded"
    assert up.outputs["revision"].value == revision
    for cluster, manifests in state.clusters.items():
        api = KubeCluster(cluster, kubeconfig=str(kubeconfig), context=CONTEXTS[cluster])
        for m in manifests:
            live = api.get(m["apiVersion"], m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])
            assert live is not None, (cluster, m["kind"], m["metadata"]["name"])
            owners = {f["manager"] for f in live["metadata"]["managedFields"] if f.get("subresource") != "status"}
            assert owners == {"fleetops"}, (m["kind"], owners)  # one owner of every field Git sets

    args = ("reconcile", "--env", "dev", "--repo", repo, "--once", "--kubeconfig", kubeconfig, "--cache-dir", tmp_path / "cache", "--output", "json")
    detect = run(*args, "--detect-only")
    assert detect.returncode == 0, detect.stdout + detect.stderr
    assert json.loads(detect.stdout)["drift"] == 0

    # A hand edit, repaired by the reconciler as the in-cluster Deployment runs it, is no change to Pulumi.
    center = KubeCluster("dev-center", kubeconfig=str(kubeconfig), context="dev")
    quota = center.get("v1", "ResourceQuota", "ml-sandbox", "device-nvidia-com-gpu")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "999"
    center.replace(quota)
    repaired = run(*args, "--force-conflicts")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    actions = [a for c in json.loads(repaired.stdout)["clusters"].values() for a in c["actions"] if a["write"]]
    assert [(a["verb"], a["target"]) for a in actions] == [("update", "ResourceQuota ml-sandbox/device-nvidia-com-gpu")]
    assert center.get("v1", "ResourceQuota", "ml-sandbox", "device-nvidia-com-gpu")["spec"]["hard"]["requests.nvidia.com/gpu"] == "32"
    assert changes(stack.preview(policy_packs=[str(pulumi_stack.PACK)], refresh=True)) == {}


def test_a_stack_that_breaks_a_deny_rule_fails_preview_naming_the_rule(api_servers, tmp_path: Path) -> None:
    _, kubeconfig = dev_clusters(api_servers, tmp_path)
    doc = yaml.safe_load((ROOT / "environments" / "dev.yaml").read_text())
    doc["budget"]["monthly"] = 100  # far below what the declared devices cost
    repo, _ = fleet_repo(tmp_path / "fleet", yaml.safe_dump(doc, sort_keys=False))
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("fleetops-test\n")
    out = run("deploy", "--env", "dev", "--preview", "--state", tmp_path / "state", "--kubeconfig", kubeconfig,
              "--passphrase-file", passphrase, "--pulumi", servers.tool("pulumi"), "--provider", servers.tool("pulumi-resource-kubernetes"),
              "--output", "json", cwd=repo, env={"FLEETOPS_DECISION_LOG": str(tmp_path / "decisions.jsonl")})
    assert out.returncode == 1, out.stdout + out.stderr
    document = json.loads(out.stdout)
    jsonschema.Draft202012Validator(envelope.json_schema()).validate(document)
    assert document["denied"] and not document["ok"] and document["operation"] == "preview"
    text = "\n".join(document["messages"])
    assert "[mandatory]  fleetops-deny" in text and "[budget.over_budget]" in text
    assert git(repo, "status", "--porcelain") == ""  # the preview wrote nothing to the fleet's repository


def readme_deploy_steps() -> str:
    """The shell blocks of the README's "Deploying with Pulumi" section, as a newcomer copies them."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## Deploying with Pulumi\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert blocks, "the README's deploy section has no sh block"
    return "\n".join(blocks)


def test_the_readmes_deploy_steps_run_as_written(api_servers, tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "fleetops").exists():
        servers.missing("no .venv/bin/fleetops: `make setup` creates it")
    servers.tool("pulumi"), servers.tool("pulumi-resource-kubernetes")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    started = api_servers(*CONTEXTS, crds=False)  # bare: the README's steps install what the fleet needs
    for server in started.values():
        server.start_controllers("resourcequota")
    kubeconfig = servers.write_kubeconfig(home / ".kube" / "config", {CONTEXTS[n]: (s, s.admin_token) for n, s in started.items()})
    status = git(ROOT, "status", "--porcelain")
    # A newcomer's shell: their own HOME, no Pulumi or XDG settings; decision records beside the test.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "XDG_", "KUBECONFIG", "FLEETOPS_"))}
    env.update(HOME=str(home), FLEETOPS_DECISION_LOG=str(tmp_path / "decisions.jsonl"))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", readme_deploy_steps()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = [line for line in done.stdout.splitlines() if line.startswith("pulumi ")]
    assert [r.split(" of ")[0] for r in reports] == ["pulumi preview", "pulumi preview", "pulumi up"], done.stdout
    assert all(r.endswith("; done") for r in reports), done.stdout
    assert "drift: 0, errors: 0" in done.stdout  # reconcile --detect-only after the deploy
    assert f"last applied: {git(ROOT, 'rev-parse', 'HEAD').strip()}" in done.stdout  # the revision deploy recorded in the clusters

    state = render.render(ROOT / "environments" / "dev.yaml", revision="any")
    for cluster, manifests in state.clusters.items():
        api = KubeCluster(cluster, kubeconfig=str(kubeconfig), context=CONTEXTS[cluster])
        for m in manifests:
            assert api.get(m["apiVersion"], m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]) is not None, m["metadata"]
    settings = home / ".local" / "state" / "fleetops" / "pulumi" / "work" / "Pulumi.dev.yaml"
    assert "encryptionsalt" in settings.read_text()  # the stack's settings: in the state folder...
    assert git(ROOT, "status", "--porcelain") == status  # ...and nothing in the repository changed
    for tracked in git(ROOT, "ls-files", "Pulumi*.yaml", "*/Pulumi*.yaml").split():
        assert "encryptionsalt" not in (ROOT / tracked).read_text(), tracked
    passphrase = (home / ".config" / "fleetops" / "pulumi-passphrase").read_text().strip()
    assert passphrase and passphrase not in done.stdout + done.stderr
