"""The review shows who may newly reach whom (spec.reach, per cluster, pair and port), and a change
that opens a tenant marked `isolation: strict` waits for approvals."""

from __future__ import annotations

from pathlib import Path

from tests.plan.test_plan import commit, edit, plan, plan_json, repo  # noqa: F401 - the fixture

STRICT = "    isolation: strict\n    quota:\n      nvidia.com/gpu: {guaranteed: 48, burst: 64}\n    network:\n      allow_to_endpoints: [model-registry]\n"


def test_opening_a_strict_tenant_is_listed_and_needs_approvals(repo: Path) -> None:  # noqa: F811
    edit(repo, STRICT, STRICT.replace("allow_to_endpoints: [model-registry]\n", "allow_to_endpoints: [model-registry]\n      allow_from_tenants: [vision]\n"))
    commit(repo, "llm-pretrain lets vision in")
    code, result = plan_json(repo)
    texts = [c["text"] for c in result["fleet_changes"]]
    assert "center-bj: llm-pretrain ← vision :every port opened" in texts  # vision is on center-bj only
    assert not [t for t in texts if t.startswith("center-sh: llm-pretrain ←")]
    assert code == 1 and result["verdict"] == "needs-approval"
    assert [d["msg"] for d in result["decisions"] if d["status"] == "approval"] == [
        "center-bj: llm-pretrain ← vision :every port opened (isolation strict) needs 2 approvals, has 0"]
    assert "center-bj: llm-pretrain ← vision :every port opened" in plan(repo, "--env", "prod").stdout
    code, result = plan_json(repo, "--approvals", "2")
    assert code == 0 and result["verdict"] == "allowed"


def test_closing_and_opening_a_shared_tenant_is_listed_per_port_and_not_gated(repo: Path) -> None:  # noqa: F811
    edit(repo, "allow_from_tenants: [vision]", "allow_from_tenants: [research]")
    edit(repo, "allow_to_endpoints: [model-registry, telemetry]", "allow_to_endpoints: [model-registry]")
    commit(repo, "speech: research in, vision out, no telemetry")
    code, result = plan_json(repo)
    texts = {c["text"] for c in result["fleet_changes"] if c["subject"].startswith("reach/")}
    assert texts == {"center-bj: speech ← research :every port opened", "center-bj: speech ← vision :every port closed",
                     "center-bj: telemetry (10.20.2.0/24) ← speech :4317 closed"}
    assert code == 0 and result["verdict"] == "allowed"
