"""The policy gate on a real OPA server (built by `make tools`), with token authentication on.

The same decisions as the embedded engine for every bundled environment and for a mutation that
fires each deny rule; OPA's work is linear in the input; `opa test --coverage` and `fleetops policy test` agree; a wrong token is
refused, fleetops fails closed, and no token ever reaches an output or the decision log.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from opa_client.opa import OpaClient

from benchmarks.generate import synthetic_yaml
from benchmarks.same_decisions import seeded_input
from fleetops import policy, render, spec
from fleetops.envelope import DecisionStatus
from tests import servers
from tests.command import run
from tests.policy.test_policy import MUTATIONS, TODAY, mutated, rendered

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]


def decisions(verdict: policy.Verdict) -> list[tuple]:
    return [(d.status, d.rule, d.resource_ref(), d.msg, d.waived_by) for d in verdict.decisions]


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_bundled_environment_gets_the_same_decisions_from_opa(opa: servers.Opa, name: str) -> None:
    env, state = rendered(name)
    embedded = policy.evaluate(env, state, today=TODAY)
    real = policy.evaluate(env, state, engine=policy.OpaEngine(opa.url, token=opa.token, timeout=30), today=TODAY)
    assert real.engine == "opa" and decisions(real) == decisions(embedded)
    assert real.policy_digest == embedded.policy_digest and real.input_digest == embedded.input_digest


@pytest.mark.parametrize("rule", sorted(MUTATIONS))
def test_each_deny_rule_fires_the_same_on_opa(opa: servers.Opa, tmp_path: Path, rule: str) -> None:
    env, state = mutated(tmp_path, MUTATIONS[rule])
    real = policy.evaluate(env, state, engine=policy.OpaEngine(opa.url, token=opa.token, timeout=30), today=TODAY)
    assert rule in real.rules("deny")
    assert decisions(real) == decisions(policy.evaluate(env, state, today=TODAY))


def opa_test_tree(policies: Path, target: Path, tests: bool = True) -> Path:
    """The policies as `opa test` loads them: data under data.fleet_data, where the policies read it."""
    bundle = policy.load_bundle(policies)
    for name, text in {**bundle.policies, **(bundle.tests if tests else {})}.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
    (target / "fleet_data").mkdir()
    (target / "fleet_data" / "data.json").write_text(json.dumps(bundle.data[policy.DATA_ROOT]))
    return target


def opa_test(tree: Path) -> tuple[dict[tuple[str, str], bool], dict[str, dict]]:
    binary = str(servers.tool("opa"))
    results = subprocess.run([binary, "test", "--format", "json", "."], cwd=tree, capture_output=True, text=True, timeout=300)
    tests = {(r["package"].removeprefix("data."), r["name"]): not r.get("fail") and not r.get("error") for r in json.loads(results.stdout)}
    cover = subprocess.run([binary, "test", "--coverage", "--format", "json", "."], cwd=tree, capture_output=True, text=True, timeout=300)
    return tests, json.loads(cover.stdout)["files"]


def uncovered_rules(path: Path, lines: set[int]) -> set[int]:
    """The head line of each top-level rule that holds an uncovered line: the two engines count the
    lines of one expression differently (OPA: its whole span; regorus: where it starts), but they
    must agree on which rules no test reaches."""
    heads = [i for i, text in enumerate(path.read_text().splitlines(), 1) if re.match(r"^[a-z_][\w.]*(\s|\(|\[|:=)", text)]
    return {max((h for h in heads if h <= line), default=0) for line in lines}


def compare_with_opa(policies: Path, tmp_path: Path) -> None:
    ours = policy.run_tests(policies)
    tests, files = opa_test(opa_test_tree(policies, tmp_path / "opa"))
    assert {(r.package, r.name): r.passed for r in ours.results} == tests
    for cover in ours.coverage:
        theirs = files.get(cover.path, {"not_covered": []})
        rows = {row for span in theirs.get("not_covered", []) for row in range(span["start"]["row"], span["end"]["row"] + 1)}
        assert (cover.percent == 100.0) == (not rows), cover.path
        assert uncovered_rules(policies / cover.path, set(cover.not_covered)) == uncovered_rules(policies / cover.path, rows), cover.path


def test_opa_test_agrees_with_fleetops_policy_test_on_the_shipped_policies(tmp_path: Path) -> None:
    compare_with_opa(ROOT / "policies", tmp_path)


def test_opa_test_agrees_on_what_is_left_uncovered(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("pack"))
    (policies / "devices_test.rego").unlink()  # a whole file no test reaches
    quota_tests = policies / "quota_test.rego"  # and one rule of a file that is otherwise tested
    quota_tests.write_text(re.sub(r"\ntest_guaranteed_over_capacity\w* if \{.*?\n\}\n", "\n", quota_tests.read_text(), flags=re.DOTALL))
    report = policy.run_tests(policies)
    assert {c.path for c in report.coverage if c.percent < 100} == {"devices.rego", "quota.rego"}
    compare_with_opa(policies, tmp_path)


def generated(tmp_path: Path) -> tuple[spec.Environment, render.DesiredState]:
    """The generated fleet at scale 0.1: 100 tenants, 2,074 objects."""
    path = tmp_path / "large.yaml"
    path.write_text(synthetic_yaml(0.1))
    return spec.load_environment(path), render.render(path, revision="test")


def test_opa_decides_the_seeded_generated_fleet_as_the_embedded_engine_does(opa: servers.Opa, tmp_path: Path) -> None:
    """The rules rewritten to index by key, on 100 tenants with violations and look-alikes that pass
    seeded in every 7th (benchmarks/same_decisions.py): a key read from the wrong tenant differs here."""
    document = seeded_input(*generated(tmp_path))
    embedded = policy.evaluate_input(document, today=TODAY)
    real = policy.evaluate_input(document, engine=policy.OpaEngine(opa.url, token=opa.token, timeout=60), today=TODAY)
    assert len(embedded.of(DecisionStatus.DENY)) > 500 and real.engine == "opa"
    assert decisions(real) == decisions(embedded)


def test_opa_evaluates_no_expression_more_than_twice_per_object_and_tenant(tmp_path: Path) -> None:
    """Work linear in the input, counted by OPA's profiler (not timed): a partial rule looked up by a key
    (`egress_peers[np.namespace]`) ran its body over every tenant at each lookup, 8,000,000 evaluations
    and 38 s for the generated fleet's 1,000 tenants (80,800 at the 100 tenants here)."""
    document = policy.policy_input(*generated(tmp_path))
    (tmp_path / "input.json").write_bytes(policy.canonical_json(document))
    tree = opa_test_tree(ROOT / "policies", tmp_path / "opa", tests=False)
    answer = subprocess.run([str(servers.tool("opa")), "eval", "--profile", "--profile-limit", "0", "--format", "json",
                             "-d", str(tree), "-i", str(tmp_path / "input.json"), "data.fleet"], capture_output=True, text=True, timeout=300, check=True)
    worst = max(json.loads(answer.stdout)["profile"], key=lambda row: row["num_eval"])
    bound = 2 * (len(document["resources"]) + len(document["spec"]["tenants"]))
    where = f"{Path(worst['location']['file']).name}:{worst['location']['row']}"
    assert worst["num_eval"] <= bound, f"{where} evaluated {worst['num_eval']:,} times for {bound // 2:,} objects and tenants"


