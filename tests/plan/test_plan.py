"""`fleetops plan` on real temporary Git repositories with real commits."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from xml.etree import ElementTree
from pathlib import Path

import pytest

from tests.command import run

ROOT = Path(__file__).resolve().parents[2]
FLEET_PARTS = ("environments", "policies", "stacks", "modules", "fleetops", "Pulumi.yaml")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)


def make_repo(tmp_path: Path) -> Path:
    """A Git repository on main with one commit of this project's fleet: program, modules, engine, policies."""
    repo = tmp_path / "fleet"
    repo.mkdir()
    for part in FLEET_PARTS:
        src = ROOT / part
        if src.is_dir():
            # What Git holds of it: not what Python and the build leave beside it (.gitignore).
            shutil.copytree(src, repo / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_yamlwriter*.so"))
        elif src.is_file():
            shutil.copy2(src, repo / part)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "Test")
    commit(repo, "fleet")
    git(repo, "checkout", "-q", "-b", "change")
    return repo


def edit(repo: Path, old: str, new: str, env: str = "prod") -> None:
    path = repo / "environments" / f"{env}.yaml"
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def plan(repo: Path, *args: str, tmpdir: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Decision records go beside the repository: the working tree must stay as the test left it.
    env = {"FLEETOPS_DECISION_LOG": str(repo.parent / "decisions.jsonl"), **({"TMPDIR": str(tmpdir)} if tmpdir else {}), **(env or {})}
    return run("plan", "--repo", repo, *args, cwd=repo, env=env)


def plan_json(repo: Path, *args: str) -> tuple[int, dict]:
    out = plan(repo, "--env", "prod", "--output", "json", *args)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout)


def test_quota_raise_shows_quota_capacity_and_clusterqueue_change(repo: Path) -> None:
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 112, burst: 176, guaranteed_per_pool: {h100-train: 56, a100-infer: 56}}")
    commit(repo, "vision: more GPUs")
    code, result = plan_json(repo)
    assert code == 0
    assert result["quota_changes"] == [
        {
            "tenant": "vision",
            "cluster": "center-bj",
            "resource": "nvidia.com/gpu",
            "before": {"guaranteed": 96, "burst": 160},
            "after": {"guaranteed": 112, "burst": 176},
        }
    ]
    row = next(r for r in result["capacity"] if r["cluster"] == "center-bj" and r["resource"] == "nvidia.com/gpu")
    assert (row["before"]["guaranteed"], row["after"]["guaranteed"]) == (272, 288)
    changed = {(o["kind"], o["namespace"], o["name"]) for o in result["objects"]["changed"]}
    assert ("ClusterQueue", "", "vision") in changed
    assert ("ResourceQuota", "vision", "device-nvidia-com-gpu") in changed
    quota = next(o for o in result["objects"]["changed"] if o["kind"] == "ResourceQuota")
    assert quota["fields"] == [{"op": "replace", "path": "/spec/hard/requests.nvidia.com~1gpu", "old": "160", "new": "176"}]
    # Fields in the order a reader meets them in the object: the quota before what may be borrowed.
    queue = next(o for o in result["objects"]["changed"] if o["kind"] == "ClusterQueue")
    assert [f["path"].rsplit("/", 1)[-1] for f in queue["fields"]][0] == "nominalQuota", queue["fields"]
    assert result["cost"]["delta"] == 0
    assert not result["objects"]["added"] and not result["objects"]["removed"]


