"""What the API server, JSON and the policies refuse, refused by validate at the line that causes it:
counts whose product or sum passes what a JSON number holds exactly, objects over the API server's size,
names derived from declared ones past the limit of whoever reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from fleetops import spec
from tests.cli import run
from tests.helpers import small_env, write_env
from tests.test_cli import COMMANDS, env_dir

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
