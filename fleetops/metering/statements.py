"""Per-tenant statements for a calendar month, from the metering series Prometheus recorded.

A postpaid tenant's statement is an invoice: a line per cluster, pool and device model with its
device-hours x the price per device-hour. A prepaid tenant's also has a balance: its top-ups dated up
to the period's end, less what it spent from its first top-up to the period's end.

The cost is bounded whatever the number of tenants: one range query for the period (grouped by
cluster, pool, tenant and resource: never one per tenant), and one more for the prepaid tenants'
spend before it when any was topped up earlier. Device-hours are counted at minute resolution
(`sum_over_time(...[1d:1m]) / 60`), one point per day, so a month is ~30 points per series.

Prices are the environment's as declared now (the revision the command runs on), in the budget's currency.
"""

from __future__ import annotations

import calendar
import csv
import datetime
import io
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from fleetops import spec
from fleetops.errors import FleetopsError
from fleetops.prometheus import Prometheus, Series, finite

DEVICES = "fleetops:tenant_devices:physical"  # modules/metering.py records it: the shared metric contract
DAY = 86400
ROUND = 6  # decimals kept of device-hours and amounts: a sum of 30 days of minute samples, no more


class StatementError(FleetopsError):
    """The statements cannot be made: a bad period, or Prometheus holds no metering for it."""


class Mode(StrEnum):
    POSTPAID = "postpaid"
    PREPAID = "prepaid"


@dataclass(frozen=True)
class Period:
    """A calendar month in UTC: [start, end)."""

    name: str
    start: datetime.datetime
    end: datetime.datetime

    @classmethod
    def parse(cls, text: str) -> Period:
        try:
            first = datetime.datetime.strptime(text, "%Y-%m").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            raise StatementError(f"--period {text!r}: a month is written YYYY-MM, e.g. 2026-11") from None
        days = calendar.monthrange(first.year, first.month)[1]
        return cls(text, first, first + datetime.timedelta(days=days))


@dataclass(frozen=True)
class Line:
    cluster: str
    pool: str
    device_model: str
    resource: str
    device_hours: float
    price_per_device_hour: float
    amount: float


@dataclass(frozen=True)
class Balance:
    top_ups: float  # dated up to the period's end
    spent_before: float  # from the first top-up to the period's start
    spent_in_period: float
    remaining: float
    low_balance_at: float | None


@dataclass(frozen=True)
class Statement:
    tenant: str
    mode: Mode
    period: str
    currency: str
    lines: list[Line] = field(default_factory=list)
    total: float = 0.0
    balance: Balance | None = None

    @property
    def overdrawn(self) -> bool:
        return self.balance is not None and self.balance.remaining < 0

    def document(self) -> dict[str, object]:
        return asdict(self) | {"mode": str(self.mode)}


@dataclass(frozen=True)
class Statements:
    environment: str
    period: Period
    prometheus: str
    queries: int
    statements: list[Statement]
    unknown: list[str]  # series naming a tenant or pool the environment does not have: not billed, said

    def document(self) -> dict[str, object]:
        return {"environment": self.environment, "period": self.period.name, "prometheus": self.prometheus,
                "queries": self.queries, "unknown": self.unknown,
                "statements": [s.document() for s in self.statements]}


def _unix(day: datetime.date | datetime.datetime) -> float:
    if not isinstance(day, datetime.datetime):
        day = datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc)
    return day.timestamp()


def device_hours_expr(tenants: Iterable[str] | None = None) -> str:
    """Device-hours in the day before each point, per cluster, pool, tenant and resource."""
    selector = DEVICES if tenants is None else f'{DEVICES}{{tenant=~"{"|".join(sorted(tenants))}"}}'
    return f"sum by (cluster, pool, tenant, resource) (sum_over_time({selector}[1d:1m])) / 60"


Key = tuple[str, str, str]  # cluster, pool, tenant


def _daily(series: list[Series]) -> dict[Key, list[tuple[float, float]]]:
    """(day's end, device-hours of the day) per cluster, pool and tenant; NaN points are no use."""
    out: dict[Key, list[tuple[float, float]]] = {}
    for s in series:
        key = (s.labels.get("cluster", ""), s.labels.get("pool", ""), s.labels.get("tenant", ""))
        out.setdefault(key, []).extend((t, v) for t, v in s.points if finite(v))
    return out


def _read(prom: Prometheus, expr: str, start: float, end: float) -> dict[Key, list[tuple[float, float]]]:
    """Points at each day's end in (start, end]: each covers the day before it."""
    return _daily(prom.query_range(expr, start + DAY, end, DAY))


