"""What a person reads on a terminal (`--output table`, the default): rich tables and summary lines of
validate, render --summary, check, policy test, reconcile, why, standing and deploy.

rich is imported as a table is made: `validate` and the other quick commands never load it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from fleetops import spec
from fleetops.output import terminal

if TYPE_CHECKING:
    from pathlib import Path

    from rich.table import Table

    from fleetops import policy, render
    from fleetops.deploy import Operation, Result as DeployResult
    from fleetops.policy.rego_tests import TestReport
    from fleetops.why.answer import Answer
    from fleetops.why.standing import Standing

STATUS_STYLE = {"deny": "bold red", "approval": "bold magenta", "warn": "yellow", "waived": "dim"}


def validate(paths: list[Path]) -> None:
    sys.stdout.write(f"ok: {len(paths)} environment file(s) valid: {', '.join(str(p) for p in paths)}\n")


def summary(env: spec.Environment, state: render.DesiredState, console: Any) -> None:
    """`render --summary`: pools and edge groups, capacity and quota per cluster, and the fleet's totals."""
    from rich.table import Table

    pools = Table(title=f"{env.environment}: pools and edge groups", title_justify="left")
    for col in ("cluster", "group", "device", "nodes", "sharing", "schedulable"):
        pools.add_column(col)
    for cluster in env.clusters:
        for group in (*cluster.pools, *cluster.edge_groups):
            sharing = group.sharing.mode if isinstance(group, spec.Pool) else "edge"
            units = ", ".join(f"{r}={n}" for r, n in spec.group_capacity(group).items())
            pools.add_row(cluster.name, group.name, f"{group.device.model} x{group.device.per_node}", str(group.nodes), sharing, units)
    quota = Table(title="capacity and quota per cluster", title_justify="left")
    for col in ("cluster", "resource", "physical", "schedulable", "sharing", "guaranteed", "burst", "headroom %"):
        quota.add_column(col, justify="right" if col not in ("cluster", "resource") else "left")
    for row in spec.capacity_rows(env):
        c = row.capacity
        quota.add_row(row.cluster, row.resource, str(c.physical), str(c.schedulable), f"x{c.sharing_factor:g}",
                      *(str(v) for v in (c.guaranteed, c.burst, c.headroom_percent)))
    console.print(pools)
    console.print(quota)
    console.print(
        f"{state.object_count} objects in {len(state.clusters)} clusters, {len(env.tenants)} tenants, "
        f"monthly cost {spec.monthly_cost(env):,.0f} {env.budget.currency} of budget {env.budget.monthly:,.0f}, revision {state.revision}"
    )


def verdict_table(verdict: policy.Verdict) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{verdict.environment}: policy decisions", title_justify="left")
    for col in ("status", "rule", "severity", "resource", "message"):
        table.add_column(col)
    for d in verdict.decisions:
        table.add_row(Text(d.status, style=STATUS_STYLE.get(d.status, "")), d.rule, d.severity, d.resource_ref(),
                      d.msg + (f" (waiver {d.waived_by})" if d.waived_by else ""))
    return table


def check(verdict: policy.Verdict) -> None:
    from fleetops.envelope import DecisionStatus

    if verdict.decisions:
        terminal.out.print(verdict_table(verdict))
    terminal.out.print(
        f"{verdict.environment}: {'pass' if verdict.ok else 'FAIL'}: {len(verdict.of(DecisionStatus.DENY))} denied, "
        f"{len(verdict.of(DecisionStatus.WARN))} warning(s), {len(verdict.of(DecisionStatus.WAIVED))} waived ({verdict.engine} engine, "
        f"policies {verdict.policy_digest[:19]}, {verdict.duration_seconds:.2f}s)",
        markup=False,
        highlight=False,
    )


def policy_tests(report: TestReport) -> None:
    from rich.table import Table

    tests = Table(title="policy tests", title_justify="left")
    for col in ("result", "package", "test", "detail"):
        tests.add_column(col)
    for r in report.results:
        tests.add_row("pass" if r.passed else "FAIL", r.package, r.name, r.error or "")
    cover = Table(title="line coverage", title_justify="left")
    for col in ("file", "covered %", "uncovered lines"):
        cover.add_column(col)
    for c in report.coverage:
        cover.add_row(c.path, f"{c.percent:.1f}", ", ".join(map(str, c.not_covered)))
    terminal.out.print(tests)
    terminal.out.print(cover)
    failed = sum(not r.passed for r in report.results)
    terminal.out.print(f"{len(report.results) - failed} passed, {failed} failed", markup=False, highlight=False)


