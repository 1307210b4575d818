"""What the API server, JSON and the policies refuse, refused by validate at the line that causes it:
counts whose product or sum passes what a JSON number holds exactly, objects over the API server's size,
names derived from declared ones past the limit of whoever reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from fleetops import spec
from tests.command import run
from tests.helpers import small_env, write_env
from tests.cli.test_cli import COMMANDS, env_dir

BIG = 2**32  # each within its field's bound (2^53 - 1); their product is not


def _problems(tmp_path: Path, env: dict[str, Any]) -> list[str]:
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(write_env(tmp_path, env))
    return list(raised.value.lines)


def _pool(env: dict[str, Any], **fields: Any) -> None:
    env["clusters"][0]["pools"][0].update(fields)


def _service(env: dict[str, Any]) -> None:
    env["services"] = [{"name": "chat", "tenant": "vision", "cluster": "center-a", "pools": ["a100-ts"], "server": "vllm",
                        "devices": {"resource": "nvidia.com/gpu", "count": BIG * BIG // 2**16}, "replicas": {"min": 1, "max": 2**31 - 1},
                        "targets": {"gpu_utilisation_percent": 60}}]
    env["tenants"][0]["workloads"] = ["training", "inference"]


OVERFLOWS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "nodes x per_node": (lambda env: _pool(env, nodes=BIG, device={"resource": "nvidia.com/gpu", "model": "A100-PCIE-40GB", "per_node": BIG}),
                         "clusters[center-a].pools[a100-ts].nodes", "the environment's devices (nodes x per_node) add up to 18,446,744,073,709,551,616"),
    "devices x time-slicing replicas": (lambda env: _pool(env, sharing={"mode": "time-slicing", "replicas": 2**51}),
                                        "clusters[center-a].pools[a100-ts].sharing", "the environment's schedulable units"),
    "quota over tenants": (lambda env: [q.update(guaranteed=2**52, burst=2**52) for t in env["tenants"] for q in t["quota"].values()],
                           "tenants[vision].quota[\"huawei.com/Ascend910\"]", "the tenants' quotas, counted in each of their clusters add up to"),
    "replicas x devices": (_service, "services[chat].replicas.max", "the services' devices at their replicas' max"),
}


@pytest.mark.parametrize("case", sorted(OVERFLOWS))
def test_counts_whose_product_or_sum_passes_a_json_number_are_refused_at_their_line(case: str, tmp_path: Path) -> None:
    change, path, what = OVERFLOWS[case]
    env = small_env()
    change(env)
    (line,) = [p for p in _problems(tmp_path, env) if "2^53 - 1" in p]
    assert f": {path}: " in line and what in line, line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_overflowing_product_is_one_line_in_every_command_not_a_traceback(command: list[str], tmp_path: Path) -> None:
    # Before: validate passed, and check, plan and audit crashed writing the policy input ("Integer exceeds 64-bit range").
    env = small_env()
    OVERFLOWS["nodes x per_node"][0](env)
    envs = env_dir(tmp_path, env)
    done = run(*command, "--env", "test", "--environments", envs, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{envs / 'test.yaml'}:") and "pools[a100-ts].nodes: the environment's devices" in line


def test_plan_refuses_an_overflowing_head_at_its_line(tmp_path: Path) -> None:
    from tests.plan.test_plan import commit, edit, make_repo, plan_json

    repo = make_repo(tmp_path)
    edit(repo, "model: H100-SXM-80GB, per_node: 8}\n        nodes: 16", f"model: H100-SXM-80GB, per_node: {BIG}}}\n        nodes: {BIG}")
    commit(repo, "2^64 H100s")
    code, result = plan_json(repo)
    assert code == 2, result
    (problem,) = result["problems"]
    assert (problem["file"], problem["line"]) == ("environments/prod.yaml", 12) and "2^53 - 1" in problem["message"]


def _model_cache(count: int, url_chars: int = 1000) -> dict[str, Any]:
    env = small_env()
    group = env["clusters"][1]["edge_groups"][0]
    group["disk_gb"] = count
    group["model_cache"] = [{"name": f"model-{i}", "size_gb": 1, "digest": f"sha256:{i:064x}",
                             "source": f"https://models.example.internal/{'x' * (url_chars - 40)}/{i}.onnx"} for i in range(count)]
    return env


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_model_cache_the_api_server_could_not_store_is_refused_by_every_command(command: list[str], tmp_path: Path) -> None:
    # Before: 1,500 cached models rendered a DaemonSet of 1.63 MB, over etcd's 1.5 MiB request limit: every
    # apply of it failed, on every pass, while validate, render and check passed it.
    envs = env_dir(tmp_path, _model_cache(1500))
    done = run(*command, "--env", "test", "--environments", envs, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{envs / 'test.yaml'}: rendered object is refused by the API server: edge-b: DaemonSet fleetops-model-cache-jetson: (root): ")
    assert "bytes of JSON, more than the 1,572,864 (1.5 MiB) the API server stores in one object" in line
    assert done.stdout == "" and not (tmp_path / "report.html").exists()


def test_a_model_cache_within_the_limit_is_rendered(tmp_path: Path) -> None:
    from fleetops import render

    render.load_checked(write_env(tmp_path, _model_cache(1000)))  # about 1.1 MB


def _offline_group(env: dict[str, Any], name: str) -> None:
    env["clusters"][1]["edge_groups"][0].update(name=name, offline_work={"tenants": ["factory"], "priority_classes": ["high"], "devices": 1})
    env["tenants"][1].update(edge_groups=[name], priority_classes=["high"])


@pytest.mark.parametrize("length", [58, 63])
def test_a_tenant_name_whose_queue_no_job_can_name_is_refused_at_the_name(length: int, tmp_path: Path) -> None:
    # Before: a tenant of 58 to 63 characters rendered LocalQueue <name>-queue of 64 to 69; jobs name their
    # queue in a label value, which holds 63, so the tenant could never submit one.
    env = small_env()
    name = "t" * length
    env["tenants"][0]["name"] = name
    (line,) = _problems(tmp_path, env)
    assert f":57:3: tenants[{name}].name: its LocalQueue {name}-queue would be {length + 6} characters, more than the 63 a label value holds" in line
    assert line.endswith("shorten the tenant's name to at most 57 characters")
    env["tenants"][0]["name"] = "t" * 57
    spec.load_environment(write_env(tmp_path, env))


def test_a_tenant_name_whose_non_preempting_queue_no_job_can_name_is_refused(tmp_path: Path) -> None:
    env = small_env()
    env["priority_classes"].append({"name": "steady", "value": 1001, "workload": "inference", "preemption": "Never"})
    env["tenants"][0].update(name="t" * 50, priority_classes=["high", "steady"])   # its -non-preempting-queue: 71
    (line,) = _problems(tmp_path, env)
    assert f"its LocalQueue {'t' * 50}-non-preempting-queue would be 71 characters" in line and line.endswith("at most 42 characters")


def test_an_edge_group_name_whose_offline_queue_no_job_can_name_is_refused_at_the_name(tmp_path: Path) -> None:
    env = small_env()
    _offline_group(env, "g" * 60)
    (line,) = _problems(tmp_path, env)
    assert f"edge_groups[{'g' * 60}].name: its LocalQueue {'g' * 60}-offline would be 68 characters" in line
    assert line.endswith("shorten the edge group's name to at most 55 characters")
    _offline_group(env, "g" * 55)
    spec.load_environment(write_env(tmp_path, env))


@pytest.mark.parametrize("manifest, refused", [
    ({"kind": "LocalQueue", "metadata": {"name": "q" * 64}}, "LocalQueue " + "q" * 64 + ": metadata.name: 64 characters: must be a label value"),
    ({"kind": "Service", "metadata": {"name": "s" * 64}}, "metadata.name: 64 characters: must be a DNS-1123 label"),
    ({"kind": "ConfigMap", "metadata": {"name": "c" * 254}}, "metadata.name: 254 characters: must be a DNS-1123 subdomain"),
    ({"kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x" * (1 << 20)}}, "data: 1,048,577 bytes, more than the 1,048,576 (1 MiB) a ConfigMap holds"),
    ({"kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "x" * (256 << 10)}}}, "metadata.annotations: 262,145 bytes"),
    ({"kind": "Pod", "metadata": {"name": "p", "labels": {"fleetops.io/tenant": "t" * 64}}}, "metadata.labels.fleetops.io/tenant: "),
])
def test_what_any_program_renders_past_the_api_server_s_limits_is_refused(manifest: dict[str, Any], refused: str) -> None:
    # Whatever program rendered it (a revision under review renders with its own): the limits are the
    # API server's, not the environment file's.
    from fleetops import schema

    (problem,) = schema.limit_problems([("c1", {"apiVersion": "v1", **manifest})])
    assert refused in str(problem), str(problem)
