"""Every Prometheus series fleetops reads or writes is named once, in fleetops/metrics.py: a renamed series is one
edit there, and no reader or renderer keeps the old name as a literal of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from fleetops import metrics
from tests.helpers import ROOT

# Names a literal could hold by chance ("up") are left out: each checked name is a series only.
NAMES = {value: name for name, value in vars(metrics).items() if name.isupper() and isinstance(value, str) and ("_" in value or ":" in value)}


def _literals(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module, f-strings' literal parts included, docstrings left out (they may name a series)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_series_is_spelled_outside_the_metrics_module() -> None:
    found = []
    for path in sorted([*(ROOT / "fleetops").rglob("*.py"), *(ROOT / "modules").rglob("*.py")]):
        if path == Path(metrics.__file__):
            continue
        for line, text in _literals(path):
            found += [f"{path.relative_to(ROOT)}:{line}: {value} (metrics.{name})" for value, name in NAMES.items() if value in text]
    assert found == []


def test_the_recording_rules_readers_ask_for_are_the_ones_metering_records() -> None:
    from fleetops import spec
    from modules import metering

    env = spec.load_environment(ROOT / "environments" / "prod.yaml")
    recorded = {rule.get("record") for cluster in env.clusters for group in metering.rule_groups(cluster, env) for rule in group["rules"]}
    # plan's usage, the statements and standing's history read these two; the budget rules read the rest.
    assert {metrics.DEVICES, metrics.SPEND, metrics.SPEND_BY_MONTH, metrics.MONTH_TO_DATE} <= recorded
