"""Plain text a person reads: statements (`statements --output text`, the default) and what-if figures (`whatif`, the default)."""

from __future__ import annotations

from fleetops.metering.statements import Idle, Mode, Statement
from fleetops.metrics import REVISION
from fleetops.whatif import report
from fleetops.whatif.figures import SideFigures, Waits
from fleetops.whatif.trace import Trace


def statement(statement: Statement, unknown: list[str]) -> str:
    """A statement as a person reads it; with `unknown`, incomplete, and said so before any figure is added up."""
    title = "Invoice" if statement.mode is Mode.POSTPAID else "Prepaid statement"
    rows = [f"{title} for {statement.tenant}, {statement.period} ({statement.currency})"]
    for line in statement.lines:
        price = "-" if line.price_per_device_hour is None else f"{line.price_per_device_hour:g}"
        rows.append(f"  {line.cluster}/{line.pool} {line.device_model}: {line.device_hours:,.2f} device-hours x {price} = {line.amount:,.2f}")
    if not statement.lines and not unknown:
        rows.append("  no use in the period")
    rows += [f"  unknown: {why}" for why in unknown]
    rows.append(f"  total: unknown (INCOMPLETE: at least {statement.total:,.2f})" if unknown else f"  total: {statement.total:,.2f}")
    if statement.revisions:
        rows.append("  prices of revisions: " + "; ".join(
            f"{cluster} " + (", ".join(f"{d.revision[:12]} ({d.first_day} to {d.last_day})" for d in deployed) if deployed is not None
                             else f"unknown (no {REVISION} recorded)")
            for cluster, deployed in statement.revisions.items()))
    if (b := statement.balance) is not None:
        if unknown:
            spent, left = "unknown", f"unknown (at most {b.remaining:,.2f})"
        else:
            low = f"; below {b.low_balance_at:,.2f}" if b.low_balance_at is not None and b.remaining < b.low_balance_at else ""
            spent, left = f"{b.spent_in_period:,.2f}", f"{b.remaining:,.2f}{' (overdrawn)' if b.remaining < 0 else low}"
        rows.append(f"  top-ups to the period's end {b.top_ups:,.2f} - spent before {b.spent_before:,.2f} - this period {spent} = balance {left}")
    return "\n".join(rows) + "\n"


def idle(rows: list[Idle], period: str, currency: str) -> str:
    """Each pool's capacity no tenant held in the period and its cost; unknown where it cannot be read, and then so is the total."""
    out = [f"Idle capacity, {period} ({currency}): device-hours no tenant's running pod held, at the prices recorded"]
    for row in rows:
        where = f"  {row.cluster}/{row.pool} {row.device_model}: "
        if row.device_hours is None or row.amount is None:
            out.append(where + f"unknown ({row.unknown})")
            continue
        share = "" if row.share is None else f" ({row.share:.1%} of {row.device_hours + row.tenant_device_hours:,.2f})"
        out.append(where + f"{row.device_hours:,.2f} device-hours idle{share} = {row.amount:,.2f}")
    known = sum(row.amount for row in rows if row.amount is not None)
    out.append(f"  total: unknown (at least {known:,.2f})" if any(row.amount is None for row in rows) else f"  total: {known:,.2f}")
    return "\n".join(out) + "\n"


def _cells(w: Waits) -> str:
    return f"{w.p50:>7.2f} {w.p90:>7.2f} {w.p99:>7.2f} {w.over_an_hour:>7.1%}"


def whatif(environment: str, trace: Trace, figures: list[SideFigures]) -> str:
    """`fleetops whatif`'s table: every side's figures side by side, then each side's per flavor, tenant and class."""
    names = [f.side for f in figures]
    width = max(12, *(len(n) for n in names))

    def row(label: str, values: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{v:>{width + 2}}" for v in values)

    lines = [f"whatif {environment}: {trace.source}; {len(trace.jobs)} jobs over {trace.window / 86400:g} days", "",
             row("", names),
             row("allocation utilisation", [f"{f.total_utilisation:.1%}" for f in figures]),
             row("offered load (the ceiling)", [f"{f.offered_load:.1%}" for f in figures]),
             row("backlog at the end (jobs)", [str(f.backlog_jobs) for f in figures]),
             row("backlog (device-hours asked)", [f"{f.backlog_device_hours:.0f}" for f in figures]),
             row("wait p50 / p99 (h)", [f"{f.waits_all.p50:.2f} / {f.waits_all.p99:.2f}" for f in figures]),
             row("jobs waiting > 1 h", [f"{f.waits_all.over_an_hour:.1%}" for f in figures]),
             row("preemptions", [str(sum(p.count for p in f.preemptions)) for f in figures]),
             row("device-hours thrown away", [f"{sum(p.device_hours_lost for p in f.preemptions):.1f}" for f in figures]),
             row("guarantee not honoured (min)", [f"{sum(g.unhonoured_minutes for g in f.guarantees):.0f}" for f in figures]),
             row("fairness (Jain, use/guarantee)", [f"{f.fairness:.3f}" for f in figures])]
    for f in figures:
        lines += ["", f"{f.side} ({f.revision[:12]}): utilisation per flavor", f"  {'cluster':<16}{'resource':<34}{'flavor':<16}{'used':>8}"]
        lines += [f"  {u.cluster:<16}{u.resource:<34}{u.flavor or '(all)':<16}{u.utilisation:>8.1%}" for u in f.utilisation]
        lines += [f"  {'waits (h)':<24}{'p50':>7} {'p90':>7} {'p99':>7} {'>1h':>7} {'jobs':>6}"]
        lines += [f"  {w.group:<24}{_cells(w)} {w.jobs:>6}" for w in (*f.waits_by_tenant, *f.waits_by_class)]
        lines += [f"  preempted: {p.victim_tenant}/{p.victim_class} by {p.preemptor_tenant}/{p.preemptor_class}: {p.count}, "
                  f"{p.device_hours_lost:.1f} device-hours lost" for p in f.preemptions]
        lines += [f"  guarantee of {g.tenant} ({g.resource} on {g.cluster}) not honoured {g.unhonoured_minutes:.0f} min in {g.episodes} "
                  f"stretches, the longest {g.longest_minutes:.0f} min" for g in f.guarantees if g.unhonoured_minutes]
    lines += ["", *(f"assumed: {a}" for a in report.ASSUMPTIONS)]
    return "\n".join(lines) + "\n"
