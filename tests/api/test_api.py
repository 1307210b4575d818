"""The fleet API (`fleetops serve`): what a platform calling it sees, in process (ASGI) and over loopback."""

from __future__ import annotations

import contextlib
import datetime
import json
import http.client
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetops.api import app as api_app
from fleetops.api import auth, metering as api_metering, snapshot as snapshot_mod
from fleetops.prometheus import Prometheus
from fleetops.metrics import IDLE_DEVICES, IDLE_SPEND, REVISION, SPEND
from fleetops.errors import ApiError
from fleetops.reconcile.status import STATUS_CONFIGMAP
from tests.command import fleetops_command, run
from tests.fake_prometheus import Fake, Script, serve as fake_prometheus, server, success  # noqa: F401 - server is a fixture
from tests.fakes.cluster import MemoryCluster
from tests.metering.test_statements import DAY
from tests.servers import free_port
from tests.plan.test_plan import commit, edit, git, make_repo, plan_json
from tests.plan.test_plan_usage import held

OPERATOR = "op-7Jq2-not-a-real-secret-but-long-enough"
VISION = "vision-9Xw1-another-token-of-the-tenant"
WRONG = "nobody-has-this-token-3c1f"
VISION_GPU = "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}"


def tokens_file(path: Path) -> Path:
    path.write_text(json.dumps({"tokens": [
        {"name": "portal", "sha256": auth.digest(OPERATOR), "scope": "operator"},
        {"name": "vision-portal", "sha256": auth.digest(VISION), "scope": "tenant", "tenant": "vision"},
    ]}))
    return path


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Served:
    repo: Path
    revision: str
    snapshot: snapshot_mod.Snapshot
    tokens: auth.Tokens
    tokens_path: Path

    def client(self, rate: str = "10000/minute", status: Any = None, meter: api_metering.StatementCache | None = None) -> TestClient:
        reader = status or (lambda: [])
        return TestClient(api_app.create_app(lambda: self.snapshot, self.tokens, reader, api_app.Settings(rate=rate), meter),
                          raise_server_exceptions=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The prod environment served at a commit that raised speech's GPU burst (so it has a plan of its own)."""
    tmp = tmp_path_factory.mktemp("api")
    repo = make_repo(tmp)
    edit(repo, "nvidia.com/gpu: {guaranteed: 120, burst: 200}", "nvidia.com/gpu: {guaranteed: 120, burst: 208}")
    revision = commit(repo, "speech: a little more burst")
    with contextlib.ExitStack() as stack:
        snapshot = snapshot_mod.load(repo, "prod", revision, stack)
        path = tokens_file(tmp / "tokens.json")
        yield Served(repo, revision, snapshot, auth.admit(auth.read(path), {"vision", "speech", "llm-pretrain"}), path)


@pytest.fixture(scope="module")
def client(served: Served) -> TestClient:
    return served.client()


def assert_problem(response: Any, status: int, kind: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["title"]
    if kind is not None:
        assert body["type"].endswith("/" + kind)
    return body


# --- what a platform reads -------------------------------------------------------------------------


def test_capacity_per_pool_and_flavor_adds_up_to_what_plan_counts_per_cluster(client: TestClient) -> None:
    rows = client.get("/v1/capacity", headers=bearer(OPERATOR)).json()
    h100 = next(r for r in rows if r["cluster"] == "center-bj" and r["pool"] == "h100-train")
    assert h100 | {"guaranteed": 0, "reachable": 0, "free_to_lend": 0} == {
        "cluster": "center-bj", "pool": "h100-train", "flavor": "h100-train", "resource": "nvidia.com/gpu", "model": "H100-SXM-80GB",
        "physical": 128, "schedulable": 128, "guaranteed": 0, "reachable": 0, "free_to_lend": 0}
    # vision's 48 and llm-pretrain's share of its 48 are held in the H100 flavor
    assert h100["guaranteed"] >= 48 and h100["reachable"] >= h100["guaranteed"] // 2
    only = client.get("/v1/capacity", params={"cluster": "center-bj", "resource": "nvidia.com/gpu"}, headers=bearer(OPERATOR)).json()
    assert only and {(r["cluster"], r["resource"]) for r in only} == {("center-bj", "nvidia.com/gpu")}


def test_a_tenant_token_sees_its_own_tenant_only(client: TestClient) -> None:
    mine = client.get("/v1/tenants", headers=bearer(VISION)).json()
    assert [t["name"] for t in mine] == ["vision"]
    gpu = next(q for q in mine[0]["quotas"] if q["resource"] == "nvidia.com/gpu")
    assert (gpu["guaranteed"], gpu["burst"]) == (96, 160)
    assert gpu["granted"] == [{"cluster": "center-bj", "guaranteed": 96, "reachable": gpu["granted"][0]["reachable"], "lends": gpu["granted"][0]["lends"]}]
    everyone = client.get("/v1/tenants", headers=bearer(OPERATOR)).json()
    assert {"vision", "speech", "llm-pretrain"} <= {t["name"] for t in everyone}


def test_the_plan_served_is_the_commit_that_made_the_revision(served: Served, client: TestClient) -> None:
    body = client.get("/v1/plan", headers=bearer(OPERATOR)).json()
    assert body["schema"] == "fleetops/v1" and body["command"] == "plan"
    assert body["head"]["revision"] == served.revision
    assert body["quota_changes"] == [{"tenant": "speech", "cluster": "center-bj", "resource": "nvidia.com/gpu",
                                      "before": {"guaranteed": 120, "burst": 200}, "after": {"guaranteed": 120, "burst": 208}}]


def test_metering_not_configured_is_a_problem_not_an_empty_answer(client: TestClient) -> None:
    for what in ("use", "statements"):
        assert_problem(client.get(f"/v1/tenants/vision/{what}", headers=bearer(VISION)), 404, "metering-not-configured")
        assert_problem(client.get(f"/v1/tenants/speech/{what}", headers=bearer(VISION)), 403, "forbidden")


# --- use and statements, from metering --------------------------------------------------------------

VISION_H100 = {"cluster": "center-bj", "pool": "h100-train", "tenant": "vision", "resource": "nvidia.com/gpu"}


# Every other cluster measured too, its tenant holding nothing: a cluster without any series is unknown use, not 0.
QUIET = [{"cluster": "center-sh", "pool": "a100-train", "tenant": "recsys", "resource": "nvidia.com/gpu"},
        {"cluster": "edge-sh-factory", "pool": "jetson-line-1", "tenant": "factory-vision", "resource": "nvidia.com/gpu"},
        {"cluster": "edge-gz-gateway", "pool": "npu-gateway", "tenant": "gateway-ocr", "resource": "huawei.com/Ascend310P"}]


def metering(form: dict[str, str]) -> bytes:
    """vision used 48 H100s all day every day of the month asked, recorded at 2.9 an hour; the prepaid tenants' use
    before the month is asked apart, and none; no reconciler recorded what it applied."""
    if REVISION in form["query"]:
        return success({"resultType": "matrix", "result": []})
    first, last = int(float(form["start"])), int(float(form["end"]))
    per_day = lambda value: [[t, str(value)] for t in range(first, last + 1, DAY)]  # noqa: E731 - on the asked steps
    if IDLE_DEVICES in form["query"] or IDLE_SPEND in form["query"]:  # of center-bj's H100 training pool, 80 of its 128 GPUs idle
        idle = [{"metric": {"cluster": "center-bj", "pool": "h100-train"}, "values": per_day(80 * 24 * (2.9 if IDLE_SPEND in form["query"] else 1))}]
        return success({"resultType": "matrix", "result": idle})
    per_hour = 2.9 if SPEND in form["query"] else 1
    series = [] if "tenant=~" in form["query"] else [{"metric": VISION_H100, "values": per_day(48 * 24 * per_hour)},
                                                     *({"metric": labels, "values": per_day(0)} for labels in QUIET)]
    return success({"resultType": "matrix", "result": series})


@pytest.fixture
def metered(served: Served, server: tuple[str, Script]) -> TestClient:  # noqa: F811
    url, script = server
    script.answer = metering
    return served.client(meter=api_metering.StatementCache(Prometheus(url)))


def test_statements_and_use_are_metering_s_figures_read_once_per_revision_and_period(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    url, script = server
    script.answer = metering
    client = served.client(meter=api_metering.StatementCache(Prometheus(url)))
    statement = client.get("/v1/tenants/vision/statements", params={"period": "2026-11"}, headers=bearer(VISION))
    assert statement.status_code == 200, statement.text
    assert statement.json() == {"tenant": "vision", "mode": "postpaid", "period": "2026-11", "currency": "USD", "balance": None,
                                "lines": [{"cluster": "center-bj", "pool": "h100-train", "device_model": "H100-SXM-80GB", "resource": "nvidia.com/gpu",
                                           "device_hours": 34560, "price_per_device_hour": 2.9, "amount": 100224}], "total": 100224,
                                "revisions": {"center-bj": None}}
    use = client.get("/v1/tenants/vision/use", params={"period": "2026-11"}, headers=bearer(VISION)).json()
    assert use == {"tenant": "vision", "period": "2026-11", "currency": "USD", "spend": 100224,
                   "use": [{"cluster": "center-bj", "pool": "h100-train", "resource": "nvidia.com/gpu", "device_model": "H100-SXM-80GB",
                            "device_hours": 34560, "spend": 100224}]}
    research = client.get("/v1/tenants/research/statements", params={"period": "2026-11"}, headers=bearer(OPERATOR)).json()
    assert research["lines"] == [] and research["balance"]["remaining"] == 250000  # both top-ups, nothing spent
    # Every tenant's month from metering's seven queries (device-hours, spend, idle device-hours, idle spend and the revisions applied of the month,
    # device-hours and spend of the prepaid tenants before it), not a set per request.
    assert [form["query"].split(" ")[0] for _, form, _ in script.asked] == ["sum", "sum", "sum", "sum", "max", "sum", "sum"]
    client.get("/v1/tenants/speech/use", params={"period": "2026-10"}, headers=bearer(OPERATOR))
    assert len(script.asked) == 12  # another period is read on its own (five queries: no top-up before October to spend from)


def test_idle_capacity_is_the_operator_s_with_what_cannot_be_read_said(metered: TestClient) -> None:
    """The statements' idle capacity per pool, from the same reading; a tenant's token sees none of it."""
    answer = metered.get("/v1/idle", params={"period": "2026-11"}, headers=bearer(OPERATOR))
    assert answer.status_code == 200, answer.text
    rows = {(row["cluster"], row["pool"]): row for row in answer.json()}
    assert rows[("center-bj", "h100-train")] == {"cluster": "center-bj", "pool": "h100-train", "device_model": "H100-SXM-80GB",
                                                 "resource": "nvidia.com/gpu", "device_hours": 57600, "tenant_device_hours": 34560,
                                                 "share": 0.625, "amount": 167040, "unknown": None}
    unread = rows[("center-sh", "a100-train")]
    assert unread["amount"] is None and unread["unknown"].startswith("center-sh/a100-train: no fleetops:pool_idle_devices:physical in 2026-11")
    assert_problem(metered.get("/v1/idle", params={"period": "2026-11"}, headers=bearer(VISION)), 403, "forbidden")


def test_use_defaults_to_the_month_to_date(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    url, script = server
    script.answer = metering
    served.client(meter=api_metering.StatementCache(Prometheus(url))).get("/v1/tenants/vision/use", headers=bearer(VISION))
    month = api_metering.this_month()
    first = datetime.datetime.strptime(month, "%Y-%m").replace(tzinfo=datetime.timezone.utc).timestamp()
    assert float(script.asked[0][1]["start"]) == first + DAY - 30


def test_the_statements_kept_are_read_again_after_their_ttl(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    url, script = server
    script.answer = metering
    now = [0.0]
    client = served.client(meter=api_metering.StatementCache(Prometheus(url), ttl=60, clock=lambda: now[0]))
    ask = lambda: client.get("/v1/tenants/vision/use", params={"period": "2026-11"}, headers=bearer(VISION))  # noqa: E731
    ask(), ask()
    now[0] = 59.0
    assert ask().status_code == 200 and len(script.asked) == 7
    now[0] = 60.0
    ask()
    assert len(script.asked) == 14


def test_prometheus_unreachable_is_503_naming_the_url_without_credentials_or_token(served: Served, tmp_path: Path) -> None:
    token = tmp_path / "prometheus-token"
    token.write_text("prom-secret-token-5d2a\n")
    port = free_port()  # nothing listens there
    client = served.client(meter=api_metering.StatementCache(Prometheus(f"http://metering:s3cret@127.0.0.1:{port}", token)))
    for what in ("use", "statements"):
        response = client.get(f"/v1/tenants/vision/{what}", params={"period": "2026-11"}, headers=bearer(VISION))
        body = assert_problem(response, 503, "metering-unavailable")
        assert body["detail"] == f"http://127.0.0.1:{port}/api/v1/query_range: no answer: connection refused"
        assert "s3cret" not in response.text and "prom-secret" not in response.text


def test_a_month_without_metering_is_404_not_zero_use(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    url, script = server
    script.body = success({"resultType": "matrix", "result": []})
    client = served.client(meter=api_metering.StatementCache(Prometheus(url)))
    body = assert_problem(client.get("/v1/tenants/vision/use", params={"period": "2026-11"}, headers=bearer(VISION)), 404, "no-metering")
    assert "no fleetops:tenant_devices:physical between 2026-11-01 and 2026-12-01" in body["detail"]
    assert_problem(client.get("/v1/tenants/vision/use", params={"period": "2026-13"}, headers=bearer(VISION)), 422)


def test_a_statement_with_unknown_use_is_503_naming_each_unknown_never_zero(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    url, script = server
    # center-sh measured by no series: what research and recsys used there is unknown; vision runs on center-bj only
    script.answer = lambda form: metering(form).replace(b'"center-sh"', b'"center-bj"').replace(b'"a100-train"', b'"h100-train"')
    client = served.client(meter=api_metering.StatementCache(Prometheus(url)))
    body = assert_problem(client.get("/v1/tenants/research/statements", params={"period": "2026-11"}, headers=bearer(OPERATOR)),
                          503, "metering-incomplete")
    assert body["problems"] == ["center-sh: no fleetops:tenant_devices:physical in 2026-11 (metering not loaded there, lost, or "
                                "nothing ran): unknown, not 0"]
    assert_problem(client.get("/v1/tenants/recsys/use", params={"period": "2026-11"}, headers=bearer(OPERATOR)), 503, "metering-incomplete")
    assert client.get("/v1/tenants/vision/use", params={"period": "2026-11"}, headers=bearer(VISION)).json()["spend"] == 100224


def test_serve_with_a_prometheus_url_that_is_not_one_is_one_line_exit_2(served: Served) -> None:
    done = run("serve", "--env", "prod", "--repo", served.repo, "--tokens", served.tokens_path, "--prometheus", "prometheus:9090")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "--prometheus prometheus:9090: not an http(s) URL (e.g. http://prometheus.monitoring:9090)"]


# --- the authorisation matrix ----------------------------------------------------------------------

GET_ROUTES = ["/v1/revision", "/v1/capacity", "/v1/prices", "/v1/tenants", "/v1/tenants/vision", "/v1/tenants/speech",
              "/v1/tenants/vision/use", "/v1/tenants/vision/statements", "/v1/tenants/speech/use", "/v1/tenants/speech/statements",
              "/v1/decisions", "/v1/plan", "/v1/status"]
# What each scope gets: a tenant sees the fleet's capacity and prices and its own tenant, use and statements; the rest is the operator's.
TENANT_SEES = {"/v1/revision": 200, "/v1/capacity": 200, "/v1/prices": 200, "/v1/tenants": 200, "/v1/tenants/vision": 200,
               "/v1/tenants/speech": 403, "/v1/tenants/vision/use": 200, "/v1/tenants/vision/statements": 200,
               "/v1/tenants/speech/use": 403, "/v1/tenants/speech/statements": 403, "/v1/decisions": 403, "/v1/plan": 403, "/v1/status": 403}
QUOTE = {"changes": [{"op": "quota", "tenant": "vision", "resource": "nvidia.com/gpu", "guaranteed_delta": 16, "burst_delta": 16,
                      "guaranteed_per_pool_delta": {"h100-train": 8, "a100-infer": 8}}]}


@pytest.mark.parametrize("route", GET_ROUTES)
@pytest.mark.parametrize("who", ["operator", "tenant", "wrong", "missing", "malformed"])
def test_authorisation_matrix(metered: TestClient, route: str, who: str) -> None:
    headers = {"operator": bearer(OPERATOR), "tenant": bearer(VISION), "wrong": bearer(WRONG), "missing": {},
               "malformed": {"Authorization": OPERATOR}}[who]
    response = metered.get(route, headers=headers)
    expected = {"operator": 200, "tenant": TENANT_SEES[route]}.get(who, 401)
    assert response.status_code == expected, response.text
    if expected == 401:
        assert response.headers["www-authenticate"] == "Bearer"
        assert_problem(response, 401, "unauthorized")


@pytest.mark.parametrize("who,expected", [("tenant", 403), ("wrong", 401), ("missing", 401)])
def test_only_the_operator_may_ask_for_a_quote(client: TestClient, who: str, expected: int) -> None:
    headers = {"tenant": bearer(VISION), "wrong": bearer(WRONG), "missing": {}}[who]
    assert_problem(client.post("/v1/quotes", json=QUOTE, headers=headers), expected)


# --- caching ---------------------------------------------------------------------------------------


def test_etag_names_the_revision_and_if_none_match_answers_304(served: Served, client: TestClient) -> None:
    first = client.get("/v1/capacity", headers=bearer(OPERATOR))
    tag = first.headers["etag"]
    assert served.revision in tag and first.headers["cache-control"] == "private, no-cache"
    again = client.get("/v1/capacity", headers={**bearer(OPERATOR), "If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    # a tenant's answers differ from the operator's: its tag does too, so a shared cache cannot mix them
    theirs = client.get("/v1/tenants", headers={**bearer(VISION), "If-None-Match": tag})
    assert theirs.status_code == 200 and theirs.headers["etag"] != tag
    stale = client.get("/v1/capacity", headers={**bearer(OPERATOR), "If-None-Match": '"0000-operator"'})
    assert stale.status_code == 200


def test_the_reconcile_status_is_live_not_cached_by_clients(client: TestClient) -> None:
    response = client.get("/v1/status", headers=bearer(OPERATOR))
    assert response.headers["cache-control"] == "no-store" and "etag" not in response.headers


# --- errors and bounds -----------------------------------------------------------------------------


def test_unknown_routes_and_methods_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/v1/nothing", headers=bearer(OPERATOR)), 404, "not-found")
    assert_problem(client.delete("/v1/capacity", headers=bearer(OPERATOR)), 405, "method-not-allowed")
    assert_problem(client.get("/v1/tenants/nobody", headers=bearer(OPERATOR)), 404, "no-such-tenant")


def test_a_body_past_the_bound_is_413_whether_declared_or_streamed(client: TestClient) -> None:
    big = json.dumps({"changes": [QUOTE["changes"][0]] * 2000}).encode()
    assert len(big) > api_app.MAX_BODY_BYTES
    assert_problem(client.post("/v1/quotes", content=big, headers={**bearer(OPERATOR), "Content-Type": "application/json"}), 413, "too-large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bound holds while the body streams
        for i in range(0, len(big), 4096):
            yield big[i:i + 4096]

    assert_problem(client.post("/v1/quotes", content=chunks(), headers={**bearer(OPERATOR), "Content-Type": "application/json"}), 413)


def test_an_invalid_quote_is_422_naming_the_field_without_echoing_it(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/quotes", json={"changes": [{"op": "quota", "tenant": "vision", "resource": "nvidia.com/gpu",
                                                                       "guaranteed_delta": "sixteen-SECRET"}]}, headers=bearer(OPERATOR)), 422)
    assert "guaranteed_delta" in body["detail"] and "SECRET" not in json.dumps(body)
    unknown = assert_problem(client.post("/v1/quotes", json={"changes": [{**QUOTE["changes"][0], "tenant": "nobody"}]},
                                         headers=bearer(OPERATOR)), 422, "change-refused")
    assert unknown["detail"] == "changes[0].tenant: no tenant named 'nobody' in the served revision"


def test_a_quote_the_environment_refuses_names_file_line_and_field(client: TestClient) -> None:
    # the guarantee grows but its split over the pools does not: the file's own check refuses it
    change = {"op": "quota", "tenant": "vision", "resource": "nvidia.com/gpu", "guaranteed_delta": 16}
    body = assert_problem(client.post("/v1/quotes", json={"changes": [change]}, headers=bearer(OPERATOR)), 422, "change-refused")
    assert re.match(r"environments/prod\.yaml:\d+:\d+: tenants\[vision\]\.quota\[\"nvidia\.com/gpu\"\]", body["detail"]), body["detail"]


def test_rate_limit_is_429_per_token_with_retry_after(served: Served) -> None:
    client = served.client(rate="3/minute")
    for _ in range(3):
        assert client.get("/v1/revision", headers=bearer(OPERATOR)).status_code == 200
    limited = client.get("/v1/revision", headers=bearer(OPERATOR))
    assert_problem(limited, 429, "rate-limited")
    assert 1 <= int(limited.headers["retry-after"]) <= 61
    assert client.get("/v1/revision", headers=bearer(VISION)).status_code == 200  # another token has its own budget
    for _ in range(3):  # guesses are limited by the address they come from
        client.get("/v1/revision", headers=bearer(WRONG))
    assert_problem(client.get("/v1/revision", headers=bearer(WRONG)), 429)


# --- quotes ----------------------------------------------------------------------------------------


def test_quotes_past_the_ones_being_judged_are_429_not_queued(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetops.api import quote as quote_mod

    judging, release = threading.Event(), threading.Event()
    real = quote_mod.quote

    def held(snapshot: Any, request: Any, prometheus: Any) -> Any:
        judging.set()
        release.wait(60)
        return real(snapshot, request, prometheus)

    monkeypatch.setattr(quote_mod, "quote", held)
    client = TestClient(api_app.create_app(lambda: served.snapshot, served.tokens, lambda: [], api_app.Settings(quotes_at_once=1)))
    first: list[Any] = []
    thread = threading.Thread(target=lambda: first.append(client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR))))
    thread.start()
    try:
        assert judging.wait(60)
        busy = client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR))
        assert_problem(busy, 429, "quotes-busy")
        assert busy.headers["retry-after"] == "1"
    finally:
        release.set()
        thread.join(120)
    assert first[0].status_code == 200
    assert client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR)).status_code == 200  # the slot is free again



