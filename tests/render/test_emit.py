"""The files `render -o` writes: the C writer writes yamltext's bytes (and orjson's, for
`--output json`), and all files land or none."""

from __future__ import annotations

import os
import random
import shutil
import sysconfig
from pathlib import Path
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson
import pytest
import yaml

from benchmarks.generate import synthetic_yaml
from fleetops import emit, render, yamltext
from tests.helpers import ROOT
from tests.render.test_render import TRICKY

EXACT = [{"s": {t: t for t in TRICKY if t}, "l": TRICKY, "n": [0, -1, 2**40, 2**63 - 1, -(2**63), True, False, None],
          "e": [{}, [], {"x": []}], "nested": [[1, [2]], [{"a": {"b": [{"c": "d"}]}}]]}, {}]


def native() -> ModuleType:
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        pytest.skip("FLEETOPS_PURE_PYTHON is set: yamltext writes")
    writer = emit.native()
    if writer is None:
        compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(compiler) and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
            # setup.py builds it wherever it can: missing here means not built, or built from another text
            pytest.fail(f"fleetops._yamlwriter is missing or was built from another _yamlwriter.pyx: run `make setup` ({compiler} and Python.h are here)")
        pytest.skip("no C compiler or no Python headers: yamltext writes")
    return writer


FORMATS = pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])


def reference(as_json: bool) -> Callable[[list[dict[str, Any]]], str]:
    """The text the C writer must write byte for byte: yamltext's, or orjson's."""
    return orjson_text if as_json else yamltext.documents


def orjson_text(manifests: list[dict[str, Any]]) -> str:
    return orjson.dumps(manifests, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


@FORMATS
@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_the_c_writer_writes_the_reference_bytes_for_every_bundled_environment(name: str, as_json: bool) -> None:
    writer = native()
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="r")
    for manifests in state.clusters.values():
        assert writer.documents(manifests, as_json) == reference(as_json)(manifests)


@FORMATS
@pytest.mark.parametrize("scale", [0.05, 0.2, 1.0])
def test_the_c_writer_writes_the_reference_bytes_on_the_generated_fleet(tmp_path: Path, scale: float, as_json: bool) -> None:
    writer = native()
    env_file = tmp_path / "large.yaml"
    env_file.write_text(synthetic_yaml(scale))
    for manifests in render.render(env_file, revision="r").clusters.values():
        assert writer.documents(manifests, as_json) == reference(as_json)(manifests)


@FORMATS
def test_the_c_writer_writes_every_kind_of_json_value_as_the_reference_does(as_json: bool) -> None:
    assert native().documents(EXACT, as_json) == reference(as_json)(EXACT)
    assert list(yaml.safe_load_all(emit.documents(EXACT))) == EXACT


@FORMATS
def test_the_c_writer_sorts_a_large_mapping_as_the_reference_does(as_json: bool) -> None:
    keys = [f"k{i}" for i in range(5000)] + ["é", "ü", "中", "\U0001f512", "Z", "_"]
    random.Random(3).shuffle(keys)
    manifests = [{"kind": "ConfigMap", "data": {k: k for k in keys}}]
    assert native().documents(manifests, as_json) == reference(as_json)(manifests)


def awkward(rng: random.Random, depth: int = 0) -> Any:
    """A random value of exact JSON types, with the strings that make YAML hard."""
    pick = rng.random()
    if depth < 4 and pick < 0.25:
        return {awkward_str(rng): awkward(rng, depth + 1) for _ in range(rng.randrange(0, 40 if rng.random() < 0.1 else 5))}
    if depth < 4 and pick < 0.4:
        return [awkward(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if pick < 0.5:
        return rng.choice([0, -1, 7, 2**31, -(2**62), 2**63 - 1, -(2**63), True, False, None])
    return awkward_str(rng)


def awkward_str(rng: random.Random) -> str:
    chars = "aZ09_./- :#'\"\\\n\t\r\x00\x07\x1f\x7f\x85\xe9\u2028\u2029\ufeff\u4e2d\U0001f512"
    if rng.random() < 0.4:
        return rng.choice(TRICKY)
    return "".join(rng.choice(chars) for _ in range(rng.randrange(0, 12)))


@FORMATS
def test_the_c_writer_writes_the_reference_bytes_for_random_awkward_manifests(as_json: bool) -> None:
    writer, rng = native(), random.Random(12)
    for _ in range(3000):
        manifests = [{awkward_str(rng): awkward(rng, 1) for _ in range(rng.randrange(0, 6))} for _ in range(rng.randrange(1, 4))]
        assert writer.documents(manifests, as_json) == reference(as_json)(manifests), manifests


class Label(str):
    """A str subclass, as a StrEnum member in a manifest would be."""


@pytest.mark.parametrize("value", [1.5, (1, "a"), Label("x"), "lone \ud800", 2**63, -(2**63) - 1, {1: "int key"}, "deep"],
                         ids=["float", "tuple", "str-subclass", "surrogate", "int-over-64-bits", "int-under-64-bits", "int-key", "deep"])
def test_values_the_c_writer_leaves_to_yamltext(value: Any) -> None:
    writer = native()
    if value == "deep":
        value = []
        for _ in range(300):
            value = [value, 1]
    for as_json in (False, True):
        assert writer.documents([{"kind": "ConfigMap", "data": {"v": value}}], as_json) is None
    odd = [{"kind": Label("ConfigMap"), "data": {Label("k"): Label("two\nlines\n"), "v": Label("yes")}}]
    assert emit.documents(odd) == yamltext.documents(odd)  # emit's documents takes it all the same


def test_a_c_writer_built_from_another_text_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    writer = native()
    monkeypatch.setattr(writer, "SOURCE_SHA256", "0" * 64)  # as after an edit of _yamlwriter.pyx without a build
    assert emit.native() is None
    monkeypatch.setattr(writer, "SOURCE_SHA256", writer.SOURCE_SHA256)
    monkeypatch.setenv("FLEETOPS_PURE_PYTHON", "1")
    assert emit.native() is None


def files_of(tmp_path: Path, count: int) -> dict[Path, list[dict[str, Any]]]:
    return {tmp_path / "out" / f"c{i}.yaml": [{"kind": "ConfigMap", "metadata": {"name": f"m{i}-{j}"}, "data": {"k": "v", "n": j}} for j in range(50)]
            for i in range(count)}


def test_a_file_reads_the_same_whoever_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # JSON, what the API server receives: a tuple is a list and NaN is null, whether the C writer
    # leaves the manifests to yamltext or was not built at all.
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "odd"}, "data": {"t": (1, "a"), "f": float("nan")}}]
    expected = "---\ndata:\n  f: null\n  t:\n  - 1\n  - a\nkind: ConfigMap\nmetadata:\n  name: odd\n"
    left_by_c = emit.documents(manifests)
    monkeypatch.setattr(emit, "_NATIVE", None)
    assert [left_by_c, emit.documents(manifests)] == [expected] * 2