def test_pool_added_adds_its_objects_capacity_and_cost(repo: Path) -> None:
    edit(
        repo,
        "  - name: center-sh\n    role: center\n    context: prod-sh\n    pools:\n",
        "  - name: center-sh\n    role: center\n    context: prod-sh\n    pools:\n"
        "      - name: h100-extra\n"
        "        device: {resource: nvidia.com/gpu, model: H100-SXM-80GB, per_node: 8}\n"
        "        nodes: 8\n"
        "        match: {name_pattern: \"sh-h100-*\"}\n",
    )
    commit(repo, "center-sh: 8 H100 nodes")
    code, result = plan_json(repo)
    # +135,488 a month: over prod's budget, and a rise of 25% that needs two approvals.
    assert [d["rule"] for d in result["decisions"] if d["status"] == "deny"] == ["budget.over_budget"]
    assert [d["rule"] for d in result["decisions"] if d["status"] == "approval"] == ["change.cost_increase_approvals"]
    assert code == 1 and result["verdict"] == "denied"
    added = {(o["cluster"], o["kind"], o["name"]) for o in result["objects"]["added"]}
    assert ("center-sh", "ResourceFlavor", "h100-extra") in added
    assert ("center-sh", "DaemonSet", "nvidia-device-plugin-h100-extra") in added
    assert result["groups"] == {"added": ["center-sh/h100-extra"], "removed": []}
    assert result["cost"]["delta"] == pytest.approx(64 * 2.9 * 730)
    row = next(r for r in result["capacity"] if r["cluster"] == "center-sh" and r["resource"] == "nvidia.com/gpu")
    assert (row["before"]["schedulable"], row["after"]["schedulable"]) == (64, 128)
    assert (row["before"]["physical"], row["after"]["physical"]) == (64, 128)
    assert "center-sh/h100-extra added: 8 nodes x 8 H100-SXM-80GB, exclusive (64 nvidia.com/gpu, +135,488 USD/mo)" in [
        c["text"] for c in result["fleet_changes"]]


def test_pool_removed_removes_its_objects(repo: Path) -> None:
    text = (repo / "environments" / "prod.yaml").read_text()
    block = re.search(r"      - name: fpga-arria10\n(?:        .*\n)+", text)
    assert block
    (repo / "environments" / "prod.yaml").write_text(text.replace(block.group(0), ""))
    edit(repo, "      fpga.intel.com/region-ce48969398f05f33946d560708be108a: {guaranteed: 4, burst: 8}\n", "")
    edit(repo, "pools: [a100-mig, fpga-arria10]", "pools: [a100-mig]")
    commit(repo, "retire the FPGA pool")
    code, result = plan_json(repo)
    assert code == 0 and "change.group_removed" in {d["rule"] for d in result["decisions"] if d["status"] == "warn"}
    removed = {(o["kind"], o["name"]) for o in result["objects"]["removed"]}
    assert ("ResourceFlavor", "fpga-arria10") in removed
    assert ("DaemonSet", "fpga-device-plugin-fpga-arria10") in removed
    assert ("ResourceQuota", "device-fpga-intel-com-region-ce48969398f05f33946d560708be108a") in removed
    assert result["groups"]["removed"] == ["center-sh/fpga-arria10"]
    assert result["cost"]["delta"] == pytest.approx(-8 * 0.9 * 730)


def test_price_change_moves_cost_and_the_metering_price_only(repo: Path) -> None:
    edit(repo, "H100-SXM-80GB: 2.9", "H100-SXM-80GB: 3.1")
    commit(repo, "new H100 price")
    code, result = plan_json(repo)
    assert code == 0
    assert result["objects"]["added"] == result["objects"]["removed"] == []
    # Only the metering rule of the cluster with H100s: it prices the spend Prometheus records at run time.
    changed = {(o["cluster"], o["kind"], o["name"]) for o in result["objects"]["changed"]}
    assert changed == {("center-bj", "PrometheusRule", "fleetops-metering")}
    assert result["cost"]["delta"] == pytest.approx(160 * 0.2 * 730)
    md = plan(repo, "--env", "prod").stdout
    assert "**Monthly cost** 539,981 → 563,341 USD (**+23,360**: +23,360 from price changes, 0 from capacity)" in md


def test_a_change_to_the_program_is_planned_as_each_side_renders_it(repo: Path) -> None:
    # The head's modules are not the code running the plan: the head renders confined, by its own
    # program, the base here from only its environment file and policies out of Git; a program change
    # needs the code owners' approvals.
    path = repo / "modules" / "kube.py"
    text = path.read_text()
    assert "return {MANAGED_BY: MANAGER," in text, "test setup: the labels every object carries"
    path.write_text(text.replace("return {MANAGED_BY: MANAGER,", 'return {"fleetops.io/tier": "gpu", MANAGED_BY: MANAGER,', 1))
    commit(repo, "a label on every object")
    code, result = plan_json(repo)
    assert (code, result["verdict"], result["approvals"]["needed_by"]) == (1, "needs-approval", ["change.program_approvals"])
    code, result = plan_json(repo, "--approvals", "2")
    assert code == 0
    assert not result["objects"]["added"] and not result["objects"]["removed"]
    namespaces = [c for c in result["objects"]["changed"] if c["kind"] == "Namespace"]
    assert namespaces and all(c["fields"] == [{"op": "add", "path": "/metadata/labels/fleetops.io~1tier", "old": None, "new": "gpu"}]
                              for c in namespaces)