def test_a_wrong_token_is_refused_and_the_gate_fails_closed_without_showing_a_token(opa: servers.Opa, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    wrong = "not-the-token-" + opa.token[:6]
    refused = run("check", "--env", "dev", "--opa-url", opa.url, "--decision-log", log, env={"FLEETOPS_OPA_TOKEN": wrong})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"OPA at {opa.url}: 401 unauthorized: the server refused the token in FLEETOPS_OPA_TOKEN")
    assert "no decision: failing closed" in refused.stderr
    assert not log.exists()  # no decision, nothing recorded
    allowed = run("check", "--env", "dev", "--opa-url", opa.url, "--decision-log", log, "--output", "json", env={"FLEETOPS_OPA_TOKEN": opa.token})
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["engine"] == "opa"
    for text in (refused.stdout, refused.stderr, allowed.stdout, allowed.stderr, log.read_text()):
        assert opa.token not in text and wrong not in text


def test_a_helper_renamed_since_the_last_upload_replaces_the_old_one(opa: servers.Opa, tmp_path: Path) -> None:
    # OPA compiles every module it holds at each change: the old callers of a renamed helper must go
    # before the new helper arrives.
    env, state = rendered("prod")
    engine = policy.OpaEngine(opa.url, token=opa.token, timeout=30)
    before = policy.evaluate(env, state, engine=engine, today=TODAY)
    renamed = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", renamed, ignore=shutil.ignore_patterns("pack"))
    for path in renamed.glob("*.rego"):
        path.write_text(path.read_text().replace("of_kind(", "objects_of_kind("))
    after = policy.evaluate(env, state, engine=engine, policies_dir=renamed, today=TODAY)
    assert decisions(after) == decisions(before)