def build(env: spec.Environment, prom: Prometheus, period: Period) -> Statements:
    """Read the period (and the prepaid tenants' spend before it) and write every tenant's statement."""
    start, end = _unix(period.start), _unix(period.end)
    usage = _read(prom, device_hours_expr(), start, end)
    if not usage:
        raise StatementError(f"{prom.url}: no {DEVICES} between {period.start:%Y-%m-%d} and {period.end:%Y-%m-%d}: is the "
                             f"PrometheusRule fleetops-metering loaded and kube-state-metrics scraped? (read as no answer, never as zero use)")
    prepaid = {t.name: t for t in env.tenants if t.billing.mode == Mode.PREPAID}
    first_top_up = {name: min(_unix(u.date) for u in t.billing.top_ups) for name, t in prepaid.items()}
    earliest = min((f for f in first_top_up.values() if f < start), default=None)
    before = _read(prom, device_hours_expr(prepaid), earliest, start) if earliest is not None else {}

    groups = {(c.name, g.name): g for c in env.clusters for g in (*c.pools, *c.edge_groups)}
    tenants = {t.name for t in env.tenants}
    unknown = sorted({f"{cluster}/{pool}/{tenant}" for cluster, pool, tenant in usage
                      if tenant not in tenants or (cluster, pool) not in groups})

    def priced(days: dict[Key, list[tuple[float, float]]], tenant: str, since: float) -> list[Line]:
        lines = []
        for (cluster, pool, name), points in sorted(days.items()):
            group = groups.get((cluster, pool))
            if name != tenant or group is None:
                continue
            hours = sum(v for t, v in points if t - DAY >= since)
            price = spec.device_hour_price(env, group)
            lines.append(Line(cluster, pool, group.device.model, group.device.resource,
                              round(hours, ROUND), price, round(hours * price, ROUND)))
        return lines

    out = []
    for tenant in env.tenants:
        since = first_top_up.get(tenant.name, float("-inf"))  # prepaid use is paid from the first top-up on
        lines = priced(usage, tenant.name, since)
        total = round(sum(line.amount for line in lines), ROUND)
        balance = None
        if tenant.name in prepaid:
            spent_before = round(sum(line.amount for line in priced(before, tenant.name, since)), ROUND)
            top_ups = sum(u.amount for u in tenant.billing.top_ups if _unix(u.date) < end)
            balance = Balance(round(top_ups, ROUND), spent_before, total, round(top_ups - spent_before - total, ROUND),
                              tenant.billing.low_balance_at)
        out.append(Statement(tenant.name, Mode(tenant.billing.mode), period.name, env.budget.currency, lines, total, balance))
    return Statements(env.environment, period, prom.url, prom.queries, out, unknown)


# --- forms ------------------------------------------------------------------------------------

CSV_FIELDS = ["tenant", "mode", "period", "kind", "cluster", "pool", "device_model", "resource", "device_hours",
              "price_per_device_hour", "amount", "currency"]


def csv_text(statements: Iterable[Statement]) -> str:
    """One row per invoice line, then the total and, for prepaid tenants, top-ups, spend before and balance."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for s in statements:
        head = {"tenant": s.tenant, "mode": str(s.mode), "period": s.period, "currency": s.currency}
        for line in s.lines:
            writer.writerow(head | {"kind": "line"} | {k: v for k, v in asdict(line).items()})
        writer.writerow(head | {"kind": "total", "amount": s.total})
        if s.balance is not None:
            for kind, amount in (("top_ups", s.balance.top_ups), ("spent_before", s.balance.spent_before), ("balance", s.balance.remaining)):
                writer.writerow(head | {"kind": kind, "amount": amount})
    return buffer.getvalue()


def text(statement: Statement) -> str:
    """A statement as a person reads it."""
    title = "Invoice" if statement.mode is Mode.POSTPAID else "Prepaid statement"
    rows = [f"{title} for {statement.tenant}, {statement.period} ({statement.currency})"]
    for line in statement.lines:
        rows.append(f"  {line.cluster}/{line.pool} {line.device_model}: {line.device_hours:,.2f} device-hours x "
                    f"{line.price_per_device_hour:g} = {line.amount:,.2f}")
    if not statement.lines:
        rows.append("  no use in the period")
    rows.append(f"  total: {statement.total:,.2f}")
    if (b := statement.balance) is not None:
        low = f"; below {b.low_balance_at:,.2f}" if b.low_balance_at is not None and b.remaining < b.low_balance_at else ""
        rows.append(f"  top-ups to the period's end {b.top_ups:,.2f} - spent before {b.spent_before:,.2f} - this period "
                    f"{b.spent_in_period:,.2f} = balance {b.remaining:,.2f}{' (overdrawn)' if b.remaining < 0 else low}")
    return "\n".join(rows) + "\n"
