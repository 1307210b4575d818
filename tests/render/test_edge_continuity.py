"""Edge continuity as declared and rendered: the disconnect policy, offline work and the model cache
(issue 24). The objects on the real API server: tests/render/test_real_edge_admission.py, tests/reconcile/test_real_edge.py."""

from __future__ import annotations

import hashlib
import re
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, spec
from modules import edge_group
from tests.command import run
from tests.helpers import one, render_env, small_env, write_env

DIGEST = "sha256:" + "ab" * 32


def jetson(env: dict[str, Any]) -> dict[str, Any]:
    return env["clusters"][1]["edge_groups"][0]


def continuity_env() -> dict[str, Any]:
    """The small environment whose Jetson group moves its pods after 30 s, caches one model and runs
    tenant factory's batch work offline on one device."""
    env = small_env()
    env["priority_classes"].append({"name": "night", "value": 10, "workload": "batch"})
    env["tenants"][1]["workloads"] = ["inference", "batch"]
    env["tenants"][1]["priority_classes"] = ["high", "night"]
    jetson(env).update({
        "disconnect": {"action": "move", "after_seconds": 30},
        "disk_gb": 64,
        "model_cache": [{"name": "detector", "size_gb": 2, "source": "https://models.example/detector.onnx", "digest": DIGEST}],
        "offline_work": {"tenants": ["factory"], "priority_classes": ["night"], "devices": 1},
    })
    return env


def problems(tmp_path: Path, env: dict[str, Any]) -> list[str]:
    with pytest.raises(spec.SpecError) as caught:
        render_env(tmp_path, env)
    return caught.value.lines


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("disconnect, message", [
    ({"action": "move"}, "action move needs after_seconds"),
    ({"action": "stay", "after_seconds": 30}, "action stay keeps pods bound however long the node is away: remove after_seconds"),
    ({"action": "leave"}, "must be one of 'stay' or 'move', got 'leave'"),
])
def test_a_disconnect_policy_that_says_too_little_or_too_much_is_refused_at_its_line(tmp_path: Path, disconnect, message) -> None:
    env = continuity_env()
    jetson(env)["disconnect"] = disconnect
    (problem,) = problems(tmp_path, env)
    assert re.fullmatch(r".*/test\.yaml:\d+:\d+: clusters\[edge-b\]\.edge_groups\[jetson\]\.disconnect(\.action)?: .*", problem) and message in problem


def test_autonomy_and_disconnect_together_are_refused(tmp_path: Path) -> None:
    env = continuity_env()
    jetson(env)["autonomy"] = True
    (problem,) = problems(tmp_path, env)
    assert "edge_groups[jetson]" in problem and "autonomy is the old spelling of disconnect: keep disconnect only" in problem


@pytest.mark.parametrize("autonomy, seconds", [(True, None), (False, 300)])
def test_the_old_autonomy_flag_reads_as_stay_or_the_api_servers_default_move(tmp_path: Path, autonomy: bool, seconds: int | None) -> None:
    env = small_env()
    jetson(env)["autonomy"] = autonomy
    group = spec.load_environment(write_env(tmp_path, env)).clusters[1].edge_groups[0]
    assert group.disconnect == spec.Disconnect(action="stay" if autonomy else "move", after_seconds=seconds)


def test_a_model_cache_larger_than_the_nodes_disk_is_refused(tmp_path: Path) -> None:
    env = continuity_env()
    jetson(env)["model_cache"].append({"name": "llm", "size_gb": 63, "source": "https://models.example/llm.gguf", "digest": DIGEST})
    (problem,) = problems(tmp_path, env)
    assert "edge_groups[jetson].model_cache: the cached models need 65 GB on every node, more than its disk_gb 64" in problem
    del jetson(env)["disk_gb"]
    (problem,) = problems(tmp_path, env)
    assert "a model cache of 65 GB needs the nodes' disk: declare disk_gb on the edge group" in problem