# --- a shared OPA: other clients write to it while fleetops evaluates ----------------------------------


def neutralised(source: str) -> str:
    """What a client that wants every change allowed writes: the module's package with no decisions."""
    return f"package {policy.package_of(source)}\n\ndeny := set()\n\nwarn := set()\n"


class Rival:
    """Another client of the same OPA, writing to whatever fleetops keeps there, between fleetops' upload and query."""

    def __init__(self, opa: servers.Opa, target: str) -> None:
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {opa.token}"
        self.url, self.target, self.writes = opa.url, target, 0

    def __call__(self) -> None:
        if self.target == "modules":
            for module in self.session.get(f"{self.url}/v1/policies", timeout=10).json()["result"]:
                if module["id"].startswith("fleetops/") and "deny" in module["raw"]:
                    put = self.session.put(f"{self.url}/v1/policies/{module['id']}", data=neutralised(module["raw"]), timeout=10)
                    self.writes += put.ok
        else:  # every copy of the policy data fleetops uploaded, with a limit no edge group exceeds
            for path in fleetops_data_paths(self.session.get(f"{self.url}/v1/data", timeout=10).json()["result"]):
                data = self.session.get(f"{self.url}/v1/data/{path}", timeout=10).json()["result"]
                data["edge"]["max_latency_ms"] = 10_000
                self.writes += self.session.put(f"{self.url}/v1/data/{path}", json=data, timeout=10).ok


def fleetops_data_paths(document: dict, prefix: str = "") -> list[str]:
    """Where a policy data document (one with `edge.max_latency_ms`) sits in OPA's data tree."""
    if isinstance(document.get("edge"), dict) and "max_latency_ms" in document["edge"]:
        return [prefix]
    return [p for k, v in document.items() if isinstance(v, dict) for p in fleetops_data_paths(v, f"{prefix}/{k}".lstrip("/"))]


