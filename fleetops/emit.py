"""Rendered manifests written as files, all at once or not at all, beside rendering.

The YAML text itself comes from `fleetops.yamltext`: its Cython-compiled twin when one was built
from the same source (setup.py; 1.8x as fast), the plain module otherwise.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from fleetops import fork, yamltext

Text = Callable[[list[dict[str, Any]]], str]


def native() -> Text | None:
    """The compiled YAML writer, or None when it was not built, or was built from another text of yamltext.py."""
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        return None
    try:
        from fleetops import _yamltext  # type: ignore[attr-defined]
    except ImportError:  # not built (no C compiler), or built for another Python
        return None
    source = Path(yamltext.__file__).read_bytes()
    return _yamltext.documents if getattr(_yamltext, "SOURCE_SHA256", None) == hashlib.sha256(source).hexdigest() else None


documents: Text = native() or yamltext.documents


class WriteError(Exception):
    """A file could not be written: one line naming it; nothing was put in place."""


class Files:
    """Files written all at once or not at all: each beside its target, renamed over it only once
    every file is written; on any failure, or leaving the `with` without `commit`, no file is
    replaced and no temporary file or folder of ours is left. A rename that fails once others are
    done puts those back: each replaced file keeps a second name (a hard link) until all are in place.

    `put` writes a text that is ready. `add` takes manifests (render's files) whose `text` is made
    and written by a writer, a fork of this process, while rendering goes on: the large fleet's
    15,000 objects are 0.1-0.25 s of YAML, which then overlaps the render instead of following it.
    The writer is forked when the Files are made, before the render has built anything: a fork
    made later shares the render's pages, and each page either side then writes is copied first
    (10,000 page faults, a third slower writing). So each file's manifests reach it as orjson text,
    through an unnamed temporary file (a pipe holds 64 KiB: the render would wait whenever the
    writer is behind). At `commit` this process writes the files the writer has not begun, from
    the last back, while the writer finishes its own: both cores write the rest.

    Whoever writes a file, its text is made from the manifests as orjson reads back its own text of
    them (manifests are JSON, what the API server receives: a tuple is a list, NaN is null), or
    from the manifests themselves when orjson cannot write them (an int beyond 64 bits).
    """

    def __init__(self, what: str, text: Text | None = None) -> None:
        self.what, self.text = what, text
        self.written: list[tuple[Path, Path]] = []  # (target, temporary)
        self.created: list[Path] = []
        self.writer: _Writer | None = _Writer.start(what, text) if text is not None else None
        self.handed: list[tuple[Path, Path]] = []  # in the order the writer has them

    def put(self, path: Path, text: str) -> None:
        _write(path, self._beside(path), text, self.what)

    def add(self, path: Path, manifests: list[dict[str, Any]]) -> None:
        import orjson

        assert self.text is not None, "Files(what, text) writes manifests"
        tmp = self._beside(path)
        try:
            data = orjson.dumps(manifests)
        except orjson.JSONEncodeError:
            _write(path, tmp, self.text(manifests), self.what)
            return
        if self.writer is not None and self.writer.hand(path, tmp, data):
            self.handed.append((path, tmp))
        else:  # no fork to be had: written here, now
            _write(path, tmp, self.text(orjson.loads(data)), self.what)

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
        """Wait for every file, then put them all in place; the number of files."""
        if self.writer is not None:
            assert self.text is not None
            for index in self.writer.finish(len(self.handed)):
                path, tmp = self.handed[index]
                _write(path, tmp, self.text(self.writer.manifests(index)), self.what)
            self.writer.wait()
        landed: list[_Before] = []
        for path, tmp in self.written:
            before = _keep(path)
            try:
                tmp.replace(path)
            except OSError as exc:
                _forget(before)
                undone = _undo(landed)
                raise WriteError(f"{path}: cannot write {self.what}: {exc.strerror}"
                                 + ("" if undone else "; files put in place before it could not all be put back")) from None
            landed.append(before)
        for before in landed:
            _forget(before)
        count, self.written, self.created = len(self.written), [], []
        return count

    def __enter__(self) -> Files:
        return self

    def __exit__(self, *_: object) -> None:
        if self.writer is not None:  # not committed: nothing lands
            self.writer.close()
        for _target, tmp in self.written:
            with contextlib.suppress(OSError):  # a folder that refused the file refuses its removal too
                tmp.unlink(missing_ok=True)
        for directory in sorted(self.created, key=lambda d: len(d.parts), reverse=True):  # innermost first
            with contextlib.suppress(OSError):
                directory.rmdir()


class _Writer:
    """The fork that writes handed-over files in order, and the two counters it shares with this
    process: the next file it may begin, and the first file this process has taken for itself."""

    def __init__(self, forked: fork.Forked, sending: Any, spool: Any, claims: Any) -> None:
        self.forked, self.sending, self.spool, self.claims = forked, sending, spool, claims
        self.spooled: list[tuple[int, int]] = []  # (offset, size) of each file's orjson text
        self.broken = False

    @classmethod
    def start(cls, what: str, text: Text) -> _Writer | None:
        claims = fork.shared([0, _ALL])
        if claims is None:
            return None
        with contextlib.ExitStack() as undo:
            try:
                spool = undo.enter_context(tempfile.TemporaryFile())
                reading, sending = fork.pipe()
            except OSError:  # no temporary folder, no file descriptor left: the files are written here
                return None
            undo.callback(sending.close)
            with contextlib.closing(reading):
                forked = fork.start(f"writing {what}", WriteError, _write_in_order, reading, sending, spool.fileno(), claims, text, what)
            if forked is None:
                return None
            undo.pop_all()
        return cls(forked, sending, spool, claims)

    def hand(self, path: Path, tmp: Path, data: bytes) -> bool:
        """Give the writer a file's orjson text; False when it cannot take it (then write it yourself)."""
        if self.broken:
            return False
        at = self.spooled[-1][0] + self.spooled[-1][1] if self.spooled else 0
        try:
            if os.pwrite(self.spool.fileno(), data, at) != len(data):
                raise OSError("short write")
            self.sending.send((str(path), str(tmp), at, len(data)))
        except OSError:  # the writer is gone (its failure is read at commit), or the spool is full
            self.broken = True
            return False
        self.spooled.append((at, len(data)))
        return True

    def manifests(self, index: int) -> list[dict[str, Any]]:
        """The manifests of the `index`th file handed over, as the writer would have read them."""
        import orjson

        at, size = self.spooled[index]
        return orjson.loads(os.pread(self.spool.fileno(), size, at))

    def finish(self, handed: int) -> Iterator[int]:
        """Every file is handed over: the ones the writer has not begun, from the last back, each
        taken only once the one before is written (the writer goes on meanwhile)."""
        taken = False
        while True:
            with self._locked() as claims:
                if claims is None:  # the writer died holding the lock: its end is read at `wait`
                    return
                index = min(claims[1], handed) - 1
                if index < claims[0]:
                    break
                claims[1] = index
            taken = True
            yield index
        if not taken:  # the writer has read every file and waits for one more (else it stops at the first one taken)
            with contextlib.suppress(OSError):  # a writer gone says why at `wait`
                self.sending.send(None)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Any]:
        """The shared counters, under their lock; None when the writer is gone with the lock held."""
        lock = self.claims.get_lock()
        while not lock.acquire(timeout=1.0):  # the writer holds it for a few instructions at a time
            if not self.forked.proc.is_alive():
                yield None
                return
        try:
            yield self.claims
        finally:
            lock.release()

    def wait(self) -> None:
        self.forked.recv()

    def close(self) -> None:
        self.forked.close()
        self.sending.close()
        self.spool.close()


_ALL = 2**62  # no file taken by the committing process yet


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


def _write_in_order(reply: Callable[..., None], reading: Any, sending: Any, spool: int, claims: Any, text: Text, what: str) -> None:
    """The writer: each file handed over, in order, until none is left or the rest is taken."""
    import orjson

    sending.close()  # this process's copy of the sending end: its reading must end when the parent's closes
    os.nice(10)  # on one core the render, which every file waits for anyway, goes first
    gc.disable()  # manifests are trees, and this process ends with its files: the collector only slowed it (3x the decoding)
    index = 0
    while (item := reading.recv()) is not None:
        path, tmp, at, size = item
        with claims.get_lock():
            if index >= claims[1]:
                break
            claims[0] = index + 1
        _write(Path(path), Path(tmp), text(orjson.loads(os.pread(spool, size, at))), what)
        index += 1
    reply(None, last=True)
