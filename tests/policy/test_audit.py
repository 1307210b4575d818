"""`fleetops audit`: the reviewer's report agrees with the policies, the gate and the waivers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.command import run

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"


def shipped_rules() -> set[str]:
    """Rule ids as the policy sources spell them, read independently of fleetops."""
    return {
        rule
        for path in POLICIES.glob("*.rego")
        if not path.name.endswith("_test.rego")
        for rule in re.findall(r'"rule":\s*"([a-z_]+\.[a-z_]+)"', path.read_text())
    }


def empty_log(folder: Path) -> Path:
    """A decision log nothing was written to yet (a log named must exist: a typo is no empty history)."""
    log = folder / "decisions.jsonl"
    log.touch()
    return log


@pytest.fixture(scope="module")
def report_json(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("audit") / "audit.json"
    done = run("audit", "--output", "json", "-o", str(out), "--decision-log", str(empty_log(out.parent)))
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit") / "audit.html"
    done = run("audit", "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_every_rule_of_the_policies_appears(report_json: dict) -> None:
    listed = [p["rule"] for p in report_json["policies"]]
    assert set(listed) == shipped_rules()
    assert len(listed) == len(set(listed))  # a rule with several bodies is listed once, at its METADATA
    for rule in report_json["policies"]:
        assert rule["title"] and rule["description"] and rule["severity"] and rule["control_id"], rule
        assert re.fullmatch(r"policies/\w+\.rego", rule["file"]) and rule["line"] > 0
        assert rule["tests"], f"{rule['rule']} has no test evidence"


def test_rule_locations_point_at_the_rule(report_json: dict) -> None:
    for rule in report_json["policies"]:
        line = (ROOT / rule["file"]).read_text().splitlines()[rule["line"] - 1]
        assert line.startswith(f"{rule['kind']} contains"), (rule["rule"], line)


def test_counts_agree_with_check(report_json: dict, tmp_path: Path) -> None:
    for env in report_json["environments"]:
        done = run("check", "--env", env["name"], "--output", "json", "--decision-log", str(tmp_path / "d.jsonl"))
        verdict = json.loads(done.stdout)
        assert env["counts"] == verdict["summary"], env["name"]
        assert sorted(d["rule"] for d in env["decisions"]) == sorted(d["rule"] for d in verdict["decisions"])


def test_coverage_and_test_results_match_policy_test(report_json: dict) -> None:
    done = run("policy", "test", "--output", "json")
    tests = json.loads(done.stdout)
    assert report_json["tests"]["total"] == len(tests["tests"])
    assert report_json["tests"]["passed"] == sum(t["passed"] for t in tests["tests"])
    assert {c["file"]: c["percent"] for c in report_json["coverage"]} == {f"policies/{c['path']}": c["percent"] for c in tests["coverage"]}


def test_json_is_stable_across_runs(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        path = tmp_path / f"a{i}.json"
        assert run("audit", "--output", "json", "-o", str(path), "--env", "dev", "--decision-log", str(empty_log(tmp_path))).returncode == 0
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]


def _policies_with(tmp_path: Path, waivers: str) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(POLICIES, repo / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "policies" / "waivers.yaml").write_text(waivers)
    return repo / "policies"


def test_expired_and_malformed_waivers_are_flagged(tmp_path: Path) -> None:
    policies = _policies_with(
        tmp_path,
        """waivers:
  - rule: quota.tenant_share
    scope: {environment: prod, cluster: center-sh, tenant: llm-pretrain}
    owner: capacity-planning@example.com
    reason: rack delayed
    ticket: FLEET-1
    created: 2025-01-01
    expires: 2025-03-01
  - rule: network.egress_anywhere
    scope: {environment: prod}
    owner: someone
    reason: too long
    ticket: FLEET-2
    created: 2026-01-01
    expires: 2026-12-31
