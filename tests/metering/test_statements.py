"""`fleetops statements` against a scripted Prometheus API: forms, exit codes and the bounded queries.
The statements against a real Prometheus over a synthetic month are in test_real_metering.py."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetops.metering.statements import Period, StatementError, use_expr
from fleetops.metrics import DEVICES, IDLE_DEVICES, IDLE_SPEND, REVISION, SPEND
from tests.command import run
from tests.fake_prometheus import server, success  # noqa: F401 - server is a fixture
from tests.helpers import ROOT

DAY = 86400
NOVEMBER = int(datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc).timestamp())


def days(per_day: float, first: int = NOVEMBER, count: int = 30) -> list[list[object]]:
    """Points as the statements' query is answered: one per day, asked 30 s before the day's end."""
    return [[first + (i + 1) * DAY - 30, str(per_day)] for i in range(count)]


Series = tuple[dict[str, str], list[list[object]]]


def matrix(*series: Series) -> Callable[[dict[str, str]], bytes]:
    """Prometheus's answer to each of the statements' queries: the given series of the recorded series it asks for
    (each series tagged with its name under "series", a tag the answer drops)."""
    def answer(form: dict[str, str]) -> bytes:
        asked = [({k: v for k, v in labels.items() if k != "series"}, values) for labels, values in series if labels["series"] in form["query"]]
        return success({"resultType": "matrix", "result": [{"metric": labels, "values": values} for labels, values in asked]})
    return answer


def use(key: dict[str, str], points: list[list[object]], price: float | None) -> tuple[Series, ...]:
    """A key's device-hours and, unless `price` is None, the spend the metering rules recorded for them at `price`."""
    spent = [[t, v if v in ("NaN", "+Inf") else str(float(str(v)) * price)] for t, v in points] if price is not None else None
    return (({**key, "series": DEVICES}, points),) + ((({**key, "series": SPEND}, spent),) if spent is not None else ())


def idle(cluster: str, pool: str, points: list[list[object]], price: float) -> tuple[Series, ...]:
    """A pool's idle device-hours and the idle spend the metering rules recorded for them at `price`."""
    return (({"cluster": cluster, "pool": pool, "series": IDLE_DEVICES}, points),
            ({"cluster": cluster, "pool": pool, "series": IDLE_SPEND}, [[t, str(float(str(v)) * price)] for t, v in points]))


# Every pool and edge group of dev with its idle capacity recorded: none of it unknown.
IDLE = (*idle("dev-center", "dev-a100", days(0), 1.4), *idle("dev-center", "dev-spot", days(0), 0.5),
        *idle("dev-center", "dev-ascend", days(0), 1.1), *idle("dev-edge", "dev-jetson", days(0), 0.3))

# dev's edge cluster measured too (its tenant held nothing): a cluster without any series is unknown use, not 0
EDGE = use({"cluster": "dev-edge", "pool": "dev-jetson", "tenant": "edge-dev"}, days(0), 0.3)


def statements(url: str, *args: str) -> tuple[int, str, str]:
    done = run("statements", "--env", "dev", "--environments", ROOT / "environments", "--prometheus", url, "--period", "2026-11", *args)
    return done.returncode, done.stdout, done.stderr


