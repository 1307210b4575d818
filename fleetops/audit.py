"""The reviewer's report: every rule, its evidence, every waiver, every decision, in one file.

The report is typed data first (`build` makes an `AuditReport`, whole), then a form of fleetops.output that only
reads it (`html.audit`, `markdown.audit`, `json.audit`: `AuditReport.to_json()` in the one JSON envelope). The data is stable for the same
input: its time is the revision's commit time (or SOURCE_DATE_EPOCH), not the wall clock; the HTML
adds the wall-clock generation time for the reader.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fleetops import git, policy, render, spec
from fleetops.envelope import VERDICT_STATUSES, DecisionStatus, decision_counts
from fleetops.errors import WhatifError

if TYPE_CHECKING:  # read only when a report is given a replay: the replay's modules stay out of every other audit
    from fleetops.whatif.document import Replayed

# --- provenance ------------------------------------------------------------------------------


def last_change(repo: Path, file: str, lines: tuple[int, int]) -> dict[str, str] | None:
    """The last commit that touched any of `lines` (first, last) of a committed file: its hash, author
    and date (None when the file or those lines are not committed)."""
    first, last = lines
    try:
        out = git.run(repo, "log", "-1", "--no-patch", "--format=%H%x09%an%x09%at", "-L", f"{first},{last}:{file}", "HEAD").strip()
    except git.GitError:
        return None
    if not out:
        return None
    commit, author, when = out.splitlines()[0].split("\t")
    return {"commit": commit, "author": author, "date": dt.datetime.fromtimestamp(int(when), tz=dt.timezone.utc).date().isoformat()}


def rule_lines(source: str, line: int) -> tuple[int, int]:
    """A rule's lines: from its `# METADATA` comment to the line before the next one (its other
    bodies and helpers sit there), trailing blank lines left out. An edit to the title, severity or
    fix of a rule changes the rule as much as an edit to its body."""
    text = source.splitlines()
    first = line
    while first > 1 and text[first - 2].startswith("#"):
        first -= 1
        if text[first - 1].strip() == "# METADATA":
            break
    last = next((n - 1 for n in range(line + 1, len(text) + 1) if text[n - 1].strip() == "# METADATA"), len(text))
    while last > line and not text[last - 1].strip():
        last -= 1
    return first, last


def revision_time(repo: Path) -> str:
    """SOURCE_DATE_EPOCH when set (reproducible builds), else the HEAD commit's time, in UTC."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        try:
            epoch = git.run(repo, "log", "-1", "--format=%ct").strip()
        except git.GitError:
            epoch = "0"
    return dt.datetime.fromtimestamp(int(epoch or 0), tz=dt.timezone.utc).isoformat()


# --- where each rule is enforced, and by whom ------------------------------------------------


class Enforcer(str, Enum):
    review = "review"
    pack = "Pulumi pack"
    reconciler = "reconciler"


# The parts of the policy input (policy.build_input) that are null unless a gate fills them, and
# which gate fills which: plan judges the change under review (plan.py: build_input(change=...)) with
# no live nodes, and with the measured use of what it touches (plan.py: build_input(usage=...)); the
# Pulumi pack judges the stack about to deploy (policy.validate_stack) with none of them;
# the reconciler judges the revision with the live node inventory (reconcile.default_gate: live=...).
OPTIONAL_INPUTS = ("change", "live", "usage")
ENFORCER_INPUTS: dict[Enforcer, frozenset[str]] = {
    Enforcer.review: frozenset({"change", "usage"}),
    Enforcer.pack: frozenset(),
    Enforcer.reconciler: frozenset({"live"}),
}
_BLOCK = re.compile(r"^(?![\s#}])(\w+)", re.MULTILINE)
_READS = re.compile(rf"\binput\.({'|'.join(OPTIONAL_INPUTS)})\b")
HEADS = ("deny", "warn")  # every rule of a kind shares its head's name: never followed as a helper