def test_a_revision_running_this_code_is_taken_out_of_git_as_its_file_and_policies(repo: Path) -> None:
    from fleetops import revisions

    base = git(repo, "rev-parse", "main").strip()
    revision = revisions.survey(repo, base, "environments/prod.yaml")
    assert revision.runs_here
    assert "environments/prod.yaml" in revision.needs and "policies/quota.rego" in revision.needs
    assert all(p == "environments/prod.yaml" or p.startswith("policies/") for p in revision.needs)
    with revisions.checkout(repo, base, revision.needs) as tree:
        assert sorted(p.name for p in tree.iterdir()) == ["environments", "policies"]
    (repo / "modules" / "kube.py").write_text((repo / "modules" / "kube.py").read_text() + "\n# changed\n")
    changed = commit(repo, "a module changed")
    # Another program: its folders too, and nothing else of the tree (a blob in docs/ is never taken out).
    assert revisions.survey(repo, changed, "environments/prod.yaml") == revisions.Revision(
        runs_here=False, needs=["fleetops", "modules", "stacks", *revision.needs])


def test_deleted_environment_file_removes_everything(repo: Path) -> None:
    (repo / "environments" / "dev.yaml").unlink()
    commit(repo, "drop dev")
    out = plan(repo, "--env", "dev", "--output", "json")
    result = json.loads(out.stdout)
    assert result["head"]["exists"] is False
    assert len(result["objects"]["removed"]) > 50 and not result["objects"]["added"]
    assert result["cost"]["after"] == 0
    md = plan(repo, "--env", "dev").stdout
    assert "deletes `environments/dev.yaml`" in md


def test_invalid_yaml_at_head_is_one_line_exit_2(repo: Path) -> None:
    edit(repo, "  - name: vision\n", "  - name: vision\n   bad: [\n")
    commit(repo, "broken")
    out = plan(repo, "--env", "prod")
    assert out.returncode == 2
    assert "cannot be judged" in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"^environments/prod\.yaml:\d+:\d+: invalid YAML", lines[0]), out.stderr


def test_an_invalid_head_replaces_the_last_verdict_in_every_form(repo: Path, tmp_path: Path) -> None:
    # The workflow posts comment.md whenever plan.json has an effect: an earlier "allowed" must not stand.
    import jsonschema

    from fleetops import envelope

    edit(repo, "  - name: vision\n", "  - name: vision\n   bad: [\n")
    commit(repo, "broken")
    out = plan(repo, "--env", "prod", "--output", "github", "--artifacts", tmp_path / "out")
    assert out.returncode == 2
    line = int(re.match(r"^environments/prod\.yaml:(\d+):", out.stderr)[1])
    assert out.stdout.startswith(f"::error file=environments/prod.yaml,line={line},title=deny%3A plan.cannot_judge::")
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "cannot be judged" in comment and f"environments/prod.yaml:{line}" in comment and "✅" not in comment
    document = json.loads((tmp_path / "out" / "plan.json").read_text())
    jsonschema.Draft202012Validator(envelope.json_schema()).validate(document)
    assert (document["verdict"], document["ok"], document["no_effect"]) == ("invalid", False, False)
    assert document["problems"][0]["line"] == line
    assert 'failures="2"' in (tmp_path / "out" / "plan-junit.xml").read_text()


def test_base_that_does_not_validate_is_one_line_exit_2(repo: Path) -> None:
    # The base renders in the plan's process (same code both sides): its failure must be the one
    # line of the file, field and position, never a traceback.
    edit(repo, "nodes: 8", "nodes: -8")
    broken = commit(repo, "broken")
    edit(repo, "nodes: -8", "nodes: 8")
    commit(repo, "fixed")
    out = plan(repo, "--env", "prod", "--base", broken)
    assert out.returncode == 2 and "cannot be judged" in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"^environments/prod\.yaml:\d+:\d+: clusters\[center-bj\]\.pools\[a100-infer\]\.nodes: must be >= 0, got -8$", lines[0]), out.stderr


def test_base_policies_the_engine_cannot_read_fail_closed(repo: Path) -> None:
    # The head is judged by the base's policies: an engine that cannot load them is no answer,
    # and no answer is a failure (exit 2), told in one line.
    (repo / "policies" / "broken.rego").write_text("package fleet.broken\n\ndeny contains d if {\n")
    broken = commit(repo, "a policy that does not parse")
    (repo / "policies" / "broken.rego").unlink()
    commit(repo, "removed")
    out = plan(repo, "--env", "prod", "--base", broken)
    assert out.returncode == 2 and "cannot be judged" in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("policy gate (fail closed): policies/broken.rego:4:1: "), out.stderr


