"""The files `render -o` writes: the compiled YAML writer writes what the plain one does, and the
writer fork and this process share the files out so that each is written once, all land or none."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.generate import synthetic_yaml
from fleetops import emit, render, yamltext
from tests.helpers import ROOT
from tests.test_render import TRICKY

VALUES = [{"s": {t: t for t in TRICKY if t}, "l": TRICKY, "n": [0, -1, 1.5, 1e9, 2**40, True, False, None], "e": [{}, [], {"x": []}],
           "nested": [[1, [2]], [{"a": {"b": [{"c": "d"}]}}]]}, {}]


def compiled() -> emit.Text:
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        pytest.skip("FLEETOPS_PURE_PYTHON is set: the plain module writes")
    writer = emit.native()
    if writer is None:
        compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(compiler) and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
            # setup.py builds it wherever it can: missing here means not built, or built from another text
            pytest.fail(f"fleetops._yamltext is missing or was built from another yamltext.py: run `make setup` ({compiler} and Python.h are here)")
        pytest.skip("no C compiler or no Python headers: fleetops writes YAML with the plain module")
    return writer


def test_render_writes_with_the_compiled_writer_where_it_was_built() -> None:
    assert emit.documents is compiled()


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_the_compiled_writer_writes_the_bytes_of_the_plain_one_for_every_bundled_environment(name: str) -> None:
    writer = compiled()
    state = render.render(ROOT / "environments" / f"{name}.yaml", revision="r")
    for manifests in state.clusters.values():
        assert writer(manifests) == yamltext.documents(manifests)


@pytest.mark.parametrize("scale", [0.05, 0.2])
def test_the_compiled_writer_writes_the_bytes_of_the_plain_one_on_the_generated_fleet(tmp_path: Path, scale: float) -> None:
    writer = compiled()
    env_file = tmp_path / "large.yaml"
    env_file.write_text(synthetic_yaml(scale))
    for manifests in render.render(env_file, revision="r").clusters.values():
        assert writer(manifests) == yamltext.documents(manifests)


@pytest.mark.parametrize("writer", ["plain", "compiled"])
def test_both_writers_round_trip_every_kind_of_value(writer: str) -> None:
    documents = yamltext.documents if writer == "plain" else compiled()
    assert documents(VALUES) == yamltext.documents(VALUES)
    assert list(yaml.safe_load_all(documents(VALUES))) == VALUES


class Label(str):
    """A str subclass, as a StrEnum member in a manifest would be."""


def test_the_compiled_writer_takes_what_the_plain_one_takes() -> None:
    # Compiled, an annotation is a type check: `str` would refuse a subclass, `list` a tuple.
    writer = compiled()
    odd = ({"kind": Label("ConfigMap"), "data": {Label("k"): Label("two\nlines\n"), "v": Label("yes")}},)
    assert writer(odd) == yamltext.documents(odd)
    assert list(yaml.safe_load_all(writer(odd))) == [{"kind": "ConfigMap", "data": {"k": "two\nlines\n", "v": "yes"}}]


def test_a_compiled_writer_built_from_another_text_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled()
    from fleetops import _yamltext  # type: ignore[attr-defined]

    monkeypatch.setattr(_yamltext, "SOURCE_SHA256", "0" * 64)  # as after an edit of yamltext.py without a build
    assert emit.native() is None
    monkeypatch.setattr(_yamltext, "SOURCE_SHA256", _yamltext.SOURCE_SHA256)
    monkeypatch.setenv("FLEETOPS_PURE_PYTHON", "1")
    assert emit.native() is None


def files_of(tmp_path: Path, count: int) -> dict[Path, list[dict[str, Any]]]:
    return {tmp_path / "out" / f"c{i}.yaml": [{"kind": "ConfigMap", "metadata": {"name": f"m{i}-{j}"}, "data": {"k": "v"}} for j in range(3)]
            for i in range(count)}


def test_the_writer_and_this_process_each_write_a_file_once_the_writer_from_the_first_this_process_from_the_last(tmp_path: Path) -> None:
    # The writer holds on in its first file until this process writes the second: by then this
    # process has taken every file from the last back to the second, and the writer must stop after its first.
    here = os.getpid()
    begun, second = multiprocessing.get_context("fork").Event(), multiprocessing.get_context("fork").Event()
    files = files_of(tmp_path, 6)
    paths = list(files)

    def text(manifests: list[dict[str, Any]]) -> str:
        if os.getpid() != here:
            begun.set()
            assert second.wait(timeout=120), "this process never took the second file"
        elif manifests == files[paths[1]]:
            second.set()
        return f"# {'writer' if os.getpid() != here else 'here'}\n{yamltext.documents(manifests)}"

    with emit.Files("objects", text) as out:
        for path, manifests in files.items():
            out.add(path, manifests)
        assert begun.wait(timeout=120), "the writer never began"
        assert out.commit() == 6
    assert [p.read_text().splitlines()[0] for p in paths] == ["# writer"] + ["# here"] * 5
    for path, manifests in files.items():
        assert list(yaml.safe_load_all(path.read_text())) == manifests


def by_whom(here: int) -> emit.Text:
    return lambda manifests: f"# {'writer' if os.getpid() != here else 'here'}\n{yamltext.documents(manifests)}"


def test_objects_orjson_cannot_carry_are_written_here(tmp_path: Path) -> None:
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"n": 2**70}}]  # beyond 64 bits
    with emit.Files("objects", by_whom(os.getpid())) as out:
        out.add(tmp_path / "big.yaml", manifests)
        out.commit()
    text = (tmp_path / "big.yaml").read_text()
    assert text.startswith("# here\n") and list(yaml.safe_load_all(text)) == manifests


def test_a_file_reads_the_same_whoever_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # JSON, what the API server receives: a tuple is a list and NaN is null, by the writer, by this
    # process at commit, and by this process with no fork to be had alike.
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "odd"}, "data": {"t": (1, "a"), "f": float("nan")}}]
    expected = "---\ndata:\n  f: null\n  t:\n  - 1\n  - a\nkind: ConfigMap\nmetadata:\n  name: odd\n"
    begun, release = multiprocessing.get_context("fork").Event(), multiprocessing.get_context("fork").Event()
    here = os.getpid()

    def text(manifests: list[dict[str, Any]]) -> str:
        if os.getpid() != here and not begun.is_set():
            begun.set()  # the writer keeps the first file until this process has written the second
            assert release.wait(timeout=120), "this process never wrote the second file"
        elif os.getpid() == here:
            release.set()
        return emit.documents(manifests)

    with emit.Files("objects", text) as out:
        for name in ("by-writer", "by-here"):
            out.add(tmp_path / f"{name}.yaml", manifests)
        assert begun.wait(timeout=120), "the writer never began"
        out.commit()
    monkeypatch.setattr(emit._Writer, "start", classmethod(lambda cls, what, text: None))  # no fork
    with emit.Files("objects", emit.documents) as out:
        out.add(tmp_path / "no-fork.yaml", manifests)
        out.commit()
    assert [(tmp_path / f"{name}.yaml").read_text() for name in ("by-writer", "by-here", "no-fork")] == [expected] * 3


def test_text_no_file_can_hold_is_one_line_and_lands_nothing(tmp_path: Path) -> None:
    manifests = [{"kind": "ConfigMap", "metadata": {"name": "x\ud800"}}]  # a lone surrogate: orjson refuses it too
    with pytest.raises(emit.WriteError, match=r"^.*x.yaml: cannot write objects: '\\ud800' is not text UTF-8 can hold$"), \
            emit.Files("objects", emit.documents) as out:
        out.add(tmp_path / "out" / "x.yaml", manifests)
        out.commit()
    assert not (tmp_path / "out").exists()


def test_a_failing_writer_lands_nothing_and_says_why_in_one_line(tmp_path: Path) -> None:
    here = os.getpid()
    begun = multiprocessing.get_context("fork").Event()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c0.yaml").write_text("old\n")

    def text(manifests: list[dict[str, Any]]) -> str:
        if os.getpid() != here:
            begun.set()
            raise emit.WriteError("c0.yaml: cannot write objects: No space left on device")
        return yamltext.documents(manifests)

    with pytest.raises(emit.WriteError, match=r"^c0.yaml: cannot write objects: No space left on device$"), emit.Files("objects", text) as out:
        for path, manifests in files_of(tmp_path, 4).items():
            out.add(path, manifests)
        assert begun.wait(timeout=120), "the writer never began"
        out.commit()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["c0.yaml"]
    assert (tmp_path / "out" / "c0.yaml").read_text() == "old\n"


def test_a_writer_killed_before_its_files_lands_nothing(tmp_path: Path) -> None:
    with pytest.raises(emit.WriteError, match=r"^writing objects: the process ended without an answer \(exit -9\)$"), \
            emit.Files("objects", emit.documents) as out:
        assert out.writer is not None
        out.writer.forked.proc.kill()  # the OOM killer
        out.writer.forked.proc.join()
        for path, manifests in files_of(tmp_path, 3).items():
            out.add(path, manifests)
        out.commit()
    assert not (tmp_path / "out").exists()


def test_files_are_written_here_without_a_temporary_folder_for_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_folder() -> None:
        raise FileNotFoundError(2, "No usable temporary directory found")

    monkeypatch.setattr(emit.tempfile, "TemporaryFile", no_folder)
    files = files_of(tmp_path, 3)
    with emit.Files("objects", emit.documents) as out:
        assert out.writer is None
        for path, manifests in files.items():
            out.add(path, manifests)
        assert out.commit() == 3
    for path, manifests in files.items():
        assert list(yaml.safe_load_all(path.read_text())) == manifests


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
