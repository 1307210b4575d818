"""The render under the Pulumi SDK takes nothing from the SDK but its public API (issue 27): a Pulumi
upgrade changes it only where it changes what programs send. The one class it takes beyond the
documented mocks, the mock monitor (for the URN check), is held to its behaviour here."""

from __future__ import annotations

import ast
from pathlib import Path

import pulumi
import pulumi.runtime
import pytest

from fleetops import render, sdk_render
from tests.render.test_render import run_custom

# The one name taken from outside the SDK's `__all__`: `Mocks.new_resource` is told a resource's type
# and name but not its parent, so only the monitor (set_mocks' `monitor` argument) knows its URN.
BEYOND_ALL = {"pulumi.runtime.mocks.MockMonitor"}


def pulumi_reaches(source: str) -> tuple[set[str], list[str]]:
    """The dotted names a module's source takes from the Pulumi SDK, and every statement that assigns
    or deletes an attribute of the SDK (a patch), as "line N: name"."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            alias.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0] for a in node.names if a.name.startswith("pulumi")})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pulumi"):
            alias.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return alias.get(node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    reached = set(alias.values()) | {name for node in ast.walk(tree) if isinstance(node, ast.Attribute) and (name := dotted(node))}
    patches = [f"line {node.lineno}: {dotted(target)}" for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete)
               for target in (node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target])
               if isinstance(target, ast.Attribute) and dotted(target)]
    patches += [f"line {node.lineno}: setattr" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and dotted(node.args[0])]
    return reached, patches


def is_public(name: str) -> bool:
    """Whether a dotted SDK name is exported by `pulumi` or `pulumi.runtime` (the installed SDK's
    `__all__`), or a public attribute of what they export (a method of an exported class)."""
    for module in (pulumi.runtime, pulumi):  # the more specific first
        if name == module.__name__:
            return True
        if name.startswith(module.__name__ + "."):
            first, *rest = name.removeprefix(module.__name__ + ".").split(".")
            return first in module.__all__ and not any(part.startswith("_") for part in rest)
    return False


def test_the_sdk_render_takes_only_the_sdks_public_api() -> None:
    reached, patches = pulumi_reaches(Path(sdk_render.__file__).read_text())
    assert not patches, f"sdk_render patches the Pulumi SDK: {patches}"
    assert sorted(n for n in reached if not is_public(n) and n not in BEYOND_ALL) == []
    assert {"pulumi.runtime.set_mocks", "pulumi.runtime.test"} <= reached


def test_the_fleets_objects_ask_for_the_provider_version_pulumi_kubernetes_own_resources_ask_for() -> None:
    from pulumi_kubernetes import _utilities  # the SDK's own choice, private: read here only to compare

    from modules import program

    assert program.K8S_VERSION == _utilities.get_version()


def test_the_check_finds_what_the_render_did_before() -> None:
    """The check itself can fail: it finds every private name and patch of the render before issue 27."""
    before = '''
import pulumi.resource as pulumi_resource_api
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await
pulumi_resource._get_stack_trace = None
pulumi_resource_api.register_resource = None
del pulumi_resource._get_stack_trace
'''
    reached, patches = pulumi_reaches(before)
    assert patches == ["line 5: pulumi.runtime.resource._get_stack_trace", "line 6: pulumi.resource.register_resource",
                       "line 7: pulumi.runtime.resource._get_stack_trace"]
    assert sorted(n for n in reached if not is_public(n)) == [
        "pulumi.resource", "pulumi.resource.register_resource", "pulumi.runtime.resource", "pulumi.runtime.resource._get_stack_trace",
        "pulumi.runtime.sync_await._ensure_event_loop", "pulumi.runtime.sync_await._sync_await"]


# --- the mock monitor, the one class beyond the documented mocks: its URN check still runs -------

# After test_render's PROVIDER, which declares `opts` with the center-a provider.
COMPONENTS = '''
class Part(pulumi.ComponentResource):
    def __init__(self, type_, name, objects):
        super().__init__(type_, name)
        for resource, config_map in objects:
            k8s.core.v1.ConfigMap(resource, metadata={"name": config_map, "namespace": name},
                                  opts=pulumi.ResourceOptions(parent=self, provider=opts.provider))
'''


def test_two_resources_of_one_name_under_one_component_type_are_refused_with_their_urn(tmp_path: Path) -> None:
    body = 'Part("test:fleet:Tenant", "ml", [("cfg", "a")])\nPart("test:fleet:Tenant", "vision", [("cfg", "b")])\n'
    urn = r"urn:pulumi:test::fleetops::test:fleet:Tenant\$kubernetes:core/v1:ConfigMap::cfg"
    with pytest.raises(render.RenderError, match=f"two resources share the URN {urn}$"):
        run_custom(tmp_path, COMPONENTS + body)


def test_one_name_under_two_component_types_is_two_urns(tmp_path: Path) -> None:
    state = run_custom(tmp_path, COMPONENTS + 'Part("test:fleet:Tenant", "ml", [("cfg", "a")])\nPart("test:fleet:Pool", "h100", [("cfg", "b")])\n')
    assert sorted(m["metadata"]["namespace"] for m in state.clusters["center-a"]) == ["h100", "ml"]
    assert state.resources == 5  # the provider, two components, two objects