""",
    )
    out = tmp_path / "audit.json"
    done = run("audit", "--env", "prod", "--policies", str(policies), "--output", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    status = {w["rule"]: w for w in report["waivers"]}
    assert status["quota.tenant_share"]["status"] == "expired" and status["quota.tenant_share"]["days_left"] < 0
    assert status["network.egress_anywhere"]["status"] == "malformed"
    assert "90" in status["network.egress_anywhere"]["problem"]
    prod = next(e for e in report["environments"] if e["name"] == "prod")
    # The expired waiver waives nothing: the share rule is a deny again.
    assert "quota.tenant_share" in {d["rule"] for d in prod["decisions"] if d["status"] == "deny"}
    html = tmp_path / "audit.html"
    run("audit", "--env", "prod", "--policies", str(policies), "-o", str(html))
    assert '<td class="expired">expired' in html.read_text()


def test_history_from_the_decision_log(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    for _ in range(2):
        assert run("check", "--env", "prod", "--decision-log", str(log)).returncode == 0
    log.write_text(
        log.read_text()
        + json.dumps({"time": "2026-11-30T10:00:00+00:00", "environment": "prod", "revision": "abc", "decisions": [{"rule": "budget.over_budget", "status": "deny", "msg": "over"}]})
        + "\nnot json\n"
    )
    out = tmp_path / "a.json"
    assert run("audit", "--env", "prod", "--decision-log", str(log), "--output", "json", "-o", str(out)).returncode == 0
    history = json.loads(out.read_text())["history"]
    assert history["entries"] == 3
    assert history["latest_denials"]["production"][0]["rule"] == "budget.over_budget"
    assert any(p.startswith(f"{log}:4: not a decision log entry") for p in history["problems"])


def _record(time: str, source: str, pr: str | None, actor: str | None, rule: str, status: str) -> str:
    return json.dumps({"schema": "fleetops.decision/v1", "time": time, "source": source, "environment": "prod", "revision": "c0ffee",
                       "pr": pr, "actor": actor, "decisions": [{"rule": rule, "status": status, "msg": f"{source} said {status}"}]}) + "\n"


def test_history_counts_approvals_and_keeps_the_production_gate_apart_from_pull_requests(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text(
        _record("2026-11-30T10:00:00+00:00", "reconcile", None, "fleetops-reconciler", "budget.over_budget", "deny")
        + _record("2026-11-30T11:00:00+00:00", "pack", None, "deployer", "capacity.overcommit", "deny")
        + "".join(_record(f"2026-11-30T12:{m:02}:00+00:00", "plan", "41", "alice", "quota.tenant_share", "deny") for m in range(25))
        + _record("2026-11-30T13:00:00+00:00", "plan", "42", "bob", "edge.fingerprint_added", "approval")
        + _record("2026-11-30T14:00:00+00:00", "check", "42", "bob", "quota.tenant_share", "deny")
    )
    out = tmp_path / "a.json"
    assert run("audit", "--env", "prod", "--decision-log", str(log), "--output", "json", "-o", str(out)).returncode == 0
    history = json.loads(out.read_text())["history"]
    by_rule = {row["rule"]: row["by_day"]["2026-11-30"] for row in history["per_rule"]}
    assert by_rule["edge.fingerprint_added"]["approval"] == 1
    production, pulls = history["latest_denials"]["production"], history["latest_denials"]["pull_request"]
    # Twenty-six pull-request denials later, the production gate's two are still listed, on their own.
    assert [(d["source"], d["rule"], d["actor"]) for d in production] == [
        ("pack", "capacity.overcommit", "deployer"), ("reconcile", "budget.over_budget", "fleetops-reconciler")]
    assert len(pulls) == 20 and {d["source"] for d in pulls} == {"plan", "check"}
    assert (pulls[0]["source"], pulls[0]["pr"], pulls[0]["actor"]) == ("check", "42", "bob")
    assert (pulls[1]["status"], pulls[1]["pr"], pulls[1]["actor"]) == ("approval", "42", "bob")

    page = tmp_path / "a.html"
    assert run("audit", "--env", "prod", "--decision-log", str(log), "-o", str(page)).returncode == 0
    text = page.read_text()
    gate = text[text.index('id="denials-production"'):text.index('id="denials-pull_request"')]
    assert "reconcile" in gate and "fleetops-reconciler" in gate and "alice" not in gate
    assert "#42" in text[text.index('id="denials-pull_request"'):]
    assert re.search(r"<td class=\"num\">0 / 1 / 0 / 0</td>", text)


def test_malformed_decision_log_lines_are_counted_and_placed_and_the_report_still_renders(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    assert run("check", "--env", "dev", "--decision-log", str(log)).returncode == 0
    good = log.read_text()
    bad = [
        "[" * 100_000,  # nested past any parser's depth: a RecursionError traceback before
        '{"time": "2026-11-30T10:00:00+00:00", "decisions": ["not a decision"]}',  # an AttributeError traceback before
        '{"time": "2026-11-30T10:00:00+00:00", "decisions": [{"rule": "x.y", "status": "deny"}], "revision": 7}',
        "{}",
    ]
    log.write_bytes((good + "\n".join(bad) + "\n").encode() + b'{"time": "caf\xe9"}\n' + good.encode())
    html = tmp_path / "audit.html"
    done = run("audit", "--env", "dev", "--decision-log", str(log), "-o", str(html))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    summary = f"decision log: 5 malformed line(s) left out of the history: {log}:2, {log}:3, {log}:4, {log}:5, {log}:6"
    assert summary in done.stderr
    text = html.read_text()
    assert "5 malformed line(s) of the decision log are left out of the history" in text
    assert f"{log}:3: not a decision log entry (decisions.0: " in text
    assert "2 evaluations in the decision log" in text
    md = tmp_path / "audit.md"
    assert run("audit", "--env", "dev", "--decision-log", str(log), "--output", "markdown", "-o", str(md)).returncode == 0
    assert summary in md.read_text()


def test_bad_policy_writes_no_report(tmp_path: Path) -> None:
    policies = _policies_with(tmp_path, "waivers: []\n")
    (policies / "quota.rego").write_text("package fleet.quota\n\ndeny contains d if {\n")
    out = tmp_path / "audit.html"
    done = run("audit", "--policies", str(policies), "-o", str(out))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".audit.html*"))


class _Outline(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained_and_semantic(report_html: Path) -> None:
    outline = _Outline()
    outline.feed(report_html.read_text())
    for tag, attrs in outline.tags:
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not re.match(r"^(https?:)?//", value), f"external reference {tag} {key}={value}"
        assert tag not in ("script", "link", "iframe", "img"), tag
    tags = [t for t, _ in outline.tags]
    assert tags.count("h1") == 1 and "main" in tags and "nav" in tags
    assert all(a.get("scope") == "col" for t, a in outline.tags if t == "th")
    assert tags.count("caption") >= tags.count("table")
    assert any(t == "svg" and a.get("role") == "img" for t, a in outline.tags)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = ["provenance", "inventory", "evidence", "decisions", "waivers", "history", "capacity"]


def _chromium(url: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium): rendered-DOM check not run")
def test_report_renders_in_headless_chromium_without_console_errors(report_html: Path, tmp_path: Path) -> None:
    # The detector must see a console error when there is one, or its silence proves nothing.
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>missingFunction()</script></body></html>")
    assert "CONSOLE" in _chromium(broken.as_uri()).stderr

    done = _chromium(report_html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CONSOLE" not in done.stderr, [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    dom = done.stdout
    for section in SECTIONS:
        assert re.search(rf'<section id="{section}" aria-labelledby="{section}-h">\s*<h2 id="{section}-h">', dom), section
    assert dom.count('<tr id="rule-') == len(shipped_rules())
    assert "<svg" in dom and "guaranteed and burst quota against capacity" in dom


def test_markdown_report_lists_rules_decisions_and_waivers(tmp_path: Path) -> None:
    out = tmp_path / "audit.md"
    done = run("audit", "--env", "prod", "--output", "markdown", "-o", str(out), "--decision-log", str(empty_log(tmp_path)))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert text.startswith("# fleetops policy audit")
    for rule in shipped_rules():
        assert f"`{rule}`" in text
    assert "### prod: 0 deny, 1 warn, 1 waived" in text and "FLEET-412" in text


def test_a_log_full_of_malformed_lines_lists_the_first_places_and_counts_them_all(tmp_path: Path) -> None:
    from fleetops import audit

    log = tmp_path / "decisions.jsonl"
    log.write_text("not json\n" * (audit.MAX_LOG_PROBLEMS + 5))
    history = audit.history(log)
    assert history["malformed"] == audit.MAX_LOG_PROBLEMS + 5 and len(history["problems"]) == audit.MAX_LOG_PROBLEMS
    assert audit.malformed_summary(history).endswith(f"{log}:{audit.MAX_LOG_PROBLEMS} and 5 more")


def test_a_mixed_mig_pools_gpus_are_counted_once_under_physical(report_json: dict) -> None:
    # prod's center-sh cuts each GPU of one pool into 3g.20gb and 2g.10gb instances: both rows said
    # all of its GPUs, so the cluster's physical GPUs summed to twice what was bought.
    import yaml

    prod = yaml.safe_load((ROOT / "environments" / "prod.yaml").read_text())
    [pool] = [p for c in prod["clusters"] for p in c.get("pools", []) if p.get("sharing", {}).get("mig", {}).get("strategy") == "mixed"]
    gpus = pool["nodes"] * pool["device"]["per_node"]
    [env] = [e for e in report_json["environments"] if e["name"] == "prod"]
    mig_rows = [r for r in env["capacity"] if r["resource"].startswith("nvidia.com/mig-") and r["cluster"] == "center-sh"]
    assert len(mig_rows) == 2 and sum(r["physical"] for r in mig_rows) == gpus


def _git(repo: Path, *args: str, author: str = "first") -> None:
    subprocess.run(["git", "-c", f"user.name={author}", "-c", "user.email=a@example.com", *args], cwd=repo, check=True, capture_output=True)


def test_last_change_counts_an_edit_to_the_rules_metadata(tmp_path: Path) -> None:
    # Blame of the rule's head line: a new title, severity or fix left "last change" at the older commit.
    repo = tmp_path / "repo"
    shutil.copytree(POLICIES, repo / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "environments", repo / "environments")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "policies")
    quota = repo / "policies" / "quota.rego"
    quota.write_text(quota.read_text().replace("# title: Guaranteed quota fits capacity with headroom", "# title: Guaranteed quota fits capacity, with headroom", 1))
    _git(repo, "commit", "-qam", "retitle", author="second")
    out = tmp_path / "a.json"
    done = run("audit", "--env", "dev", "--output", "json", "-o", str(out), "--decision-log", str(empty_log(tmp_path)), cwd=repo)
    assert done.returncode == 0, done.stderr
    rules = {r["rule"]: r for r in json.loads(out.read_text())["policies"]}
    assert rules["quota.guaranteed_over_capacity"]["last_change"]["author"] == "second"
    assert rules["quota.tenant_share"]["last_change"]["author"] == "first"  # the next rule's lines were not touched


def test_each_rule_says_where_it_is_enforced_and_who_owns_it(report_json: dict) -> None:
    rules = {r["rule"]: r for r in report_json["policies"]}
    # input.change and input.usage exist only in a plan, input.live only where the reconciler reads live nodes;
    # network.strict_tenant_opened reads the flows the change opens (input.change.strict_opened).
    review_only = {r for r in rules if r.startswith(("change.", "usage.", "work."))} | {"network.strict_tenant_opened"}
    assert {r for r, p in rules.items() if p["enforced_by"] == ["review"]} == review_only
    assert rules["capacity.live_below_guaranteed"]["enforced_by"] == ["reconciler"]
    assert rules["budget.over_budget"]["enforced_by"] == ["review", "Pulumi pack", "reconciler"]  # the plan-only costing is one alternative
    assert rules["quota.tenant_share"]["enforced_by"] == ["review", "Pulumi pack", "reconciler"]
    owners = re.findall(r'"(@[^"]+)"', (POLICIES / "owners.yaml").read_text())
    assert owners and all(r["owners"][: len(owners)] == owners for r in rules.values())


def test_codeowners_of_a_rules_file_are_its_owners(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(POLICIES, repo / "policies", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "environments", repo / "environments")
    (repo / ".github").mkdir()
    (repo / ".github" / "CODEOWNERS").write_text("* @everyone\npolicies/ @fleet-policy-owners\npolicies/quota.rego @capacity-team\n")
    _git(repo, "init", "-q")
    out = tmp_path / "a.json"
    done = run("audit", "--env", "dev", "--output", "json", "-o", str(out), "--decision-log", str(empty_log(tmp_path)), cwd=repo)
    assert done.returncode == 0, done.stderr
    rules = {r["rule"]: r for r in json.loads(out.read_text())["policies"]}
    assert rules["quota.tenant_share"]["owners"][-1] == "@capacity-team" and "@fleet-policy-owners" not in rules["quota.tenant_share"]["owners"]
    assert rules["rbac.broad_subject"]["owners"][-1] == "@fleet-policy-owners"


# Run in a copy of the report (the report itself holds no script): which chart texts reach outside their SVG.
_CUT_PROBE = """<script>
const cut = [];
let texts = 0;
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect();
  for (const t of svg.querySelectorAll("text")) {
    texts += 1;
    const r = t.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) cut.push(t.textContent);
  }
}
document.body.dataset.texts = texts;
document.body.dataset.cut = cut.join(" | ");
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium): chart layout not measured")
def test_no_label_or_number_of_the_capacity_chart_is_cut(report_html: Path, tmp_path: Path) -> None:
    # prod's FPGA region resource (55 characters) ran past the left edge of a fixed 360-pixel label column.
    probe = tmp_path / "probe.html"
    probe.write_text(report_html.read_text().replace("</body>", _CUT_PROBE + "</body>"))
    done = _chromium(probe.as_uri())
    texts = re.search(r'data-texts="(\d+)"', done.stdout)
    cut = re.search(r'data-cut="([^"]*)"', done.stdout)
    assert texts and int(texts[1]) > 10, done.stdout[-500:]
    assert cut is not None and cut[1] == "", cut and cut[1]