def _blocks(source: str) -> list[tuple[int, str, str]]:
    """The top-level statements of a policy: first line, the name they define, their text."""
    starts = [(source.count("\n", 0, m.start()) + 1, m.group(1), m.start()) for m in _BLOCK.finditer(source)]
    ends = [start for _, _, start in starts[1:]] + [len(source)]
    return [(line, name, source[start:end]) for (line, name, start), end in zip(starts, ends, strict=True) if name not in ("package", "import")]


def inputs_read(source: str, lines: tuple[int, int]) -> set[str]:
    """Which optional inputs the rule at `lines` cannot fire without, itself or through the helpers
    of its file. Bodies of one name are alternatives (a name needs what all of them need: `costs`
    has a body that reads input.change and one that does not); what one body names it needs."""
    blocks = _blocks(source)
    helpers = {name for _, name, _ in blocks if name not in HEADS}
    uses = [(name, set(_READS.findall(text)), {h for h in helpers if h != name and re.search(rf"\b{h}\b", text)}) for _, name, text in blocks]
    needs: dict[str, set[str]] = {name: set() for name in helpers}

    def body_needs(direct: set[str], refs: set[str]) -> set[str]:
        return direct.union(*(needs[r] for r in refs))

    changed = True
    while changed:  # grows to the fixed point; Rego forbids recursion, so it ends
        changed = False
        for name in helpers:
            new = set.intersection(*(body_needs(direct, refs) for n, direct, refs in uses if n == name))
            if new != needs[name]:
                needs[name], changed = new, True
    first, last = lines
    heads = [body_needs(direct, refs) for (line, name, _), (_, direct, refs) in zip(blocks, uses, strict=True) if name in HEADS and first <= line <= last]
    return set.intersection(*heads) if heads else set()


def enforced_by(source: str, lines: tuple[int, int]) -> list[str]:
    """The gates whose input holds everything the rule reads: where a decision of it can stop a change."""
    needs = inputs_read(source, lines)
    return [gate.value for gate, given in ENFORCER_INPUTS.items() if needs <= given]


def rule_owners(repo: Path, policies_dir: Path, rule_file: str) -> list[str]:
    """Who owns a rule: policies/owners.yaml (plan asks them to review a policy change) and the
    CODEOWNERS entries whose pattern matches the rule's file."""
    from fleetops import forge, plan

    owners = plan.policy_owners(policies_dir.parent)
    place = next((repo / p for p in forge.CODEOWNERS_PLACES if (repo / p).is_file()), None)
    if place is not None:
        owners += sorted(forge.code_owners(policy.read_text(place), [rule_file]))
    return list(dict.fromkeys(owners))


# --- history ---------------------------------------------------------------------------------


class GateKind(str, Enum):
    """Which gate a record comes from: what ships (reconcile, the Pulumi pack, check outside a pull
    request), a pull request's branch under review (plan, check in a pull request's CI job), or a plan
    outside a pull request (a preview on a workstation: it gated nothing)."""

    production = "production"
    pull_request = "pull_request"
    local = "local"


def gate_of(entry: policy.DecisionRecord) -> GateKind:
    if entry.source == "plan" and (entry.run == "local" or not entry.pr):  # no pull request: older records say so by their missing pr
        return GateKind.local
    if entry.source in ("plan", "check") and entry.pr:
        return GateKind.pull_request
    return GateKind.production


# Every status a gate records: plan's "approval" (more approvals resolve it) counts as much as a deny.
STATUSES = tuple(map(str, DecisionStatus))


MAX_LOG_PROBLEMS = 20  # places listed in the report; the count covers every malformed line


def _why(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where + ': ' if where else ''}{first['msg']}"


