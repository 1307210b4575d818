"""Render enforces the engine's rules, reports program failures in one line, and its speed-ups change nothing:
the direct render gives byte for byte what the stack program gives under the Pulumi SDK."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from benchmarks.generate import synthetic_yaml
from fleetops import cli, emit, output, render, sdk_render, spec
from modules import fleet
from modules.kube import Part, Target
from tests.helpers import ROOT, small_env, write_env

PROVIDER = '''
import pulumi
import pulumi_kubernetes as k8s

opts = pulumi.ResourceOptions(provider=k8s.Provider("center-a", context="ctx-a"))
'''


def run_custom(tmp_path: Path, body: str) -> render.DesiredState:
    program = tmp_path / "program.py"
    program.write_text(PROVIDER + body)
    return render.render(write_env(tmp_path, small_env()), revision="rev", engine="pulumi", program=program)


def test_custom_program_objects_are_collected_per_cluster(tmp_path: Path) -> None:
    state = run_custom(tmp_path, 'k8s.core.v1.ConfigMap("a", metadata={"name": "a", "namespace": "default"}, data={"n": "1"}, opts=opts)\n')
    assert state.clusters["center-a"] == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"n": "1"}}]
    assert state.clusters["edge-b"] == []


def config_maps(*objects: tuple[str, str, str]) -> str:
    """Program lines declaring ConfigMaps on the center-a provider: (Pulumi name, name, namespace)."""
    return "".join(
        f'k8s.core.v1.ConfigMap("{resource}", metadata={{"name": "{name}", "namespace": "{namespace}"}}, opts=opts)\n'
        for resource, name, namespace in objects
    )


def test_two_resources_with_one_urn_are_refused(tmp_path: Path) -> None:
    body = config_maps(("same", "a", "default"), ("same", "b", "default"))
    with pytest.raises(render.RenderError, match=r"two resources share the URN urn:pulumi:test::fleetops::pulumi:pulumi:Stack\$kubernetes:core/v1:ConfigMap::same$"):
        run_custom(tmp_path, body)


def test_one_object_declared_twice_in_a_cluster_is_refused(tmp_path: Path) -> None:
    body = config_maps(("first", "cfg", "default"), ("second", "cfg", "default"))
    with pytest.raises(render.RenderError, match=r"center-a declares ConfigMap default/cfg twice"):
        run_custom(tmp_path, body)


def test_same_name_in_two_namespaces_is_two_objects(tmp_path: Path) -> None:
    body = config_maps(("first", "cfg", "one"), ("second", "cfg", "two"))
    assert len(run_custom(tmp_path, body).clusters["center-a"]) == 2


def test_an_object_without_a_cluster_provider_is_refused(tmp_path: Path) -> None:
    body = 'k8s.core.v1.ConfigMap("loose", metadata={"name": "loose", "namespace": "default"})\n'
    with pytest.raises(render.RenderError, match="is not bound to a cluster provider"):
        run_custom(tmp_path, body)


def test_an_input_known_only_after_deployment_is_refused(tmp_path: Path) -> None:
    body = (
        'first = k8s.core.v1.ConfigMap("first", metadata={"name": "first", "namespace": "default"}, opts=opts)\n'
        'k8s.core.v1.ConfigMap("second", metadata={"name": "second", "namespace": "default"}, data={"uid": first.metadata.uid}, opts=opts)\n'
    )
    with pytest.raises(render.RenderError, match="has an input known only after deployment"):
        run_custom(tmp_path, body)


def test_a_failing_program_is_one_render_error(tmp_path: Path) -> None:
    with pytest.raises(render.RenderError, match=r"the stack program failed: ZeroDivisionError: division by zero"):
        run_custom(tmp_path, "1 / 0\n")


# --- the optimised render against the stock SDK mocks -------------------------------------------


class _Echo(pulumi.runtime.Mocks):
    """The SDK's documented mock: every resource resolves to its inputs, on the SDK's own monitor."""

    def __init__(self) -> None:
        self.objects: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        if args.typ == sdk_render.PROVIDER_TYPE:
            return args.name, {}
        if args.custom and args.typ.startswith("kubernetes:"):
            self.objects.append((args.provider.rsplit("::", 1)[-1], args.inputs))
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


def _integers(text: str) -> float | int:
    number = float(text)
    return int(number) if number.is_integer() else number


def stock_render(env_file: Path, revision: str) -> dict[str, list[dict[str, Any]]]:
    """The stack program under the SDK's documented mocks as they come: not a preview, outputs echoed."""
    mocks = _Echo()
    pulumi.runtime.reset_options(project="fleetops", stack="prod", preview=False)
    pulumi.runtime.set_mocks(mocks, project="fleetops", stack="prod", preview=False)
    pulumi.runtime.set_all_config({"fleetops:specFile": str(env_file), "fleetops:revision": revision})

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(render.STACK_PROGRAM), run_name="__main__")

    program()
    clusters: dict[str, list[dict[str, Any]]] = {}
    for cluster, inputs in mocks.objects:
        clusters.setdefault(cluster, []).append(json.loads(json.dumps(inputs), parse_float=_integers))
    return clusters


