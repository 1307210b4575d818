"""The loop around a pass: revisions from Git, fail-closed refusals, leader election, metrics, logs, CLI."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetops import cli, cluster, reconcile, render, spec
from fleetops.errors import ExitCode
from fleetops.reconcile import loop
from tests.fakes import Faults, MemoryCluster
from tests.output.test_output import conforms
from tests.reconcile_support import DEV, Clock, allow, commit, git, new_repo, options

GOOD = DEV.read_text()
BIGGER = GOOD.replace("nvidia.com/gpu: {guaranteed: 8, burst: 32}", "nvidia.com/gpu: {guaranteed: 8, burst: 40}")
BAD_YAML = GOOD + "\ntenants: [unclosed\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "fleet")


def make(repo: Path, tmp_path: Path, apis: dict[str, MemoryCluster], gate=allow, identity: str | None = None, clock=None) -> reconcile.ReconcileLoop:
    return reconcile.ReconcileLoop(
        "dev", reconcile.GitSource(str(repo), "main", tmp_path / f"cache-{identity}"), lambda c: apis[c.name],
        gate=gate, opts=options(clock=clock or Clock()), identity=identity,
    )


def fleet() -> dict[str, MemoryCluster]:
    return {"dev-center": MemoryCluster("dev-center"), "dev-edge": MemoryCluster("dev-edge")}


def quota(api: MemoryCluster) -> str:
    return api.peek("v1", "ResourceQuota", "ml-sandbox", "device-nvidia-com-gpu")["spec"]["hard"]["requests.nvidia.com/gpu"]


def status(api: MemoryCluster) -> dict[str, str]:
    return api.peek("v1", "ConfigMap", "fleetops-system", "fleetops-status")["data"]


def test_invalid_and_denied_revisions_are_never_applied_and_the_last_applied_stays(repo: Path, tmp_path: Path) -> None:
    apis = fleet()
    first = commit(repo, GOOD, "good")
    gate_says = {"deny": False}

    def gate(env, state, live):
        return reconcile.GateResult(gate_says["deny"], ["fleet.quota: burst too high"] if gate_says["deny"] else [])

    rec = make(repo, tmp_path, apis, gate)
    applied = rec.run_once()
    assert applied.status == "applied" and applied.revision == first and rec.last_applied == first
    assert quota(apis["dev-center"]) == "32" and status(apis["dev-center"])["revision"] == first

    bad = commit(repo, BAD_YAML, "broken yaml")
    for api in apis.values():
        api.reset_counts()
    invalid = rec.run_once()
    assert invalid.status == "invalid" and invalid.revision == bad and invalid.exit_code() == 2
    assert invalid.reasons[0].startswith("environments/dev.yaml:") and "invalid YAML" in invalid.reasons[0]
    assert sum(api.count(v) for api in apis.values() for v in ("apply", "delete", "patch", "create")) == 0  # nothing applied
    assert rec.last_applied == first
    assert status(apis["dev-center"])["revision"] == first and status(apis["dev-center"])["result"] == "invalid"

    commit(repo, BIGGER, "raise burst")
    gate_says["deny"] = True
    denied = rec.run_once()
    assert denied.status == "denied" and denied.reasons == ["fleet.quota: burst too high"] and denied.exit_code() == 1
    assert quota(apis["dev-center"]) == "32"  # not applied
    assert status(apis["dev-center"])["revision"] == first and status(apis["dev-center"])["result"] == "denied"
    assert rec.last_applied == first

    gate_says["deny"] = False
    later = rec.run_once()
    assert later.status == "applied" and quota(apis["dev-center"]) == "40" and rec.last_applied == later.revision


def test_fetch_failure_keeps_the_last_good_revision(repo: Path, tmp_path: Path) -> None:
    apis = fleet()
    first = commit(repo, GOOD, "good")
    rec = make(repo, tmp_path, apis)
    assert rec.run_once().status == "applied"
    shutil.rmtree(repo)
    again = rec.run_once()
    assert again.revision == first and again.status == "clean"
    assert "keeping the last good revision" in again.reasons[0]


def test_no_revision_at_all_is_bad_input(tmp_path: Path) -> None:
    rec = make(tmp_path / "nowhere", tmp_path, fleet())
    result = rec.run_once()
    assert result.status == "unavailable" and result.exit_code() is ExitCode.BAD_INPUT and result.revision is None


def test_two_reconcilers_one_writer(repo: Path, tmp_path: Path, backend) -> None:
    apis = backend(spec.load_environment(DEV))
    commit(repo, GOOD, "good")
    clock = Clock()
    a = make(repo, tmp_path, apis, identity="replica-a", clock=clock)
    b = make(repo, tmp_path, apis, identity="replica-b", clock=clock)
    first = a.run_once()
    assert first.status == "applied", first.errors
    lease = apis["dev-center"].peek("coordination.k8s.io/v1", "Lease", "fleetops-system", "fleetops-reconciler")
    assert lease["spec"]["holderIdentity"] == "replica-a"
    for api in apis.values():
        api.reset_counts()
    follower = b.run_once()
    assert follower.status == "standby" and follower.exit_code() == 1
    assert all(not c.leader for c in follower.clusters.values()) and "replica-a holds the Lease" in follower.reasons[0]
    assert sum(api.writes() for api in apis.values()) == 0
    clock.advance(5)
    a.run_once()  # the leader renews
    clock.advance(10)
    assert all(not c.leader for c in b.run_once().clusters.values())  # renewed 10 s ago: still held
    clock.advance(60)  # replica-a stopped renewing: its Lease expires
    taken = b.run_once()
    assert all(c.leader for c in taken.clusters.values())
    assert apis["dev-center"].peek("coordination.k8s.io/v1", "Lease", "fleetops-system", "fleetops-reconciler")["spec"]["holderIdentity"] == "replica-b"
    assert all(not c.leader for c in a.run_once().clusters.values())


def test_the_gate_uses_the_policies_of_the_fetched_revision(repo: Path, tmp_path: Path) -> None:
    over = GOOD.replace("budget: {monthly: 25000", "budget: {monthly: 100")
    shutil.copytree(DEV.parent.parent / "policies", repo / "policies", ignore=shutil.ignore_patterns("pack", "__pycache__"))
    commit(repo, over, "over budget")
    apis = fleet()
    denied = make(repo, tmp_path, apis, gate=None).run_once()
    assert denied.status == "denied" and any(r.startswith("budget.over_budget:") for r in denied.reasons)
    today = dt.date.today()
    (repo / "policies" / "waivers.yaml").write_text(
        "waivers:\n  - rule: budget.over_budget\n    scope: {environment: dev}\n    owner: finance@example.com\n"
        f"    reason: dev runs over budget this month\n    ticket: FIN-1\n    created: {today}\n    expires: {today + dt.timedelta(days=30)}\n"
    )
    commit(repo, over, "waive the dev budget in Git")
    assert make(repo, tmp_path, apis, gate=None).run_once().status == "applied"


def test_an_unreachable_api_server_is_an_error_not_a_standby(repo: Path, tmp_path: Path) -> None:
    apis = fleet()
    commit(repo, GOOD, "good")
    for api in apis.values():
        api.faults = Faults(rate=1.0, statuses=(403,), verbs=frozenset({"get", "create", "apply"}))
    result = make(repo, tmp_path, apis, identity="replica-a").run_once()
    assert result.status == "errors" and result.exit_code() == 1
    assert all("cannot take the Lease: 403" in r for r in result.reasons), result.reasons
    assert "holds the Lease" not in " ".join(result.reasons)


def test_a_stale_lease_write_loses_the_race(backend) -> None:
    api = backend(spec.load_environment(DEV))["dev-center"]
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleetops-system"}})
    clock = Clock()
    a = reconcile.LeaseElector(api, "fleetops-system", "a", 15, clock)
    b = reconcile.LeaseElector(api, "fleetops-system", "b", 15, clock)
    assert a.acquire() and not b.acquire()
    clock.advance(30)
    real_get = api.get
    api.get = lambda *args: {**real_get(*args)}  # both read the same expired Lease ...
    seen = api.get("coordination.k8s.io/v1", "Lease", "fleetops-system", "fleetops-reconciler")
    assert b.acquire()  # ... b writes first
    api.get = lambda *args: seen
    assert not a.acquire()  # a writes with the resourceVersion it read: 409, stays a follower


def test_metrics_health_and_readiness_endpoints(repo: Path, tmp_path: Path) -> None:
    apis = fleet()
    first = commit(repo, GOOD, "good")
    rec = make(repo, tmp_path, apis)
    server = reconcile.serve_http("127.0.0.1", 0, rec.metrics, lambda: rec.ready)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert urllib.request.urlopen(f"{base}/healthz").status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/readyz")
        assert err.value.code == 503
        rec.run_once()
        assert urllib.request.urlopen(f"{base}/readyz").status == 200
        text = urllib.request.urlopen(f"{base}/metrics").read().decode()
        second = commit(repo, BIGGER, "raise burst")
        rec.run_once()
        after = urllib.request.urlopen(f"{base}/metrics").read().decode()
    finally:
        server.shutdown()
    # What was deployed when, for the statements: one series per cluster, the revision its status records applied.
    assert f'fleetops_revision_info{{cluster="dev-center",revision="{first}"}} 1.0' in text
    assert f'fleetops_revision_info{{cluster="dev-center",revision="{second}"}} 1.0' in after and first not in after
    quotas = sum(m["kind"] == "ResourceQuota" for m in render.render(DEV, revision="r").clusters["dev-center"])
    assert quotas >= 4  # a device quota and the priority-class quota per tenant: every one created is counted
    for name in ("fleetops_reconcile_duration_seconds_count 1.0", "fleetops_last_success_timestamp_seconds",
                 f'fleetops_drift_objects{{cluster="dev-center",kind="ResourceQuota"}} {quotas}.0', "fleetops_policy_denials_total 0.0",
                 # dev.yaml: dev-a100's 32 time-sliced units and dev-spot's 8 GPUs
                 'fleetops_capacity_devices{cluster="dev-center",resource="nvidia.com/gpu",state="declared"} 40.0'):
        assert name in text


def test_drift_asked_over_http_is_a_detect_pass_now_at_the_revision_fetched_now(repo: Path, tmp_path: Path) -> None:
    from fleetops.output import json as json_output

    apis = fleet()
    commit(repo, GOOD, "good")
    gate_says = {"deny": False}
    rec = make(repo, tmp_path, apis, gate=lambda env, state, live: reconcile.GateResult(gate_says["deny"], ["fleet.quota: burst too high"]))
    assert rec.run_once().status == "applied"
    server = reconcile.serve_http("127.0.0.1", 0, rec.metrics, lambda: rec.ready, drift=lambda: json_output.reconcile(rec.detect()).encode())
    base = f"http://127.0.0.1:{server.server_address[1]}"
    center = apis["dev-center"]
    edited = center.peek("v1", "ResourceQuota", "ml-sandbox", "device-nvidia-com-gpu")
    edited["spec"]["hard"]["requests.nvidia.com/gpu"] = "999"
    center.put(edited)
    newer = commit(repo, BIGGER, "raise burst")
    gate_says["deny"] = True  # what the gate would say of it: not asked, a detect pass writes nothing
    for api in apis.values():
        api.reset_counts()
    try:
        code, body = probe(base, "/drift")
        metrics = probe(base, "/metrics")[1]
    finally:
        server.shutdown()
    document = conforms(json.loads(body), "reconcile")  # the document `reconcile --output json` prints
    assert code == 200 and document["status"] == "drift" and document["revision"] == newer
    drifted = {(a["verb"], a["target"]) for a in document["clusters"]["dev-center"]["actions"]}
    assert ("update", "ResourceQuota ml-sandbox/device-nvidia-com-gpu") in drifted  # the hand edit
    assert sum(api.writes() for api in apis.values()) == 0
    assert rec.last_status == "applied" and rec.passes == 1  # the service's record is its own passes'
    assert "fleetops_policy_denials_total 0.0" in metrics and "fleetops_reconcile_duration_seconds_count 1.0" in metrics


def test_drift_requests_share_passes_one_at_a_time_each_answered_by_a_pass_begun_after_it() -> None:
    from fleetops.reconcile.service import Shared

    first_began, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def run() -> bytes:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            first_began.set()
            assert release.wait(30)
        return str(len(runs)).encode()

    class Watched(threading.Condition):
        """Counts the requests that wait for a pass."""

        def __init__(self) -> None:
            super().__init__()
            self.waiting = threading.Semaphore(0)

        def wait(self, timeout: float | None = None) -> bool:
            self.waiting.release()
            return super().wait(timeout)

    changed = Watched()
    shared = Shared(run)
    shared._changed = changed  # noqa: SLF001 - the test watches who waits
    answers: dict[str, bytes] = {}

    def ask(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.__setitem__(name, shared()))
        thread.start()
        return thread

    threads = [ask("before")]
    assert first_began.wait(30)
    threads += [ask("during-1"), ask("during-2")]  # they arrive while the first pass runs: it cannot answer them
    assert changed.waiting.acquire(timeout=30) and changed.waiting.acquire(timeout=30)
    release.set()
    for thread in threads:
        thread.join(30)
    assert answers == {"before": b"1", "during-1": b"2", "during-2": b"2"} and runs == [1, 2]


def test_a_drift_pass_that_fails_answers_503_in_one_line_and_the_next_request_runs_again() -> None:
    # A client library's error of many lines and any length: the answer is one line, bounded as /readyz's reason is.
    failures = iter([RuntimeError("list failed at https://user:TOKEN@git.example.com/fleet\n" + "body: " + "x" * 20000), None])

    def drift() -> bytes:
        failure = next(failures)
        if failure is not None:
            raise failure
        return b'{"drift": 0}'

    server = reconcile.serve_http("127.0.0.1", 0, reconcile.Metrics(), lambda: reconcile.service.Readiness(), drift=drift)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        failed, again = probe(base, "/drift"), probe(base, "/drift")
    finally:
        server.shutdown()
    assert failed[0] == 503 and failed[1].count("\n") == 1 and "RuntimeError: list failed" in failed[1] and "TOKEN" not in failed[1]
    assert len(failed[1]) <= len("drift not read: ...\n") + reconcile.service.READY_REASON_CHARS
    assert again == (200, '{"drift": 0}')


def probe(base: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{base}{path}") as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_readiness_tells_the_truth_about_the_last_pass_and_errors_are_metrics_per_cluster(repo: Path, tmp_path: Path) -> None:
    apis = {name: MemoryCluster(name, faults=Faults(rate=1.0, statuses=(cluster.TIMEOUT,))) for name in ("dev-center", "dev-edge")}
    commit(repo, GOOD, "good")
    verdict = {"gate": reconcile.GateResult(False, [])}
    rec = make(repo, tmp_path, apis, gate=lambda env, state, live: verdict["gate"])
    server = reconcile.serve_http("127.0.0.1", 0, rec.metrics, lambda: rec.ready)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert rec.run_once().status == "errors"  # every API server is unreachable
        code, body = probe(base, "/readyz")
        assert code == 503 and body.startswith("not ready: the last pass failed in 2 cluster(s): dev-center: API server unreachable"), body
        metrics = probe(base, "/metrics")[1]
        for cluster_name in ("dev-center", "dev-edge"):
            assert f'fleetops_reconcile_errors_total{{cluster="{cluster_name}"}} 1.0' in metrics
            assert f'fleetops_cluster_up{{cluster="{cluster_name}"}} 0.0' in metrics
        for api in apis.values():
            api.faults.rate = 0
        assert rec.run_once().status == "applied"
        assert probe(base, "/readyz") == (200, "ok\n")
        metrics = probe(base, "/metrics")[1]
        assert 'fleetops_cluster_up{cluster="dev-center"} 1.0' in metrics and 'fleetops_reconcile_errors_total{cluster="dev-center"} 1.0' in metrics
        verdict["gate"] = reconcile.GateResult(True, ["policy engine unavailable: ConnectionError: OPA at 127.0.0.1:8181"], unavailable=True)
        assert rec.run_once().status == "denied"
        code, body = probe(base, "/readyz")
        assert code == 503 and "the policy gate could not judge revision" in body and "OPA at 127.0.0.1:8181" in body
        verdict["gate"] = reconcile.GateResult(True, ["fleet.quota: burst too high"])  # a policy's denial: the loop works
        assert rec.run_once().status == "denied"
        assert probe(base, "/readyz")[0] == 200
    finally:
        server.shutdown()


def test_a_pass_that_raises_makes_the_service_not_ready(repo: Path, tmp_path: Path) -> None:
    commit(repo, GOOD, "good")
    rec = make(repo, tmp_path, fleet())
    rec.run_once()
    assert rec.ready

    def broken(env, state, live):
        raise RuntimeError("https://bot:ghp_secret@git.example.com went away")

    rec.gate = broken
    stop = threading.Event()
    rec.opts.clock = Clock()
    original = rec.run_once

    def once_then_stop():
        try:
            return original()
        finally:
            stop.set()

    rec.run_once = once_then_stop
    rec.serve(0, stop)
    assert not rec.ready and rec.ready.reason.startswith("the last pass failed: RuntimeError") and "ghp_secret" not in rec.ready.reason


def test_json_logs_carry_fields_and_never_credentials() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(reconcile.JsonFormatter())
    logger = logging.getLogger("fleetops.test")
    logger.addHandler(handler)
    try:
        logger.warning("fetch https://bot:ghp_secret@git.example.com/fleet.git failed", extra={"fields": {"revision": "abc"}})
    finally:
        logger.removeHandler(handler)
    entry = json.loads(stream.getvalue())
    assert entry["level"] == "warning" and entry["revision"] == "abc"
    assert "ghp_secret" not in stream.getvalue() and "https://***@git.example.com" in entry["msg"]


# --- the command ---------------------------------------------------------------------------


runner = CliRunner()


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> dict[str, MemoryCluster]:
    """The CLI against memory clusters and an allowing gate (the policy engine is another issue)."""
    apis = fleet()
    monkeypatch.setattr(cluster, "connect", lambda name, *a, **k: apis[name])
    monkeypatch.setattr(loop, "default_gate", lambda env, state, live, policies_dir: allow(env, state, live))
    monkeypatch.setattr(reconcile.ReconcileLoop, "__init__", _without_sleeps(reconcile.ReconcileLoop.__init__))
    return apis


def _without_sleeps(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.opts.sleep = lambda s: None
    return wrapped


def run(*args: str):
    return runner.invoke(cli.app, ["reconcile", *args])


def test_cli_detect_only_once_exits_1_on_drift_and_0_when_converged(wired, repo: Path, tmp_path: Path) -> None:
    commit(repo, GOOD, "good")
    common = ["--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c"), "--once"]
    drift = run(*common, "--detect-only", "--output", "json")
    assert drift.exit_code == 1, drift.output
    report = conforms(json.loads(drift.output), "reconcile")  # the one JSON shape of every command
    assert report["status"] == "drift" and report["drift"] > 0 and report["ok"] is False
    assert sum(api.writes() for api in wired.values()) == 0
    applied = run(*common)
    assert applied.exit_code == 0, applied.output
    assert "applied" in applied.output
    assert run(*common, "--detect-only").exit_code == 0


def test_cli_bad_input_is_one_line_and_exit_2(wired, repo: Path, tmp_path: Path) -> None:
    commit(repo, BAD_YAML, "broken")
    common = ["--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c")]
    both = run(*common)
    assert both.exit_code == 2 and "choose one of --once or --interval" in both.output
    assert run(*common, "--interval", "soon").exit_code == 2
    assert run(*common, "--once", "--context", "x").exit_code == 2
    invalid = run(*common, "--once")
    assert invalid.exit_code == 2 and "environments/dev.yaml:" in invalid.output and "Traceback" not in invalid.output
    assert run(*common, "--once", "--no-such-flag").exit_code == 2
    assert sum(api.writes() for api in wired.values()) == 0


def test_cli_help() -> None:
    result = runner.invoke(cli.app, ["reconcile", "--help"])
    assert result.exit_code == 0 and "--detect-only" in result.output and "--prune" in result.output


def test_service_loop_runs_passes_until_stopped(repo: Path, tmp_path: Path) -> None:
    import threading

    commit(repo, GOOD, "good")
    stop = threading.Event()
    passes = []

    def gate(env, state, live):
        passes.append(1)
        if len(passes) == 2:
            stop.set()  # the loop ends after this pass, without any wait
        return reconcile.GateResult(False, [])

    rec = make(repo, tmp_path, fleet(), gate, identity="only")
    rec.serve(interval=0, stop=stop)
    assert rec.passes == 2 and rec.last_status == "clean" and rec.ready


def test_cli_service_mode_with_a_busy_metrics_port_is_one_line_exit_2(wired, repo: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c"), "--interval", "30s",
                     "--metrics-host", "127.0.0.1", "--metrics-port", str(port))
    assert result.exit_code == 2 and f"--metrics-port {port}" in result.output and "Traceback" not in result.output


def test_git_source_follows_a_branch_a_tag_or_a_commit(repo: Path, tmp_path: Path) -> None:
    first = commit(repo, GOOD, "first")
    git(repo, "tag", "v1")
    second = commit(repo, BIGGER, "second")
    assert reconcile.GitSource(str(repo), "main", tmp_path / "a").fetch().revision == second
    assert reconcile.GitSource(str(repo), "v1", tmp_path / "b").fetch().revision == first
    assert reconcile.GitSource(str(repo), first, tmp_path / "c").fetch().revision == first
    missing = reconcile.GitSource(str(repo), "no-such-branch", tmp_path / "d").fetch()
    assert missing.revision is None and "no branch, tag or commit 'no-such-branch'" in missing.error


@pytest.mark.parametrize(
    "url",
    ["https://user:p@ssTOKEN@git.example.com/fleet.git", "https://ghp_secret@git.example.com/fleet.git", "ssh://git:tok@git.example.com:22/fleet"],
)
def test_credentials_in_repository_urls_are_redacted_whole(url: str) -> None:
    shown = reconcile.redact(f"fetch {url} failed")
    assert "TOKEN" not in shown and "secret" not in shown and "tok@" not in shown and "ssTOKEN" not in shown
    assert "***@git.example.com" in shown


class BasicAuthGit:
    """A Git repository served over dumb HTTP on 127.0.0.1 that answers only with the right Basic credentials."""

    def __init__(self, bare: Path, user: str, token: str):
        import base64
        import functools
        import http.server
        import threading

        expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        self.seen: list[str | None] = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N802, N805 - http.server's names
                self.seen.append(handler.headers.get("Authorization"))
                if handler.headers.get("Authorization") != expected:
                    handler.send_response(401)
                    handler.send_header("WWW-Authenticate", 'Basic realm="git"')
                    handler.send_header("Content-Length", "0")
                    handler.end_headers()
                    return
                super().do_GET()

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(bare.parent)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{user}:{token}@127.0.0.1:{self.server.server_address[1]}/{bare.name}"


def test_the_git_token_reaches_the_server_but_never_the_cache(repo: Path, tmp_path: Path) -> None:
    token = "s3cret-token-value"
    first = commit(repo, GOOD, "first")
    bare = tmp_path / "served" / "fleet.git"
    bare.parent.mkdir()
    subprocess.run(["git", "clone", "--quiet", "--bare", str(repo), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    served = BasicAuthGit(bare, "bot", token)
    try:
        source = reconcile.GitSource(served.url, "main", tmp_path / "cache")
        fetched = source.fetch()
        assert fetched.revision == first, fetched.error
        second = commit(repo, BIGGER, "second")
        subprocess.run(["git", "-C", str(repo), "push", "--quiet", str(bare), "main"], check=True)
        subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
        assert source.fetch().revision == second
        # A cache an earlier version cloned with the token in its remote URL is cleaned by the next fetch.
        subprocess.run(["git", "-C", str(source.path), "remote", "set-url", "origin", served.url], check=True)
        assert source.fetch().revision == second
        refused = reconcile.GitSource(served.url.replace(token, "wrong-token"), "main", tmp_path / "other").fetch()
    finally:
        served.server.shutdown()
        served.server.server_close()
    assert any(served.seen) and token not in (source.path / ".git" / "config").read_text()
    leaked = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert leaked == []
    assert refused.revision is None and "terminal prompts disabled" in refused.error and "wrong-token" not in refused.error  # refused, no prompt