def test_a_cached_model_needs_a_sha256_digest_and_a_unique_name(tmp_path: Path) -> None:
    env = continuity_env()
    jetson(env)["model_cache"].append({**jetson(env)["model_cache"][0], "digest": "md5:1234"})
    (problem,) = problems(tmp_path, env)
    assert "model_cache[1].digest: must be 'sha256:' and 64 lowercase hex digits" in problem
    jetson(env)["model_cache"][1]["digest"] = DIGEST
    (problem,) = problems(tmp_path, env)
    assert "model_cache[1].name: duplicate cached model name 'detector'" in problem


def test_offline_work_only_for_tenants_and_classes_the_environment_allows(tmp_path: Path) -> None:
    env = continuity_env()
    env["tenants"][0]["priority_classes"] = ["high"]
    jetson(env)["offline_work"] = {"tenants": ["factory", "vision", "nobody"], "priority_classes": ["night", "high", "nightly"], "devices": 5}
    env["tenants"][1]["priority_classes"] = ["night"]
    found = problems(tmp_path, env)
    assert [p.split(": ", 1)[1] for p in found] == [
        "clusters[edge-b].edge_groups[jetson].offline_work.priority_classes[1]: tenant factory may not use priority class high (its classes: night)",
        "clusters[edge-b].edge_groups[jetson].offline_work.tenants[1]: tenant vision may not use edge group jetson: list edge-b in its clusters and jetson in its edge_groups",
        "clusters[edge-b].edge_groups[jetson].offline_work.tenants[2]: unknown tenant 'nobody'",
        "clusters[edge-b].edge_groups[jetson].offline_work.priority_classes[2]: unknown priority class 'nightly'",
        "clusters[edge-b].edge_groups[jetson].offline_work.devices: 5 nvidia.com/gpu for offline work, more than the group's 4",
    ]


def test_validate_names_file_line_and_field_and_exits_2(tmp_path: Path) -> None:
    env = continuity_env()
    jetson(env)["disconnect"] = {"action": "move"}
    write_env(tmp_path, env)
    result = run("validate", "--env", "test", "--environments", str(tmp_path))
    assert result.returncode == 2
    (line,) = (result.stdout + result.stderr).strip().splitlines()
    assert "test.yaml:" in line and "edge_groups[jetson].disconnect: action move needs after_seconds" in line


# --- rendering -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> render.DesiredState:
    return render_env(tmp_path_factory.mktemp("continuity"), continuity_env())


