"""`fleetops policy test`: every `*_test.rego` through the embedded engine, with line coverage."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetops.errors import PolicyError
from fleetops.policy.bundle import POLICIES_DIR, Bundle, load_bundle, package_of
from fleetops.policy.engine import EmbeddedEngine, regorus_error


_TEST_RULE = re.compile(r"^(test_\w+)\b", re.MULTILINE)


@dataclass(frozen=True)
class TestResult:
    package: str
    name: str
    passed: bool
    error: str | None = None


@dataclass(frozen=True)
class FileCoverage:
    path: str
    covered: list[int]
    not_covered: list[int]

    @property
    def percent(self) -> float:
        total = len(self.covered) + len(self.not_covered)
        return 100.0 if total == 0 else round(100 * len(self.covered) / total, 1)


@dataclass(frozen=True)
class TestReport:
    results: list[TestResult]
    coverage: list[FileCoverage]  # shipped policies only, not the tests themselves

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tests": [r.__dict__ for r in self.results],
            "coverage": [{"path": c.path, "percent": c.percent, "not_covered": c.not_covered} for c in self.coverage],
        }


def discover_tests(tests: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(package, rule) for each `test_*` rule; a rule defined twice runs once, as OPA does."""
    for _, source in sorted(tests.items()):
        package = package_of(source)
        yield from ((package, name) for name in dict.fromkeys(_TEST_RULE.findall(source)))


def run_tests(policies_dir: Path = POLICIES_DIR) -> TestReport:
    """Run every `*_test.rego` through the embedded engine, with line coverage of the policies.

    Tests pass inputs with `with input as` / `with data.fleet_data... as` (verified on regorus
    0.9.1); a test passes when its rule evaluates to true, fails when undefined or false.
    """
    bundle = load_bundle(policies_dir)
    if not bundle.tests:
        raise PolicyError(f"{policies_dir}: no *_test.rego files")
    embedded = EmbeddedEngine()
    engine = embedded.load(bundle, {**bundle.policies, **bundle.tests})
    engine.set_enable_coverage(True)
    engine.set_input_json("{}")
    results = []
    for package, name in discover_tests(bundle.tests):
        try:
            value = engine.eval_rule(f"data.{package}.{name}")
            results.append(TestResult(package, name, value is True, None if value is True else f"evaluated to {value!r}"))
        except RuntimeError as exc:
            results.append(TestResult(package, name, False, regorus_error(exc, policies_dir)))
    report = {f["path"]: f for f in json.loads(engine.get_coverage_report_as_json()).get("files", [])}
    coverage = []
    for path, source in sorted(bundle.policies.items()):
        if path in report:
            coverage.append(FileCoverage(path, sorted(report[path]["covered"]), sorted(report[path]["not_covered"])))
        else:
            # No test evaluated the file, so regorus reports nothing for it: all its lines are uncovered.
            coverage.append(FileCoverage(path, [], _coverable_lines(embedded, bundle, path)))
    return TestReport(results, coverage)


def _coverable_lines(embedded: EmbeddedEngine, bundle: Bundle, path: str) -> list[int]:
    """The lines of a policy file that coverage counts, as regorus counts them (the lines of its
    expressions, not braces or blank lines): evaluate the file's package once on an empty input in
    an engine of its own, and take every line the report mentions, covered or not."""
    engine = embedded.load(bundle, bundle.policies)
    engine.set_enable_coverage(True)
    engine.set_input_json("{}")
    try:
        engine.eval_query(f"data.{package_of(bundle.policies[path])}")
    except RuntimeError:
        pass  # an error part-way still leaves the lines it reached in the report
    report = {f["path"]: f for f in json.loads(engine.get_coverage_report_as_json()).get("files", [])}
    entry = report.get(path, {"covered": [], "not_covered": []})
    return sorted({*entry["covered"], *entry["not_covered"]})