def test_an_overdrawn_prepaid_tenant_exits_1_and_spend_is_priced_per_pool(server) -> None:  # noqa: F811
    url, script = server
    sandbox = {"cluster": "dev-center", "tenant": "ml-sandbox"}
    # dev-center's reconciler recorded one revision applied to the 15th, another from then; dev-edge's recorded none
    applied = [({"cluster": "dev-center", "revision": "a" * 40, "series": REVISION}, days(1, count=15)),
               ({"cluster": "dev-center", "revision": "b" * 40, "series": REVISION}, days(1, NOVEMBER + 14 * DAY, 16))]
    script.answer = matrix(*use({**sandbox, "pool": "dev-a100"}, days(48), 1.4), *use({**sandbox, "pool": "dev-spot"}, days(10), 0.5),
                         *use({"cluster": "dev-center", "pool": "dev-a100", "tenant": "gone"}, days(1), 1.4), *EDGE, *applied,
                         *idle("dev-center", "dev-a100", days(10), 1.4), *IDLE[2:])  # dev-spot, dev-ascend, dev-jetson: none idle
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
    assert sandbox_statement["revisions"] == {"dev-center": [{"revision": "a" * 40, "first_day": "2026-11-01", "last_day": "2026-11-15"},
                                                             {"revision": "b" * 40, "first_day": "2026-11-15", "last_day": "2026-11-30"}]}
    assert next(s for s in document["statements"] if s["tenant"] == "edge-dev")["revisions"] == {"dev-edge": None}  # unknown, said
    text = statements(url)[1]
    assert f"prices of revisions: dev-center {'a' * 12} (2026-11-01 to 2026-11-15), {'b' * 12} (2026-11-15 to 2026-11-30)" in text
    assert f"prices of revisions: dev-edge unknown (no {REVISION} recorded)" in text
    # Beside the tenants' statements, each pool's idle capacity: what no tenant held of it, and its cost as recorded.
    idle_a100 = next(row for row in document["idle"] if row["pool"] == "dev-a100")
    assert idle_a100 == {"cluster": "dev-center", "pool": "dev-a100", "device_model": "A100-PCIE-40GB", "resource": "nvidia.com/gpu",
                         "device_hours": 300, "tenant_device_hours": 1470, "share": round(300 / 1770, 6), "amount": 420, "unknown": None}
    assert [row["pool"] for row in document["idle"]] == ["dev-a100", "dev-ascend", "dev-spot", "dev-jetson"]
    assert ("Idle capacity, 2026-11 (USD): device-hours no tenant's running pod held, at the prices recorded\n"
            "  dev-center/dev-a100 A100-PCIE-40GB: 300.00 device-hours idle (16.9% of 1,770.00) = 420.00\n") in text
    assert text.endswith("  dev-edge/dev-jetson Jetson-AGX-Orin: 0.00 device-hours idle = 0.00\n  total: 420.00\n")  # no capacity: no share
    # The month's five queries only: dev's prepaid tenant was topped up on the month's first day, so there is no use before it to read.
    assert [path for path, _, _ in script.asked[:5]] == ["/api/v1/query_range"] * 5 and len(script.asked) == 10


def test_the_queries_are_grouped_never_one_per_tenant(server) -> None:  # noqa: F811
    url, script = server
    script.answer = matrix(*use({"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev"}, days(1), 1.4), *EDGE, *IDLE)
    assert statements(url)[0] == 0
    devices, spend, idle_devices, idle_spend, revisions = (form for _, form, _ in script.asked)
    assert revisions["query"] == "max by (cluster, revision) (max_over_time(fleetops_revision_info[1d]))"
    assert devices["query"] == use_expr(DEVICES) == "sum by (cluster, pool, tenant) (sum_over_time(fleetops:tenant_devices:physical[1d:1m])) / 60"
    assert spend["query"] == use_expr(SPEND) == "sum by (cluster, pool, tenant) (sum_over_time(fleetops:tenant_spend:per_hour[1d:1m])) / 60"
    assert idle_devices["query"] == "sum by (cluster, pool, tenant) (sum_over_time(fleetops:pool_idle_devices:physical[1d:1m])) / 60"
    assert idle_spend["query"] == "sum by (cluster, pool, tenant) (sum_over_time(fleetops:pool_idle_spend:per_hour[1d:1m])) / 60"
    assert {(form["start"], form["step"]) for form in (devices, spend, idle_devices, idle_spend, revisions)} == {(f"{NOVEMBER + DAY - 30}.000", "86400")}