def test_objects_orjson_cannot_carry_are_written_as_they_are(tmp_path: Path) -> None:
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"n": 2**70}}]  # beyond 64 bits
    with emit.Files("objects") as out:
        out.put(tmp_path / "big.yaml", emit.documents(manifests))
        out.commit()
    assert list(yaml.safe_load_all((tmp_path / "big.yaml").read_text())) == manifests


def test_text_no_file_can_hold_is_one_line_and_lands_nothing(tmp_path: Path) -> None:
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "x\ud800"}}]  # a lone surrogate: orjson refuses it too
    with pytest.raises(emit.WriteError, match=r"^.*x.yaml: cannot write objects: '\\ud800' is not text UTF-8 can hold$"), \
            emit.Files("objects") as out:
        out.put(tmp_path / "out" / "x.yaml", emit.documents(manifests))
        out.commit()
    assert not (tmp_path / "out").exists()


def test_a_file_that_cannot_be_written_lands_nothing_and_says_why_in_one_line(tmp_path: Path) -> None:
    files = files_of(tmp_path, 4)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c2.yaml").write_text("old\n")
    (tmp_path / "out" / ".c2.yaml.tmp").mkdir()  # where the writer must write c2.yaml first
    with pytest.raises(emit.WriteError, match=r"^.*c2\.yaml: cannot write objects: Is a directory$"), emit.Files("objects") as out:
        for path, manifests in files.items():
            out.put(path, emit.documents(manifests))
        out.commit()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".c2.yaml.tmp", "c2.yaml"]
    assert (tmp_path / "out" / "c2.yaml").read_text() == "old\n"


def test_a_render_that_fails_after_writing_files_lands_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the render failed"), emit.Files("objects") as out:
        for path, manifests in files_of(tmp_path, 30).items():
            out.put(path, emit.documents(manifests))
        raise ValueError("the render failed")
    assert not (tmp_path / "out").exists()  # no file, no temporary, no folder of ours


def test_a_rename_that_fails_partway_puts_back_the_files_renamed_before_it(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("a", "b", "c"):
        (out_dir / f"{name}.yaml").write_text(f"old {name}\n")
    with pytest.raises(emit.WriteError, match=r"^.*b\.yaml: cannot write objects: Is a directory$"), emit.Files("objects") as out:
        for name in ("new", "a", "b", "c"):
            out.put(out_dir / f"{name}.yaml", f"new {name}\n")
        (out_dir / "b.yaml").unlink()
        (out_dir / "b.yaml").mkdir()  # made a folder by someone else after it was written: its rename fails
        out.commit()
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.yaml", "b.yaml", "c.yaml"]  # no temporary files, no new.yaml
    assert [(out_dir / f"{name}.yaml").read_text() for name in ("a", "c")] == ["old a\n", "old c\n"]


def test_ctrl_c_while_the_files_are_renamed_leaves_the_folder_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("a", "b"):
        (out_dir / f"{name}.yaml").write_text(f"old {name}\n")
    rename, renamed = Path.replace, []

    def interrupted(self: Path, target: Path) -> Path:
        if self.name.endswith(".tmp"):
            renamed.append(self)
            if len(renamed) == 3:  # "new" and "a" are in place: SIGINT arrives
                raise KeyboardInterrupt
        return rename(self, target)

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt), emit.Files("objects") as out:
        for name in ("new", "a", "b"):
            out.put(out_dir / f"{name}.yaml", f"new {name}\n")
        out.commit()
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.yaml", "b.yaml"]
    assert [(out_dir / f"{name}.yaml").read_text() for name in ("a", "b")] == ["old a\n", "old b\n"]


def test_a_second_name_left_by_a_killed_run_does_not_stop_the_next(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("old\n")
    (tmp_path / ".a.yaml.old").write_text("left by a run killed between its renames\n")
    with emit.Files("objects") as out:
        out.put(tmp_path / "a.yaml", "new\n")
        assert out.commit() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"] and (tmp_path / "a.yaml").read_text() == "new\n"


def test_where_the_file_system_has_no_hard_links_files_are_still_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(emit.os, "link", no_links)
    (tmp_path / "a.yaml").write_text("old\n")
    with emit.Files("objects") as out:
        out.put(tmp_path / "a.yaml", "new\n")
        out.put(tmp_path / "b.yaml", "new b\n")
        assert out.commit() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"] and (tmp_path / "a.yaml").read_text() == "new\n"
