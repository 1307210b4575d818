"""Every bundled environment renders to objects the API server would accept, and the check has teeth."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fleetops import render, schema
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def prod() -> render.DesiredState:
    return render.render(ROOT / "environments" / "prod.yaml", revision="rev-schema")


def first(state: render.DesiredState, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(m for _, m in state.objects() if m["kind"] == kind))


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_rendered_object_of_a_bundled_environment_validates(name: str) -> None:
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="rev-schema")
    assert schema.validate_objects(state.objects()) == []


def test_custom_resources_are_checked_against_their_upstream_crds(prod: render.DesiredState) -> None:
    crds = schema.crd_schemas(schema.crd_dir())
    kinds = {(m["apiVersion"], m["kind"]) for _, m in prod.objects()}
    custom = {("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("apps.kubeedge.io/v1alpha1", "NodeGroup"), ("apps.openyurt.io/v1beta2", "NodePool")}
    assert custom <= kinds
    assert custom <= set(crds)


def test_unknown_field_in_a_core_kind_is_caught(prod: render.DesiredState) -> None:
    ds = first(prod, "DaemonSet")
    ds["spec"]["template"]["spec"]["nodeSelectorr"] = {"a": "b"}
    (problem,) = schema.validate_objects([("c", ds)])
    assert (problem.kind, problem.path) == ("DaemonSet", "spec.template.spec")
    assert "'nodeSelectorr' was unexpected" in problem.message


def test_wrong_type_in_a_core_kind_is_caught(prod: render.DesiredState) -> None:
    pc = first(prod, "PriorityClass")
    pc["value"] = "high"
    (problem,) = schema.validate_objects([("c", pc)])
    assert (problem.kind, problem.path) == ("PriorityClass", "value")
    assert problem.message.startswith('"high" is not of type') and '"integer"' in problem.message


def test_unknown_field_in_a_custom_resource_is_caught(prod: render.DesiredState) -> None:
    queue = first(prod, "ClusterQueue")
    queue["spec"]["cohort"] = "v1beta1-spelling"  # v1beta2 names it cohortName
    (problem,) = schema.validate_objects([("c", queue)])
    assert (problem.kind, problem.path) == ("ClusterQueue", "spec")
    assert "'cohort' was unexpected" in problem.message


def test_wrong_type_in_a_custom_resource_is_caught(prod: render.DesiredState) -> None:
    group = first(prod, "NodeGroup")
    group["spec"]["matchLabels"] = ["not", "a", "map"]
    (problem,) = schema.validate_objects([("c", group)])
    assert (problem.kind, problem.path) == ("NodeGroup", "spec.matchLabels")
    assert problem.message == '["not","a","map"] is not of type "object"'


def test_a_crd_pattern_in_go_regex_syntax_is_read_as_the_api_server_reads_it(prod: render.DesiredState) -> None:
    # prometheus-operator's `^(?i)(abort|warn)?$` is RE2 (Go), not ECMA 262: any case of the words passes.
    rule = first(prod, "PrometheusRule")
    for value, ok in (("Warn", True), ("ABORT", True), ("sometimes", False)):
        rule["spec"]["groups"][0]["partial_response_strategy"] = value
        problems = schema.validate_objects([("c", rule)])
        assert (problems == []) is ok, problems
    assert problems[0].path == "spec.groups.0.partial_response_strategy"


def test_a_kind_without_any_schema_is_a_problem() -> None:
    (problem,) = schema.validate_objects([("c", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})])
    assert "no schema for example.com/v1 Widget" in problem.message


def test_a_crd_that_is_no_schema_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "widgets.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "spec:\n  group: example.com\n  names: {kind: Widget}\n"
        "  versions:\n  - name: v1\n    schema:\n      openAPIV3Schema: {type: object, properties: {spec: {type: 5}}}\n"
    )
    (problem,) = schema.validate_objects([("c", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})], crds=tmp_path)
    assert problem.message.startswith(f"the schema of example.com/v1 Widget in {tmp_path} is not usable: ")


def test_a_refused_long_value_is_one_short_line_that_keeps_why(prod: render.DesiredState) -> None:
    # The message quotes the value it refuses: 1,000 flavors of a tenant's ClusterQueue made one line of 100 kB.
    queue = first(prod, "ClusterQueue")
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    flavors += [{**flavors[0], "name": f"extra-{i}"} for i in range(1000)]
    (problem,) = schema.validate_objects([("c", queue)])
    assert (problem.kind, problem.path) == ("ClusterQueue", "spec.resourceGroups.0.flavors")
    assert len(str(problem)) < 400 and "\n" not in str(problem)
    assert problem.message.startswith('[{"name":') and problem.message.endswith("has more than 64 items")
