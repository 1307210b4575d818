"""Per-tenant statements for a calendar month, from the metering series Prometheus recorded.

A postpaid tenant's statement is an invoice: a line per cluster, pool and device model with its
device-hours x the price per device-hour. A prepaid tenant's also has a balance: its top-ups dated up
to the period's end, less what it spent from its first top-up to the period's end.

The cost is bounded whatever the number of tenants: five range queries for the period, one per recorded
series (device-hours and spend, grouped by cluster, pool and tenant: never one per tenant; the idle
device-hours and their spend, per cluster and pool; the revisions applied, per cluster), and two more
per month of the prepaid tenants' use before it when any was topped up earlier. Device-hours are counted
at minute resolution (`sum_over_time(...[1d:1m]) / 60`), one point per day, so a month is ~30 points per
series: each minute of the month counts once, as the latest sample at or before it says. The server holds
a query's minute samples at once and refuses above its `--query.max-samples` (50 million by default), so
no query asks for more than one series over SPAN: a month of one series for 1,000 tenant-pools is ~45
million (benchmarks/metering_bench.py); both series at once, or a prepaid year at once, were refused.

Money is what Prometheus recorded, never repriced: each minute's spend is `fleetops:tenant_spend:per_hour`,
which the metering rules deployed at that minute computed with the prices of the revision they were
rendered from. So a closed month keeps the prices that were in force in it, and the prepaid balance
PromQL computes (from the same series) equals the statement's. A line's price per device-hour is what the
period charged per device-hour (spend / device-hours): one price, or the mean of those in force.

Beside the tenants' statements, each pool's idle capacity: the device-hours no tenant's running pod held
(`fleetops:pool_idle_devices:physical`: allocatable less the tenants' use, each minute) and what they cost
(`fleetops:pool_idle_spend:per_hour`, at the same recorded prices). A shared GPU is cut by one sharing factor
for both, a time-slicing replica a quarter of a 4-way GPU, a 3g.20gb MIG instance half an A100-40GB cut into
one 3g and two 2g: a pool's tenants' spend and its idle spend add up to its whole devices' cost. OpenCost
calls it idle cost; pods of no tenant (kube-system's) are part of it here, as no tenant pays for them.

A statement names the revisions whose prices it billed: per cluster of its lines, each revision the cluster's
reconciler recorded as applied (`fleetops_revision_info`, which Prometheus keeps) and the first and last day of
the period it was; unknown (None) where nothing recorded it (a fleet deployed by `pulumi up` alone).

What cannot be read as use is said as unknown, never billed as 0: a day whose device-hours are no
number (NaN, Inf) or negative, and a cluster a tenant runs on that has no series at all in the period
(the metering rules are not loaded there, its Prometheus lost the month, or nothing ran there: the
series cannot tell these apart). Such a tenant's statement is incomplete: its total is unknown, and
`fleetops statements` exits 2. An answer that is not Prometheus's (a point off the asked days, a
series twice) is refused whole by the client (fleetops.prometheus).
"""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel

from fleetops import spec
from fleetops.errors import FleetopsError
from fleetops.metrics import DEVICES, IDLE_DEVICES, IDLE_SPEND, NODE_ALLOCATABLE, REVISION, SPEND
from fleetops.prometheus import Prometheus, finite