def history(log: Path | None, latest: int = 20) -> dict[str, Any]:
    """Decisions per rule per day, and the latest denials, from a decision log (JSONL).

    A line that is not a decision record is counted and its place (file:line) listed, never skipped
    silently: a log someone edited by hand must show it.
    """
    empty: dict[str, Any] = {"source": str(log) if log else None, "entries": 0, "days": [], "per_rule": [],
                             "latest_denials": {gate.value: [] for gate in GateKind}, "malformed": 0, "problems": []}
    if log is None or not log.is_file():
        return empty
    per_rule: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    denials: dict[GateKind, list[dict[str, Any]]] = {gate: [] for gate in GateKind}
    times: list[str] = []
    problems: list[str] = []
    malformed = 0
    try:
        lines = log.read_bytes().splitlines()
    except OSError as exc:
        raise policy.PolicyError(f"{log}: cannot read the decision log: {exc.strerror}") from None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            # pydantic's JSON parser: invalid UTF-8 and nesting past its depth limit are validation errors, not a crash.
            entry = policy.DecisionRecord.model_validate_json(raw)
        except ValidationError as exc:
            malformed += 1
            if len(problems) < MAX_LOG_PROBLEMS:
                problems.append(f"{log}:{number}: not a decision log entry ({_why(exc)})")
            continue
        times.append(entry.time)
        day = entry.time[:10]
        for d in entry.decisions:
            counts = per_rule[d.rule].setdefault(day, dict.fromkeys(STATUSES, 0))
            counts[d.status] += 1
            if d.status.blocks:
                denials[gate_of(entry)].append({
                    "time": entry.time, "source": entry.source, "environment": entry.environment, "revision": entry.revision or "",
                    "pr": str(entry.pr) if entry.pr else None, "actor": entry.actor, "rule": d.rule, "status": d.status.value, "msg": d.msg,
                })
    days = sorted({day for rule in per_rule.values() for day in rule})
    return {
        "source": str(log),
        "entries": len(times),
        "first": min(times) if times else None,
        "last": max(times) if times else None,
        "days": days,
        "per_rule": [{"rule": rule, "by_day": dict(sorted(by_day.items()))} for rule, by_day in sorted(per_rule.items())],
        # Per gate, so a busy week of pull requests cannot push the last production denial out of the list.
        "latest_denials": {gate.value: sorted(rows, key=lambda d: d["time"], reverse=True)[:latest] for gate, rows in denials.items()},
        "malformed": malformed,
        "problems": problems,
    }


def malformed_summary(h: dict[str, Any]) -> str:
    """One line for stderr and the report: how many log lines were skipped, and where the first are."""
    if not h["malformed"]:
        return ""
    places = ", ".join(p.split(": ", 1)[0] for p in h["problems"])
    more = f" and {h['malformed'] - len(h['problems'])} more" if h["malformed"] > len(h["problems"]) else ""
    return f"decision log: {h['malformed']} malformed line(s) left out of the history: {places}{more}"


# --- the report ------------------------------------------------------------------------------

def rule_inventory(bundle: policy.Bundle) -> list[dict[str, Any]]:
    """Every deny/warn rule with its METADATA (title, description, severity, control id) and place."""
    return [
        {
            "package": policy.package_of(bundle.policies[m.file]),
            "kind": m.rule,
            "rule": m.rule_id,
            "title": m.title,
            "description": m.description,
            "severity": m.severity,
            "control_id": m.control_id,
            "file": f"{bundle.directory.name}/{m.file}",
            "path": m.file,
            "line": m.line,
        }
        for m in sorted(policy.rule_metadata(bundle), key=lambda m: (m.file, m.line))
    ]


