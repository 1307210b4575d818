"""The environment lines a real-Kueue scenario names in its docstring are the lines it proves.

tests/render/test_real_kueue.py names what each scenario proves as `environments/<env>.yaml:<line>` (or
`line <n>` / `lines <n>-<m>` of the file named before), each quoting the line in backticks; "..."
in a quote skips text. An edit that moves or changes a line fails here, so the proofs keep naming
the lines they prove. Runs without any server.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "render" / "test_real_kueue.py"
REFERENCE = re.compile(r"(?:environments/)?(?P<file>[a-z]+)\.yaml(?::(?P<first>\d+)(?:-(?P<last>\d+))?)?"
                       r"|\blines?\s+(?P<line>\d+)(?:-(?P<until>\d+))?")
QUOTE = re.compile(r"\s*`(?P<text>[^`]+)`")


class Reference(NamedTuple):
    test: str
    file: str
    first: int
    last: int
    quote: str | None


def references(test: str, doc: str) -> Iterator[Reference]:
    """Each line range a docstring names, with the quote that follows it; a bare `line n` is of the file named last."""
    file = None
    for found in REFERENCE.finditer(doc):
        file = found["file"] or file
        start = found["first"] or found["line"]
        if file is None or start is None:  # a file named without a line, or a line before any file
            continue
        first = int(start)
        last = int(found["last"] or found["until"] or first)
        quote = QUOTE.match(doc, found.end())
        yield Reference(test, file, first, last, quote["text"] if quote else None)


def scenario_references(source: str) -> list[Reference]:
    tree = ast.parse(source)
    return [ref for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            for ref in references(node.name, ast.get_docstring(node) or "")]


def flat(text: str) -> str:
    return " ".join(text.split())


def problem(ref: Reference) -> str | None:
    """What is wrong with one reference, or None."""
    path = ROOT / "environments" / f"{ref.file}.yaml"
    if not path.is_file():
        return f"{ref.test}: no environments/{ref.file}.yaml"
    lines = path.read_text().splitlines()
    where = f"{ref.test}: environments/{ref.file}.yaml:{ref.first}{f'-{ref.last}' if ref.last != ref.first else ''}"
    if not 1 <= ref.first <= ref.last <= len(lines):
        return f"{where}: the file has {len(lines)} lines"
    if ref.quote is None:
        return f"{where}: quote the line it proves in backticks"
    text, at = flat(" ".join(lines[ref.first - 1:ref.last])), 0
    for part in (p.strip() for p in flat(ref.quote).split("...")):
        at = text.find(part, at)
        if at < 0:
            return f"{where} does not say `{ref.quote}`: it says `{text}`"
        at += len(part)
    return None


def test_every_line_a_scenario_names_says_what_it_quotes() -> None:
    refs = scenario_references(SCENARIOS.read_text())
    assert {r.file for r in refs} >= {"dev", "prod", "staging"}
    assert [p for r in refs if (p := problem(r))] == []


@pytest.mark.parametrize("doc, wrong", [
    ("environments/staging.yaml:79 `preemption: Never`", None),
    ("environments/staging.yaml:78 `preemption: Never`", "does not say `preemption: Never`"),
    ("environments/staging.yaml:64 `priority_classes: [batch-low]`; line 66 `guaranteed: 4 ... burst: 16`", None),
    ("staging.yaml:64 `priority_classes: [batch-low]`, and line 66 `burst: 16 ... guaranteed: 4`", "does not say `burst: 16"),
    ("environments/staging.yaml:9-12 `name: stg-h100 ... taints: [{key: dedicated, value: training, effect:\n    NoSchedule}]`", None),
    ("environments/staging.yaml:51", "quote the line it proves"),
    ("environments/staging.yaml:960 `x`", "the file has"),
    ("environments/nope.yaml:1 `x`", "no environments/nope.yaml"),
])
def test_a_moved_or_changed_line_is_caught(doc: str, wrong: str | None) -> None:
    found = [p for r in references("t", doc) if (p := problem(r))]
    if wrong is None:
        assert found == []
    else:
        assert len(found) == 1 and wrong in found[0], found