def canonical(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True)  # the SDK's Struct keeps no key order


def test_direct_render_equals_the_stock_sdk_on_prod() -> None:
    env_file = ROOT / "environments" / "prod.yaml"
    stock = stock_render(env_file, "rev-equal")
    ours = render.render(env_file, revision="rev-equal").clusters
    assert sum(map(len, ours.values())) == sum(map(len, stock.values())) > 150
    assert {c: sorted(ms, key=canonical) for c, ms in ours.items()} == {c: sorted(ms, key=canonical) for c, ms in stock.items()}


def rendered_files(state: render.DesiredState) -> dict[str, str]:
    """What `fleetops render -o DIR` writes: one YAML file per cluster."""
    return {cluster: output.dump(manifests, output.ObjectFormat.yaml) for cluster, manifests in state.clusters.items()}


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_direct_render_is_byte_identical_to_the_stack_program_for_every_bundled_environment(name: str) -> None:
    env_file = ROOT / "environments" / f"{name}.yaml"
    direct = render.render(env_file, revision="rev-same")
    sdk = render.render(env_file, revision="rev-same", engine="pulumi")
    assert rendered_files(direct) == rendered_files(sdk)
    assert direct.resources == sdk.resources and direct.object_count > 90


@pytest.mark.parametrize("scale", [0.02, 0.05, 0.1])
def test_direct_render_is_byte_identical_on_the_generated_fleet_at_several_scales(tmp_path: Path, scale: float) -> None:
    env_file = tmp_path / "large.yaml"
    env_file.write_text(synthetic_yaml(scale))
    direct = render.render(env_file, revision="rev-same")
    sdk = render.render(env_file, revision="rev-same", engine="pulumi")
    assert rendered_files(direct) == rendered_files(sdk)
    assert direct.resources == sdk.resources > 200 * scale * 10


def test_the_direct_render_refuses_two_parts_with_one_urn_as_the_engine_does(monkeypatch: pytest.MonkeyPatch) -> None:
    target = Target(cluster="center-a", environment="test")
    twice = [Part("fleetops:fleet:Tenant", "center-a/ml", target), Part("fleetops:fleet:Tenant", "center-a/ml", target)]
    monkeypatch.setattr(fleet, "fleet", lambda env: Part(fleet.FLEET, "test", parts=twice))
    with pytest.raises(render.RenderError, match=r"two resources share the URN fleetops:fleet:Fleet::fleetops:fleet:Tenant::center-a/ml"):
        render.render(ROOT / "environments" / "dev.yaml", revision="r")