def reconcile_pass(result: Any) -> None:
    """A reconcile pass: its actions per cluster, capacity declared against live, drift, errors and the last applied revision."""
    from rich.table import Table

    from fleetops.reconcile import PassStatus

    out, err = terminal.out, terminal.err
    if result.status in (PassStatus.INVALID, PassStatus.UNAVAILABLE):  # nothing was reconciled: the reasons alone, no table, no counts
        for reason in result.reasons:
            err.print(reason, markup=False, highlight=False)
        return
    table = Table(title=f"{result.environment} at {result.revision or '(no revision)'}: {result.status}", title_justify="left")
    for col in ("cluster", "action", "object", "detail", "result"):
        # A fingerprint or a name is read whole: long words wrap, never end in an ellipsis.
        table.add_column(col, overflow="fold")
    for name, cluster in result.clusters.items():
        if cluster.unreachable is not None:
            table.add_row(name, "unreachable", "", cluster.unreachable, "error")
        elif not cluster.leader and not cluster.errors:
            table.add_row(name, "standby", "", "another replica holds the Lease", "")
        for a in cluster.actions:
            outcome = a.error or ("done" if a.done else ("planned" if a.write else ""))
            table.add_row(name, a.verb, a.target, a.text(), outcome)
        for problem in cluster.problems:
            table.add_row(name, "malformed", "", problem, "left out")
    if table.row_count:
        out.print(table)
    capacity = Table(title="capacity: declared vs live", title_justify="left")
    for col in ("cluster", "group", "resource", "nodes ready/declared", "units allocatable/declared", "unavailable"):
        capacity.add_column(col)
    for name, cluster in result.clusters.items():
        for row in cluster.capacity:
            capacity.add_row(name, row.group, row.resource, f"{row.ready_nodes}/{row.declared_nodes}", f"{row.allocatable}/{row.declared}", str(row.unavailable))
    if capacity.row_count:
        out.print(capacity)
    for reason in result.reasons:
        if reason not in result.errors:
            out.print(reason, markup=False, highlight=False)
    # Errors of a cluster (not of one object, those are in the table) go to standard error, once each.
    in_table = {f"{a.cluster}: {a.verb} {a.target}: {a.error}" for c in result.clusters.values() for a in c.actions if a.error}
    for error in dict.fromkeys(result.errors):
        if error not in in_table:
            err.print(error, markup=False, highlight=False)
    recorded = {n: c.last_applied for n, c in result.clusters.items() if c.leader}
    if result.last_applied or len(set(recorded.values())) <= 1:
        applied = result.last_applied or "none"
    else:  # the clusters' status records disagree: each one's
        applied = ", ".join(f"{n} {r or 'none'}" for n, r in recorded.items())
    out.print(f"drift: {result.drift}, errors: {len(result.errors)}, last applied: {applied}", highlight=False)


def why(cluster: str, status: dict[str, str] | None, answers: list[Answer], tenant: str | None, problems: list[str]) -> None:
    for problem in problems:
        terminal.say(problem)
    sys.stdout.write(why_report(cluster, status, answers, tenant))


def why_report(cluster: str, status: dict[str, str] | None, answers: list[Answer], tenant: str | None) -> str:
    """`why`'s table output: the reconciler's last pass on the cluster (the live queues are what it last applied: a
    failed or denied pass leaves them behind the file), then each answer."""
    record = status or {}
    head = (f"reconciler on {cluster}: " + (f"revision {record.get('revision') or '-'}, last pass {record.get('result') or '-'}"
                                            if status is not None else "no status record (is fleetops reconciling it?)"))
    body = "\n\n".join(a.text() for a in answers) if answers else f"no pending job of {tenant} on {cluster}"
    return f"{head}\n{body}\n"


STANDING_COLUMNS = ("cluster", "resource", "guaranteed", "reachable", "in use", "borrowed", "lent", "pending jobs", "pending units",
                    "below guarantee (min)")


def standing(rows: list[Standing], problems: list[str], title: str) -> None:
    for problem in problems:
        terminal.say(problem)
    terminal.out.print(standing_table(rows, title))
    sys.stdout.write("".join(f"{line}\n" for line in standing_notes(rows)))  # whole lines: a wrapped basis reads wrong


def standing_table(rows: list[Standing], title: str) -> Table:
    """`standing`'s table output; what its last column depends on is `standing_notes`."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for col in STANDING_COLUMNS:
        out.add_column(col, justify="left" if col in ("cluster", "resource") else "right")
    for r in rows:
        out.add_row(r.cluster, r.resource, *(str(v) for v in (r.guaranteed, r.reachable, r.in_use, r.borrowed, r.lent, r.pending_jobs, r.pending_units)),
                    "unknown" if r.below.minutes is None else f"{r.below.minutes:g}")
    return out


def standing_notes(rows: list[Standing]) -> list[str]:
    """What the minutes below guarantee depend on (or why they are unknown): a line per distinct basis."""
    return [f"minutes below guarantee while others borrowed: {basis}" for basis in sorted({r.below.basis for r in rows})]


def deploy(result: DeployResult, operation: Operation, env: str) -> None:
    from fleetops.deploy import Operation

    # A preview's changes are to come; an up's were made (a failed up reports what it did and what failed).
    done = operation is Operation.up
    changes = ", ".join(f"{op} {n}" if done else f"{n} to {op}" for op, n in sorted(result.changes.items())) or "no changes"
    verdict = "done" if result.ok else "denied by the policy pack" if result.denied else "failed"
    terminal.out.print(f"pulumi {operation.value} of stack {result.stack} (environment {env}): {changes}; {verdict}", markup=False, highlight=False)
    terminal.out.print(f"state: {result.state}", markup=False, highlight=False)
    sys.stdout.write(result.diff)
    for message in result.messages:
        terminal.say(message)
