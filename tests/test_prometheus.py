"""fleetops.prometheus against a tiny local HTTP server that answers as Prometheus's API does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from fleetops.errors import ExitCode
from fleetops.prometheus import Prometheus, PrometheusError, Sample, Series

TOKEN = "s3cr3t-prometheus-token"


@dataclass
class Script:
    """What the fake server answers next, and what it was asked."""

    status: int = 200
    body: bytes = b""
    asked: list[tuple[str, dict[str, str], Message]] = field(default_factory=list)


def success(data: dict) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            script.asked.append((self.path, form, self.headers))  # case-insensitive, as HTTP headers are
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(script.body)))
            self.end_headers()
            self.wfile.write(script.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


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