def test_policy_and_reconcile_never_edit_the_rendered_objects() -> None:
    """The direct render shares lists and dicts between objects (the same rules, the same labels), as
    the SDK's copies did not: its consumers must read them only, or one object's edit changes another."""
    from fleetops import policy, reconcile
    from tests.fakes import MemoryCluster
    from tests.reconcile_support import allow, options

    env_file = ROOT / "environments" / "dev.yaml"
    env, state = spec.load_environment(env_file), render.render(env_file, revision="r")
    before = rendered_files(state)
    policy.evaluate(env, state)
    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "applied"
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "clean"
    assert rendered_files(state) == before


TRICKY = ["", "yes", "No", "ON", "y", "null", "~", "true", "1", "1.0", "1e3", "0x1F", "0o17", "12:30", "2026-01-01", ".inf", "-",
          "- x", "a: b", "#x", "x #y", "*ref", "&a", "!tag", "%x", "@x", "`x", "'q'", '"q"', " lead", "trail ", "a\tb",
          "line\n", "two\nlines", "two\nlines\n\n", " indented\nblock\n", "tab\n\tin block\n", "ünïcode", "emoji 🔒",
          "nvidia.com/gpu", "a/b_c-d.e", "C0FFEE", "e10", "nan", "Null", "<<", "=", "?x", "{x}", "[x]", "x,y", "|", ">"]


def test_the_yaml_writer_round_trips_every_kind_of_value() -> None:
    objects = [{"s": {t: t for t in TRICKY if t}, "l": TRICKY, "n": [0, -1, 1.5, 1e9, 2**40, True, False, None], "e": [{}, [], {"x": []}],
                "nested": [[1, [2]], [{"a": {"b": [{"c": "d"}]}}]]}, {}]
    assert list(yaml.safe_load_all(output.dump(objects, output.ObjectFormat.yaml))) == objects


def test_every_rendered_file_reads_back_as_the_objects() -> None:
    for name in ("dev", "staging", "prod"):
        state = render.render(ROOT / "environments" / f"{name}.yaml", revision="r")
        for manifests in state.clusters.values():
            assert list(yaml.safe_load_all(output.dump(manifests, output.ObjectFormat.yaml))) == manifests


def test_the_direct_render_refuses_one_object_declared_twice_in_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    target = Target(cluster="dev-center", environment="dev")
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}}
    twice = [Part("fleetops:fleet:Tenant", "dev-center/a", target, lambda: [dict(config)]),
             Part("fleetops:fleet:Tenant", "dev-center/b", target, lambda: [dict(config)])]
    monkeypatch.setattr(fleet, "fleet", lambda env: Part(fleet.FLEET, "dev", parts=twice))
    with pytest.raises(render.RenderError, match=r"dev-center declares ConfigMap default/cfg twice"):
        render.render(ROOT / "environments" / "dev.yaml", revision="r")


def test_files_written_as_the_render_goes_land_all_at_once_or_not_at_all(tmp_path: Path) -> None:
    state = render.render(ROOT / "environments" / "prod.yaml", revision="r")
    out = tmp_path / "a" / "b"
    with emit.Files("objects") as files:
        for cluster, manifests in state.clusters.items():
            files.put(out / f"{cluster}.yaml", emit.documents(manifests))
        assert not [p for p in out.iterdir() if p.suffix == ".yaml"]  # nothing in place before commit
    assert not (tmp_path / "a").exists()  # left without commit: no file, no temporary, no folder of ours
    with emit.Files("objects") as files:
        for cluster, manifests in state.clusters.items():
            files.put(out / f"{cluster}.yaml", emit.documents(manifests))
        assert files.commit() == len(state.clusters)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c}.yaml" for c in state.clusters)
    for cluster, manifests in state.clusters.items():
        assert (out / f"{cluster}.yaml").read_text() == emit.documents(manifests)


def test_a_tenant_finds_the_groups_of_the_cluster_it_is_given_not_of_the_one_it_was_copied_from() -> None:
    env = spec.load_environment(ROOT / "environments" / "dev.yaml")
    edge = next(c for c in env.clusters if c.edge_groups)
    tenant = next(t for t in env.tenants if t.edge_groups)
    assert [g.fingerprints for g in spec.eligible_groups(tenant, [edge])] != [[]]  # the index of `edge` is built now
    bare = edge.model_copy(update={"edge_groups": [g.model_copy(update={"fingerprints": []}) for g in edge.edge_groups]})
    assert [g.fingerprints for g in spec.eligible_groups(tenant, [bare])] == [[]]
    assert bare == bare.model_copy() and edge != bare