def test_a_quote_decides_as_plan_decides_byte_for_byte(served: Served, client: TestClient) -> None:
    quote = client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR))
    assert quote.status_code == 200, quote.text
    body = quote.json()
    assert body["quota_changes"][0]["after"] == {"guaranteed": 112, "burst": 176}
    assert body["decisions"], "a quota raise this large is judged: the test compares something"
    # The same change as a pull request: the quoted file in the working tree, planned against the served revision.
    (served.repo / "environments" / "prod.yaml").write_text(body["environment_file"])
    try:
        code, planned = plan_json(served.repo, "--base", served.revision)
    finally:
        git(served.repo, "checkout", "--", "environments/prod.yaml")
    assert json.dumps(body["decisions"], sort_keys=True) == json.dumps(planned["decisions"], sort_keys=True)
    assert (body["verdict"], body["counts"], body["cost"]) == (planned["verdict"], planned["counts"], planned["cost"])
    assert code == (0 if body["verdict"] == "allowed" else 1)


def test_the_decisions_served_are_plans_own(served: Served, client: TestClient) -> None:
    decisions = client.get("/v1/decisions", headers=bearer(OPERATOR)).json()["decisions"]
    latest = client.get("/v1/plan", headers=bearer(OPERATOR)).json()["decisions"]
    # A decision the served plan makes too is written alike, field order included (a client that
    # reads one reads the other): both are plan's typed decision.
    # The plan's say what the change did to them too (`finding`); the revision judged alone has no change to say it of.
    same = {(d["rule"], d["resource"], d["msg"]): {k: v for k, v in d.items() if k != "finding"} for d in latest}
    shared = [d for d in decisions if (d["rule"], d["resource"], d["msg"]) in same]
    assert any("waiver" in d for d in shared), "test setup: a waived decision is compared too"
    assert [json.dumps(d) for d in shared] == [json.dumps(same[d["rule"], d["resource"], d["msg"]]) for d in shared]
    # The served revision planned against itself (no change): its decisions, as `plan --output json` prints them,
    # each already at base there (judged alone, the served ones say no finding).
    _, planned = plan_json(served.repo, "--base", served.revision, "--head", served.revision)
    assert {d.pop("finding") for d in planned["decisions"]} == {"pre-existing"} and not any("finding" in d for d in decisions)
    assert json.dumps(decisions, sort_keys=True) == json.dumps(planned["decisions"], sort_keys=True)


