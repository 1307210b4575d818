"""OpaEngine: the OPA server client, against a fake OPA on 127.0.0.1.

The fake records what the client sends (policy and data upload, query path, bearer token) and can
answer with any status, so the client's error paths are checked here; tests/test_real_opa.py checks
the same client against a real OPA server.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import regorus

from fleetops import policy, render, spec

ROOT = Path(__file__).resolve().parent.parent
TODAY = dt.date(2026, 12, 2)
TOKEN = "s3cret-opa-token"


class FakeOpa(ThreadingHTTPServer):
    """Records every request; answers uploads like OPA and queries by evaluating the uploads with regorus."""

    def __init__(self, fail: dict[str, tuple[int, dict]] | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.calls: list[dict] = []
        self.policies: dict[str, str] = {}
        self.data: dict[str, object] = {}
        self.fail = fail or {}  # "METHOD /path-prefix" -> (status, body)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, document: dict) -> dict:
        engine = regorus.Engine()
        for name, text in self.policies.items():
            engine.add_policy(name, text)
        engine.add_data_json(json.dumps(self.data))
        engine.set_input_json(json.dumps(document))
        result = json.loads(engine.eval_query_as_json("data.fleet"))
        return {"result": result["result"][0]["expressions"][0]["value"]}


class Handler(BaseHTTPRequestHandler):
    server: FakeOpa

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, body: dict | None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.server.calls.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        for prefix, (status, reply) in self.server.fail.items():
            if f"{self.command} {self.path}".startswith(prefix):
                return self._reply(status, reply)
        if self.command == "PUT" and self.path.startswith("/v1/policies/"):
            self.server.policies[self.path.removeprefix("/v1/policies/")] = body
            return self._reply(200, {})
        if self.command == "PUT" and self.path.startswith("/v1/data/"):
            self.server.data[self.path.removeprefix("/v1/data/")] = json.loads(body)
            return self._reply(204, None)
        if self.command == "GET" and self.path == "/v1/policies/":
            return self._reply(200, {"result": [{"id": i} for i in self.server.policies]})
        if self.command == "DELETE" and self.path.startswith("/v1/policies/"):
            self.server.policies.pop(self.path.removeprefix("/v1/policies/"), None)
            return self._reply(200, {})
        if self.command == "POST" and self.path == "/v1/data/fleet":
            return self._reply(200, self.server.answer(json.loads(body)["input"]))
        return self._reply(404, {"code": "not_found", "message": self.path})

    do_GET = do_PUT = do_POST = do_DELETE = _handle


@contextmanager
def fake_opa(**kw) -> Iterator[FakeOpa]:
    server = FakeOpa(**kw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def prod():
    path = ROOT / "environments" / "prod.yaml"
    return spec.load_environment(path), render.render(path, revision="test")


def decisions(verdict: policy.Verdict) -> list[tuple]:
    return [(d.status, d.rule, d.resource_ref(), d.msg) for d in verdict.decisions]


def test_opa_engine_uploads_policies_and_data_then_queries_data_fleet():
    env, state = prod()
    with fake_opa() as server:
        verdict = policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    paths = [(c["method"], c["path"]) for c in server.calls]
    uploads = sorted(p for m, p in paths if m == "PUT" and p.startswith("/v1/policies/"))
    assert ("GET", "/v1/policies/") in paths
    shipped = sorted(p.stem for p in policy.POLICIES_DIR.glob("*.rego") if not p.name.endswith("_test.rego"))
    assert "quota" in shipped and uploads == [f"/v1/policies/fleetops/{n}" for n in shipped]
    assert ("PUT", "/v1/data/fleet_data") in paths
    assert paths[-1] == ("POST", "/v1/data/fleet")
    assert not any("_test" in p for _, p in paths)  # tests are not shipped to the decision point
    assert json.loads(server.calls[-1]["body"])["input"]["environment"] == "prod"
    assert {c["auth"] for c in server.calls} == {f"Bearer {TOKEN}"}
    assert verdict.engine == "opa"
    assert decisions(verdict) == decisions(policy.evaluate(env, state, today=TODAY))


def test_modules_left_by_an_older_bundle_are_removed():
    env, state = prod()
    with fake_opa() as server:
        server.policies["fleetops/old-quota"] = 'package fleet.quota\n\ndeny contains {"rule": "quota.old"} if { true }\n'
        server.policies["team/other"] = "package team.other\n\nallow := true\n"
        verdict = policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)
    assert ("DELETE", "/v1/policies/fleetops/old-quota") in [(c["method"], c["path"]) for c in server.calls]
    assert "team/other" in server.policies  # what others keep in the same OPA is left alone
    assert "quota.old" not in verdict.rules()


def test_without_a_token_no_authorization_header_is_sent():
    env, state = prod()
    with fake_opa() as server:
        policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)
    assert {c["auth"] for c in server.calls} == {None}


def test_a_policy_opa_rejects_names_file_and_line_and_never_the_token():
    env, state = prod()
    rejected = {
        "code": "invalid_parameter",
        "message": "error(s) occurred while compiling module(s)",
        "errors": [{"code": "rego_parse_error", "message": "unexpected eof token", "location": {"file": "fleetops/budget", "row": 12, "col": 3}}],
    }
    with fake_opa(fail={"PUT /v1/policies/fleetops/budget": (400, rejected)}) as server:
        with pytest.raises(policy.PolicyError) as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert "budget.rego:12:3: OPA at http://127.0.0.1:" in str(caught.value)
    assert "unexpected eof token" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_a_server_error_on_query_fails_closed_without_the_token():
    env, state = prod()
    with fake_opa(fail={"POST /v1/data/fleet": (500, {"code": "internal_error", "message": f"boom {TOKEN}"})}) as server:
        with pytest.raises(policy.PolicyError, match=r"OPA at http://127\.0\.0\.1:\d+: query data\.fleet: HTTPError") as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert TOKEN not in str(caught.value)


def test_an_answer_without_result_is_no_decision():
    env, state = prod()
    with fake_opa(fail={"POST /v1/data/fleet": (200, {})}) as server:
        with pytest.raises(policy.PolicyError, match="no result"):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)


def test_an_unreachable_server_fails_closed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    env, state = prod()
    with pytest.raises(policy.PolicyError, match=rf"OPA at http://127\.0\.0\.1:{port}: remove the policies uploaded before: .*ConnectionError"):
        policy.evaluate(env, state, engine=policy.OpaEngine(f"http://127.0.0.1:{port}", token=TOKEN), today=TODAY)


def test_a_server_that_never_answers_times_out():
    env, state = prod()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # connections queue in the backlog; nothing ever reads them
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(policy.PolicyError, match="Timeout"):
            policy.evaluate(env, state, engine=policy.OpaEngine(url, token=TOKEN, timeout=0.2), today=TODAY)


@pytest.mark.parametrize("url", ["ftp://opa:8181", "http://opa:8181/v1/data", "opa:8181"])
def test_an_unusable_url_is_rejected(url):
    with pytest.raises(policy.PolicyError, match="want http"):
        policy.OpaEngine(url)


def test_url_credentials_are_never_shown():
    with pytest.raises(policy.PolicyError) as caught:
        policy.OpaEngine("http://admin:hunter2@opa:8181/v1")
    assert "hunter2" not in str(caught.value)


def test_engine_from_environment(monkeypatch):
    monkeypatch.delenv("FLEETOPS_OPA_URL", raising=False)
    assert isinstance(policy.engine_from(None), policy.EmbeddedEngine)
    monkeypatch.setenv("FLEETOPS_OPA_URL", "https://opa.example:8443")
    monkeypatch.setenv("FLEETOPS_OPA_TOKEN", TOKEN)
    engine = policy.engine_from(None)
    assert isinstance(engine, policy.OpaEngine) and engine.token == TOKEN and engine.ssl and engine.port == 8443
