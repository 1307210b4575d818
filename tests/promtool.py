"""The real `promtool` (`make tools` builds it with Prometheus, from its Go module) run over the rule groups fleetops renders.

`check_rules(...)` runs `promtool check rules`; `check_config(...)` `promtool check config`; `test_rules(groups, tests)` runs `promtool test rules`
with synthetic series (https://prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/).
Both raise `PromtoolFailed` with promtool's own output. Without promtool the test is skipped, or
fails under FLEETOPS_REAL_SERVERS=required (CI), like every other real tool (tests/servers.py).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.servers import tool

TIMEOUT = 120.0


class PromtoolFailed(AssertionError):
    """promtool exited non-zero; the message is its output."""


def promtool() -> str:
    """The promtool binary; skip (or, in CI, fail) without it."""
    return str(tool("promtool"))


def rule_groups(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rule groups of PrometheusRule objects, or the groups themselves when given groups."""
    groups: list[dict[str, Any]] = []
    for item in items:
        if item.get("kind") == "PrometheusRule":
            groups.extend(item["spec"]["groups"])
        else:
            groups.append(dict(item))
    return groups


def _run(args: list[str], cwd: Path) -> None:
    done = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        raise PromtoolFailed(f"promtool {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")


def _write_rules(directory: Path, groups: list[dict[str, Any]], name: str = "rules.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def check_rules(rule_groups_or_objects: Iterable[Mapping[str, Any]]) -> None:
    """`promtool check rules` on the groups (or PrometheusRule objects); raises PromtoolFailed.

    Each PrometheusRule is a file of its own, as prometheus-operator writes it for Prometheus (group
    names are unique per file); bare groups share one file.
    """
    items = list(rule_groups_or_objects)
    files = [rule_groups([item]) for item in items if item.get("kind") == "PrometheusRule"]
    bare = [dict(item) for item in items if item.get("kind") != "PrometheusRule"]
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        names = [_write_rules(Path(tmp), groups, f"rules-{i}.yaml").name for i, groups in enumerate([*files, *([bare] if bare else [])])]
        _run(["check", "rules", *names], Path(tmp))


def check_config(config: Mapping[str, Any]) -> None:
    """`promtool check config --syntax-only` on a Prometheus configuration; raises PromtoolFailed."""
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        (Path(tmp) / "prometheus.yml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
        _run(["check", "config", "--syntax-only", "prometheus.yml"], Path(tmp))


def test_rules(groups: Iterable[Mapping[str, Any]], tests: Mapping[str, Any]) -> None:
    """`promtool test rules` with `tests` (promtool's test file, without `rule_files`) over `groups`.

    `groups` may also be PrometheusRule objects. Raises PromtoolFailed with promtool's output.
    """
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        rules = _write_rules(Path(tmp), rule_groups(groups))
        spec = {"rule_files": [rules.name], "evaluation_interval": "1m", **tests}
        (Path(tmp) / "tests.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        _run(["test", "rules", "tests.yaml"], Path(tmp))


# Not a pytest test despite the name: the harness function other test modules call.
test_rules.__test__ = False  # type: ignore[attr-defined]
