"""Statements as CSV (`statements --output csv`): one row per invoice line, total, top-up and balance; and per pool its idle capacity."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import asdict

from fleetops.metering.statements import Idle, Statement

CSV_FIELDS = ["tenant", "mode", "period", "kind", "cluster", "pool", "device_model", "resource", "device_hours",
              "price_per_device_hour", "amount", "currency", "note"]


def csv_text(statements: Iterable[Statement], incomplete: dict[str, list[str]]) -> str:
    """One row per invoice line, then the total and, for prepaid tenants, top-ups, spend before and balance.
    An incomplete statement has a row per unknown (its note says what) and no amount in its total and balance."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for s in statements:
        head = {"tenant": s.tenant, "mode": str(s.mode), "period": s.period, "currency": s.currency}
        unknown = incomplete.get(s.tenant, [])
        for line in s.lines:
            writer.writerow(head | {"kind": "line"} | {k: v for k, v in asdict(line).items()})
        for why in unknown:
            writer.writerow(head | {"kind": "unknown", "note": why})
        writer.writerow(head | {"kind": "total", "amount": "" if unknown else s.total})
        if s.balance is not None:
            for kind, amount in (("top_ups", s.balance.top_ups), ("spent_before", s.balance.spent_before),
                                 ("balance", "" if unknown else s.balance.remaining)):
                writer.writerow(head | {"kind": kind, "amount": amount})
    return buffer.getvalue()


def idle_csv(rows: Iterable[Idle], period: str, currency: str) -> str:
    """A row per pool: its idle device-hours and their cost (empty where unknown, the note says why), in the statements' columns."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    for row in rows:
        writer.writerow({"period": period, "kind": "idle", "cluster": row.cluster, "pool": row.pool, "device_model": row.device_model,
                         "resource": row.resource, "device_hours": "" if row.device_hours is None else row.device_hours,
                         "amount": "" if row.amount is None else row.amount, "currency": currency, "note": row.unknown or ""})
    return buffer.getvalue()
