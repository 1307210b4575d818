"""Rendered manifests as YAML text, fast: block structure, every scalar JSON-compatible.

PyYAML builds a node graph in Python before its emitter (even libyaml's) writes a byte: for the
large fleet that was 6.5x the time of rendering it (benchmarks/render_bench.py). Manifests are plain
data (dicts, lists, strings, numbers, booleans, null), so they are written here directly: mappings
and sequences in block style with sorted keys, a string plain only when YAML 1.1 and 1.2 both read
it back as that string (else as a JSON string, which YAML reads as a double-quoted scalar), and a
multi-line string as a literal block. tests/render/test_render.py reads every file back with PyYAML.

This module defines the text. Its C twin, fleetops/_yamlwriter.pyx (8x as fast), writes the
same bytes for manifests of exact JSON types;
this module writes them where the twin was not built, and any value the twin leaves to it (a
float, a tuple, a str subclass). tests/render/test_emit.py holds the two to the same bytes: a change to
the format here is a change there too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

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


def _literal(text: Any, pad: str) -> str | None:
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


def documents(manifests: Iterable[dict[str, Any]]) -> str:
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
