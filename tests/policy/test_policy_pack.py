"""The Pulumi policy pack's validations, without the Pulumi CLI: Pulumi's policy args built from a render.

tests/deploy/test_real_pulumi.py runs the same pack under the real Pulumi engine.
"""

from __future__ import annotations

import json

import contextlib
import datetime as dt
import shutil
import runpy
from pathlib import Path

import pytest
import yaml
from pulumi_policy import PolicyProviderResource, PolicyResourceOptions, ResourceValidationArgs, StackValidationArgs

from fleetops import policy, render, spec
from fleetops.envelope import DecisionStatus

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "pack"


def pulumi_type(manifest: dict) -> str:
    api = manifest["apiVersion"]
    return f"kubernetes:{api if '/' in api else 'core/' + api}:{manifest['kind']}"


def stack_resources(state: render.DesiredState) -> list[ResourceValidationArgs]:
    """What Pulumi hands a resource validation: each object's inputs as props, its cluster's provider."""
    opts = PolicyResourceOptions(protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 additional_secret_outputs=[], custom_timeouts=None)
    out = []
    for cluster in state.clusters:
        urn = f"urn:pulumi:{state.environment}::fleetops::pulumi:providers:kubernetes::{cluster}"
        provider = PolicyProviderResource("pulumi:providers:kubernetes", {}, urn, cluster)
        out.append(ResourceValidationArgs("pulumi:providers:kubernetes", {}, urn, cluster, opts, None))
        out.append(ResourceValidationArgs("fleetops:fleet:Cluster", {}, f"urn:x::{cluster}", cluster, opts, None))
        for i, (c, manifest) in enumerate((c, m) for c, m in state.objects() if c == cluster):
            # Typed resources' inputs carry no apiVersion/kind; custom resources' do.
            props = {k: v for k, v in manifest.items() if i % 2 or k not in ("apiVersion", "kind")}
            out.append(ResourceValidationArgs(pulumi_type(manifest), props, f"urn:obj:{cluster}:{i}", manifest["metadata"]["name"], opts, provider))
    return out


@pytest.fixture(scope="module")
def pack() -> dict:
    # Imported, not run as __main__: the PolicyPack (which serves Pulumi's analyzer gRPC) is not started.
    return runpy.run_path(str(PACK / "__main__.py"), run_name="fleetops_pack")


def validate(pack: dict, name: str, resources: list[ResourceValidationArgs], project: Path = ROOT) -> list[tuple[str, str | None]]:
    """The engine's order: every resource through the resource policy, then the stack policy once,
    in the project's folder, as Pulumi runs the pack."""
    reported: list[tuple[str, str | None]] = []
    pack["DECLARED"].clear()
    for resource in resources:
        pack["record_inputs"](resource, lambda message, urn=None: reported.append((message, urn)))
    assert reported == []  # recording never reports
    with contextlib.chdir(project):
        pack[name](StackValidationArgs([]), lambda message, urn=None: reported.append((message, urn)))
    return reported


def rendered(tmp_path: Path | None = None, change=None) -> tuple[spec.Environment, render.DesiredState]:
    path = ROOT / "environments" / "prod.yaml"
    if change is not None:
        doc = yaml.safe_load(path.read_text())
        change(doc)
        path = tmp_path / "prod.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return spec.load_environment(path), render.render(path, revision="test")


def test_the_pack_records_inputs_and_declares_a_mandatory_and_an_advisory_stack_policy(pack):
    levels = {p.name: p.enforcement_level.value for p in pack["POLICIES"]}
    assert levels == {"fleetops-inputs": "advisory", "fleetops-deny": "mandatory", "fleetops-warn": "advisory"}
    runtime = yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text())["runtime"]
    assert runtime["name"] == "python" and (PACK / runtime["options"]["virtualenv"]).resolve() == (PACK.parent.parent / ".venv").resolve()
    assert "pulumi-policy==1.21.0" in (PACK / "requirements.txt").read_text().splitlines()


def test_stack_input_equals_the_render_input():
    env, state = rendered()
    document, _ = policy.stack_input(stack_resources(state), ROOT / "environments")
    expected = policy.policy_input(env, state)
    assert document["facts"] == expected["facts"] and document["spec"] == expected["spec"]
    key = lambda r: (r["cluster"], r["kind"], r["namespace"], r["name"])  # noqa: E731
    assert sorted(document["resources"], key=key) == sorted(expected["resources"], key=key)


def test_prod_stack_has_no_mandatory_violation_and_reports_its_warnings(pack, decision_log):
    _, state = rendered()
    resources = stack_resources(state)
    assert validate(pack, "validate_denies", resources) == []
    (record,) = map(json.loads, decision_log.read_text().splitlines())  # the deny pass records; warnings do not again
    assert (record["source"], record["environment"], record["verdict"]) == ("pack", "prod", "allowed")
    warnings = [m for m, _ in validate(pack, "validate_warnings", resources)]
    assert "[budget.alert_threshold] projected monthly cost 539981 USD is 90% of the budget of 600000, past the 80% alert" in warnings


def test_a_deny_is_a_mandatory_violation_on_the_resource(pack, tmp_path):
    _, state = rendered(tmp_path, lambda d: d["clusters"][0]["pools"][2]["sharing"].update(replicas=8))
    resources = stack_resources(state)
    violations = validate(pack, "validate_denies", resources)
    (message, urn) = next(v for v in violations if v[0].startswith("[devices.time_slicing_replicas]"))
    target = next(r for r in resources if r.urn == urn)
    assert target.resource_type == "kubernetes:core/v1:ConfigMap" and target.name == "nvidia-device-plugin-a100-infer"


def test_a_stack_the_gate_cannot_read_is_a_mandatory_violation(pack):
    _, state = rendered()
    resources = stack_resources(state)
    orphan = next(r for r in resources if r.provider is not None)
    orphan.provider = None
    (message, urn), = validate(pack, "validate_denies", resources)
    assert message.startswith("fleetops policy gate could not decide: ") and "no Kubernetes provider" in message and urn is None
    assert validate(pack, "validate_warnings", resources) == []


def test_waivers_apply_in_the_pack_as_in_check(tmp_path):
    _, state = rendered()
    document, _ = policy.stack_input(stack_resources(state), ROOT / "environments")
    verdict = policy.evaluate_input(document, today=dt.date(2026, 12, 2))
    assert [d.rule for d in verdict.of(DecisionStatus.WAIVED)] == ["quota.tenant_share"]


def test_the_pack_judges_with_the_policies_and_waivers_of_the_project_it_runs_in(pack, tmp_path):
    project = tmp_path / "fleet"
    shutil.copytree(ROOT / "environments", project / "environments")
    shutil.copytree(ROOT / "policies", project / "policies", ignore=shutil.ignore_patterns("pack"))
    _, state = rendered()
    resources = stack_resources(state)
    (project / "policies" / "waivers.yaml").write_text("waivers: []\n")  # this project waives nothing
    denied = validate(pack, "validate_denies", resources, project)
    assert [m for m, _ in denied if m.startswith("[quota.tenant_share]")], denied
    assert validate(pack, "validate_denies", resources, ROOT) == []  # the bundled waiver, in the bundled repository
