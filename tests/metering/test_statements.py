"""`fleetops statements` against a scripted Prometheus API: forms, exit codes and the bounded queries.
The statements against a real Prometheus over a synthetic month are in test_real_metering.py."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from fleetops.metering.statements import Period, StatementError
from tests.command import run
from tests.fake_prometheus import server, success  # noqa: F401 - server is a fixture
from tests.helpers import ROOT

DAY = 86400
NOVEMBER = int(datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc).timestamp())


def days(per_day: float, first: int = NOVEMBER, count: int = 30) -> list[list[object]]:
    """Points as the statements' query is answered: one per day, asked 30 s before the day's end."""
    return [[first + (i + 1) * DAY - 30, str(per_day)] for i in range(count)]


def matrix(*series: tuple[dict[str, str], list[list[object]]]) -> bytes:
    return success({"resultType": "matrix", "result": [{"metric": labels, "values": values} for labels, values in series]})


# dev's edge cluster measured too (its tenant held nothing): a cluster without any series is unknown use, not 0
EDGE = ({"cluster": "dev-edge", "pool": "dev-jetson", "tenant": "edge-dev", "resource": "nvidia.com/gpu"}, days(0))


def statements(url: str, *args: str) -> tuple[int, str, str]:
    done = run("statements", "--env", "dev", "--environments", ROOT / "environments", "--prometheus", url, "--period", "2026-11", *args)
    return done.returncode, done.stdout, done.stderr


def test_an_overdrawn_prepaid_tenant_exits_1_and_spend_is_priced_per_pool(server) -> None:  # noqa: F811
    url, script = server
    sandbox = {"cluster": "dev-center", "tenant": "ml-sandbox", "resource": "nvidia.com/gpu"}
    script.body = matrix(({**sandbox, "pool": "dev-a100"}, days(48)), ({**sandbox, "pool": "dev-spot"}, days(10)),
                         ({"cluster": "dev-center", "pool": "dev-a100", "tenant": "gone", "resource": "nvidia.com/gpu"}, days(1)), EDGE)
    code, out, err = statements(url, "--output", "json")
    assert code == 1
    assert err.splitlines() == ["warning: dev-center/dev-a100/gone: metered, but no such tenant or pool in dev: not billed",
                                "overdrawn: ml-sandbox"]
    document = json.loads(out)
    assert document["ok"] is False and document["counts"] == {"statements": 4, "overdrawn": 1, "incomplete": 0}
    sandbox_statement = next(s for s in document["statements"] if s["tenant"] == "ml-sandbox")
    lines = {line["pool"]: (line["device_hours"], line["price_per_device_hour"], line["amount"]) for line in sandbox_statement["lines"]}
    assert lines == {"dev-a100": (1440, 1.4, 2016), "dev-spot": (300, 0.5, 150)}  # the spot pool at its own price
    assert sandbox_statement["balance"] == {"top_ups": 2000, "spent_before": 0, "spent_in_period": 2166, "remaining": -166, "low_balance_at": 200}
    # One query: dev's prepaid tenant was topped up on the month's first day, so there is no spend before it to read.
    assert [path for path, _, _ in script.asked] == ["/api/v1/query_range"]


def test_the_queries_are_grouped_never_one_per_tenant(server) -> None:  # noqa: F811
    url, script = server
    script.body = matrix(({"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev", "resource": "nvidia.com/gpu"}, days(1)), EDGE)
    assert statements(url)[0] == 0
    (_, form, _), = script.asked
    assert form["query"] == ("sum by (cluster, pool, tenant, resource) (sum_over_time(fleetops:tenant_devices:physical[1d:1m])) / 60")
    assert (form["start"], form["step"]) == (f"{NOVEMBER + DAY - 30}.000", "86400")


def test_no_metering_in_the_month_is_exit_2_not_zero_use(server) -> None:  # noqa: F811
    url, script = server
    script.body = matrix()
    code, out, err = statements(url)
    assert code == 2 and out == ""
    assert "no fleetops:tenant_devices:physical between 2026-11-01 and 2026-12-01" in err and len(err.strip().splitlines()) == 1


def test_the_text_form_reads_as_an_invoice(server, tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    script.body = matrix(({"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev", "resource": "nvidia.com/gpu"}, days(2)), EDGE)
    code, _, err = statements(url, "--out", str(tmp_path))
    assert code == 0 and "wrote 4 statements for 2026-11" in err
    assert (tmp_path / "platform-dev.txt").read_text() == (
        "Invoice for platform-dev, 2026-11 (USD)\n"
        "  dev-center/dev-a100 A100-PCIE-40GB: 60.00 device-hours x 1.4 = 84.00\n"
        "  total: 84.00\n")


@pytest.mark.parametrize("text", ["2026-13", "2026/11", "november", ""])
def test_a_period_is_a_month(text: str) -> None:
    with pytest.raises(StatementError, match="a month is written YYYY-MM"):
        Period.parse(text)


def test_february_of_a_leap_year_has_29_days() -> None:
    period = Period.parse("2028-02")
    assert (period.end - period.start).days == 29


# --- use that cannot be read is unknown, never 0 ------------------------------------------------------------

PLATFORM = {"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev", "resource": "nvidia.com/gpu"}


@pytest.mark.parametrize("value,said", [("NaN", "no number (NaN, Inf)"), ("+Inf", "no number (NaN, Inf)"), ("-24", "negative")])
def test_a_day_without_a_number_makes_the_statement_incomplete_and_exits_2(server, value: str, said: str) -> None:  # noqa: F811
    url, script = server
    points = days(24)
    points[2][1] = value  # 2026-11-03
    script.body = matrix((PLATFORM, points), EDGE)
    code, out, err = statements(url, "--output", "json")
    assert code == 2
    why = f"dev-center/dev-a100: device-hours {said} on 2026-11-03: unknown, not 0"
    assert err.splitlines() == [f"incomplete: platform-dev: {why}"]
    document = json.loads(out)
    assert document["ok"] is False and document["incomplete"] == {"platform-dev": [why]}
    platform = next(s for s in document["statements"] if s["tenant"] == "platform-dev")
    assert platform["total"] is None  # not the 29 days' sum, and never 0
    edge = next(s for s in document["statements"] if s["tenant"] == "edge-dev")
    assert edge["total"] == 0  # the other tenants' statements are whole


def test_a_cluster_missing_from_the_answer_is_unknown_use_and_nothing_is_written(server, tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    script.body = matrix((PLATFORM, days(2)))  # dev-edge: no series at all
    code, out, err = statements(url, "--out", str(tmp_path))
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert err.splitlines() == [
        "incomplete: edge-dev: dev-edge: no fleetops:tenant_devices:physical in 2026-11 (metering not loaded there, lost, "
        "or nothing ran): unknown, not 0",
        f"wrote nothing to {tmp_path}: 1 statements are incomplete"]
    code, out, _ = statements(url)
    assert code == 2
    assert "Invoice for edge-dev, 2026-11 (USD)\n  unknown: dev-edge: no fleetops:tenant_devices:physical" in out
    assert "  total: unknown (INCOMPLETE: at least 0.00)\n" in out
    assert "Invoice for platform-dev, 2026-11 (USD)\n  dev-center/dev-a100 A100-PCIE-40GB: 60.00 device-hours x 1.4 = 84.00\n  total: 84.00\n" in out
    code, out, _ = statements(url, "--output", "csv")
    assert code == 2 and "edge-dev,postpaid,2026-11,total,,,,,,,,USD,\n" in out and ",unknown," in out


@pytest.mark.parametrize("body,said", [
    (matrix((PLATFORM, days(2)), (PLATFORM, days(2)), EDGE), "is answered twice"),  # two replicas, not deduplicated
    (matrix((PLATFORM, days(2, first=NOVEMBER - 31 * DAY)), EDGE), "not one of the asked steps"),  # October's days
])
def test_duplicated_or_out_of_period_samples_are_refused_not_billed(server, body: bytes, said: str) -> None:  # noqa: F811
    url, script = server
    script.body = body
    code, out, err = statements(url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "an answer to a range query that is not Prometheus's" in err and said in err


def test_a_prometheus_that_trickles_its_answer_is_cut_at_the_deadline(server) -> None:  # noqa: F811
    url, script = server
    script.body = matrix((PLATFORM, days(2)), EDGE)
    script.pace = 0.2
    code, out, err = statements(url, "--deadline", "2s")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"{url}/api/v1/query_range: the answer broke off: no whole answer within 2 s "
                                        "(the server answers too slowly, or trickles)"]


def test_incomplete_statements_are_not_audited(server, tmp_path: Path) -> None:  # noqa: F811
    from fleetops.metering.statements import audit_summary

    url, script = server
    script.body = matrix((PLATFORM, days(2)))  # dev-edge unmeasured
    code, out, _ = statements(url, "--output", "json")
    assert code == 2
    (tmp_path / "statements.json").write_text(out)
    with pytest.raises(StatementError) as caught:
        audit_summary(tmp_path / "statements.json")
    assert str(caught.value) == (f"{tmp_path / 'statements.json'}: 1 incomplete statements (e.g. edge-dev: dev-edge: no "
                                 "fleetops:tenant_devices:physical in 2026-11 (metering not loaded there, lost, or nothing ran): "
                                 "unknown, not 0): not audited")