def test_the_disconnect_policy_mutates_only_the_groups_new_pods_tolerations(state: render.DesiredState) -> None:
    policy = one(state, "edge-b", "MutatingAdmissionPolicy", "fleetops-edge-disconnect-jetson")
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    body = policy["spec"]
    assert body["matchConstraints"]["resourceRules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    assert "object.spec.nodeSelector['fleetops.io/edge-group'] == 'jetson'" in body["matchConditions"][0]["expression"]
    (mutation,) = body["mutations"]
    patch = mutation["jsonPatch"]["expression"]
    assert mutation["patchType"] == "JSONPatch" and "path: '/spec/tolerations'" in patch
    # Serving work moves 30 s after the taint; the group's offline work (class night) stays.
    assert patch.count("tolerationSeconds: 30") == 2 and "object.spec.priorityClassName in ['night']" in patch
    binding = one(state, "edge-b", "MutatingAdmissionPolicyBinding", "fleetops-edge-disconnect-jetson")
    assert binding["spec"] == {"policyName": "fleetops-edge-disconnect-jetson"}


def test_a_staying_group_tolerates_without_seconds_and_tells_openyurt_0(tmp_path: Path) -> None:
    env = small_env()
    env["clusters"][1]["edge_runtime"] = "openyurt"
    state = render_env(tmp_path, env)
    patch = one(state, "edge-b", "MutatingAdmissionPolicy", "fleetops-edge-disconnect-jetson")["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert "tolerationSeconds" not in patch.split("+ [", 1)[1]
    assert one(state, "edge-b", "NodePool", "jetson")["spec"]["annotations"] == {"node.openyurt.io/autonomy-duration": "0"}


def test_offline_work_gets_its_own_queue_out_of_the_shared_capacity(state: render.DesiredState, tmp_path: Path) -> None:
    queue = one(state, "edge-b", "ClusterQueue", "jetson-offline")["spec"]
    assert "cohortName" not in queue  # offline, there is nobody to borrow from or lend to
    assert queue["namespaceSelector"]["matchExpressions"] == [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["factory"]}]
    assert queue["resourceGroups"][0]["flavors"] == [{"name": "jetson", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}]
    assert one(state, "edge-b", "LocalQueue", "jetson-offline", "factory")["spec"] == {"clusterQueue": "jetson-offline"}
    # The root cohort lends what no tenant guarantees, less the offline queue's device.
    def root_quota(s: render.DesiredState) -> int:
        (flavor,) = one(s, "edge-b", "Cohort", "edge-b")["spec"]["resourceGroups"][0]["flavors"]
        return flavor["resources"][0]["nominalQuota"]
    without = continuity_env()
    del jetson(without)["offline_work"]
    assert (root_quota(render_env(tmp_path, without)), root_quota(state)) == (2, 1)


def test_the_tenant_admission_admits_the_offline_queue_for_its_classes_only(state: render.DesiredState) -> None:
    policy = one(state, "edge-b", "ValidatingAdmissionPolicy", "fleetops-tenant-factory")["spec"]
    queue_rule = policy["validations"][-1]
    assert "== 'jetson-offline' && variables.priorityClass in ['night']" in queue_rule["expression"]
    assert "or jetson-offline for offline work of night" in queue_rule["messageExpression"]


def test_the_model_cache_daemonset_prefetches_onto_the_groups_nodes(state: render.DesiredState) -> None:
    ds = one(state, "edge-b", "DaemonSet", "fleetops-model-cache-jetson", "kube-system")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"fleetops.io/edge-group": "jetson"}
    assert pod["volumes"] == [{"name": "cache", "hostPath": {"path": "/var/lib/fleetops/models", "type": "DirectoryOrCreate"}}]
    (prefetch,) = pod["initContainers"]
    assert prefetch["image"] == edge_group.PREFETCH_IMAGE
    # The models are arguments, never pasted into the script: name, digest, URL.
    assert prefetch["command"][3:] == ["prefetch", "detector", "ab" * 32, "https://models.example/detector.onnx"]


def prefetch(cache: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The rendered prefetch script under sh, with a wget that copies a local file (the URL's path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wget = bin_dir / "wget"
    wget.write_text('#!/bin/sh\n# wget -q -O FILE URL\ncp "${4#file://}" "$3"\n')
    wget.chmod(wget.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CACHE": str(cache)}
    return subprocess.run(["sh", "-c", edge_group.PREFETCH_SCRIPT, "prefetch", *args], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs sha256sum")
def test_the_prefetch_keeps_only_files_whose_digest_matches(tmp_path: Path) -> None:
    cache, source = tmp_path / "cache", tmp_path / "model.onnx"
    cache.mkdir()
    source.write_bytes(b"weights v1")
    good = hashlib.sha256(b"weights v1").hexdigest()
    assert prefetch(cache, tmp_path, "detector", good, f"file://{source}").returncode == 0
    assert (cache / "detector").read_bytes() == b"weights v1"
    # A file that differs from its digest is refused and nothing half-written is left.
    result = prefetch(cache, tmp_path, "other", "00" * 32, f"file://{source}")
    assert result.returncode == 1 and f"other: sha256 differs from {'00' * 32}" in result.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["detector"]
    # A cached file that still matches is not fetched again (the source may be unreachable offline).
    source.unlink()
    assert prefetch(cache, tmp_path, "detector", good, f"file://{source}").returncode == 0