def test_no_effect_prints_nothing_with_only_on_change(repo: Path) -> None:
    (repo / "environments" / "prod.yaml").write_text((repo / "environments" / "prod.yaml").read_text() + "\n# a comment only\n")
    commit(repo, "comment")
    out = plan(repo, "--env", "prod", "--only-on-change")
    assert out.returncode == 0 and out.stdout == ""
    code, result = plan_json(repo)
    assert code == 0
    assert result["no_effect"] is True


def test_working_tree_and_index_untouched_and_temp_removed(repo: Path) -> None:
    edit(repo, "H100-SXM-80GB: 2.9", "H100-SXM-80GB: 3.0")  # uncommitted: head is the working tree
    (repo / "environments" / "new-file.txt").write_text("untracked\n")
    git(repo, "add", "environments/new-file.txt")
    status_before = git(repo, "status", "--porcelain")
    index_before = (repo / ".git" / "index").read_bytes()
    tmpdir = repo.parent / "tmp"
    tmpdir.mkdir()
    out = plan(repo, "--env", "prod", "--output", "json", tmpdir=tmpdir)
    assert json.loads(out.stdout)["cost"]["delta"] == pytest.approx(160 * 0.1 * 730)
    assert git(repo, "status", "--porcelain") == status_before
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert list(tmpdir.iterdir()) == []
    assert git(repo, "worktree", "list").count("\n") == 1


def test_unknown_base_revision_is_exit_2(repo: Path) -> None:
    out = plan(repo, "--env", "prod", "--base", "no-such-rev")
    assert out.returncode == 2
    assert "unknown revision 'no-such-rev'" in out.stderr and "Traceback" not in out.stderr


def test_junit_output_is_xml_with_a_suite(repo: Path) -> None:
    out = plan(repo, "--env", "prod", "--output", "junit")
    suite = ElementTree.fromstring(out.stdout).find("testsuite")
    assert suite is not None and suite.get("name") == "fleetops plan prod"
    assert len(suite.findall("testcase")) >= 1


def test_large_quota_raise_needs_two_approvals(repo: Path) -> None:
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")
    commit(repo, "vision: a lot more GPUs")
    code, result = plan_json(repo)
    assert code == 1 and result["verdict"] == "needs-approval"  # its own state: not a policy denial
    assert not [d for d in result["decisions"] if d["status"] == "deny"]
    assert {d["rule"] for d in result["decisions"] if d["status"] == "approval"} == {"change.quota_raise_approvals"}
    assert "### fleetops plan `prod`: ⏳ needs approval" in plan(repo, "--env", "prod").stdout
    code, result = plan_json(repo, "--approvals", "2")
    assert code == 0 and result["verdict"] == "allowed"
    out = plan(repo, "--env", "prod", "--output", "junit")
    cases = ElementTree.fromstring(out.stdout).iter("testcase")
    failed = sorted(c.get("name").split()[0] for c in cases if c.find("failure") is not None)
    assert out.returncode == 1 and failed == ["change.quota_raise_approvals", "change.quota_raise_approvals", "policy"]


def test_weakened_policy_does_not_judge_its_own_change(repo: Path) -> None:
    # center-sh has 64 GPUs; 10% headroom allows 57 guaranteed, and tenants hold 56.
    data = repo / "policies" / "data.yaml"
    data.write_text(data.read_text().replace("headroom: 0.1 ", "headroom: 0.0 ", 1))
    waivers = repo / "policies" / "waivers.yaml"
    waivers.write_text(waivers.read_text().replace("accepted: {guaranteed: 48, units: 64}", "accepted: {guaranteed: 50, units: 64}"))
    edit(repo, "nvidia.com/gpu: {guaranteed: 48, burst: 64}", "nvidia.com/gpu: {guaranteed: 50, burst: 64}")
    commit(repo, "llm-pretrain: two more GPUs, and drop the headroom rule and widen the share waiver")
    code, result = plan_json(repo)
    assert code == 1
    denied = {d["rule"]: d for d in result["decisions"] if d["status"] == "deny"}
    # the base's waiver of llm-pretrain's share accepted 48 of 64 (the head's own widening is not read): 50 is for review again
    assert sorted(denied) == ["quota.guaranteed_over_capacity", "quota.tenant_share"]
    assert "center-sh" in denied["quota.guaranteed_over_capacity"]["msg"]
    assert "needs review" in denied["quota.tenant_share"]["msg"]
    assert result["policy"]["policy_files_changed"] == ["policies/data.yaml", "policies/waivers.yaml"]
    assert result["policy"]["owners"] == ["@platform-policy", "@security-compliance"]
    assert "change.policy_files_changed" in {d["rule"] for d in result["decisions"] if d["status"] == "warn"}
    md = plan(repo, "--env", "prod").stdout
    assert "**Policy change**" in md and "@platform-policy" in md
    # The head's own (weakened) policies would have let it through: that is what the base gate prevents.
    check = run("check", "--env", "prod", "--policies", repo / "policies", "--decision-log", repo.parent / "d.jsonl", cwd=repo)
    assert check.returncode == 0, check.stdout + check.stderr