DAY = 86400
EARLY = 30  # seconds: between two minute steps of the subquery
ROUND = 6  # decimals kept of device-hours and amounts: a sum of 30 days of minute samples, no more
DAYS_NAMED = 3  # of the days refused on one pool, the first named; the rest counted
SPAN = 31 * DAY  # the most one query asks for: a query holds its days' minutes of every series at once (below)
PRICE_SOURCE = f"{SPEND} as Prometheus recorded it: each minute at the prices of the metering rules deployed then"


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
    def parse(cls, text: str, now: datetime.datetime | None = None) -> Period:
        """The month `text` names, begun by `now` (default: the clock): a month to come has no use yet, and its
        prepaid balance would be read from the first top-up on, 31 days a query, through years no one lived."""
        try:
            first = datetime.datetime.strptime(text, "%Y-%m").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            raise StatementError(f"--period {text!r}: a month is written YYYY-MM, e.g. 2026-11") from None
        now = now or datetime.datetime.now(datetime.timezone.utc)
        if first > now:
            raise StatementError(f"--period {text}: the month has not begun (it is {now:%Y-%m-%d} UTC): no statement yet")
        days = calendar.monthrange(first.year, first.month)[1]
        return cls(text, first, first + datetime.timedelta(days=days))


@dataclass(frozen=True)
class Line:
    cluster: str
    pool: str
    device_model: str
    resource: str
    device_hours: float
    price_per_device_hour: float | None  # charged per device-hour in the period (spend / device-hours); None without use
    amount: float


@dataclass(frozen=True)
class Balance:
    top_ups: float  # dated up to the period's end
    spent_before: float  # from the first top-up to the period's start
    spent_in_period: float
    remaining: float
    low_balance_at: float | None


@dataclass(frozen=True)
class Idle:
    """A pool's capacity no tenant's running pod held in the period, and its cost at the prices recorded then;
    None where it cannot be read (`unknown` says why)."""

    cluster: str
    pool: str
    device_model: str
    resource: str
    device_hours: float | None
    tenant_device_hours: float  # what tenants' pods held of the pool in the period: the statements' lines (and metered unknown tenants')
    share: float | None  # idle / (idle + tenants'), of the capacity the pool had
    amount: float | None
    unknown: str | None = None


@dataclass(frozen=True)
class Deployed:
    """A revision a cluster's reconciler recorded as applied, from the first to the last day of the period it was."""

    revision: str
    first_day: str
    last_day: str


@dataclass(frozen=True)
class Statement:
    tenant: str
    mode: Mode
    period: str
    currency: str
    lines: list[Line] = field(default_factory=list)
    total: float = 0.0
    balance: Balance | None = None
    revisions: dict[str, list[Deployed] | None] = field(default_factory=dict)  # per cluster of its lines; None: not recorded

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
    incomplete: dict[str, list[str]] = field(default_factory=dict)  # tenant -> what of its use is unknown
    idle: list[Idle] = field(default_factory=list)  # per pool and edge group of the environment

    def document(self) -> dict[str, object]:
        return {"environment": self.environment, "period": self.period.name, "prometheus": self.prometheus,
                "price_source": PRICE_SOURCE, "queries": self.queries, "unknown": self.unknown, "incomplete": self.incomplete,
                "statements": [self.statement_document(s) for s in self.statements], "idle": [asdict(i) for i in self.idle]}

    def statement_document(self, statement: Statement) -> dict[str, object]:
        """A statement as JSON: an incomplete one's total and balance are unknown (null), never the known part's sum."""
        document = statement.document()
        if statement.tenant in self.incomplete:
            document["total"] = None
            if isinstance(balance := document["balance"], dict):
                balance.update(spent_in_period=None, remaining=None)
        return document


def _unix(day: datetime.date | datetime.datetime) -> float:
    if not isinstance(day, datetime.datetime):
        day = datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc)
    return day.timestamp()


def use_expr(name: str, tenants: Iterable[str] | None = None) -> str:
    """The recorded series `name` (device-hours or spend, a tenant's or idle) summed over the day before each point, per
    cluster, pool and tenant (none: "", for the idle series)."""
    where = "" if tenants is None else f'{{tenant=~"{"|".join(sorted(tenants))}"}}'
    return f"sum by (cluster, pool, tenant) (sum_over_time({name}{where}[1d:1m])) / 60"


Key = tuple[str, str, str]  # cluster, pool, tenant
Days = dict[Key, list[tuple[float, float]]]  # (day's end, the day's device-hours or spend)


