"""OpaEngine: the OPA server client, against a fake OPA on 127.0.0.1.

The fake records what the client sends (policy and data upload, query path, bearer token) and can
answer with any status, so the client's error paths are checked here; tests/policy/test_real_opa.py checks
the same client against a real OPA server.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import shutil
from pathlib import Path

import pytest
import regorus

from fleetops import policy, render, spec
from tests.policy.test_policy import MUTATIONS, mutated

ROOT = Path(__file__).resolve().parents[2]
TODAY = dt.date(2026, 12, 2)
TOKEN = "s3cret-opa-token"


class FakeOpa(ThreadingHTTPServer):
    """Records every request; answers uploads like OPA and queries by evaluating the uploads with regorus."""

    def __init__(self, fail: dict[str, tuple[int, dict]] | None = None, redirect: tuple[str, str] | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.calls: list[dict] = []
        self.policies: dict[str, str] = {}
        self.data: dict[str, object] = {}
        self.fail = fail or {}  # regular expression matched on "METHOD /path" -> (status, body)
        self.redirect = redirect  # (regular expression, base URL): answer those requests 307 to the URL

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path: str, document: dict) -> dict:
        engine = regorus.Engine()
        for name, text in self.policies.items():
            engine.add_policy(name, text)
        engine.add_data_json(json.dumps(self.data))
        engine.set_input_json(json.dumps(document))
        result = json.loads(engine.eval_query_as_json("data." + path.replace("/", ".")))
        return {"result": result["result"][0]["expressions"][0]["value"]}

    def put_data(self, path: str, value: object) -> None:
        *parents, last = path.split("/")
        node = self.data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def delete_data(self, path: str) -> None:
        *parents, last = path.split("/")
        node = self.data
        for part in parents:
            node = node.get(part, {})
        node.pop(last, None)


class Handler(BaseHTTPRequestHandler):
    server: FakeOpa

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, body: dict | None, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.server.calls.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        for pattern, (status, reply) in self.server.fail.items():
            if re.match(pattern, f"{self.command} {self.path}"):
                return self._reply(status, reply)
        if self.server.redirect and re.match(self.server.redirect[0], f"{self.command} {self.path}"):
            return self._reply(307, None, {"Location": self.server.redirect[1] + self.path})
        if self.command == "PUT" and self.path.startswith("/v1/policies/"):
            self.server.policies[self.path.removeprefix("/v1/policies/")] = body
            return self._reply(200, {})
        if self.command == "PUT" and self.path.startswith("/v1/data/"):
            self.server.put_data(self.path.removeprefix("/v1/data/"), json.loads(body))
            return self._reply(204, None)
        if self.command == "GET" and self.path == "/v1/policies/":
            return self._reply(200, {"result": [{"id": i} for i in self.server.policies]})
        if self.command == "DELETE" and self.path.startswith("/v1/policies/"):
            self.server.policies.pop(self.path.removeprefix("/v1/policies/"), None)
            return self._reply(200, {})
        if self.command == "DELETE" and self.path.startswith("/v1/data/"):
            self.server.delete_data(self.path.removeprefix("/v1/data/"))
            return self._reply(204, None)
        if self.command == "POST" and self.path.startswith("/v1/data/"):
            return self._reply(200, self.server.answer(self.path.removeprefix("/v1/data/"), json.loads(body)["input"]))
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


def test_opa_engine_uploads_under_a_root_of_its_own_queries_it_and_removes_it():
    env, state = prod()
    with fake_opa() as server:
        verdict = policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    paths = [(c["method"], c["path"]) for c in server.calls]
    uploads = [p for m, p in paths if m == "PUT" and p.startswith("/v1/policies/")]
    (root,) = {re.fullmatch(r"/v1/policies/(fleetops/e[0-9a-f]{32})/[\w/]+", p).group(1) for p in uploads}
    shipped = sorted(p.stem for p in policy.POLICIES_DIR.glob("*.rego") if not p.name.endswith("_test.rego"))
    assert "quota" in shipped and sorted(uploads) == [f"/v1/policies/{root}/{n}" for n in shipped]
    assert uploads[0] == f"/v1/policies/{root}/lib"  # the helper before its callers
    assert ("PUT", f"/v1/data/{root}/fleet_data") in paths
    query = paths.index(("POST", f"/v1/data/{root}"))
    # Removed after the query, callers before the helper, then the data.
    assert paths[query + 1:] == [("DELETE", p) for p in reversed(uploads)] + [("DELETE", f"/v1/data/{root}")]
    assert server.policies == {} and server.data == {"fleetops": {}}
    assert not any("_test" in p for _, p in paths)  # tests are not shipped to the decision point
    assert json.loads(server.calls[query]["body"])["input"]["environment"] == "prod"
    assert {c["auth"] for c in server.calls} == {f"Bearer {TOKEN}"}
    assert verdict.engine == "opa"
    assert decisions(verdict) == decisions(policy.evaluate(env, state, today=TODAY))


def test_two_evaluations_never_share_a_root():
    env, state = prod()
    with fake_opa() as server:
        for _ in range(2):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)
    roots = {c["path"].split("/")[4] for c in server.calls if c["method"] == "POST"}
    assert len(roots) == 2


def test_what_others_keep_in_the_same_opa_changes_nothing_and_is_left_alone():
    env, state = prod()
    with fake_opa() as server:
        # An older fleetops' modules under the fixed ids, a rival's data where they read it, another team's policy.
        server.policies["fleetops/quota"] = 'package fleet.quota\n\ndeny contains {"rule": "quota.old"} if { true }\n'
        server.policies["team/other"] = "package team.other\n\nallow := true\n"
        server.data["fleet_data"] = {"edge": {"max_latency_ms": 1}}
        verdict = policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)
    assert "quota.old" not in verdict.rules()
    assert decisions(verdict) == decisions(policy.evaluate(env, state, today=TODAY))
    assert set(server.policies) == {"fleetops/quota", "team/other"} and server.data["fleet_data"] == {"edge": {"max_latency_ms": 1}}


@pytest.mark.parametrize(
    "answer, problem",
    [
        ({"fleet_data": {}}, r"fleet_data differs from data\.yaml"),
        (None, r"is not a document"),
    ],
)
def test_an_answer_that_is_not_from_the_uploaded_policies_fails_closed(answer, problem):
    env, state = prod()
    with fake_opa(fail={r"POST /v1/data/fleetops/": (200, {"result": answer})}) as server:
        with pytest.raises(policy.PolicyError, match=r"the answer is not from the policies this evaluation uploaded \(.*" + problem):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert server.policies == {}  # removed even so


def test_a_module_without_the_policy_digest_fails_closed(monkeypatch):
    # What a rival's module in our place looks like: the right package, none of our digest.
    env, state = prod()
    with fake_opa() as server:
        original = FakeOpa.answer

        def swapped(self, path, document):
            quota = next(k for k in self.policies if k.endswith("/quota"))
            self.policies[quota] = f"package {path.replace('/', '.')}.fleet.quota\n\ndeny := set()\n"
            return original(self, path, document)

        monkeypatch.setattr(FakeOpa, "answer", swapped)
        with pytest.raises(policy.PolicyError, match=r"\.fleet\.quota has no fleetops_policy_digest sha256:"):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)


@pytest.mark.parametrize("step", ["PUT /v1/policies/", "PUT /v1/data/", "POST /v1/data/"])
def test_a_redirect_is_refused_and_nothing_reaches_its_target(step):
    # Before: requests followed the 307 and sent the policies, data or input (and the token's request) to the target.
    env, state = prod()
    with fake_opa() as target, fake_opa(redirect=(step, target.url)) as server:
        with pytest.raises(policy.PolicyError) as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
        assert server.policies == {}  # what was uploaded before the redirect is removed
    assert str(caught.value) == f"OPA at {server.url}: answered 307 redirecting elsewhere: redirects are refused, nothing was sent on"
    assert target.calls == []


def test_a_policy_reading_other_data_is_refused(tmp_path):
    directory = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", directory, ignore=shutil.ignore_patterns("pack"))
    with (directory / "edge.rego").open("a") as fh:
        fh.write('\n# data.elsewhere in a comment is fine\nmsg := "data.elsewhere in a string is fine"\n\nlimit := data.elsewhere.limit\n')
    env, state = prod()
    with fake_opa() as server:
        with pytest.raises(policy.PolicyError, match=r"edge\.rego:\d+: policies read only data\.fleet and data\.fleet_data"):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url), policies_dir=directory, today=TODAY)
    assert server.calls == []


@pytest.mark.parametrize("package", ["team.other", "fleet_data.x"])
def test_a_policy_outside_the_fleet_packages_is_refused(package):
    with pytest.raises(policy.PolicyError, match=rf"^extra\.rego:1: package {package}: policies are packages fleet\.\*$"):
        policy.rebase(f"package {package}\n\nallow := true\n", "fleetops.e1", Path("extra.rego"))


def test_rebase_moves_packages_and_data_references_but_not_strings_or_comments():
    source = (
        'package fleet.quota\n\nimport data.fleet.lib\n\ncfg := data.fleet_data.quota\n'
        '# data.fleet.lib in a comment\nmsg := "see data.fleet_data and package fleet"\nx := input.data.fleet\n'
    )
    assert policy.rebase(source, "fleetops.e1", Path("quota.rego")) == (
        'package fleetops.e1.fleet.quota\n\nimport data.fleetops.e1.fleet.lib\n\ncfg := data.fleetops.e1.fleet_data.quota\n'
        '# data.fleet.lib in a comment\nmsg := "see data.fleet_data and package fleet"\nx := input.data.fleet\n'
    )


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
    with fake_opa(fail={r"PUT /v1/policies/fleetops/e\w+/budget$": (400, rejected)}) as server:
        with pytest.raises(policy.PolicyError) as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert "budget.rego:12:3: OPA at http://127.0.0.1:" in str(caught.value)
    assert "unexpected eof token" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_a_server_error_on_query_fails_closed_without_the_token():
    env, state = prod()
    with fake_opa(fail={r"POST /v1/data/fleetops/": (500, {"code": "internal_error", "message": f"boom {TOKEN}"})}) as server:
        with pytest.raises(policy.PolicyError, match=r"OPA at http://127\.0\.0\.1:\d+: query data\.fleetops\.e\w+: HTTPError") as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert TOKEN not in str(caught.value)


def test_an_answer_without_result_is_no_decision():
    env, state = prod()
    with fake_opa(fail={r"POST /v1/data/fleetops/": (200, {})}) as server:
        with pytest.raises(policy.PolicyError, match="no result"):
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url), today=TODAY)


def test_an_unreachable_server_fails_closed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    env, state = prod()
    with pytest.raises(policy.PolicyError) as caught:
        policy.evaluate(env, state, engine=policy.OpaEngine(f"http://127.0.0.1:{port}", token=TOKEN), today=TODAY)
    # what failed in a few words, not urllib3's pool, retries and request path
    assert str(caught.value) == f"OPA at http://127.0.0.1:{port}: no answer: connection refused"


def test_a_server_that_never_answers_times_out():
    env, state = prod()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # connections queue in the backlog; nothing ever reads them
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(policy.PolicyError) as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(url, token=TOKEN, timeout=0.2), today=TODAY)
    assert str(caught.value) == f"OPA at {url}: no answer: timed out"


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


def forged(module: str) -> str:
    """A rival's module in our place that passes every check of the answer: the uploaded module's own
    package and digest lines, its rules kept under other names, and no decisions."""
    renamed = re.sub(r"^(deny|warn)\b", r"rival_\1", module, flags=re.MULTILINE)
    return f"{renamed}\ndeny := set()\n\nwarn := set()\n"


def test_a_forged_module_with_the_uploaded_package_and_digest_never_allows_a_denied_change(monkeypatch, tmp_path):
    # Before: OPA's answer held the digest in every package and the uploaded data, so the forged
    # modules' empty decisions were the verdict: a change the policies deny passed the gate.
    env, state = mutated(tmp_path, MUTATIONS["edge.latency"])
    assert "edge.latency" in policy.evaluate(env, state, today=TODAY).rules("deny")
    with fake_opa() as server:
        original = FakeOpa.answer

        def swapped(self, path, document):
            for module_id, module in self.policies.items():
                if re.search(r"^deny\b", module, flags=re.MULTILINE):
                    self.policies[module_id] = forged(module)
            return original(self, path, document)

        monkeypatch.setattr(FakeOpa, "answer", swapped)
        with pytest.raises(policy.PolicyError) as caught:
            policy.evaluate(env, state, engine=policy.OpaEngine(server.url, token=TOKEN), today=TODAY)
    assert re.fullmatch(
        rf"OPA at {server.url}: its answer differs from the embedded engine's on the same policies and input "
        r"\(data\.fleet\.\w+\.deny: OPA did not decide [\w.]+( on \S+)?\): no verdict; an OPA that other clients can write to is no judge "
        r"\(README: trust boundary\)", str(caught.value)), str(caught.value)
    assert TOKEN not in str(caught.value)
