"""Statements for the bundled prod over a synthetic month, read from a real Prometheus.

The raw series are kube-state-metrics-like, written into TSDB blocks by `promtool tsdb create-blocks-from
openmetrics`. Prometheus evaluates recording rules live, never over backfilled history, so the rendered
metering rules are evaluated over that history by the real server (range queries of the rendered
expressions, as `promtool tsdb create-blocks-from rules` does) and the results backfilled beside the raw
series; the statements then read the recorded series, as they do in a cluster (and as plan's utilisation
does), rather than raw series they would have to join again. The prices change on 15 November at noon: the
spend before it is recorded by the rules of the file as it was, after it by the rules of the file with the
new prices, as a deploy that day would have it. Every figure is checked against the sums the test computes
from its own generator (tests/metering_data.py) and the two files' prices.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import datetime
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetops import spec
from fleetops.metrics import REVISION
from fleetops.prometheus import Prometheus as Client
from modules import metering
from tests import metering_data as data
from tests.command import run
from tests.helpers import ROOT
from tests.servers import Prometheus, prometheus_server

pytestmark = pytest.mark.real

PROD = ROOT / "environments" / "prod.yaml"
HOUR = 3600
START = data.unix(datetime.date(2026, 10, 25))  # a week before the month: research's prepaid spend before it
END = data.unix(datetime.date(2026, 12, 1))
MONTH = (data.unix(datetime.date(2026, 11, 1)), END)
CHANGE = data.unix(datetime.date(2026, 11, 15)) + 12 * HOUR  # the new prices deployed
RAISE = 1.25  # every device model's price from CHANGE on


def repriced(raw: dict[str, Any]) -> dict[str, Any]:
    after = copy.deepcopy(raw)
    after["prices"] = {model: round(price * RAISE, 4) for model, price in raw["prices"].items()}
    return after


def recorded(url: str, record: str, sides: list[tuple[spec.Environment, int, int]]) -> str:
    """The rendered rules that record `record`, of each side's environment over its [start, end], evaluated by the
    real server hour by hour as the samples are: an OpenMetrics family to backfill.

    What `promtool tsdb create-blocks-from rules` does, in one range query per rule: promtool asks per
    two-hour block and writes one block each, which took over ten minutes and 2 GB for these 37 days."""
    client = Client(url)
    lines = [f"# TYPE {record} gauge"]
    for env, start, end in sides:
        for cluster in env.clusters:
            for rule in metering.metering_rules(cluster, env):
                if rule["record"] != record:
                    continue
                for series in client.query_range(rule["expr"], start, end, HOUR):
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted({**series.labels, **rule.get("labels", {})}.items()))
                    lines += [f"{record}{{{labels}}} {v!r} {t:.0f}" for t, v in series.points]
    return "\n".join(lines) + "\n"


BEFORE, AFTER = "a1" * 20, "b2" * 20  # the revisions deployed before and after the price change


def applied(env: spec.Environment, start: int, end: int) -> str:
    """What each cluster's reconciler exports as it runs (scraped every hour here): the revision its status records
    applied, BEFORE until the price change, AFTER from then: an OpenMetrics family to backfill."""
    lines = [f"# TYPE {REVISION} gauge"]
    for cluster in env.clusters:
        lines += [f'{REVISION}{{cluster="{cluster.name}",revision="{BEFORE if t < CHANGE else AFTER}"}} 1 {t}' for t in range(start, end, HOUR)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, list[data.Pod]]]:
    raw = yaml.safe_load(PROD.read_text())
    pods = data.pods(raw, START, END)
    directory = tmp_path_factory.mktemp("prometheus")
    before = spec.load_environment(PROD)
    (directory / "prod.yaml").write_text(yaml.safe_dump(repriced(raw), sort_keys=False))
    after = spec.load_environment(directory / "prod.yaml")
    text = data.openmetrics(raw, pods, START, END).removesuffix("# EOF\n")
    priced = [(before, START, CHANGE - HOUR), (after, CHANGE, END)]
    # Each stage's rules read what the stages before it recorded, as the rule group's order has it in a cluster.
    stages = [[(metering.DEVICES, [(before, START, END)]), (metering.POOL_DEVICES, [(before, START, END)])],
              [(metering.SPEND, priced), (metering.IDLE_DEVICES, [(before, START, END)])],
              [(metering.IDLE_SPEND, priced)]]
    for n, stage in enumerate(stages):
        with prometheus_server(directory / f"stage{n}", text + "# EOF\n", lookback="1h") as stage_server:
            text += "".join(recorded(stage_server.url, record, sides) for record, sides in stage)
    text += applied(before, START, END)
    with prometheus_server(directory / "both", text + "# EOF\n", lookback="1h") as server:
        yield server, pods


def statements(server: Prometheus, *args: str) -> tuple[int, str, str]:
    result = run("statements", "--env", "prod", "--environments", ROOT / "environments", "--prometheus", server.url, *args)
    return result.returncode, result.stdout, result.stderr


def expected(pods: list[data.Pod], a: int, b: int) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Per tenant, cluster and pool: device-hours in [a, b), and what they cost at the prices in force, minute by minute."""
    raw = yaml.safe_load(PROD.read_text())
    models = {(c["name"], g["name"]): g["device"]["model"] for c in raw["clusters"] for k in ("pools", "edge_groups") for g in c.get(k, [])}
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for pod in pods:
        key = (pod.tenant, pod.cluster, pod.pool)
        price = raw["prices"][models[(pod.cluster, pod.pool)]]
        early, late = data.device_hours(pod, START, a, min(b, CHANGE)), data.device_hours(pod, START, max(a, CHANGE), b)
        hours, cost = out.get(key, (0.0, 0.0))
        out[key] = (hours + early + late, cost + early * price + late * round(price * RAISE, 4))
    return out


