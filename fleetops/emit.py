"""Rendered manifests written as files, all at once or not at all.

The YAML text is fleetops.yamltext's. `fleetops._yamlwriter` writes the same bytes in C where it
was built (setup.py): 0.3 s of CPU less than yamltext for the large fleet's files, `render -o`
1.15x the render's CPU instead of 1.8x (benchmarks/README.md, "What pays"). yamltext writes them otherwise, and
writes any file with a value the C writer leaves to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from fleetops import yamltext
from fleetops.errors import FleetopsError

def native() -> ModuleType | None:
    """The C writer, or None when it was not built, or was built from another text of _yamlwriter.pyx."""
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        return None
    try:
        from fleetops import _yamlwriter  # type: ignore[attr-defined]
    except ImportError:  # not built (no C compiler), or built for another Python
        return None
    try:
        source = Path(__file__).with_name("_yamlwriter.pyx").read_bytes()
    except OSError:  # installed without its source: what it was built from cannot be told
        return None
    return _yamlwriter if getattr(_yamlwriter, "SOURCE_SHA256", None) == hashlib.sha256(source).hexdigest() else None


_NATIVE = native()


def documents(manifests: list[dict[str, Any]]) -> str:
    """The manifests as a multi-document YAML stream: yamltext's text, of the manifests as JSON has them."""
    if _NATIVE is not None and type(manifests) is list:
        text = _NATIVE.documents(manifests)
        if text is not None:
            return text
    return yamltext.documents(_as_json(manifests))


def _as_json(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests as JSON has them, what the API server receives (a tuple is a list, NaN is
    null): so a file reads the same whichever writer writes it. As they are when orjson cannot
    write them (an int beyond 64 bits, a lone surrogate)."""
    import orjson

    try:
        return orjson.loads(orjson.dumps(manifests))  # type: ignore[no-any-return]
    except orjson.JSONEncodeError:
        return manifests


def json_text(manifests: list[dict[str, Any]]) -> str:
    """The manifests as one JSON list, indented, keys sorted (orjson's text)."""
    if _NATIVE is not None and type(manifests) is list:
        text = _NATIVE.documents(manifests, as_json=True)
        if text is not None:
            return text
    import orjson

    return orjson.dumps(manifests, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


class WriteError(FleetopsError):
    """A file could not be written: one line naming it; nothing was put in place. Bad input (exit 2): the
    target the command was given cannot hold the files."""


class Files:
    """Files written all at once or not at all: each beside its target, renamed over it only once
    every file is written; on any failure, or leaving the `with` without `commit`, no file is
    replaced and no temporary file or folder of ours is left. A rename that fails once others are
    done, or Ctrl-C or SIGTERM amid the renames, puts those back: each replaced file keeps a second
    name (a hard link) until all are in place.

    `put` writes a text (render's: each cluster's file as soon as it is rendered).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.written: list[tuple[Path, Path]] = []  # (target, temporary)
        self.created: list[Path] = []

    def put(self, path: Path, text: str) -> None:
        _write(path, self._beside(path), text, self.what)

    def _beside(self, path: Path) -> Path:
        """The temporary file `path` is first written to, in its folder (made if missing)."""
        if path.exists() and not path.is_file():
            raise WriteError(f"{path}: not a regular file; {self.what} not written")
        if not path.parent.is_dir():
            missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WriteError(f"{exc.filename or path.parent}: cannot write {self.what}: {exc.strerror}") from None
            self.created += missing
        tmp = path.with_name(f".{path.name}.tmp")
        self.written.append((path, tmp))
        return tmp

    def commit(self) -> int:
        """Put every file in place; the number of files."""
        landed: list[_Before] = []
        try:
            for path, tmp in self.written:
                landed.append(_keep(path))  # before the rename: an interrupt right after it is undone too
                try:
                    tmp.replace(path)
                except OSError as exc:
                    _forget(landed.pop())
                    raise WriteError(f"{path}: cannot write {self.what}: {exc.strerror}") from None
        except BaseException as exc:  # a refused rename, Ctrl-C, SIGTERM: the files put in place go back
            if not _undo(landed) and isinstance(exc, WriteError):
                raise WriteError(f"{exc}; files put in place before it could not all be put back") from None
            raise
        for before in landed:
            _forget(before)
        count, self.written, self.created = len(self.written), [], []
        return count

    def __enter__(self) -> Files:
        return self

    def __exit__(self, *_: object) -> None:
        for _target, tmp in self.written:
            with contextlib.suppress(OSError):  # a folder that refused the file refuses its removal too
                tmp.unlink(missing_ok=True)
        for directory in sorted(self.created, key=lambda d: len(d.parts), reverse=True):  # innermost first
            with contextlib.suppress(OSError):
                directory.rmdir()


class _Before(NamedTuple):
    """What a file renamed into place replaced: `kept`, a second name of the file it replaced (to put
    it back), or nothing (`new`: there was none; else the file system has no hard links)."""

    path: Path
    kept: Path | None
    new: bool


def _keep(path: Path) -> _Before:
    kept = path.with_name(f".{path.name}.old")
    try:
        with contextlib.suppress(FileNotFoundError):
            kept.unlink()  # left by a run that was killed
        os.link(path, kept)
    except FileNotFoundError:
        return _Before(path, None, new=True)
    except OSError:  # no hard links here, or a folder that refuses them (its rename then says why)
        return _Before(path, None, new=False)
    return _Before(path, kept, new=False)


def _forget(before: _Before) -> None:
    if before.kept is not None:
        with contextlib.suppress(OSError):
            before.kept.unlink()


def _undo(landed: list[_Before]) -> bool:
    """Put back what was there before each file renamed into place; False when one could not be."""
    undone = True
    for before in reversed(landed):
        try:
            if before.kept is not None:
                before.kept.replace(before.path)
                before.kept.unlink(missing_ok=True)  # left where path was not replaced yet: a rename onto the same file does nothing
            elif before.new:
                before.path.unlink(missing_ok=True)
            else:
                undone = False
        except OSError:
            undone = False
    return undone


def _write(path: Path, tmp: Path, text: str, what: str) -> None:
    try:
        tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise WriteError(f"{path}: cannot write {what}: {exc.strerror}") from None
    except UnicodeEncodeError as exc:  # a lone surrogate, which no UTF-8 file can hold
        raise WriteError(f"{path}: cannot write {what}: {exc.object[exc.start:exc.end]!r} is not text UTF-8 can hold") from None