def test_a_quote_writes_nothing_and_leaves_the_served_revision_as_it_was(served: Served, client: TestClient) -> None:
    before = (client.get("/v1/tenants/vision", headers=bearer(OPERATOR)).json(), git(served.repo, "status", "--porcelain"),
              git(served.repo, "rev-parse", "HEAD"))
    client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR))
    after = (client.get("/v1/tenants/vision", headers=bearer(OPERATOR)).json(), git(served.repo, "status", "--porcelain"),
             git(served.repo, "rev-parse", "HEAD"))
    assert after == before


def test_a_new_pool_is_quoted_with_its_cost(client: TestClient) -> None:
    pool = {"name": "h100-extra", "device": {"resource": "nvidia.com/gpu", "model": "H100-SXM-80GB", "per_node": 8}, "nodes": 2}
    body = client.post("/v1/quotes", json={"changes": [{"op": "add_pool", "cluster": "center-bj", "pool": pool}]}, headers=bearer(OPERATOR)).json()
    prices = client.get("/v1/prices", headers=bearer(OPERATOR)).json()
    h100 = next(p["per_device_hour"] for p in prices["prices"] if p["model"] == "H100-SXM-80GB")
    assert body["cost"]["delta"] == pytest.approx(16 * h100 * 730, rel=0.01)
    assert body["objects"]["added"] >= 1