def _day(t: float) -> str:
    return f"{datetime.datetime.fromtimestamp(t - DAY, datetime.timezone.utc):%Y-%m-%d}"


def _named(days: list[float]) -> str:
    """The first DAYS_NAMED of these days (each point's day's end), and how many more."""
    return ", ".join(_day(t) for t in days[:DAYS_NAMED]) + (f" and {len(days) - DAYS_NAMED} more" if len(days) > DAYS_NAMED else "")


def _refused(key: Key, what: str, points: list[tuple[float, float]]) -> str | None:
    """Why some of a series' days cannot be read (no number, or below zero), naming them; None if all can."""
    bad = [(t, v) for t, v in points if not finite(v) or v < 0]
    if not bad:
        return None
    kinds = " or ".join(sorted({"no number (NaN, Inf)" if not finite(v) else "negative" for _, v in bad}))
    return f"{key[0]}/{key[1]}: {what} {kinds} on {_named([t for t, _ in bad])}: unknown, not 0"


@dataclass
class _Use:
    """What one read found: per series name, its days; and per key why some of them cannot be read."""

    days: dict[str, Days] = field(default_factory=dict)
    refused: dict[Key, str] = field(default_factory=dict)

    @classmethod
    def of(cls, names: tuple[str, str]) -> _Use:
        """Nothing read yet of these series."""
        return cls({name: {} for name in names})


WHAT = {DEVICES: "device-hours", SPEND: "spend", IDLE_DEVICES: "idle device-hours", IDLE_SPEND: "idle spend"}
TENANTS = (DEVICES, SPEND)
IDLE = (IDLE_DEVICES, IDLE_SPEND)


REVISIONS_EXPR = f"max by (cluster, revision) (max_over_time({REVISION}[1d]))"