def test_links_in_the_repository_are_skipped_not_followed(repo: Path) -> None:
    (repo / "abs-link").symlink_to("/etc/hostname")
    (repo / "rel-link").symlink_to("environments/prod.yaml")
    # Taken out of Git with the policies: followed, either would be a policy file that does not parse.
    (repo / "policies" / "abs-link.rego").symlink_to("/etc/hostname")
    (repo / "policies" / "rel-link.rego").symlink_to("../environments/prod.yaml")
    commit(repo, "links")
    out = plan(repo, "--env", "prod", "--base", "HEAD", "--head", "HEAD", "--output", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["no_effect"] is True
    # A revision whose program is not the one running is taken out whole: its links are skipped too.
    kube = repo / "modules" / "kube.py"
    kube.write_text(kube.read_text() + "\n# changed\n")
    commit(repo, "a module changed")
    out = plan(repo, "--env", "prod", "--base", "HEAD", "--head", "HEAD", "--output", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["no_effect"] is True


def test_default_base_follows_an_explicit_head(repo: Path) -> None:
    edit(repo, "H100-SXM-80GB: 2.9", "H100-SXM-80GB: 3.1")
    head = commit(repo, "price")
    git(repo, "checkout", "-q", "main")  # HEAD is now main itself: the base must come from --head
    code, result = plan_json(repo, "--head", head)
    assert code == 0
    assert result["cost"]["delta"] == pytest.approx(160 * 0.2 * 730)


def test_plan_writes_the_decision_record_that_audit_reads(repo: Path) -> None:
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")
    commit(repo, "vision: a lot more GPUs")
    out = run("plan", "--repo", repo, "--env", "prod", "--output", "json", "--approvals", "1", cwd=repo,
              env={"FLEETOPS_DECISION_LOG": str(repo.parent / "decisions.jsonl"), "FLEETOPS_PR": "7", "FLEETOPS_ACTOR": "bob"})
    assert out.returncode == 1
    (line,) = (repo.parent / "decisions.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert (record["source"], record["environment"], record["pr"], record["actor"], record["approvals"], record["verdict"]) == (
        "plan", "prod", "7", "bob", 1, "needs-approval")
    assert record["policy_digest"] == json.loads(out.stdout)["judgement"]["policy_digest"]
    assert record["summary"]["approval"] == 2  # guaranteed and burst both raised past the limit
    audit = run("audit", "--decision-log", repo.parent / "decisions.jsonl", "--output", "json", cwd=ROOT)
    history = json.loads(audit.stdout)["history"]
    assert history["entries"] == 1, history


def test_a_local_plan_is_recorded_as_local_and_audit_never_counts_it_as_a_pull_request(repo: Path) -> None:
    # Every local plan appended a record that audit listed under pull requests.
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 150, burst: 200, guaranteed_per_pool: {h100-train: 75, a100-infer: 75}}")
    commit(repo, "vision: a lot more GPUs")
    log = repo.parent / "decisions.jsonl"
    nothing = {"CI": "", "FLEETOPS_PR": "", "GITHUB_REF": "", "CI_MERGE_REQUEST_IID": "", "FLEETOPS_DECISION_LOG": str(log)}
    assert run("plan", "--repo", repo, "--env", "prod", "--output", "json", cwd=repo, env=nothing).returncode == 1
    assert run("plan", "--repo", repo, "--env", "prod", "--output", "json", cwd=repo,
               env={**nothing, "CI": "true", "FLEETOPS_PR": "7"}).returncode == 1
    local, pull = (json.loads(line) for line in log.read_text().splitlines())
    assert (local["run"], local["pr"], pull["run"], pull["pr"]) == ("local", None, "ci", "7")
    history = json.loads(run("audit", "--decision-log", log, "--output", "json", cwd=ROOT).stdout)["history"]
    denials = history["latest_denials"]
    assert {d["pr"] for d in denials["pull_request"]} == {"7"}, denials  # only the CI run's
    assert denials["local"] and all(d["pr"] is None for d in denials["local"]), denials
    assert not denials["production"]


def test_each_decision_points_at_the_item_it_is_about(repo: Path) -> None:
    # Two tenants' quotas on two clusters change; each cluster's sum is located at its own tenant's line.
    edit(repo, "nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 400, burst: 400, guaranteed_per_pool: {h100-train: 200, a100-infer: 200}}")
    edit(repo, "nvidia.com/gpu: {guaranteed: 48, burst: 64}", "nvidia.com/gpu: {guaranteed: 60, burst: 64}")
    data = repo / "policies" / "data.yaml"
    data_lines = data.read_text().count("\n")
    data.write_text(data.read_text() + "\n")
    commit(repo, "two quota raises and a policy data edit")
    code, result = plan_json(repo)
    text = (repo / "environments" / "prod.yaml").read_text().splitlines()
    line_of = {needle: next(i for i, t in enumerate(text, 1) if needle in t) for needle in ("guaranteed: 400", "guaranteed: 60")}
    sums = {d["subject"]["cluster"]: d["location"] for d in result["decisions"] if d["rule"] == "quota.guaranteed_over_capacity"}
    assert sums["center-bj"]["line"] == line_of["guaranteed: 400"] and sums["center-sh"]["line"] == line_of["guaranteed: 60"]
    assert all(loc["column"] > 1 for loc in sums.values())  # the field itself, not the line's start
    policy_change = next(d for d in result["decisions"] if d["rule"] == "change.policy_files_changed")
    assert policy_change["location"] == {"file": "policies/data.yaml", "line": data_lines + 1, "column": 1}  # the line added


def test_a_head_only_the_schema_check_refuses_cannot_be_approved(repo: Path) -> None:
    # A Kueue ResourceFlavor takes at most 8 taints: the model accepts 9, the API server not. Once
    # merged, the reconciler would refuse the revision and the fleet would stay where it is.
    taints = ", ".join(f"{{key: k{i}, value: v, effect: NoSchedule}}" for i in range(9))
    edit(repo, "taints: [{key: dedicated, value: training, effect: NoSchedule}]", f"taints: [{taints}]")
    commit(repo, "nine taints")
    out = plan(repo, "--env", "prod")
    assert out.returncode == 2 and "cannot be judged" in out.stdout
    assert "rendered object fails its schema" in out.stderr and "has more than 8 items" in out.stderr


def test_a_new_top_up_is_a_field_change_with_its_date_as_written(repo: Path) -> None:
    edit(repo, "{date: 2026-11-15, amount: 100000}]", "{date: 2026-11-15, amount: 100000}, {date: 2026-12-01, amount: 50000}]")
    commit(repo, "research tops up")
    code, result = plan_json(repo)
    assert code == 0
    (change,) = [f for f in result["spec_changes"] if f["path"] == "tenants[research].billing.top_ups"]
    assert change["new"][-1] == {"date": "2026-12-01", "amount": 50000}
    md = plan(repo, "--env", "prod")
    assert md.returncode == 0 and "Traceback" not in md.stderr and "2026-12-01" in md.stdout


def test_an_environment_at_neither_side_is_one_line_naming_the_known_ones(repo: Path) -> None:
    # A typo in --env printed a whole "cannot be judged" comment (and wrote it as artifacts) without the names to choose from.
    (repo / "environments" / "lab.yaml").write_text((repo / "environments" / "dev.yaml").read_text())  # at head only
    out = plan(repo, "--env", "prdo", "--artifacts", repo.parent / "artifacts")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    base = git(repo, "rev-parse", "main").strip()[:12]
    assert out.stderr.strip() == f"environments/prdo.yaml:1:1: no environment 'prdo' at base {base} or head (known: dev, lab, prod, staging)"
    assert not (repo.parent / "artifacts").exists() and not (repo.parent / "decisions.jsonl").exists()