def test_the_audit_and_the_gate_name_a_malformed_waiver_in_the_same_words(tmp_path: Path) -> None:
    """One reading of waivers.yaml: a waiver without a ticket is the same problem in the audit's table and
    in the gate's waiver problems (the audit used to print pydantic's own "Field required")."""
    policies = _policies_with(
        tmp_path,
        """waivers:
  - rule: quota.tenant_share
    scope: {environment: prod}
    owner: capacity-planning@example.com
    reason: rack delayed
    created: 2026-01-01
    expires: 2026-02-01
""",
    )
    out = tmp_path / "audit.json"
    assert run("audit", "--env", "prod", "--policies", str(policies), "--output", "json", "-o", str(out)).returncode == 0
    (row,) = json.loads(out.read_text())["waivers"]
    assert (row["status"], row["problem"]) == ("malformed", "ticket: required field is missing")
    checked = run("check", "--env", "prod", "--policies", str(policies), "--output", "json", "--decision-log", str(tmp_path / "log.jsonl"))
    (problem,) = json.loads(checked.stdout)["problems"]
    assert (problem["path"], problem["message"]) == ("waivers[0].ticket", "required field is missing")


STATEMENTS = {"environment": "dev", "period": "2026-11", "prometheus": "http://prometheus.monitoring:9090", "statements": [
    {"tenant": "vision", "mode": "postpaid", "currency": "USD", "total": 1234.5, "balance": None, "lines": []},
    {"tenant": "ml-sandbox", "mode": "prepaid", "currency": "USD", "total": 300.0, "balance": {"remaining": -12.25}, "lines": []},
]}