def _daily(prom: Prometheus, expr: str, start: float, end: float) -> Iterable[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Each series of `expr` asked once a day of [start, end), at most SPAN per query: its labels and (day's end, value)."""
    for first in range(int(start), int(end), SPAN):
        last = min(first + SPAN, int(end))
        for s in prom.query_range(expr, first + DAY - EARLY, last - EARLY, DAY):
            yield s.labels, [(t + EARLY, v) for t, v in s.points]


def _deployed(prom: Prometheus, start: float, end: float) -> dict[str, list[Deployed]]:
    """Per cluster, the revisions recorded as applied on some day of [start, end), in the order they came."""
    days: dict[tuple[str, str], list[float]] = {}
    for labels, points in _daily(prom, REVISIONS_EXPR, start, end):
        key = (labels.get("cluster", ""), labels.get("revision", ""))
        days.setdefault(key, []).extend(t for t, v in points if finite(v))
    out: dict[str, list[Deployed]] = {}
    for (cluster, revision), ends in sorted(days.items(), key=lambda item: (item[0][0], min(item[1]), max(item[1]))):
        out.setdefault(cluster, []).append(Deployed(revision, _day(min(ends)), _day(max(ends))))
    return out


def _unpriced(key: Key, hours: str, spend: str, days: list[tuple[float, float]], priced_days: list[tuple[float, float]]) -> str | None:
    """Days of use with no recorded spend (the rules that price it were not loaded, or their series was lost), named."""
    priced = {t for t, _ in priced_days}
    bare = [t for t, v in days if v > 0 and t not in priced]
    return f"{key[0]}/{key[1]}: {WHAT[hours]} but no {spend} on {_named(bare)}: its cost unknown, not 0" if bare else None


def _read(prom: Prometheus, start: float, end: float, names: tuple[str, str], tenants: Iterable[str] | None = None) -> _Use:
    """(day's end, value) of each series of `names` (device-hours and their spend) for each day of [start, end)
    that reads as a number, and per key why some days do not (no number, or device-hours without recorded spend).
    Each point is asked EARLY seconds before its day's end, so that its `[1d:1m]` window holds exactly the day's
    1,440 minutes (from 00:00 to 23:59) whether the server's ranges include their start (Prometheus 2) or not (3)."""
    use = _Use.of(names)
    for name, days in use.days.items():
        for labels, points in _daily(prom, use_expr(name, tenants), start, end):
            key = (labels.get("cluster", ""), labels.get("pool", ""), labels.get("tenant", ""))
            if (why := _refused(key, WHAT[name], points)) is not None:
                use.refused.setdefault(key, why)
            days.setdefault(key, []).extend((t, v) for t, v in points if finite(v) and v >= 0)
    hours, spend = names
    for key, points in use.days[hours].items():
        if key not in use.refused and (why := _unpriced(key, hours, spend, points, use.days[spend].get(key, []))) is not None:
            use.refused[key] = why
    return use


def _idle(groups: dict[tuple[str, str], spec.Group], idle: _Use, usage: Days, period: Period) -> list[Idle]:
    """Per pool and edge group of the environment: its idle device-hours and their cost, beside what its tenants held."""
    held: dict[tuple[str, str], float] = {}
    for (cluster, pool, _), points in usage.items():
        held[(cluster, pool)] = held.get((cluster, pool), 0.0) + sum(v for _, v in points)
    out = []
    for (cluster, pool), group in sorted(groups.items()):
        tenants_held = round(held.get((cluster, pool), 0.0), ROUND)
        key = (cluster, pool, "")
        why = idle.refused.get(key)
        if key not in idle.days[IDLE_DEVICES]:
            why = f"{cluster}/{pool}: no {IDLE_DEVICES} in {period.name} (no {NODE_ALLOCATABLE} of its nodes, metering rules older than it, or lost): unknown, not 0"
        hours = None if why else round(sum(v for _, v in idle.days[IDLE_DEVICES][key]), ROUND)
        amount = None if why else round(sum(v for _, v in idle.days[IDLE_SPEND].get(key, [])), ROUND)
        share = round(hours / (hours + tenants_held), ROUND) if hours is not None and hours + tenants_held else None
        out.append(Idle(cluster, pool, group.device.model, group.device.resource, hours, tenants_held, share, amount, why))
    return out


def build(env: spec.Environment, prom: Prometheus, period: Period) -> Statements:
    """Read the period (and the prepaid tenants' spend before it) and write every tenant's statement."""
    start, end = _unix(period.start), _unix(period.end)
    use = _read(prom, start, end, TENANTS)
    usage = use.days[DEVICES]
    if not usage:
        raise StatementError(f"{prom.url}: no {DEVICES} between {period.start:%Y-%m-%d} and {period.end:%Y-%m-%d}: is the "
                             f"PrometheusRule fleetops-metering loaded and kube-state-metrics scraped? (read as no answer, never as zero use)")
    idle = _read(prom, start, end, IDLE)
    deployed = _deployed(prom, start, end)
    prepaid = {t.name: t for t in env.tenants if t.billing.mode == Mode.PREPAID}
    first_top_up = {name: min(_unix(u.date) for u in t.billing.top_ups) for name, t in prepaid.items()}
    earliest = min((f for f in first_top_up.values() if f < start), default=None)
    before = _read(prom, earliest, start, TENANTS, prepaid) if earliest is not None else _Use.of(TENANTS)

    groups = {(c.name, g.name): g for c in env.clusters for g in (*c.pools, *c.edge_groups)}
    tenants = {t.name for t in env.tenants}
    unknown = sorted({f"{cluster}/{pool}/{tenant}" for cluster, pool, tenant in usage if tenant not in tenants or (cluster, pool) not in groups}
                     | {f"{cluster}/{pool} (idle)" for cluster, pool, _ in idle.days[IDLE_DEVICES] if (cluster, pool) not in groups})
    measured = {cluster for cluster, _, _ in usage}
    metered = {c.name for c in env.clusters if c.pools or c.edge_groups}

    def unknowns(tenant: spec.Tenant) -> list[str]:
        """What of the tenant's use cannot be read: clusters without a series, days without a number or a price."""
        out = [f"{cluster}: no {DEVICES} in {period.name} (metering not loaded there, lost, or nothing ran): unknown, not 0"
               for cluster in tenant.clusters if cluster in metered and cluster not in measured]
        out += [why for (_, _, name), why in sorted(use.refused.items()) if name == tenant.name]
        out += [f"{why} (before {period.name}: the balance's spend)" for (_, _, name), why in sorted(before.refused.items()) if name == tenant.name]
        return out

    def lines_of(read: _Use, tenant: str, since: float) -> list[Line]:
        lines = []
        for (cluster, pool, name), points in sorted(read.days[DEVICES].items()):
            group = groups.get((cluster, pool))
            if name != tenant or group is None:
                continue
            hours = sum(v for t, v in points if t - DAY >= since)
            amount = sum(v for t, v in read.days[SPEND].get((cluster, pool, name), []) if t - DAY >= since)
            lines.append(Line(cluster, pool, group.device.model, group.device.resource, round(hours, ROUND),
                              round(amount / hours, ROUND) if hours else None, round(amount, ROUND)))
        return lines

    out, incomplete = [], {}
    for tenant in env.tenants:
        if reasons := unknowns(tenant):
            incomplete[tenant.name] = reasons
        since = first_top_up.get(tenant.name, float("-inf"))  # prepaid use is paid from the first top-up on
        lines = lines_of(use, tenant.name, since)
        total = round(sum(line.amount for line in lines), ROUND)
        balance = None
        if tenant.name in prepaid:
            spent_before = round(sum(line.amount for line in lines_of(before, tenant.name, since)), ROUND)
            top_ups = sum(u.amount for u in tenant.billing.top_ups if _unix(u.date) < end)
            balance = Balance(round(top_ups, ROUND), spent_before, total, round(top_ups - spent_before - total, ROUND),
                              tenant.billing.low_balance_at)
        revisions = {cluster: deployed.get(cluster) for cluster in sorted({line.cluster for line in lines})}
        out.append(Statement(tenant.name, Mode(tenant.billing.mode), period.name, env.budget.currency, lines, total, balance, revisions))
    return Statements(env.environment, period, prom.url, prom.queries, out, unknown, incomplete, _idle(groups, idle, usage, period))


# --- in the audit report ----------------------------------------------------------------------

DOCUMENT_BYTES = 64 * 1024 * 1024  # of a statements file: 1,000 tenants' month is ~1 MiB of JSON


class _Balance(BaseModel):
    remaining: float | None


class _Summary(BaseModel):
    tenant: str
    mode: Mode
    currency: str
    total: float | None  # unknown in an incomplete statement
    balance: _Balance | None


class _StatementsDocument(BaseModel):
    environment: str
    period: str
    prometheus: str
    incomplete: dict[str, list[str]] = {}
    statements: list[_Summary]


def audit_summary(path: Path) -> dict[str, object]:
    """What the audit report shows of a `fleetops statements --output json` file: per tenant, its mode, total and balance."""
    try:
        document = spec.read_output(path, _StatementsDocument, DOCUMENT_BYTES, "statements")
    except ValueError as exc:
        raise StatementError(str(exc)) from None
    unknown = document.incomplete or {s.tenant: ["total: null"] for s in document.statements if s.total is None}
    if unknown:  # an audit shows no figure that is not one
        tenant, reasons = next(iter(unknown.items()))
        raise StatementError(f"{path}: {len(unknown)} incomplete statements (e.g. {tenant}: {reasons[0]}): not audited")
    return {"environment": document.environment, "period": document.period, "prometheus": document.prometheus,
            "rows": [{"tenant": s.tenant, "mode": str(s.mode), "currency": s.currency, "total": s.total,
                      "balance": None if s.balance is None else s.balance.remaining} for s in document.statements]}