def test_load_checked_is_the_file_its_objects_and_their_schema_check(tmp_path: Path) -> None:
    path = write_env(tmp_path, small_env())
    checked = render.load_checked(path, display="environments/test.yaml", revision="rev-x")
    assert checked.env.environment == "test" and checked.document.positions.file == "environments/test.yaml"
    assert checked.state.revision == "rev-x" and checked.state.object_count > 50
    env = small_env()
    env["clusters"][0]["pools"][0]["taints"] *= 9  # a Kueue ResourceFlavor takes at most 8
    with pytest.raises(spec.SpecError) as raised:
        render.load_checked(write_env(tmp_path, env), display="environments/test.yaml", revision="rev-x")
    assert [p.split(": [")[0] for p in raised.value.lines] == [
        "environments/test.yaml: rendered object fails its schema: center-a: ResourceFlavor a100-ts: spec.nodeTaints"]


def test_a_render_over_the_object_limit_stops_at_the_cluster_that_crosses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_env(tmp_path, small_env())
    per_cluster = {c: len(objs) for c, objs in render.load_checked(path, revision="r").state.clusters.items()}
    assert list(per_cluster) == ["center-a", "edge-b"]
    monkeypatch.setattr(spec, "LIMITS", spec.Limits(objects=per_cluster["center-a"] + 1))
    done: list[str] = []
    with pytest.raises(render.RenderError) as raised:
        render.load_checked(path, display="environments/test.yaml", revision="r", each_cluster=lambda cluster, objects: done.append(cluster))
    assert str(raised.value) == (f"environments/test.yaml: renders more than {per_cluster['center-a'] + 1:,} objects, the limit for one "
                                 f"environment (fleetops.spec.LIMITS); {sum(per_cluster.values()):,} by cluster edge-b")
    assert done == ["center-a"]  # nothing of the cluster that crossed it was handed on


def test_plan_refuses_a_head_over_the_object_limit_in_the_words_render_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Head's objects may come from head's own program rendered in isolation: plan counts them again, as render does.
    from fleetops import plan
    from fleetops.errors import PlanError

    state = render.load_checked(write_env(tmp_path, small_env()), revision="r").state
    total = sum(len(objs) for objs in state.clusters.values())
    monkeypatch.setattr(spec, "LIMITS", spec.Limits(objects=total - 1))
    with pytest.raises(PlanError) as raised:
        plan.check_schema(plan.RenderedSide("head", True, clusters=state.clusters), "environments/test.yaml")
    assert str(raised.value) == (f"environments/test.yaml: renders more than {total - 1:,} objects, the limit for one "
                                 f"environment (fleetops.spec.LIMITS); {total:,} in all")


def test_render_says_two_parts_with_one_urn_in_one_line_and_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    # The composition's error is of fleetops's one family: the CLI's one handler prints it, no traceback.
    target = Target(cluster="center-a", environment="test")
    twice = [Part("fleetops:fleet:Tenant", "center-a/ml", target), Part("fleetops:fleet:Tenant", "center-a/ml", target)]
    monkeypatch.setattr(fleet, "fleet", lambda env: Part(fleet.FLEET, "test", parts=twice))
    monkeypatch.setattr(cli.memory, "for_a_command", lambda: None)  # a command's process ends; this one goes on
    monkeypatch.setattr("sys.argv", ["fleetops", "render", "--env", "dev", "--environments", str(ROOT / "environments"),
                                     "--revision", "r", "-o", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    lines = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    assert lines[0].endswith(": two resources share the URN fleetops:fleet:Fleet::fleetops:fleet:Tenant::center-a/ml")
    assert not (tmp_path / "out").exists()
