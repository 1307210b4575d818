"""Rendered manifests as YAML text, fast: block structure, every scalar JSON-compatible.

PyYAML builds a node graph in Python before its emitter (even libyaml's) writes a byte: for the
large fleet that was 6.5x the time of rendering it (benchmarks/render_bench.py). Manifests are plain
data (dicts, lists, strings, numbers, booleans, null), so they are written here directly: mappings
and sequences in block style with sorted keys, a string plain only when YAML 1.1 and 1.2 both read
it back as that string (else as a JSON string, which YAML reads as a double-quoted scalar), and a
multi-line string as a literal block. tests/test_render.py reads every file back with PyYAML and
compares it with the objects. `Files` writes one file per cluster beside rendering, all or none.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetops import fork

# Letters first: never a number, a date or a sexagesimal; the words YAML 1.1 reads as booleans or null are excluded.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*\Z")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
_BLOCKABLE = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029\ufeff]*\Z")


# Label keys, names and values repeat across thousands of objects, and whole lines with them (the
# labels and annotations every object carries): each is formatted once per stream. A line's key
# holds its value's type: a bool is never an int here, and "1" never 1.
_TEXT: dict[str, str] = {}
_LINES: dict[tuple[str, ...] | tuple[str, str, str | int], str] = {}  # (pad, key, value) -> line, (pad, key) -> "key:"


def _scalar(value: Any) -> str:
    if type(value) is str:
        text = _TEXT.get(value)
        if text is None:
            plain = _PLAIN.match(value) and value.lower() not in _WORDS
            text = _TEXT[value] = value if plain else json.dumps(value, ensure_ascii=False)
        return text
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    return _scalar(str(value))


def _literal(text: str, pad: str) -> str | None:
    """`|` block of a multi-line string, or None when a literal block cannot hold it exactly."""
    if "\n" not in text or text.startswith((" ", "\n")) or "\r" in text or not _BLOCKABLE.match(text):
        return None
    body = text[:-1] if text.endswith("\n") else text
    if body.endswith("\n"):  # trailing blank lines: keep them with "+"
        return None
    indicator = "|" if text.endswith("\n") else "|-"
    return indicator + "".join(f"\n{pad}{line}" if line else "\n" for line in body.split("\n"))


def _node(value: Any, pad: str, out: list[str]) -> None:
    """Append the lines of a non-empty mapping or sequence at indentation `pad`."""
    if type(value) is dict:
        inner = pad + "  "
        lines = _LINES
        for key in sorted(value):
            item = value[key]
            if type(item) is str or type(item) is int:  # most fields: one line, written once per stream
                line = lines.get((pad, key, item))
                if line is None:
                    if type(item) is str and "\n" in item:
                        _entry(f"{pad}{_scalar(key)}:", item, pad, inner, out)
                        continue
                    line = lines[pad, key, item] = f"{pad}{_scalar(key)}: {_scalar(item)}"
                out.append(line)
                continue
            head = lines.get((pad, key))
            if head is None:
                head = lines[pad, key] = f"{pad}{_scalar(key)}:"
            if type(item) is dict and item:
                out.append(head)
                _node(item, inner, out)
            elif type(item) is list and item:
                out.append(head)
                _node(item, pad, out)  # a sequence under a key sits at the key's indentation
            else:
                _entry(head, item, pad, inner, out)
    else:
        for item in value:
            if isinstance(item, (dict, list)) and item:
                start = len(out)
                _node(item, pad + "  ", out)
                out[start] = f"{pad}- {out[start][len(pad) + 2:]}"  # the first line moves onto the dash
            else:
                _entry(f"{pad}-", item, pad, pad + "  ", out)


def _entry(head: str, value: Any, pad: str, inner: str, out: list[str]) -> None:
    if isinstance(value, dict) and value:
        out.append(head)
        _node(value, inner, out)
    elif isinstance(value, list) and value:
        out.append(head)
        _node(value, pad, out)  # a sequence under a key sits at the key's indentation
    elif isinstance(value, (dict, list)):
        out.append(f"{head} {'{}' if isinstance(value, dict) else '[]'}")
    elif isinstance(value, str) and (block := _literal(value, inner)) is not None:
        out.append(f"{head} {block}")
    else:
        out.append(f"{head} {_scalar(value)}")


def documents(manifests: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream, one `---` document per manifest."""
    out: list[str] = []
    try:
        for manifest in manifests:
            out.append("---")
            if manifest:
                _node(manifest, "", out)
            else:
                out.append("{}")
    finally:
        _TEXT.clear()  # caches of one stream, not of the process
        _LINES.clear()
    return "\n".join(out) + "\n" if out else ""


