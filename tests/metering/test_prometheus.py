"""fleetops.prometheus against a tiny local HTTP server that answers as Prometheus's API does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetops.errors import ExitCode
from fleetops.prometheus import Prometheus, PrometheusError, Sample, Series
from tests.fake_prometheus import server, success  # noqa: F401 - server is a fixture

TOKEN = "s3cr3t-prometheus-token"


def test_an_instant_query_gives_typed_samples_and_sends_the_expression_and_time(server) -> None:
    url, script = server
    script.body = success({"resultType": "vector", "result": [
        {"metric": {"tenant": "vision", "pool": "h100"}, "value": [1700000000, "12.5"]},
        {"metric": {"tenant": "nlp", "pool": "h100"}, "value": [1700000000, "NaN"]},
    ]})
    prom = Prometheus(url)
    samples = prom.query("sum by (tenant, pool) (x)", 1700000000)
    assert samples[0] == Sample({"tenant": "vision", "pool": "h100"}, 12.5)
    assert samples[1].value != samples[1].value  # NaN travels as NaN, not as zero
    path, form, _ = script.asked[0]
    assert path == "/api/v1/query"
    assert form == {"query": "sum by (tenant, pool) (x)", "time": "1700000000.000"}
    assert prom.queries == 1


def test_a_range_query_gives_series_with_their_points(server) -> None:
    url, script = server
    script.body = success({"resultType": "matrix", "result": [
        {"metric": {"tenant": "vision"}, "values": [[0, "1"], [3600, "2.5"]]},
    ]})
    series = Prometheus(url + "/").query_range("x", 0, 3600, 3600)
    assert series == [Series({"tenant": "vision"}, ((0.0, 1.0), (3600.0, 2.5)))]
    path, form, _ = script.asked[0]
    assert path == "/api/v1/query_range"
    assert (form["start"], form["end"], form["step"]) == ("0.000", "3600.000", "3600")


def test_the_bearer_token_from_its_file_is_sent_and_never_shown(server, tmp_path: Path) -> None:
    url, script = server
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    # A server (or proxy) that echoes the credential back in its error message.
    script.status, script.body = 400, json.dumps({"status": "error", "errorType": "bad_data",
                                                  "error": f"parse error; token {TOKEN}"}).encode()
    with pytest.raises(PrometheusError) as caught:
        Prometheus(url, token_file).query("x{", 0)
    assert script.asked[0][2]["Authorization"] == f"Bearer {TOKEN}"
    assert str(caught.value) == f"{url}/api/v1/query: HTTP 400, bad_data: parse error; token ***"
    assert caught.value.exit_code == ExitCode.BAD_INPUT


def test_credentials_in_the_url_are_used_but_never_named(server) -> None:
    url, script = server
    script.status, script.body = 503, b"<html>down</html>"
    with_user = url.replace("http://", "http://alice:pa55word@")
    with pytest.raises(PrometheusError) as caught:
        Prometheus(with_user, retries=0).query("x", 0)
    assert script.asked[0][2]["Authorization"].startswith("Basic ")
    assert "pa55word" not in str(caught.value) and "alice" not in str(caught.value)
    assert str(caught.value) == f"{url}/api/v1/query: HTTP 503, an answer that is not Prometheus's JSON"


def test_a_5xx_is_retried_before_it_is_an_error(server) -> None:
    url, script = server
    script.status, script.body = 503, b"unavailable"
    with pytest.raises(PrometheusError):
        Prometheus(url, retries=2).query("x", 0)
    assert len(script.asked) == 3  # the first attempt and two retries


def test_an_answer_over_the_byte_bound_is_refused(server) -> None:
    url, script = server
    script.body = success({"resultType": "vector", "result": [{"metric": {"i": str(i)}, "value": [0, "1"]} for i in range(2000)]})
    with pytest.raises(PrometheusError, match="an answer larger than 10000 bytes"):
        Prometheus(url, max_bytes=10_000).query("x", 0)


def test_a_refused_connection_is_one_line_naming_the_url() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PrometheusError) as caught:
        Prometheus(f"http://127.0.0.1:{port}", retries=0).query("x", 0)
    assert str(caught.value) == f"http://127.0.0.1:{port}/api/v1/query: no answer: connection refused"


def test_a_scalar_where_a_matrix_was_asked_is_an_error(server) -> None:
    url, script = server
    script.body = success({"resultType": "scalar", "result": [0, "1"]})
    assert Prometheus(url).query("1", 0) == [Sample({}, 1.0)]
    with pytest.raises(PrometheusError, match="answered with a scalar where a matrix was expected"):
        Prometheus(url).query_range("1", 0, 60, 60)


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://host/", "http://"])
def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(PrometheusError, match="not an http\\(s\\) URL"):
        Prometheus(url)


def test_a_token_file_that_is_missing_or_too_large_is_named_without_its_contents(tmp_path: Path) -> None:
    with pytest.raises(PrometheusError, match="cannot read the Prometheus token file"):
        Prometheus("http://localhost:9090", tmp_path / "absent")
    big = tmp_path / "big"
    big.write_text(TOKEN * 2000)
    with pytest.raises(PrometheusError) as caught:
        Prometheus("http://localhost:9090", big)
    assert TOKEN not in str(caught.value) and "larger than" in str(caught.value)


# --- what is not Prometheus's answer, and a server that never finishes one ------------------------------------


def test_a_server_that_trickles_its_answer_is_cut_at_the_query_s_deadline(server) -> None:
    url, script = server
    script.body = success({"resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]})
    script.pace = 0.2  # a byte every 0.2 s: every read answers well within its timeout, the answer never ends in time
    prom = Prometheus(url, read_timeout=1, query_deadline=2, retries=0)
    with pytest.raises(PrometheusError) as caught:
        prom.query("x", 0)
    assert str(caught.value) == (f"{url}/api/v1/query: the answer broke off: no whole answer within 2 s "
                                 "(the server answers too slowly, or trickles)")


def test_the_client_s_deadline_bounds_all_its_queries(server) -> None:
    url, script = server
    script.body = success({"resultType": "vector", "result": []})
    script.pace = 0.2
    prom = Prometheus(url, read_timeout=1, query_deadline=60, client_deadline=2, retries=0)
    with pytest.raises(PrometheusError, match="no whole answer within 2 s"):
        prom.query("x", 0)
    with pytest.raises(PrometheusError, match="not asked: the 2 s given to Prometheus's queries are spent"):
        prom.query("x", 0)
    assert len(script.asked) == 1


@pytest.mark.parametrize("result,message", [
    ([{"metric": {"tenant": "vision"}, "values": [[0, "1"]]}, {"metric": {"tenant": "vision"}, "values": [[60, "1"]]}],
     "the series {'tenant': 'vision'} is answered twice"),
    ([{"metric": {"tenant": "vision"}, "values": [[0, "1"], [0, "1"]]}], "a series with the point at 1970-01-01T00:00:00Z twice or out of order"),
    ([{"metric": {"tenant": "vision"}, "values": [[-3600, "1"]]}], "a point at 1969-12-31T23:00:00Z, not one of the asked steps"),
    ([{"metric": {"tenant": "vision"}, "values": [[30, "1"]]}], "a point at 1970-01-01T00:00:30Z, not one of the asked steps"),
])
def test_a_range_answer_off_the_asked_steps_or_with_a_series_twice_is_refused(server, result: list, message: str) -> None:
    url, script = server
    script.body = success({"resultType": "matrix", "result": result})
    with pytest.raises(PrometheusError) as caught:
        Prometheus(url).query_range("x", 0, 3600, 60)
    assert str(caught.value).startswith(f"{url}: an answer to a range query that is not Prometheus's: {message}")


def test_an_instant_answer_with_a_series_twice_is_refused(server) -> None:
    url, script = server
    script.body = success({"resultType": "vector", "result": [{"metric": {"tenant": "vision"}, "value": [0, "1"]}] * 2})
    with pytest.raises(PrometheusError, match="the series {'tenant': 'vision'} is answered twice"):
        Prometheus(url).query("x", 0)