# --- the reconcile status ----------------------------------------------------------------------------


def test_status_reads_what_each_reconciler_published_and_says_which_cluster_did_not_answer(served: Served) -> None:
    reported = MemoryCluster("center-bj")
    namespace = served.snapshot.env.reconciler.namespace
    reported.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATUS_CONFIGMAP, "namespace": namespace},
                   "data": {"environment": "prod", "revision": served.revision, "result": "ok", "message": "applied"}})
    calls = []

    def connect(cluster: Any) -> Any:
        calls.append(cluster.name)
        if cluster.name == "center-bj":
            return reported
        if cluster.name == "center-sh":
            raise ApiError(503, "https://user:pass@api.example unavailable")
        return None

    now = [0.0]
    reader = api_app.StatusReader(lambda: served.snapshot, connect, ttl=10, clock=lambda: now[0])
    rows = {r["cluster"]: r for r in served.client(status=reader).get("/v1/status", headers=bearer(OPERATOR)).json()}
    assert rows["center-bj"] == {"cluster": "center-bj", "state": "reported", "revision": served.revision, "result": "ok",
                                 "message": "applied", "serving_revision": True}
    assert rows["center-sh"]["state"] == "unreachable" and "pass" not in json.dumps(rows["center-sh"])
    assert {r["state"] for name, r in rows.items() if name not in ("center-bj", "center-sh")} <= {"unreachable"}
    reader()
    assert len(calls) == len(rows)  # within the ttl the clusters are not asked again
    now[0] = 11
    reader()
    assert len(calls) == 2 * len(rows)


