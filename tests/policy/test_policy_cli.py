"""`fleetops check` and `fleetops policy test` as a person or CI runs them: real subprocesses, exit codes, output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests import command
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # An empty FLEETOPS_OPA_URL selects the embedded engine, whatever the caller's shell has set.
    return command.run(*args, env={"FLEETOPS_DECISION_LOG": str(tmp_path / "decisions.jsonl"), "FLEETOPS_OPA_URL": "", **env})


def mutated_env_dir(tmp_path: Path, change) -> Path:
    directory = tmp_path / "environments"
    directory.mkdir()
    doc = yaml.safe_load((ROOT / "environments" / "prod.yaml").read_text())
    change(doc)
    (directory / "prod.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


def test_check_prod_passes_with_its_budget_warning_and_logs_the_decision(tmp_path):
    proc = run("check", "--env", "prod", "--output", "json", tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True and report["summary"]["deny"] == 0
    assert [d["msg"] for d in report["decisions"] if d["rule"] == "budget.alert_threshold"] == [
        "projected monthly cost 539981 USD is 90% of the budget of 600000, past the 80% alert"
    ]
    assert [d["rule"] for d in report["decisions"] if d["status"] == "waived"] == ["quota.tenant_share"]
    (line,) = (tmp_path / "decisions.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert logged["environment"] == "prod" and logged["engine"] == "embedded"
    assert logged["policy_digest"] == report["policy_digest"] and logged["input_digest"] == report["input_digest"]


@pytest.mark.parametrize("name", ["dev", "staging"])
def test_check_other_bundled_environments_pass(tmp_path, name):
    proc = run("check", "--env", name, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^{name}: pass: 0 denied", proc.stdout, re.MULTILINE)


@pytest.mark.parametrize(
    "rule, change",
    [
        ("quota.guaranteed_over_capacity", lambda d: d["tenants"][0]["quota"].update({"nvidia.com/gpu": {"guaranteed": 400, "burst": 400}})),
        ("edge.training_on_edge", lambda d: d["tenants"][5].update(workloads=["training", "inference"])),
        ("network.missing_default_deny", lambda d: d["network"].update(default_deny=False)),
    ],
)
def test_check_a_denied_change_exits_1_naming_the_rule(tmp_path, rule, change):
    environments = mutated_env_dir(tmp_path, change)
    proc = run("check", "--env", "prod", "--environments", str(environments), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    assert rule in proc.stdout and "prod: FAIL" in proc.stdout


def test_check_junit_marks_denies_as_failures(tmp_path):
    environments = mutated_env_dir(tmp_path, lambda d: d["budget"].update(monthly=500000))
    proc = run("check", "--env", "prod", "--environments", str(environments), "--output", "junit", tmp_path=tmp_path)
    assert proc.returncode == 1
    suite = ET.fromstring(proc.stdout).find("testsuite")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert "budget.over_budget Budget/prod" in failed and "policy gate" in failed


def test_check_with_an_expired_waiver_exits_1_and_reports_the_waiver(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    waivers = yaml.safe_load((policies / "waivers.yaml").read_text())
    waivers["waivers"][0].update(created="2026-01-05", expires="2026-03-31")
    (policies / "waivers.yaml").write_text(yaml.safe_dump(waivers, sort_keys=False))
    proc = run("check", "--env", "prod", "--policies", str(policies), tmp_path=tmp_path)
    assert proc.returncode == 1
    assert "quota.tenant_share" in proc.stdout
    assert re.search(r"waiver ignored: .*waivers\.yaml:\d+:\d+: waivers\[0\]: waiver of quota.tenant_share expired on 2026-03-31", proc.stderr)


def test_check_a_policy_that_does_not_parse_exits_2_in_one_line(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    (policies / "edge.rego").write_text((policies / "edge.rego").read_text() + "\ndeny contains d if {\n")
    proc = run("check", "--env", "dev", "--policies", str(policies), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(r".*edge\.rego:\d+:\d+: .*\(no decision: failing closed\)", line)
    assert not (tmp_path / "decisions.jsonl").exists()


def test_check_an_unreachable_opa_exits_2_in_one_line_and_never_prints_the_token(tmp_path):
    port = free_port()  # nothing listens there
    proc = run("check", "--env", "dev", "--opa-url", f"http://admin:hunter2@127.0.0.1:{port}", tmp_path=tmp_path,
               FLEETOPS_OPA_TOKEN="s3cret-opa-token")
    no_traceback(proc)
    assert proc.returncode == 2
    # one line naming the server (without its credentials) and what failed; urllib3's text said neither plainly
    assert proc.stderr.strip() == f"OPA at http://127.0.0.1:{port}: no answer: connection refused (no decision: failing closed)"
    assert "s3cret-opa-token" not in proc.stdout + proc.stderr and not (tmp_path / "decisions.jsonl").exists()


def test_check_a_bad_live_inventory_exits_2_naming_the_file(tmp_path):
    inventory = tmp_path / "live.json"
    inventory.write_text('{"nodes": [{"cluster": "dev-center", "name": "n1"}]}')
    proc = run("check", "--env", "dev", "--live", str(inventory), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    assert re.search(r"live\.json:1:1: nodes\.0\.ready: Field required", proc.stderr)


def test_policy_test_reports_every_test_and_coverage(tmp_path):
    proc = run("policy", "test", "--output", "json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] and len(report["tests"]) >= 30
    assert all(c["percent"] >= 90 for c in report["coverage"])
    table = run("policy", "test", tmp_path=tmp_path)
    assert table.returncode == 0 and re.search(r"\d+ passed, 0 failed", table.stdout)


def test_policy_test_exits_1_on_a_failing_test(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    (policies / "wrong_test.rego").write_text("package fleet.wrong_test\n\ntest_always_fails if {\n\tfalse\n}\n")
    proc = run("policy", "test", "--policies", str(policies), tmp_path=tmp_path)
    assert proc.returncode == 1
    assert re.search(r"FAIL .*fleet\.wrong_test .*test_always_fails", proc.stdout)


def fleet_repository(tmp_path: Path) -> Path:
    """A fleet repository of its own: environments and policies beside each other, as users keep them."""
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "environments", repo / "environments")
    shutil.copytree(ROOT / "policies", repo / "policies", ignore=shutil.ignore_patterns("pack"))
    return repo


def test_check_audit_and_policy_test_judge_with_the_policies_of_the_repository_they_run_in(tmp_path):
    repo = fleet_repository(tmp_path)
    environ = {"FLEETOPS_DECISION_LOG": str(tmp_path / "decisions.jsonl"), "FLEETOPS_OPA_URL": ""}
    shipped = json.loads(command.run("check", "--env", "prod", "--output", "json", cwd=repo, env=environ).stdout)
    assert [d["rule"] for d in shipped["decisions"] if d["status"] == "waived"] == ["quota.tenant_share"]
    (repo / "policies" / "waivers.yaml").write_text("waivers: []\n")  # this repository waives nothing
    judged = command.run("check", "--env", "prod", "--output", "json", cwd=repo, env=environ)
    assert judged.returncode == 1, judged.stderr
    report = json.loads(judged.stdout)
    assert "quota.tenant_share" in [d["rule"] for d in report["decisions"] if d["status"] == "deny"]
    assert report["policy_digest"] != shipped["policy_digest"]  # the digest covers the waivers
    audit = json.loads(command.run("audit", "--env", "prod", "--output", "json", cwd=repo, env=environ).stdout)
    assert audit["waivers"] == [] and audit["provenance"]["policy_digest"] == report["policy_digest"]
    (repo / "policies" / "devices_test.rego").unlink()
    tested = json.loads(command.run("policy", "test", "--output", "json", cwd=repo, env=environ).stdout)
    assert not any(t["package"] == "fleet.devices_test" for t in tested["tests"])
    assert next(c for c in tested["coverage"] if c["path"] == "devices.rego")["percent"] < 100


def test_a_folder_without_policies_is_bad_input_not_a_pass(tmp_path):
    repo = fleet_repository(tmp_path)
    shutil.rmtree(repo / "policies")
    proc = command.run("check", "--env", "dev", cwd=repo, env={"FLEETOPS_DECISION_LOG": str(tmp_path / "d.jsonl"), "FLEETOPS_OPA_URL": ""})
    assert proc.returncode == 2 and "policies: no policy folder" in proc.stderr and "failing closed" in proc.stderr


def test_check_a_rego_file_that_is_not_utf8_exits_2_naming_it(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    (policies / "edge.rego").write_bytes((policies / "edge.rego").read_bytes() + b"\n# na\xefve\n")
    proc = run("check", "--env", "dev", "--policies", str(policies), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(r".*edge\.rego:\d+: not UTF-8 \(.*\) \(no decision: failing closed\)", line)


def test_check_a_key_written_twice_in_policy_data_exits_2_naming_it(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    data = policies / "data.yaml"
    data.write_text(data.read_text().replace("  max_latency_ms: 20\n", "  max_latency_ms: 20\n  max_latency_ms: 5000\n"))
    proc = run("check", "--env", "dev", "--policies", str(policies), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(r".*data\.yaml:\d+:3: edge\.max_latency_ms: duplicate key \(no decision: failing closed\)", line)


@pytest.mark.parametrize("nesting", ["[" * 100_000, '{"nodes": ' * 100_000])
def test_check_a_deeply_nested_live_inventory_exits_2_in_one_line(tmp_path, nesting):
    inventory = tmp_path / "live.json"
    inventory.write_text(nesting)
    proc = run("check", "--env", "dev", "--live", str(inventory), tmp_path=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(r".*live\.json:1:1: the live inventory is nested too deeply .*\(no decision: failing closed\)", line)