def test_no_metering_in_the_month_is_exit_2_not_zero_use(server) -> None:  # noqa: F811
    url, script = server
    script.answer = matrix()
    code, out, err = statements(url)
    assert code == 2 and out == ""
    assert "no fleetops:tenant_devices:physical between 2026-11-01 and 2026-12-01" in err and len(err.strip().splitlines()) == 1


def test_the_text_form_reads_as_an_invoice(server, tmp_path: Path) -> None:  # noqa: F811
    url, script = server
    script.answer = matrix(*use({"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev"}, days(2), 1.4), *EDGE)
    code, _, err = statements(url, "--out", str(tmp_path))
    assert code == 0 and "wrote 4 statements for 2026-11" in err
    assert (tmp_path / "platform-dev.txt").read_text() == (
        "Invoice for platform-dev, 2026-11 (USD)\n"
        "  dev-center/dev-a100 A100-PCIE-40GB: 60.00 device-hours x 1.4 = 84.00\n"
        "  total: 84.00\n"
        "  prices of revisions: dev-center unknown (no fleetops_revision_info recorded)\n")


@pytest.mark.parametrize("text", ["2026-13", "2026/11", "november", ""])
def test_a_period_is_a_month(text: str) -> None:
    with pytest.raises(StatementError, match="a month is written YYYY-MM"):
        Period.parse(text)


def test_february_of_a_leap_year_has_29_days() -> None:
    period = Period.parse("2028-02", now=datetime.datetime(2028, 3, 1, tzinfo=datetime.timezone.utc))
    assert (period.end - period.start).days == 29


def test_a_month_to_come_is_refused_before_any_query(server) -> None:  # noqa: F811
    """Not read as no use, and not read at all: its prepaid balance would be asked from the first top-up to it, a query
    per 31 days of each series (two for the year 2871, 20,000 for its prepaid history)."""
    url, script = server
    script.answer = matrix(*use(PLATFORM, days(2), 1.4), *EDGE, *IDLE)
    done = run("statements", "--env", "dev", "--environments", ROOT / "environments", "--prometheus", url, "--period", "2871-10")
    assert done.returncode == 2 and done.stdout == "" and script.asked == []
    assert done.stderr.strip().startswith("--period 2871-10: the month has not begun (it is ")


# --- use that cannot be read is unknown, never 0 ------------------------------------------------------------

PLATFORM = {"cluster": "dev-center", "pool": "dev-a100", "tenant": "platform-dev"}


@pytest.mark.parametrize("value,said", [("NaN", "no number (NaN, Inf)"), ("+Inf", "no number (NaN, Inf)"), ("-24", "negative")])
def test_a_day_without_a_number_makes_the_statement_incomplete_and_exits_2(server, value: str, said: str) -> None:  # noqa: F811
    url, script = server
    points = days(24)
    points[2][1] = value  # 2026-11-03
    script.answer = matrix(use(PLATFORM, points, None)[0], use(PLATFORM, days(24), 1.4)[1], *EDGE, *IDLE)
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
    script.answer = matrix(*use(PLATFORM, days(2), 1.4), *IDLE)  # dev-edge: no series at all
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
    (matrix(*use(PLATFORM, days(2), 1.4), *use(PLATFORM, days(2), 1.4), *EDGE), "is answered twice"),  # two replicas, not deduplicated
    (matrix(*use(PLATFORM, days(2, first=NOVEMBER - 31 * DAY), 1.4), *EDGE), "not one of the asked steps"),  # October's days
])
def test_duplicated_or_out_of_period_samples_are_refused_not_billed(server, body: Callable[[dict[str, str]], bytes], said: str) -> None:  # noqa: F811
    url, script = server
    script.answer = body
    code, out, err = statements(url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "an answer to a range query that is not Prometheus's" in err and said in err


def test_a_prometheus_that_trickles_its_answer_is_cut_at_the_deadline(server) -> None:  # noqa: F811
    url, script = server
    script.answer = matrix(*use(PLATFORM, days(2), 1.4), *EDGE)
    script.pace = 0.2
    code, out, err = statements(url, "--deadline", "2s")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"{url}/api/v1/query_range: the answer broke off: no whole answer within 2 s "
                                        "(the server answers too slowly, or trickles)"]