def test_statements_given_to_the_audit_appear_in_html_and_markdown(tmp_path: Path) -> None:
    given = tmp_path / "statements.json"
    given.write_text(json.dumps(STATEMENTS))
    md, page = tmp_path / "audit.md", tmp_path / "audit.html"
    for out, form in ((md, "markdown"), (page, "html")):
        done = run("audit", "--env", "dev", "--output", form, "-o", str(out), "--statements", str(given), "--decision-log", str(empty_log(tmp_path)))
        assert done.returncode == 0, done.stderr
    text = md.read_text()
    assert "## Statements: dev, 2026-11" in text
    assert "| ml-sandbox | prepaid | 300.00 USD | -12.25 USD |" in text and "| vision | postpaid | 1,234.50 USD |  |" in text
    assert 'id="statements"' in page.read_text() and "-12.25 USD" in page.read_text()


def test_a_file_that_is_not_statements_is_one_line_and_no_report(tmp_path: Path) -> None:
    given = tmp_path / "statements.json"
    given.write_text(json.dumps({"environment": "dev", "period": "2026-11"}))
    done = run("audit", "--env", "dev", "--output", "markdown", "-o", str(tmp_path / "audit.md"), "--statements", str(given))
    assert done.returncode == 2 and not (tmp_path / "audit.md").exists()
    assert done.stderr.strip() == f"{given}: not the JSON of `fleetops statements --output json`: prometheus: Field required"