def tests_by_rule(tests: dict[str, str], results: list[policy.TestResult], inventory: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Which tests exercise which rule.

    A test that names a rule id (`"quota.tenant_share" in rules(quota.deny)`) exercises that rule; a
    test that names none but reads a package's `deny` or `warn` (`count(budget.deny) == 0`) exercises
    every rule of that kind in the package: the "does not fire" half of the evidence.
    """
    outcome = {(r.package, r.name): r.passed for r in results}
    by_head: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rule in inventory:
        by_head[(rule["package"].rsplit(".", 1)[-1], rule["kind"])].append(rule["rule"])
    known = {rule["rule"] for rule in inventory}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for source in tests.values():
        package = policy.package_of(source)
        starts = [(m.group(1), m.start()) for m in re.finditer(r"^(test_\w+)\b", source, re.MULTILINE)]
        for i, (name, start) in enumerate(starts):
            body = source[start : starts[i + 1][1] if i + 1 < len(starts) else len(source)]
            named = [r for r in dict.fromkeys(re.findall(r'"([a-z_]+\.[a-z_]+)"', body)) if r in known]
            if not named:
                heads = dict.fromkeys(re.findall(r"\b([a-z_]+)\.(deny|warn)\b", body))
                named = [r for head in heads for r in by_head.get(head, [])]
            for rule in named:
                out[rule].append({"name": f"{package}.{name}", "passed": outcome.get((package, name), False)})
    return {rule: sorted(ts, key=lambda t: t["name"]) for rule, ts in out.items()}


@dataclass(frozen=True)
class EnvironmentSection:
    """One environment judged: its decisions as every report shows them (`policy.report_rows`), and its capacity rows."""

    name: str
    counts: dict[str, int]
    decisions: list[dict[str, Any]]
    capacity: list[dict[str, Any]]


def environment_section(name: str, checked: render.Checked, policies_dir: Path, engine: policy.Engine) -> EnvironmentSection:
    """An environment as every command takes it (`render.load_checked`), judged by the policies."""
    verdict = policy.evaluate(checked.env, checked.state, engine=engine, policies_dir=policies_dir)
    capacity = [row.to_dict() for row in spec.capacity_rows(checked.env)]
    decisions = policy.report_rows(verdict)
    return EnvironmentSection(name, decision_counts(decisions, VERDICT_STATUSES), decisions, capacity)


def waiver_rows(policies_dir: Path, today: dt.date) -> list[dict[str, Any]]:
    """Every waiver entry: active ones with days left, expired and malformed ones flagged with why."""
    entries, positions = policy.read_waivers(policies_dir / policy.WAIVERS_FILE)
    rows = []
    for entry in entries:
        assert positions is not None  # entries come from a file, so it has positions
        raw = entry.raw if isinstance(entry.raw, dict) else {}
        scope = raw.get("scope") if isinstance(raw.get("scope"), dict) else {}
        row = {
            "rule": str(raw.get("rule", "")),
            "scope": scope,
            "scope_text": " ".join(f"{k}={v}" for k, v in scope.items()),
            "owner": str(raw.get("owner", "")),
            "reason": str(raw.get("reason", "")),
            "ticket": str(raw.get("ticket", "")),
            "expires": str(raw.get("expires", "")),
            "days_left": None,
            "where": positions.error(("waivers", entry.index), "").place,
        }
        if entry.waiver is None:
            loc, msg = entry.errors[0]
            row.update(status="malformed", problem=f"{spec.format_loc(loc)}: {msg}".lstrip(": "))
        else:
            left = (entry.waiver.expires - today).days
            row.update(days_left=left, status="expired" if left < 0 else "active", problem=None)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Provenance:
    """What the report was made from: the revision and its time, the policies' digest, the engine."""

    revision: str
    revision_date: str
    policy_digest: str
    engine: str
    engine_version: str


@dataclass(frozen=True)
class TestSummary:
    total: int
    passed: int
    failed: list[str]  # `package.name` of each failing policy test


@dataclass(frozen=True)
class AuditReport:
    """The audit report, built whole by `build`; the CLI and the forms only read it. Its rows (rules,
    coverage, decisions, waivers, history, statements) are the published ones (`audit` in
    fleetops/schemas/output.schema.json), as the modules that own them build them."""

    provenance: Provenance
    packages: list[str]
    policies: list[dict[str, Any]]
    tests: TestSummary
    coverage: list[dict[str, Any]]
    environments: list[EnvironmentSection]
    waivers: list[dict[str, Any]]
    history: dict[str, Any]
    statements: dict[str, object] | None  # `audit --statements FILE` (statements.audit_summary); None: not asked
    work: Replayed | None = None  # `audit --whatif FILE`: what a configuration did to a trace's work; None: not asked

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """Every environment's decisions, in order."""
        return [d for e in self.environments for d in e.decisions]

    @property
    def ok(self) -> bool:
        return not any(d["status"] == DecisionStatus.DENY for d in self.decisions)

    def to_json(self) -> dict[str, Any]:
        """The published `audit` fields (the envelope adds schema, command, version, ok, counts and problems)."""
        return {"provenance": asdict(self.provenance), "packages": self.packages, "policies": self.policies, "tests": asdict(self.tests),
                "coverage": self.coverage, "environments": [asdict(e) for e in self.environments], "waivers": self.waivers,
                "history": self.history, "statements": self.statements, "work": None if self.work is None else work_summary(self.work)}


def build(
    repo: Path,
    environments: list[tuple[str, render.Checked]],
    policies_dir: Path,
    decision_log: Path | None,
    engine: policy.Engine | None = None,
    today: dt.date | None = None,
    statements: Path | None = None,
    work: Path | None = None,
) -> AuditReport:
    """The report of `environments` judged by `policies_dir`, with the history of `decision_log` and,
    when given, the statements of `statements` (a `fleetops statements --output json` file) and the replay
    of `work` (a `fleetops whatif --output json` file)."""
    engine = engine or policy.engine_from()
    today = today or dt.date.today()
    bundle = policy.load_bundle(policies_dir)
    tests = policy.run_tests(policies_dir)
    inventory = rule_inventory(bundle)
    evidence = tests_by_rule(bundle.tests, tests.results, inventory)
    for rule in inventory:
        rule["tests"] = evidence.get(rule["rule"], [])
        path = rule.pop("path")
        source = (policies_dir / path).resolve()
        rule["lines"] = rule_lines(bundle.policies[path], rule["line"])
        rule["enforced_by"] = enforced_by(bundle.policies[path], rule["lines"])
        inside = source.is_relative_to(repo.resolve())
        in_repo = source.relative_to(repo.resolve()).as_posix() if inside else rule["file"]
        rule["owners"] = rule_owners(repo, policies_dir, in_repo)
        rule["last_change"] = last_change(repo, in_repo, rule["lines"]) if inside else None
    coverage = [
        {
            "file": f"{policies_dir.name}/{c.path}",
            "covered": len(c.covered),
            "total": len(c.covered) + len(c.not_covered),
            "percent": c.percent,
            "uncovered": c.not_covered,
        }
        for c in tests.coverage
    ]
    return AuditReport(  # its parts made in the order they always were: the first that fails is the one said
        provenance=Provenance(git.revision(repo), revision_time(repo), bundle.digest, engine.name, engine_version(engine)),
        packages=sorted({r["package"] for r in inventory}),
        policies=inventory,
        tests=TestSummary(len(tests.results), sum(r.passed for r in tests.results),
                          [f"{r.package}.{r.name}" for r in tests.results if not r.passed]),
        coverage=coverage,
        environments=[environment_section(name, checked, policies_dir, engine) for name, checked in environments],
        waivers=waiver_rows(policies_dir, today),
        history=history(decision_log),
        statements=_statements(statements) if statements is not None else None,
        work=_work(work, [name for name, _ in environments]) if work is not None else None,
    )


def _statements(path: Path) -> dict[str, object]:
    from fleetops.metering import statements

    return statements.audit_summary(path)


def _work(path: Path, covered: list[str]) -> Replayed:
    from fleetops.whatif import document

    work = document.read(path)
    if work.environment not in covered:  # a replay is evidence of its own environment only
        raise WhatifError(f"{path}: a replay of environment {work.environment}, which this report does not cover ({', '.join(covered)})")
    return work


def work_summary(work: Replayed) -> dict[str, Any]:
    """The audit's rows of a replay: per side, the figures a reader compares first, beside the load offered and the trace."""
    sides = [{"side": f.side, "revision": f.revision, "utilisation": f.total_utilisation, "offered_load": f.offered_load,
              "backlog_jobs": f.backlog_jobs, "wait_p50_hours": f.waits_all.p50, "wait_p99_hours": f.waits_all.p99,
              "over_an_hour": f.waits_all.over_an_hour, "preemptions": sum(p.count for p in f.preemptions), "fairness": f.fairness}
             for f in work.figures]
    return {"environment": work.environment, "source": work.source, "jobs": work.jobs, "window_hours": work.window_hours,
            "assumptions": work.assumptions, "sides": sides}


def engine_version(engine: policy.Engine) -> str:
    if isinstance(engine, policy.EmbeddedEngine):
        return f"celine-regorus {importlib.metadata.version('celine-regorus')}"
    return getattr(engine, "version", "") or "server"