def test_incomplete_statements_are_not_audited(server, tmp_path: Path) -> None:  # noqa: F811
    from fleetops.metering.statements import audit_summary

    url, script = server
    script.answer = matrix(*use(PLATFORM, days(2), 1.4))  # dev-edge unmeasured
    code, out, _ = statements(url, "--output", "json")
    assert code == 2
    (tmp_path / "statements.json").write_text(out)
    with pytest.raises(StatementError) as caught:
        audit_summary(tmp_path / "statements.json")
    assert str(caught.value) == (f"{tmp_path / 'statements.json'}: 1 incomplete statements (e.g. edge-dev: dev-edge: no "
                                 "fleetops:tenant_devices:physical in 2026-11 (metering not loaded there, lost, or nothing ran): "
                                 "unknown, not 0): not audited")


# --- money as it was recorded: the prices in force, never today's -------------------------------------------


def test_a_month_with_a_price_change_is_billed_at_the_prices_recorded_not_todays(server) -> None:  # noqa: F811
    """dev's A100 costs 1.4 today; the rules deployed before the 15th recorded 1.0. A closed month keeps what it cost."""
    url, script = server
    hours = days(24)
    spend = [[t, "24" if i < 14 else str(24 * 1.4)] for i, (t, _) in enumerate(hours)]
    script.answer = matrix(({**PLATFORM, "series": DEVICES}, hours), ({**PLATFORM, "series": SPEND}, spend), *EDGE)
    code, out, err = statements(url, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    line, = next(s for s in document["statements"] if s["tenant"] == "platform-dev")["lines"]
    assert (line["device_hours"], line["amount"]) == (720, pytest.approx(14 * 24 * 1.0 + 16 * 24 * 1.4, abs=1e-6))
    assert line["price_per_device_hour"] == pytest.approx((14 * 1.0 + 16 * 1.4) / 30, abs=1e-6)  # what the month charged per device-hour
    assert document["price_source"].startswith("fleetops:tenant_spend:per_hour as Prometheus recorded it")


def test_use_without_recorded_spend_is_an_unknown_cost_not_todays_price(server) -> None:  # noqa: F811
    url, script = server
    hours = days(24)
    spend = [[t, str(24 * 1.4)] for t, _ in hours[:28]]  # the 29th and 30th: the rules that price it were not loaded
    script.answer = matrix(({**PLATFORM, "series": DEVICES}, hours), ({**PLATFORM, "series": SPEND}, spend), *EDGE, *IDLE)
    code, out, err = statements(url, "--output", "json")
    assert code == 2
    why = "dev-center/dev-a100: device-hours but no fleetops:tenant_spend:per_hour on 2026-11-29, 2026-11-30: its cost unknown, not 0"
    assert err.splitlines() == [f"incomplete: platform-dev: {why}"]
    assert json.loads(out)["incomplete"] == {"platform-dev": [why]}


def test_a_long_prepaid_history_is_read_a_month_at_a_time_and_every_day_of_it_spent(server, tmp_path: Path) -> None:  # noqa: F811
    """A query holds its days' minutes of every series at once, refused past the server's --query.max-samples:
    a prepaid tenant topped up in August has its use before November asked in spans of at most 31 days."""
    url, script = server
    environments = tmp_path / "environments"
    environments.mkdir()
    dev = (ROOT / "environments" / "dev.yaml").read_text()
    assert "top_ups: [{date: 2026-11-01" in dev, "test setup: dev's prepaid tenant is topped up otherwise"
    (environments / "dev.yaml").write_text(dev.replace("top_ups: [{date: 2026-11-01", "top_ups: [{date: 2026-08-01"))
    sandbox = {"cluster": "dev-center", "pool": "dev-a100", "tenant": "ml-sandbox"}
    month = matrix(*use(sandbox, days(1), 1.4), *EDGE)

    def answer(form: dict[str, str]) -> bytes:
        if "tenant=~" not in form["query"]:
            return month(form)
        first, last = int(float(form["start"])), int(float(form["end"]))
        value = "1" if DEVICES in form["query"] else "1.4"  # an A100-hour a day, at 1.4
        return success({"resultType": "matrix", "result": [{"metric": sandbox, "values": [[t, value] for t in range(first, last + 1, DAY)]}]})

    script.answer = answer
    done = run("statements", "--env", "dev", "--environments", environments, "--prometheus", url, "--period", "2026-11", "--output", "json")
    assert done.returncode == 0, done.stderr
    balance = next(s for s in json.loads(done.stdout)["statements"] if s["tenant"] == "ml-sandbox")["balance"]
    assert balance["spent_before"] == pytest.approx(92 * 1.4, abs=1e-6)  # 1 August to 31 October, every day
    assert balance["remaining"] == pytest.approx(2000 - 92 * 1.4 - 30 * 1.4, abs=1e-6)
    spans = sorted({(float(form["start"]) + 30 - DAY, float(form["end"]) + 30) for _, form, _ in script.asked if "tenant=~" in form["query"]})
    august = int(datetime.datetime(2026, 8, 1, tzinfo=datetime.timezone.utc).timestamp())
    assert spans[0][0] == august and spans[-1][1] == NOVEMBER and len(spans) == 3
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and all(end - start <= 31 * DAY for start, end in spans)
    assert len(script.asked) == 5 + 2 * 3  # the month's five, and two per span before it


def test_idle_capacity_that_cannot_be_read_is_unknown_and_the_tenants_statements_stand(server) -> None:  # noqa: F811
    """A pool whose nodes' allocatable was never recorded, or whose idle device-hours have no recorded spend some day,
    has no idle figure, said on standard error, and the idle total is a lower bound; the tenants' statements are whole."""
    url, script = server
    a100_idle = idle("dev-center", "dev-a100", days(5), 1.4)
    script.answer = matrix(*use(PLATFORM, days(2), 1.4), *EDGE, a100_idle[0], (a100_idle[1][0], a100_idle[1][1][:29]),
                           *idle("dev-center", "dev-spot", days(4), 0.5), *IDLE[4:6])  # dev-jetson: no idle series
    code, out, err = statements(url, "--output", "json")
    assert code == 0, err
    assert err.splitlines() == [
        "idle unknown: dev-center/dev-a100: idle device-hours but no fleetops:pool_idle_spend:per_hour on 2026-11-30: its cost unknown, not 0",
        "idle unknown: dev-edge/dev-jetson: no fleetops:pool_idle_devices:physical in 2026-11 (no kube_node_status_allocatable of its "
        "nodes, metering rules older than it, or lost): unknown, not 0"]
    rows = {row["pool"]: row for row in json.loads(out)["idle"]}
    assert (rows["dev-a100"]["device_hours"], rows["dev-a100"]["amount"]) == (None, None)
    assert (rows["dev-spot"]["device_hours"], rows["dev-spot"]["amount"]) == (120, 60)
    assert rows["dev-jetson"]["amount"] is None and rows["dev-jetson"]["unknown"].startswith("dev-edge/dev-jetson: no fleetops:pool_idle_devices")
    _, text, _ = statements(url)
    assert "  dev-center/dev-a100 A100-PCIE-40GB: unknown (dev-center/dev-a100: idle device-hours but no" in text
    assert text.endswith("  total: unknown (at least 60.00)\n")
    _, table, _ = statements(url, "--output", "csv")
    assert ",2026-11,idle,dev-center,dev-spot,A100-PCIE-40GB,nvidia.com/gpu,120.0,,60.0,USD,\n" in table