# --- the command ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def serve_process(served: Served, log: Path, *args: str | Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`fleetops serve` on a free loopback port, its log in `log`, and its process; stopped (SIGTERM) on the way out."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([*fleetops_command(), "serve", "--env", "prod", "--repo", str(served.repo), "--rev", served.revision,
                                 "--listen", f"127.0.0.1:{port}", "--tokens", str(served.tokens_path), *map(str, args)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "serving prod" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # readiness: the server loads the revision before it listens
        assert "serving prod" in log.read_text(), log.read_text()
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.contextmanager
def serving(served: Served, log: Path, *args: str | Path) -> Iterator[int]:
    with serve_process(served, log, *args) as (port, _):
        yield port


def test_serve_on_loopback_answers_and_never_logs_a_token(served: Served, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with serving(served, log) as port:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/revision", headers=bearer(OPERATOR))
        with urllib.request.urlopen(request, timeout=10) as r:
            answer = json.loads(r.read(1 << 16))
        assert answer["revision"] == served.revision and answer["scope"] == "operator"
        for token in (VISION, WRONG):
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/decisions", headers=bearer(token)), timeout=5).close()
    text = log.read_text()
    assert "vision-portal" in text and "/v1/decisions" in text  # requests are logged, by the token's name
    for token in (OPERATOR, VISION, WRONG):
        assert token not in text
    assert "Traceback" not in text


def test_serve_with_tls_answers_https_only(served: Served, tmp_path: Path) -> None:
    import ssl

    from tests.servers import tls_pair

    ca = tls_pair(tmp_path / "tls")
    trusted = ssl.create_default_context(cadata=ca.decode())
    with serving(served, tmp_path / "serve.log", "--tls-cert", tmp_path / "tls" / "tls.crt", "--tls-key", tmp_path / "tls" / "tls.key") as port:
        request = urllib.request.Request(f"https://127.0.0.1:{port}/v1/revision", headers=bearer(OPERATOR))
        with urllib.request.urlopen(request, timeout=10, context=trusted) as r:
            assert json.loads(r.read(1 << 16))["revision"] == served.revision
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # in clear, the token is never read
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/revision", headers=bearer(OPERATOR)), timeout=10)


def test_a_tls_key_that_does_not_load_is_one_line_exit_2(served: Served, tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    result = run("serve", "--env", "prod", "--repo", served.repo, "--rev", served.revision, "--tokens", served.tokens_path,
                 "--listen", "127.0.0.1:0", "--tls-cert", tmp_path / "tls.crt", "--tls-key", tmp_path / "tls.crt")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "--tls-cert" in result.stderr


@pytest.mark.parametrize("content,message", [
    ("{", "not JSON"),
    ('{"tokens": [{"name": "x", "sha256": "plaintext-token", "scope": "operator"}]}', "tokens.0.sha256"),
    ('{"tokens": [{"name": "x", "sha256": "' + "a" * 64 + '", "scope": "tenant", "tenant": "nobody"}]}', "no tenant 'nobody'"),
])
def test_a_bad_tokens_file_is_one_line_exit_2(served: Served, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    result = run("serve", "--env", "prod", "--repo", served.repo, "--rev", served.revision, "--tokens", path, "--listen", "127.0.0.1:0")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and message in lines[0], result.stderr
    assert "plaintext-token" not in result.stderr


@pytest.mark.parametrize("name,content,message", [
    ("missing.json", None, "no such file"),
    ("tokens.json", "{", "not JSON"),
    ("tokens.json", '{"tokens": []}', "tokens: List should have at least 1 item"),
])
def test_a_tokens_file_is_refused_before_the_fleet_is_loaded(tmp_path: Path, name: str, content: str | None, message: str) -> None:
    # Refused only after rendering and judging the whole fleet: here the repository is not even Git, so a
    # tokens file named in the one line says it was read first.
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    (tmp_path / "repo").mkdir()
    result = run("serve", "--env", "prod", "--repo", tmp_path / "repo", "--tokens", path, "--listen", "127.0.0.1:0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(str(path)) and message in line, result.stderr


def test_serving_beyond_loopback_without_tls_is_refused(served: Served) -> None:
    result = run("serve", "--env", "prod", "--repo", served.repo, "--tokens", served.tokens_path, "--listen", "0.0.0.0:8443")
    assert result.returncode == 2 and "--tls-cert" in result.stderr and "Traceback" not in result.stderr


# --- the contract: property-based, against the OpenAPI document ------------------------------------------

import schemathesis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import checks  # noqa: E402


CONTRACT_CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
                   checks.response_schema_conformance, checks.response_headers_conformance]


def test_contract_no_5xx_and_every_answer_matches_its_schema(served: Served, server: tuple[str, Script]) -> None:  # noqa: F811
    """schemathesis generates requests from the document (valid and not) for every operation, sends each with an
    operator's, a tenant's and a wrong token, and checks each answer against the document. (Its pytest plugin
    does not run on pytest 9: the operations are driven here with hypothesis.)"""
    url, script = server
    script.answer = metering  # use and statements answered from metering, so their 200s are checked too
    app = api_app.create_app(lambda: served.snapshot, served.tokens, lambda: [], api_app.Settings(rate="100000/minute"),
                             api_metering.StatementCache(Prometheus(url)))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/capacity", "/v1/quotes", "/v1/tenants/{name}/use"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def conforms(case: Any) -> None:
            for token in (OPERATOR, VISION, WRONG):  # each scope, and a token nobody holds
                case.call_and_validate(headers=bearer(token), checks=CONTRACT_CHECKS)

        conforms()


def test_the_openapi_document_is_3_1_and_reuses_the_cli_json_schema(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    assert schemas["decision"] == json.loads(json.dumps(__import__("fleetops.envelope").envelope.json_schema()["$defs"]["decision"]).replace(
        '"#/$defs/', '"#/components/schemas/'))
    decisions = document["paths"]["/v1/decisions"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert decisions == {"$ref": "#/components/schemas/Decisions"}
    assert schemas["Decisions"]["properties"]["decisions"]["items"] == {"$ref": "#/components/schemas/decision"}
    assert document["paths"]["/v1/capacity"]["get"]["responses"]["429"]["content"] == {
        "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    # use and statements: the metering models, and a 503 when Prometheus does not answer
    statements = document["paths"]["/v1/tenants/{name}/statements"]["get"]["responses"]
    assert statements["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Statement"}
    assert set(schemas["Statement"]["properties"]) == {"tenant", "mode", "period", "currency", "lines", "total", "balance", "revisions"}
    assert schemas["Mode"]["enum"] == ["postpaid", "prepaid"]
    assert set(statements) >= {"404", "503"} and "503" in document["paths"]["/v1/tenants/{name}/use"]["get"]["responses"]


# --- following a branch -----------------------------------------------------------------------------------


def test_a_newer_commit_is_served_once_loaded_whole_and_an_invalid_one_never(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = git(repo, "rev-parse", "HEAD").strip()
    stack = contextlib.ExitStack()
    current = snapshot_mod.Current(snapshot_mod.load(repo, "prod", first, stack), stack)
    tokens = auth.admit(auth.read(tokens_file(tmp_path / "tokens.json")), {"vision"})
    client = TestClient(api_app.create_app(current, tokens, lambda: []))
    fetch = lambda: (repo, git(repo, "rev-parse", "HEAD").strip())  # noqa: E731 - the branch's head, as serve --refresh reads it
    try:
        tag = client.get("/v1/tenants/vision", headers=bearer(OPERATOR)).headers["etag"]
        assert snapshot_mod.refresh(current, fetch) is None and current().revision == first  # nothing new: nothing loaded

        edit(repo, VISION_GPU, VISION_GPU.replace("burst: 160", "burst: 168"))
        second = commit(repo, "vision: more burst")
        assert snapshot_mod.refresh(current, fetch) is None
        answer = client.get("/v1/tenants/vision", headers={**bearer(OPERATOR), "If-None-Match": tag})
        assert answer.status_code == 200 and second in answer.headers["etag"]
        assert next(q["burst"] for q in answer.json()["quotas"] if q["resource"] == "nvidia.com/gpu") == 168

        edit(repo, "burst: 168", "burst: lots")
        commit(repo, "broken")
        problem = snapshot_mod.refresh(current, fetch)
        assert problem is not None and "environments/prod.yaml:" in problem and "burst" in problem
        assert current().revision == second  # the last good revision stays served, whole
    finally:
        current.close()


def test_a_quote_past_capacity_is_denied_with_the_fix_in_numbers(client: TestClient) -> None:
    change = {**QUOTE["changes"][0], "guaranteed_delta": 1000, "burst_delta": 1000, "guaranteed_per_pool_delta": {"h100-train": 500, "a100-infer": 500}}
    body = client.post("/v1/quotes", json={"changes": [change]}, headers=bearer(OPERATOR)).json()
    assert body["verdict"] == "denied"
    over = [d for d in body["decisions"] if d["rule"] == "quota.guaranteed_over_capacity" and d["status"] == "deny"]
    assert over and over[0]["fix"].startswith("lower guaranteed nvidia.com/gpu by ")
    assert over[0]["location"]["file"] == "environments/prod.yaml"


def test_a_quotas_fields_say_they_are_deltas(client: TestClient) -> None:
    # `guaranteed: 16` was added to vision's 96: a client reading it as the new guarantee quoted 112 for 16.
    old = {"op": "quota", "tenant": "vision", "resource": "nvidia.com/gpu", "guaranteed": 16}
    body = assert_problem(client.post("/v1/quotes", json={"changes": [old]}, headers=bearer(OPERATOR)), 422, "invalid-request")
    assert "guaranteed is now guaranteed_delta" in body["detail"], body["detail"]
    fields = client.get("/openapi.json").json()["components"]["schemas"]["QuotaChange"]["properties"]
    assert {"guaranteed_delta", "burst_delta", "guaranteed_per_pool_delta"} <= set(fields) and not {"guaranteed", "burst"} & set(fields)


def test_a_quote_edits_the_repositorys_own_file_and_its_decisions_point_at_its_lines(served: Served, client: TestClient) -> None:
    body = client.post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR)).json()
    original, edited = (served.repo / "environments" / "prod.yaml").read_text().splitlines(), body["environment_file"].splitlines()
    # Only vision's GPU quota line differs, its comment kept: every other line (comments, layout) is the repository's.
    assert len(edited) == len(original)
    (line,) = [n for n, (was, now) in enumerate(zip(original, edited), start=1) if was != now]
    assert "nvidia.com/gpu: {guaranteed: 112, burst: 176, guaranteed_per_pool: {h100-train: 56, a100-infer: 56}}" in edited[line - 1]
    assert edited[line - 1].split("#")[1] == original[line - 1].split("#")[1]
    about = [d for d in body["decisions"] if "vision" in d["msg"] and d["location"]]
    assert about and {d["location"]["line"] for d in about} == {line}, about
    # The patch is the edit a reviewer merges: Git applies it to the served revision as it is.
    applied = subprocess.run(["git", "-C", str(served.repo), "apply", "--check", "-"], input=body["patch"], capture_output=True, text=True)
    assert applied.returncode == 0 and body["patch"].startswith("--- a/environments/prod.yaml"), applied.stderr


def test_a_quote_measures_use_on_serves_prometheus(served: Served) -> None:
    with fake_prometheus(Fake(held(15.0, 3.6))) as fake:  # vision used 31% of its guarantee
        body = served.client(meter=api_metering.StatementCache(Prometheus(fake.url))).post("/v1/quotes", json=QUOTE, headers=bearer(OPERATOR)).json()
    assert fake.asked, "the quote asked serve's Prometheus"
    assert "usage.guarantee_raise_underused" in {d["rule"] for d in body["decisions"] if d["status"] == "approval"}
    assert not [d["msg"] for d in body["decisions"] if "no --prometheus given" in d["msg"]]


# --- what cannot silence the API (issue 34, class 7) --------------------------------------------------------------


def get(port: int, path: str, token: str | None = None, headers: dict[str, str] | None = None, timeout: float = 20,
        source: str = "127.0.0.1") -> tuple[int, dict[str, Any]]:
    """An answer's status and JSON body over loopback, errors included, from the `source` address."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        connection.request("GET", path, headers={**(bearer(token) if token else {}), **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read(1 << 20) or b"{}")
    finally:
        connection.close()


def test_a_slow_prometheus_holds_no_route_and_every_metering_request_is_answered(served: Served, server: tuple[str, Script],  # noqa: F811
                                                                                  tmp_path: Path) -> None:
    url, script = server
    script.answer, script.held = metering, threading.Event()  # Prometheus holds its answer until the test lets it go
    with serving(served, tmp_path / "serve.log", "--prometheus", url) as port:
        try:
            answers: list[tuple[int, dict[str, Any]]] = []
            # More requests than the server has worker threads (40), from 3 addresses: each holds 20 connections at once.
            ask = lambda source: answers.append(get(port, "/v1/tenants/vision/statements?period=2026-11", VISION, source=source))  # noqa: E731
            asking = [threading.Thread(target=ask, args=(f"127.0.0.{10 + i % 3}",)) for i in range(60)]
            for thread in asking:
                thread.start()
            assert get(port, "/healthz") == (200, {"status": "ok"})
            for thread in asking:
                thread.join(60)
            assert len(answers) == 60 and {(code, body["type"].rpartition("/")[2]) for code, body in answers} == {(503, "metering-pending")}
            assert get(port, "/v1/revision", OPERATOR)[0] == 200 and get(port, "/healthz")[0] == 200
            assert len(script.asked) == 1  # one reading for every request of the period
        finally:
            script.held.set()
        code, body = get(port, "/v1/tenants/vision/statements?period=2026-11", VISION)
        assert code == 200 and body["total"] == 100224


def test_sigterm_stops_serve_within_its_bound_while_prometheus_holds_an_answer(served: Served, server: tuple[str, Script],  # noqa: F811
                                                                             tmp_path: Path) -> None:
    url, script = server
    script.answer, script.held = metering, threading.Event()
    log = tmp_path / "serve.log"
    try:
        with serve_process(served, log, "--prometheus", url) as (port, proc):
            asking = threading.Thread(target=get, args=(port, "/v1/tenants/vision/statements?period=2026-11", VISION, None, 60))
            asking.start()
            deadline = time.monotonic() + 30
            while not script.asked and time.monotonic() < deadline:
                time.sleep(0.05)  # until the reading has begun
            assert script.asked
            proc.terminate()
            assert proc.wait(30) == 128 + 15  # 10 s for what is still being answered, then it stops
            asking.join(60)
    finally:
        script.held.set()
    assert "Traceback" not in log.read_text()


def slow_head(port: int, source: str) -> socket.socket:
    """A connection from `source` that sends part of a request's head and no more (slowloris)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: fleet\r\n")
    return sock


def test_slow_connections_from_one_address_leave_the_others_served(served: Served, tmp_path: Path) -> None:
    with serving(served, tmp_path / "serve.log") as port, contextlib.ExitStack() as held:
        slow = [held.enter_context(slow_head(port, "127.0.0.2")) for _ in range(260)]  # past uvicorn's 256 connections
        assert get(port, "/healthz") == (200, {"status": "ok"})
        assert get(port, "/v1/revision", OPERATOR)[0] == 200
        refused = slow[-1].recv(1 << 16)  # the address's connections past its cap were answered at once
        assert refused.startswith(b"HTTP/1.1 429 ") and b"too-many-connections" in refused
        assert slow[0].recv(1 << 16) == b""  # and each within it is closed when its head is not whole in time


def test_forwarded_headers_count_only_from_a_trusted_proxy(served: Served, tmp_path: Path) -> None:
    def guesses(port: int) -> list[int]:  # a wrong token, each time "from" another address
        return [get(port, "/v1/revision", WRONG, {"X-Forwarded-For": f"203.0.113.{i}"})[0] for i in range(5)]

    with serving(served, tmp_path / "serve.log", "--rate-limit", "3/minute") as port:
        assert guesses(port) == [401, 401, 401, 429, 429]  # loopback's own word is not taken: one client, one budget
    with serving(served, tmp_path / "proxied.log", "--rate-limit", "3/minute", "--trusted-proxy", "127.0.0.1") as port:
        assert guesses(port) == [401] * 5  # behind the proxy, each client has its budget


def test_a_trusted_proxy_that_is_no_address_is_one_line_exit_2(served: Served) -> None:
    result = run("serve", "--env", "prod", "--repo", served.repo, "--tokens", served.tokens_path, "--trusted-proxy", "proxy.local")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "--trusted-proxy 'proxy.local': not an address or network (e.g. 10.0.0.5 or 10.0.0.0/8)"]


OTHER = "a" * 64


@pytest.mark.parametrize("second,message", [
    ({"name": "portal", "sha256": OTHER, "scope": "operator"}, "tokens.2.name: 'portal' names tokens.0 too (line 2): the log and the rate limits tell tokens by their names"),
    ({"name": "vision-admin", "sha256": auth.digest(VISION), "scope": "operator"},
     "tokens.2.sha256: the same token as tokens.1 (line 3, tenant 'vision-portal'): a token is one principal, with one scope"),
])
def test_a_tokens_file_naming_a_token_twice_is_refused_at_its_line(tmp_path: Path, second: dict[str, str], message: str) -> None:
    path = tmp_path / "tokens.json"
    entries = [{"name": "portal", "sha256": auth.digest(OPERATOR), "scope": "operator"},
               {"name": "vision-portal", "sha256": auth.digest(VISION), "scope": "tenant", "tenant": "vision"}, second]
    path.write_text('{"tokens": [\n' + ",\n".join(json.dumps(e) for e in entries) + "\n]}\n")
    with pytest.raises(auth.TokenError) as caught:
        auth.admit(auth.read(path), {"vision"})
    assert str(caught.value) == f"{path}:4: {message}" and caught.value.exit_code == 2
    assert auth.digest(VISION) not in str(caught.value)


def test_a_body_that_does_not_arrive_in_time_is_408(served: Served) -> None:
    import asyncio

    import httpx

    app = api_app.create_app(lambda: served.snapshot, served.tokens, lambda: [], api_app.Settings(body_seconds=1))

    async def stalled() -> Any:
        yield b'{"changes": ['
        await asyncio.Event().wait()  # the rest never comes

    async def ask() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://fleet") as client:
            return await client.post("/v1/quotes", content=stalled(), headers={**bearer(OPERATOR), "Content-Type": "application/json"})

    loop = asyncio.new_event_loop()  # not asyncio.run: it leaves the thread without a loop that later tests' libraries ask for
    try:
        assert_problem(loop.run_until_complete(asyncio.wait_for(ask(), 30)), 408, "body-too-slow")
    finally:
        loop.close()
