"""The order the fleet declares (modules.kube.prerequisites) is the order every route applies in.

`pulumi up` registers each object with `depends_on` its prerequisites; render's apply order and the
reconciler's (fleetops.kube.apply_order / kind_rank) must put every prerequisite first too, or the API
server refuses an object whose Namespace is not there yet (issue 42: the first `up` of a generated
fleet failed that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks import generate
from fleetops import render
from fleetops.errors import RenderError
from fleetops.kube import apply_order, describe, key_of, kind_rank
from modules.kube import prerequisites


ROOT = Path(__file__).resolve().parents[2]


def generated(tmp_path, scale: float):
    path = tmp_path / "environments" / "gen.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(generate.synthetic_environment(scale, "gen"), sort_keys=False))
    return path


def test_every_prerequisite_comes_first_in_render_and_reconcile_order(tmp_path) -> None:
    state = render.render(generated(tmp_path, 0.05), revision="r")
    checked = 0
    for cluster, manifests in state.clusters.items():
        position = {key_of(m): i for i, m in enumerate(sorted(manifests, key=apply_order))}
        for manifest in manifests:
            for needed in prerequisites(manifest):
                if needed in position:  # kube-system is the cluster's, not the fleet's
                    assert position[needed] < position[key_of(manifest)], (cluster, describe(key_of(manifest)), describe(needed))
                    assert kind_rank({"kind": needed[1]}) < kind_rank(manifest), (describe(needed), manifest["kind"])
                    checked += 1
    # Every tenant's objects wait for its Namespace, every plugin for its ServiceAccount and ConfigMap.
    assert checked > state.object_count / 2


def test_a_workload_needs_its_service_account_and_config_maps() -> None:
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "p", "namespace": "ns"},
                 "spec": {"template": {"spec": {"serviceAccountName": "sa", "volumes": [
                     {"name": "a", "configMap": {"name": "cfg"}}, {"name": "b", "emptyDir": {}}]}}}}
    assert prerequisites(daemonset) == [("v1", "Namespace", "", "ns"), ("v1", "ServiceAccount", "ns", "sa"), ("v1", "ConfigMap", "ns", "cfg")]
    assert prerequisites({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}) == []


# The stack program as it was before issue 42 (objects registered with no depends_on), run as
# `render --engine pulumi` runs any program: under the SDK's mocks.
WAITS_FOR_NOTHING = '''
import runpy
import modules.program
declared = modules.program.prerequisites
modules.program.prerequisites = lambda manifest: []
try:
    runpy.run_path({program!r}, run_name="__main__")
finally:
    modules.program.prerequisites = declared
'''


def test_a_program_whose_objects_wait_for_nothing_is_refused_naming_the_first(tmp_path) -> None:
    """The first `up` of a generated fleet failed with "namespaces … not found" because the engine was
    told no order (issue 42); that program is refused before any engine runs it. The fleet's own program
    passes the same check on every bundled environment and the generated fleet at three scales
    (tests/render/test_render.py renders them all through it)."""
    program = tmp_path / "__main__.py"
    program.write_text(WAITS_FOR_NOTHING.format(program=str(render.STACK_PROGRAM)))
    with pytest.raises(RenderError, match=r"center-bj's .* is registered without depends_on its Namespace \S+: the engine may create it first"):
        render.render(ROOT / "environments" / "prod.yaml", revision="r", engine="pulumi", program=program)
