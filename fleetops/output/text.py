"""Statements as a person reads them (`statements --output text`, the default)."""

from __future__ import annotations

from fleetops.metering.statements import Mode, Statement


def statement(statement: Statement, unknown: list[str]) -> str:
    """A statement as a person reads it; with `unknown`, incomplete, and said so before any figure is added up."""
    title = "Invoice" if statement.mode is Mode.POSTPAID else "Prepaid statement"
    rows = [f"{title} for {statement.tenant}, {statement.period} ({statement.currency})"]
    for line in statement.lines:
        rows.append(f"  {line.cluster}/{line.pool} {line.device_model}: {line.device_hours:,.2f} device-hours x "
                    f"{line.price_per_device_hour:g} = {line.amount:,.2f}")
    if not statement.lines and not unknown:
        rows.append("  no use in the period")
    rows += [f"  unknown: {why}" for why in unknown]
    rows.append(f"  total: unknown (INCOMPLETE: at least {statement.total:,.2f})" if unknown else f"  total: {statement.total:,.2f}")
    if (b := statement.balance) is not None:
        if unknown:
            spent, left = "unknown", f"unknown (at most {b.remaining:,.2f})"
        else:
            low = f"; below {b.low_balance_at:,.2f}" if b.low_balance_at is not None and b.remaining < b.low_balance_at else ""
            spent, left = f"{b.spent_in_period:,.2f}", f"{b.remaining:,.2f}{' (overdrawn)' if b.remaining < 0 else low}"
        rows.append(f"  top-ups to the period's end {b.top_ups:,.2f} - spent before {b.spent_before:,.2f} - this period {spent} = balance {left}")
    return "\n".join(rows) + "\n"