def balance_promql(server: Prometheus, tenant: str, at: int) -> float:
    """The prepaid balance as the rendered budget rules compute it at `at`: the BALANCE rule's expression, with its
    PREPAID_SPEND read as that rule evaluated every BUDGET_MINUTES (a subquery at the rule group's interval)."""
    rules = {r["record"]: r for r in metering.budget_rules(spec.load_environment(PROD)) if "record" in r and r.get("labels", {}).get("tenant") == tenant}
    prepaid, balance = rules[metering.PREPAID_SPEND]["expr"], rules[metering.BALANCE]["expr"]
    read = f'{metering.PREPAID_SPEND}{{tenant="{tenant}"}}[{metering.BALANCE_RANGE}]'
    assert read in balance, "test setup: the balance rule no longer reads the prepaid spend so"
    (value,) = Client(server.url).query(balance.replace(read, f"({prepaid})[{metering.BALANCE_RANGE}:{metering.BUDGET_MINUTES}m]"), at)
    return value.value


def test_prod_statements_for_a_month_with_a_price_change_are_what_each_hour_cost_then(month: tuple[Prometheus, list[data.Pod]]) -> None:
    server, pods = month
    code, out, err = statements(server, "--period", "2026-11", "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    # device-hours, spend, idle device-hours, idle spend and the revisions applied of the month, device-hours and spend of the prepaid
    # tenants before it: whatever the tenants
    assert document["queries"] == 7
    raw = yaml.safe_load(PROD.read_text())
    got = {s["tenant"]: s for s in document["statements"]}
    assert set(got) == {t["name"] for t in raw["tenants"]}
    month_use = expected(pods, *MONTH)
    for (tenant, cluster, pool), (device_hours, cost) in month_use.items():
        line = next(x for x in got[tenant]["lines"] if (x["cluster"], x["pool"]) == (cluster, pool))
        assert line["device_hours"] == pytest.approx(device_hours, abs=1e-5)
        assert line["amount"] == pytest.approx(cost, abs=0.005)  # to the cent: each minute at the price deployed then
    billed = sum(cost for _, cost in month_use.values())
    assert sum(s["total"] for s in got.values()) == pytest.approx(billed, abs=0.005)
    assert billed > 0 and document["unknown"] == []  # the kube-system pod is no tenant's, and billed to none
    # Not the prices of the file the command read (the month's first half), nor the new ones: what each line charged per hour.
    lines = [line for s in got.values() for line in s["lines"] if line["device_hours"]]
    at_the_file = sum(line["device_hours"] * raw["prices"][line["device_model"]] for line in lines)
    assert billed - at_the_file > 1
    assert all(raw["prices"][x["device_model"]] < x["price_per_device_hour"] < raw["prices"][x["device_model"]] * RAISE for x in lines)
    # Each statement names the revisions whose rules priced it, per cluster it ran on: the prices' two revisions, on the days they were.
    deployed = [{"revision": BEFORE, "first_day": "2026-11-01", "last_day": "2026-11-15"}, {"revision": AFTER, "first_day": "2026-11-15", "last_day": "2026-11-30"}]
    for s in got.values():
        assert s["revisions"] == {cluster: deployed for cluster in sorted({x["cluster"] for x in s["lines"]})}

    # Every pool's capacity is its tenants' device-hours and its idle ones, its whole devices' cost their spend and the idle spend,
    # to the cent: a time-sliced GPU's replica is a quarter of its cost, a 3g.20gb MIG instance half an A100-40GB's; none is left or
    # counted twice. The system pod's GPU is no tenant's: idle here.
    idle = {(row["cluster"], row["pool"]): row for row in document["idle"]}
    groups = {(c["name"], g["name"]): g for c in raw["clusters"] for kind in ("pools", "edge_groups") for g in c.get(kind, [])}
    assert set(idle) == set(groups)
    hours_before, hours_after = (CHANGE - MONTH[0]) / HOUR, (MONTH[1] - CHANGE) / HOUR
    for (cluster, pool), group in groups.items():
        devices = group["nodes"] * group["device"]["per_node"]
        units = data.allocatable(group)
        assert sum(n * data.per_unit(group)[r] for r, n in units.items()) == pytest.approx(devices)  # test setup: the test's own reading
        assert sum(p.physical for p in pods if (p.cluster, p.pool) == (cluster, pool)) <= devices  # test setup: never above capacity
        price = raw["prices"][group["device"]["model"]]
        tenants = [use for (_, c, p), use in month_use.items() if (c, p) == (cluster, pool)]
        row = idle[(cluster, pool)]
        assert row["tenant_device_hours"] == pytest.approx(sum(h for h, _ in tenants), abs=1e-5)
        assert row["device_hours"] == pytest.approx(devices * (hours_before + hours_after) - row["tenant_device_hours"], abs=1e-5)
        whole = devices * (hours_before * price + hours_after * round(price * RAISE, 4))
        assert row["amount"] == pytest.approx(whole - sum(cost for _, cost in tenants), abs=0.005)
        assert row["unknown"] is None
    shared = [idle[("center-bj", "a100-infer")], idle[("center-sh", "a100-mig")]]  # time-slicing, MIG mixed: each tenant held some
    assert all(0 < row["share"] < 1 and row["tenant_device_hours"] > 0 for row in shared)

    research = got["research"]
    assert research["mode"] == "prepaid"
    before = sum(cost for (t, _, _), (_, cost) in expected(pods, data.unix(datetime.date(2026, 10, 1)), MONTH[0]).items() if t == "research")
    assert before > 0
    balance = research["balance"]
    assert balance["top_ups"] == 250000  # 1 October and 15 November, both before the month's end
    assert balance["spent_before"] == pytest.approx(before, abs=0.005)
    assert balance["remaining"] == pytest.approx(250000 - before - research["total"], abs=0.005)
    # What the low-balance alert reads, computed by Prometheus at the month's end, is the statement's balance.
    assert balance_promql(server, "research", END - 1) == pytest.approx(balance["remaining"], abs=0.005)
    assert got["speech"]["balance"] is None


def test_csv_and_text_say_the_same_and_out_writes_a_file_per_tenant(month: tuple[Prometheus, list[data.Pod]], tmp_path: Path) -> None:
    server, _ = month
    _, out, _ = statements(server, "--period", "2026-11", "--output", "json")
    totals = {s["tenant"]: s["total"] for s in json.loads(out)["statements"]}
    code, out, _ = statements(server, "--period", "2026-11", "--output", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["tenant"]: float(r["amount"]) for r in rows if r["kind"] == "total"} == totals
    code, _, err = statements(server, "--period", "2026-11", "--out", str(tmp_path))
    assert code == 0 and "wrote 7 statements for 2026-11" in err
    text = (tmp_path / "research.txt").read_text()
    assert text.startswith("Prepaid statement for research, 2026-11 (USD)") and "balance" in text


def test_the_api_answers_each_tenant_s_statement_as_the_cli_prints_it(month: tuple[Prometheus, list[data.Pod]], tmp_path: Path) -> None:
    """`fleetops serve --prometheus`'s statement of a tenant for a month is `fleetops statements --output json`'s, figure for figure."""
    from fastapi.testclient import TestClient

    from fleetops.api import app as api_app, auth, metering as api_metering, snapshot as snapshot_mod
    from fleetops.prometheus import Prometheus as Client
    from tests.plan.test_plan import git, make_repo

    server, _ = month
    code, out, _ = statements(server, "--period", "2026-11", "--output", "json")
    assert code in (0, 1)
    printed = {s["tenant"]: s for s in json.loads(out)["statements"]}
    repo = make_repo(tmp_path)  # this project's fleet, the environment the CLI read, at a commit
    operator = "operator-token-for-the-real-metering-test"
    tokens = auth.Tokens([auth.Entry(name="portal", scope=auth.Scope.OPERATOR, sha256=auth.digest(operator))])
    with contextlib.ExitStack() as stack:
        snapshot = snapshot_mod.load(repo, "prod", git(repo, "rev-parse", "HEAD").strip(), stack)
        meter = api_metering.StatementCache(Client(server.url))
        client = TestClient(api_app.create_app(lambda: snapshot, tokens, lambda: [], meter=meter))
        served = {name: client.get(f"/v1/tenants/{name}/statements", params={"period": "2026-11"},
                                   headers={"Authorization": f"Bearer {operator}"}).json() for name in printed}
    assert served == printed
    assert printed["research"]["balance"] is not None and any(s["lines"] for s in printed.values())  # a prepaid tenant and use compared


def test_a_month_without_metering_is_no_answer_never_zero_use(month: tuple[Prometheus, list[data.Pod]]) -> None:
    server, _ = month
    code, out, err = statements(server, "--period", "2025-01")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"{server.url}: no fleetops:tenant_devices:physical between 2025-01-01 and 2025-02-01: is the PrometheusRule "
        "fleetops-metering loaded and kube-state-metrics scraped? (read as no answer, never as zero use)"]


def test_a_prometheus_that_does_not_answer_is_one_line_exit_2() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run("statements", "--env", "prod", "--environments", ROOT / "environments",
                 "--prometheus", f"http://user:pw@127.0.0.1:{port}", "--period", "2026-11")
    assert result.returncode == 2
    assert result.stderr.strip() == f"http://127.0.0.1:{port}/api/v1/query_range: no answer: connection refused"