@pytest.mark.parametrize("target", ["modules", "data"])
def test_a_rival_writing_between_upload_and_query_never_turns_a_deny_into_an_allow(opa: servers.Opa, tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    # Before: the rival's empty modules (or loosened data) decided 10 of 10 denied checks as allowed.
    rival = Rival(opa, target)
    query = OpaClient.query_rule

    def raced(client, *args, **kwargs):
        rival()  # exactly between the upload and the query: the window a concurrent client has
        return query(client, *args, **kwargs)

    monkeypatch.setattr(OpaClient, "query_rule", raced)
    engine = policy.OpaEngine(opa.url, token=opa.token, timeout=30)
    for rule in sorted(MUTATIONS):
        (tmp_path / rule).mkdir()
        env, state = mutated(tmp_path / rule, MUTATIONS[rule])
        try:
            verdict = policy.evaluate(env, state, engine=engine, today=TODAY)
        except policy.PolicyError as exc:
            assert "the answer is not from the policies this evaluation uploaded" in str(exc) and opa.token not in str(exc)
            continue
        assert rule in verdict.rules("deny"), f"{rule}: allowed after a rival wrote to OPA"
    assert rival.writes, "the rival found nothing of fleetops' to write to"


def test_two_gates_sharing_an_opa_each_get_their_own_policies_decisions(opa: servers.Opa, tmp_path: Path) -> None:
    # Two pull requests judged at once by one OPA: one side's policies waive nothing, the other's
    # have no quota rule. Before, each upload removed the other's modules: wrong answers or errors.
    strict = tmp_path / "strict"
    shutil.copytree(ROOT / "policies", strict, ignore=shutil.ignore_patterns("pack"))
    (strict / "waivers.yaml").write_text("waivers: []\n")
    lax = tmp_path / "lax"
    shutil.copytree(ROOT / "policies", lax, ignore=shutil.ignore_patterns("pack"))
    (lax / "quota.rego").write_text("package fleet.quota\n\ndeny := set()\n")
    env, state = rendered("prod")
    engine = policy.OpaEngine(opa.url, token=opa.token, timeout=30)
    expected = {d: decisions(policy.evaluate(env, state, policies_dir=d, today=TODAY)) for d in (strict, lax)}
    assert expected[strict] != expected[lax]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(policy.evaluate, env, state, engine=engine, policies_dir=d, today=TODAY) for _ in range(6) for d in (strict, lax)]
        got = [(d, f.result()) for f, d in zip(runs, [d for _ in range(6) for d in (strict, lax)])]
    for d, verdict in got:
        assert decisions(verdict) == expected[d]
    modules = requests.get(f"{opa.url}/v1/policies", headers={"Authorization": f"Bearer {opa.token}"}, timeout=10).json()["result"]
    assert not [m["id"] for m in modules if m["id"].startswith("fleetops/")]  # each evaluation removed what it uploaded


class Forger(Rival):
    """A client holding the same token that keeps what the answer is checked against - each uploaded
    module's package and `fleetops_policy_digest` lines, the uploaded data - and replaces the rules."""

    def __call__(self) -> None:
        for module in self.session.get(f"{self.url}/v1/policies", timeout=10).json()["result"]:
            if module["id"].startswith("fleetops/") and re.search(r"^deny\b", module["raw"], flags=re.MULTILINE):
                kept = re.sub(r"^(deny|warn)\b", r"rival_\1", module["raw"], flags=re.MULTILINE)
                put = self.session.put(f"{self.url}/v1/policies/{module['id']}", data=f"{kept}\ndeny := set()\n\nwarn := set()\n", timeout=10)
                self.writes += put.ok


def test_a_rival_forging_package_and_digest_lines_never_turns_a_deny_into_an_allow(opa: servers.Opa, tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the forged modules passed the digest and data checks and decided 9 of 9 denied changes
    # as allowed. Now the embedded engine's answer on the same bundle and input is the floor.
    forger = Forger(opa, "modules")
    # The forger writes exactly between fleetops' upload and its query, every time.
    monkeypatch.setattr(OpaClient, "query_rule", lambda client, *a, ask=OpaClient.query_rule, **kw: (forger(), ask(client, *a, **kw))[1])
    engine = policy.OpaEngine(opa.url, token=opa.token, timeout=30)
    for change in MUTATIONS.values():
        env, state = mutated(Path(tempfile.mkdtemp(dir=tmp_path)), change)
        with pytest.raises(policy.PolicyError, match=r"its answer differs from the embedded engine's .*: OPA did not decide ") as caught:
            policy.evaluate(env, state, engine=engine, today=TODAY)
        assert opa.token not in str(caught.value)
    assert forger.writes >= len(MUTATIONS), "the forger found nothing of fleetops' to write to"
