"""The confined render: a revision's program answers as bounded, validated data, or not at all."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fleetops import isolate

pytestmark = pytest.mark.skipif(not isolate.available(), reason="the confined render needs Landlock (Linux 5.13+)")

ENV = "environments/x.yaml"


def program(tmp_path: Path, render_body: str) -> Path:
    """A revision's tree whose `fleetops.render.render_environment` runs `render_body` (returning clusters)."""
    tree = tmp_path / "tree"
    (tree / "fleetops").mkdir(parents=True)
    (tree / "environments").mkdir()
    (tree / ENV).write_text("environment: x\n")
    (tree / "fleetops" / "__init__.py").write_text("")
    (tree / "fleetops" / "spec.py").write_text(textwrap.dedent("""
        class SpecError(Exception):
            problems = []

        def load_environment(path, display=None):
            return open(path).read()
    """))
    (tree / "fleetops" / "render.py").write_text("class RenderError(Exception):\n    pass\n\n"
                                                  "class State:\n    pass\n\n"
                                                  "def render_environment(env, path, revision=None):\n"
                                                  + textwrap.indent(textwrap.dedent(render_body), "    ")
                                                  + "\n    state = State()\n    state.clusters = clusters\n    return state\n")
    return tree


def render(tree: Path, limits: isolate.Limits = isolate.LIMITS) -> dict:
    return isolate.start(tree, ENV, "abc", "x.yaml@abc", limits).finish()


def test_a_programs_objects_come_back_as_plain_data(tmp_path: Path) -> None:
    tree = program(tmp_path, 'clusters = {"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "1"}}}]}')
    assert render(tree) == {"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "1"}}}]}


@pytest.mark.parametrize("clusters, why", [
    ('{"c1": [{"kind": "Namespace", "metadata": {"name": "a"}}]}', "c1.0.apiVersion: Field required"),
    ('{"c1": [{"apiVersion": "v1", "kind": 5, "metadata": {"name": "a"}}]}', "c1.0.kind: Input should be a valid string"),
    ('{"c1": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {}}]}', "a Namespace without a name on c1"),
    ('{"c1": "not a list"}', "c1: Input should be a valid list"),
])
def test_an_answer_that_is_not_kubernetes_objects_is_refused(tmp_path: Path, clusters: str, why: str) -> None:
    with pytest.raises(isolate.IsolationError, match="x.yaml@abc: ") as caught:
        render(program(tmp_path, f"clusters = {clusters}"))
    assert why in str(caught.value)


def test_an_answer_over_its_bound_is_refused(tmp_path: Path) -> None:
    tree = program(tmp_path, 'clusters = {"c1": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "y" * (3 << 20)}}]}')
    with pytest.raises(isolate.IsolationError, match="answered more than 2 MiB"):
        render(tree, isolate.Limits(answer_bytes=2 << 20))


def test_a_program_that_never_ends_is_stopped_by_its_cpu_bound(tmp_path: Path) -> None:
    with pytest.raises(isolate.IsolationError, match="more than 1 s of CPU"):
        render(program(tmp_path, "while True:\n    pass"), isolate.Limits(cpu_seconds=1))


def test_a_program_that_takes_more_memory_than_its_bound_fails(tmp_path: Path) -> None:
    with pytest.raises(isolate.IsolationError, match="MemoryError"):
        render(program(tmp_path, "hog = bytearray(2 << 30)\nclusters = {}"), isolate.Limits(memory_bytes=1 << 30))


def test_what_a_program_prints_is_shown_without_control_characters(tmp_path: Path) -> None:
    tree = program(tmp_path, 'raise SystemExit("bad\\x1b[2J\\x07 input")')
    with pytest.raises(isolate.IsolationError) as caught:
        render(tree)
    assert "bad?[2J? input" in str(caught.value) and "\x1b" not in str(caught.value)