class WriteError(Exception):
    """A file could not be written: one line naming it; nothing was put in place."""


class Files:
    """Files written all at once or not at all: each beside its target, renamed over it only once
    every file is written; on any failure, or leaving the `with` without `commit`, no file is
    replaced and no temporary file or folder of ours is left.

    `put` writes a text that is ready. `add` takes manifests (render's files) and has their text made
    and written by forks of this process while rendering goes on (the large fleet's 15,000 objects
    are 0.25 s of YAML, which then overlaps the render instead of following it). A fork is started
    for every `batch` objects rather than for every file: each fork costs the renderer its page
    tables and copies of the pages it writes next (5,000: two forks while the large fleet renders,
    measured best against 2,000 to 8,000); what is left at `commit` is shared out among as many
    forks as there are cores.
    """

    def __init__(self, what: str, text: Callable[[list[dict[str, Any]]], str] = documents, batch: int = 5000) -> None:
        self.what, self.text, self.batch = what, text, batch
        self.written: list[tuple[Path, Path]] = []  # (target, temporary)
        self.queued: list[tuple[Path, Path, list[dict[str, Any]]]] = []
        self.writers: list[fork.Forked] = []
        self.created: list[Path] = []

    def put(self, path: Path, text: str) -> None:
        _write(path, self._beside(path), text, self.what)

    def add(self, path: Path, manifests: list[dict[str, Any]]) -> None:
        self.queued.append((path, self._beside(path), manifests))
        if sum(len(m) for _, _, m in self.queued) >= self.batch:
            self._start()

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

    def _start(self, forks: int = 1) -> None:
        """Write the queued files: in `forks` forks, each with a like share of the objects (here, without fork)."""
        files, self.queued = self.queued, []
        shares: list[list[tuple[Path, Path, list[dict[str, Any]]]]] = [[] for _ in range(min(forks, len(files)))]
        for entry in sorted(files, key=lambda f: -len(f[2])):  # largest first, each to the lightest share
            min(shares, key=lambda share: sum(len(f[2]) for f in share)).append(entry)
        for share in shares:
            writer = fork.start(str(share[0][0]), WriteError, _write_in_fork, share, self.text, self.what)
            if writer is None:
                _write_manifests(share, self.text, self.what)
            else:
                self.writers.append(writer)

    def commit(self) -> int:
        """Wait for every file, then put them all in place; the number of files."""
        self._start(forks=min(fork.cores(), 8))  # nothing else to do here now: every core writes
        for writer in self.writers:
            writer.recv()
        for path, tmp in self.written:
            try:
                tmp.replace(path)
            except OSError as exc:
                raise WriteError(f"{path}: cannot write {self.what}: {exc.strerror}") from None
        count, self.written, self.created = len(self.written), [], []
        return count

    def __enter__(self) -> Files:
        return self

    def __exit__(self, *_: object) -> None:
        for writer in self.writers:  # not committed: nothing lands
            writer.close()
        for _, tmp in self.written:
            with contextlib.suppress(OSError):  # a folder that refused the file refuses its removal too
                tmp.unlink(missing_ok=True)
        for directory in sorted(self.created, key=lambda d: len(d.parts), reverse=True):  # innermost first
            with contextlib.suppress(OSError):
                directory.rmdir()


def _write(path: Path, tmp: Path, text: str, what: str) -> None:
    try:
        tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise WriteError(f"{path}: cannot write {what}: {exc.strerror}") from None


def _write_manifests(files: list[tuple[Path, Path, list[dict[str, Any]]]], text: Callable[[list[dict[str, Any]]], str], what: str) -> None:
    for path, tmp, manifests in files:
        _write(path, tmp, text(manifests), what)


def _write_in_fork(reply: Callable[..., None], *args: Any) -> None:
    os.nice(10)  # the render, which every file waits for anyway, goes first
    _write_manifests(*args)
    reply(None, last=True)