def test_a_decision_log_line_with_a_status_no_gate_writes_is_listed_as_malformed(tmp_path: Path) -> None:
    # A hand-edited "denied" (not a status) was counted as an entry and its decision dropped without a word.
    log = tmp_path / "decisions.jsonl"
    log.write_text('{"time": "2026-11-30T10:00:00+00:00", "decisions": [{"rule": "x.y", "status": "denied"}]}\n')
    md = tmp_path / "audit.md"
    done = run("audit", "--env", "dev", "--decision-log", str(log), "--output", "markdown", "-o", str(md))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"decision log: 1 malformed line(s) left out of the history: {log}:1" in done.stderr


@pytest.mark.parametrize("given,what", [("missing.jsonl", "no such file"), (".", "a folder, not a file")])
def test_a_decision_log_given_that_is_no_file_is_bad_input_and_no_report(tmp_path: Path, given: str, what: str) -> None:
    # A mistyped --decision-log read as an empty history: the report said "no decision log entries" and exit 0.
    log, out = tmp_path / given, tmp_path / "audit.md"
    done = run("audit", "--env", "dev", "--decision-log", str(log), "--output", "markdown", "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"--decision-log {log}: {what}"
    assert not out.exists()


def test_the_default_decision_log_not_yet_written_is_an_empty_history(tmp_path: Path) -> None:
    # Nothing has been checked in a fresh clone: .fleetops/decisions.jsonl does not exist yet, and that is no error.
    out = tmp_path / "audit.json"
    done = run("audit", "--env", "dev", "--environments", ROOT / "environments", "--policies", POLICIES, "--output", "json",
               "-o", str(out), cwd=tmp_path, env={"FLEETOPS_DECISION_LOG": ""})
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["history"]["entries"] == 0 and not (tmp_path / ".fleetops").exists()
