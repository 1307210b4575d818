"""The review's trust boundary, attacked through real Git revisions: a pull request whose program
differs from the judge's is rendered confined and answers as data; nothing it holds judges it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from fleetops import isolate
from fleetops.spec import HOURS_PER_MONTH as HOURS
from tests.plan.test_plan import commit, edit, git, plan, plan_json, repo  # noqa: F401 - `repo` is a fixture

pytestmark = pytest.mark.skipif(not isolate.available(), reason="the confined render needs Landlock (Linux 5.13+) and a seccomp filter (libseccomp2)")

# Raising vision's guarantee on center-bj past its pools: quota.guaranteed_over_capacity denies it.
OVER = ("nvidia.com/gpu: {guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}}", "nvidia.com/gpu: {guaranteed: 400, burst: 400, guaranteed_per_pool: {h100-train: 200, a100-infer: 200}}")


def append(repo: Path, rel: str, code: str) -> None:
    path = repo / rel
    path.write_text(path.read_text() + "\n" + code)


def test_a_head_that_rewrites_the_judge_through_its_answer_is_still_denied(repo: Path) -> None:
    # The attack on the old plan: the head's program answered in pickle, and an object in it ran
    # code in the judging process on load, which dropped every denial.
    marker = repo.parent / "judge-rewritten"
    append(repo, "fleetops/render.py", f'''
class _Payload:
    def __reduce__(self):
        # Loaded, it drops every denial of the judge and stands in for a harmless ConfigMap.
        return (eval, ("(setattr(__import__('fleetops.policy').policy, 'evaluate_input', (lambda real: lambda *a, **k: "
                       "__import__('dataclasses').replace(real(*a, **k), decisions=[]))(__import__('fleetops.policy').policy.evaluate_input)), "
                       "open({str(marker)!r}, 'w').write('x'), "
                       "{{'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {{'name': 'payload', 'namespace': 'default'}}}})[2]",))


_render_environment = render_environment


def render_environment(*args, **kwargs):
    state = _render_environment(*args, **kwargs)
    next(iter(state.clusters.values())).append(_Payload())
    return state
''')
    edit(repo, *OVER)
    commit(repo, "vision: 400 GPUs, and a judge that says yes")
    out = plan(repo, "--env", "prod", "--output", "json")
    assert out.returncode == 2 and json.loads(out.stdout)["verdict"] == "invalid", out.stdout[:300]
    assert "not JSON serializable" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not marker.exists()


def test_no_code_of_the_head_runs_in_the_judging_process(repo: Path) -> None:
    # The head's modules run (its label is in the plan) but never here, and never with the right to write.
    marker = repo.parent / "head-code-ran"
    append(repo, "modules/__init__.py", f"try:\n    open({str(marker)!r}, 'a').write('ran')\nexcept OSError:\n    pass\n")
    kube = repo / "modules" / "kube.py"
    text = kube.read_text()
    old = "return {MANAGED_BY: MANAGER, "
    assert old in text, "test setup: the common labels moved"
    kube.write_text(text.replace(old, 'return {"example.com/head": "yes", MANAGED_BY: MANAGER, ', 1))
    commit(repo, "modules: one more label")
    code, result = plan_json(repo)
    changed = result["objects"]["changed"]
    assert changed and all(any("example.com~1head" in f["path"] or "example.com/head" in f["path"] for f in o["fields"]) for o in changed)
    assert not marker.exists()
    assert result["program_file_changes"] == ["modules/__init__.py", "modules/kube.py"]
    assert result["security_changes"] >= 2
    assert code == 1 and result["verdict"] == "needs-approval"  # a program change needs the code owners' approval
    assert "change.program_approvals" in {d["rule"] for d in result["decisions"] if d["status"] == "approval"}


def test_the_heads_program_sees_no_token_no_network_no_secret_and_writes_nothing(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "kubeconfig"
    secret.write_text("token: s3cr3t")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    append(repo, "modules/fleet.py", f'''
import os as _os, socket as _socket, json as _json

def _try(what):
    try:
        what()
        return "allowed"
    except Exception as exc:
        return type(exc).__name__

_probe = {{
    "token": _os.environ.get("FLEETOPS_OPA_TOKEN", "none"),
    "variables": sorted(_os.environ),
    "read_secret": _try(lambda: open({str(secret)!r}).read()),
    "write_judge": _try(lambda: open({str(repo / "fleetops" / "policy" / "verdict.py")!r}, "a").write("# pwned")),
    "write_tmp": _try(lambda: open({str(tmp_path / "probe")!r}, "w").write("x")),
    "connect": _try(lambda: _socket.create_connection(("127.0.0.1", {port}), timeout=2)),
    "git_config": _try(lambda: open({str(repo / ".git" / "config")!r}).read()),
}}
raise SystemExit("probe " + _json.dumps(_probe))
''')
    commit(repo, "modules: look around")
    judge_before = (repo / "fleetops" / "policy" / "verdict.py").read_bytes()
    out = plan(repo, "--env", "prod", env={"FLEETOPS_OPA_TOKEN": "opa-s3cr3t", "GITHUB_TOKEN": "ghs_s3cr3t"})
    assert out.returncode == 2, out.stdout + out.stderr
    line = next(part for part in out.stderr.splitlines() if "probe " in part)
    probe = json.loads(line.split("probe ", 1)[1])
    assert probe["token"] == "none"
    assert not any("TOKEN" in v for v in probe["variables"])
    assert probe["read_secret"] == probe["write_judge"] == probe["write_tmp"] == probe["git_config"] == "PermissionError"
    assert probe["connect"] != "allowed"
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert (repo / "fleetops" / "policy" / "verdict.py").read_bytes() == judge_before
    assert not (tmp_path / "probe").exists()


def test_a_refusal_of_the_heads_program_is_placed_at_its_line_in_every_form(repo: Path) -> None:
    # The head's program takes fewer clusters than the judge's: its refusal reaches the plan with its
    # file, line, column and field, as a refusal of the judge's own model does.
    append(repo, "fleetops/render.py", """
def render_environment(env, path, **kwargs):
    from fleetops.errors import Problem, SpecError

    raise SpecError([Problem("this program renders at most 3 clusters", "environments/prod.yaml", 4, 3, "clusters")])
""")
    commit(repo, "render: at most 3 clusters")
    code, result = plan_json(repo)
    assert code == 2 and result["verdict"] == "invalid"
    assert result["problems"] == [{"file": "environments/prod.yaml", "line": 4, "column": 3, "path": "clusters",
                                   "message": "this program renders at most 3 clusters"}]
    assert [d["location"] for d in result["decisions"]] == [{"file": "environments/prod.yaml", "line": 4, "column": 3}]
    annotations = plan(repo, "--env", "prod", "--output", "github").stdout
    assert annotations.startswith("::error file=environments/prod.yaml,line=4,"), annotations


def test_head_owners_and_waivers_are_never_read_for_the_verdict(repo: Path) -> None:
    owners = repo / "policies" / "owners.yaml"
    owners.write_text("owners: ['@attacker']\n")
    edit(repo, *OVER)
    commit(repo, "vision: 400 GPUs; I own the policies now")
    code, result = plan_json(repo)
    assert code == 1 and result["verdict"] == "denied"
    assert "@attacker" not in result["policy"]["owners"]


def test_a_base_without_policies_fails_closed(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    git(repo, "rm", "-rq", "policies")
    base = commit(repo, "no policies")
    git(repo, "checkout", "-q", "change")
    git(repo, "reset", "-q", "--hard", base)
    edit(repo, *OVER)
    commit(repo, "vision: 400 GPUs")
    out = plan(repo, "--env", "prod", "--base", base)
    assert out.returncode == 2
    assert "no policies/" in out.stderr and "fail closed" in out.stderr


def test_more_than_the_limit_out_of_git_is_refused_in_one_line(repo: Path) -> None:
    from fleetops import revisions
    from fleetops.errors import PlanError

    (repo / "modules" / "blob.bin").write_bytes(os.urandom(3 << 20))
    head = commit(repo, "a large file in the program")
    with pytest.raises(PlanError, match=r"more than 2 MiB in modules: refused"):
        with revisions.checkout(repo, head, ["modules"], limit=2 << 20):
            pass
    with revisions.checkout(repo, head, ["environments/prod.yaml"], limit=2 << 20) as tree:  # the blob is not taken out
        assert [p.name for p in tree.rglob("*") if p.is_file()] == ["prod.yaml"]


def test_a_cluster_admin_binding_added_by_the_program_is_denied(repo: Path) -> None:
    # The attack: a head adds, in modules/, a ClusterRoleBinding of cluster-admin for every authenticated user.
    append(repo, "modules/fleet.py", """
_manifests = manifests


def manifests(env, *args, **kwargs):
    collected = _manifests(env, *args, **kwargs)
    cluster = next(iter(collected.clusters))
    collected.clusters[cluster].append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "everyone-admin", "labels": {"app.kubernetes.io/managed-by": "fleetops"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]})
    return collected
""")
    commit(repo, "modules: a helpful binding")
    code, result = plan_json(repo, "--approvals", "5")
    assert code == 1 and result["verdict"] == "denied", result["verdict"]
    denied = {d["rule"] for d in result["decisions"] if d["status"] == "deny"}
    assert {"rbac.unjudged_binding", "rbac.broad_subject"} <= denied
    assert result["program_file_changes"] == ["modules/fleet.py"]


def test_a_price_cut_cannot_hide_the_cost_of_more_nodes(repo: Path) -> None:
    edit(repo, "  H100-SXM-80GB: 2.9\n", "  H100-SXM-80GB: 0\n")
    edit(repo, "nodes: 16", "nodes: 320")
    commit(repo, "twenty times the H100 nodes, for free")
    code, result = plan_json(repo)
    assert code == 1 and result["verdict"] != "allowed"
    blocking = {d["rule"] for d in result["decisions"] if d["status"] in ("deny", "approval")}
    assert "change.price_decrease_approvals" in blocking
    assert blocking & {"change.cost_increase_approvals", "budget.monthly_over_budget", "budget.over_budget"}, blocking


def test_a_spot_price_cut_cannot_hide_the_cost_of_more_spot_nodes(tmp_path: Path) -> None:
    from fleetops import plan, spec
    from tests.helpers import spot_env, write_env

    base, head = spot_env(), spot_env()
    head["clusters"][0]["pools"][3].update(nodes=20, spot={"price": 0.0})  # ten times the spot nodes, for free
    (tmp_path / "base").mkdir()
    before = spec.load_environment(write_env(tmp_path / "base", base))
    after = spec.load_environment(write_env(tmp_path, head))
    assert spec.monthly_cost(after) < spec.monthly_cost(before)
    assert plan.cost_at_base_prices(before, after) - spec.monthly_cost(before) == pytest.approx(18 * 8 * 0.6 * 730)


def test_a_head_answering_past_the_judges_depth_gets_a_verdict_not_a_traceback(repo: Path) -> None:
    # The attack: the head's program writes its own answer, one object nested 1,000 deep; the judge's
    # schema check crashed on it with a traceback, and no form of the plan said anything.
    append(repo, "fleetops/render.py", '''
_render_environment = render_environment


def render_environment(*args, **kwargs):
    import os, sys

    import orjson

    state = _render_environment(*args, **kwargs)
    objects = next(iter(state.clusters.values()))
    objects[0]["nested"] = "DEEP"
    sys.stdout.buffer.write(orjson.dumps({"clusters": state.clusters}).replace(b'"DEEP"', b"[" * 1000 + b"]" * 1000))
    sys.stdout.flush()
    os._exit(0)
''')
    commit(repo, "render: deep")
    code, result = plan_json(repo)
    assert code == 2 and result["verdict"] == "invalid"
    assert [d["rule"] for d in result["decisions"]] == ["plan.cannot_judge"]
    assert "the revision's program answered data nested more than 64 deep" in result["decisions"][0]["msg"]
    comment = plan(repo, "--env", "prod")
    assert comment.returncode == 2 and "Traceback" not in comment.stderr
    assert "nested more than 64 deep" in comment.stdout, comment.stdout[:500]


def test_a_model_renamed_to_a_cheap_price_cannot_hide_the_cost_of_more_nodes(repo: Path) -> None:
    # The attack: h100-train's model renamed to one the base does not price, at a twentieth of H100's
    # price, with twenty times the nodes: its own cost is flat, and no model's price was cut.
    edit(repo, "model: H100-SXM-80GB, per_node: 8}\n        nodes: 16", "model: H100-SXM-80GB-B, per_node: 8}\n        nodes: 320")
    edit(repo, "  H100-SXM-80GB: 2.9\n", "  H100-SXM-80GB: 2.9\n  H100-SXM-80GB-B: 0.145\n")
    commit(repo, "twenty times the H100 nodes, under another name")
    code, result = plan_json(repo, "--approvals", "5")
    assert code == 1 and result["verdict"] == "denied", result["verdict"]
    (over,) = [d for d in result["decisions"] if d["rule"] == "budget.over_budget"]
    assert "at the base revision's prices" in over["msg"]
    code, result = plan_json(repo, "--approvals", "0")
    (below,) = [d for d in result["decisions"] if d["rule"] == "change.price_below_reference_approvals"]
    assert below["status"] == "approval" and below["msg"] == (
        "pool center-bj/h100-train (H100-SXM-80GB-B) is priced 0.145 per device-hour, below 2.9, what it cost per "
        "device-hour in the base revision: needs 2 approvals, has 0")


def _priced(tmp_path: Path, change) -> tuple[float, float, list[dict]]:
    """The spot environment before and after `change`: the base's cost, the head's at the reference, and
    the prices below it."""
    from fleetops import plan, spec
    from tests.helpers import spot_env, write_env

    base, head = spot_env(), spot_env()
    change(head)
    (tmp_path / "base").mkdir(exist_ok=True)
    before = spec.load_environment(write_env(tmp_path / "base", base))
    after = spec.load_environment(write_env(tmp_path, head))
    return spec.monthly_cost(before), plan.cost_at_base_prices(before, after), spec.below_reference(spec.Reference.of(before), after)


def _new_spot_pool(model: str, price: float, nodes: int = 20):
    def change(env: dict) -> None:
        env["clusters"][0]["pools"].append({"name": "cheap-spot", "device": {"resource": "nvidia.com/gpu", "model": model, "per_node": 8},
                                            "nodes": nodes, "spot": {"price": price}})
        env["tenants"][0]["pools"].append("cheap-spot")
    return change


@pytest.mark.parametrize("change, reference, subject, why", [
    # A new spot pool of a priced model: at its model's price, which a spot price only discounts.
    (_new_spot_pool("H100-SXM-80GB", 0.0001), 2.9, "pool center-a/cheap-spot (H100-SXM-80GB, spot)", "which a new spot pool's price discounts"),
    # ... of a model no one prices: at the highest price the base knows for nvidia.com/gpu (H100's).
    (_new_spot_pool("B200-NEW", 0.0001), 2.9, "pool center-a/cheap-spot (B200-NEW, spot)", "the highest price of nvidia.com/gpu"),
])
def test_a_new_spot_pool_at_a_near_zero_price_is_costed_at_the_reference(tmp_path: Path, change, reference: float, subject: str, why: str) -> None:
    before, judged, below = _priced(tmp_path, change)
    assert judged - before == pytest.approx(20 * 8 * reference * HOURS)
    (entry,) = below
    assert (entry["subject"], entry["price"], entry["reference"]) == (subject, 0.0001, reference) and why in entry["basis"]


def test_a_pool_made_spot_or_renamed_to_a_cheaper_model_is_judged_at_what_it_cost(tmp_path: Path) -> None:
    def made_spot(env: dict) -> None:
        env["clusters"][0]["pools"][1].update(nodes=10, spot={"price": 0.01})  # h100-mig: 1 node at 2.9 before

    before, judged, below = _priced(tmp_path, made_spot)
    assert judged - before == pytest.approx(9 * 8 * 2.9 * HOURS)
    assert [(e["subject"], e["reference"]) for e in below] == [("pool center-a/h100-mig (H100-SXM-80GB, spot)", 2.9)]

    def renamed(env: dict) -> None:  # to a model the base prices, lower: the pool is what it was
        env["clusters"][0]["pools"][1]["device"]["model"] = "A100-PCIE-40GB"
        env["clusters"][0]["pools"][1]["sharing"] = {"mode": "exclusive"}

    before, judged, below = _priced(tmp_path, renamed)
    assert judged == pytest.approx(before)
    assert [(e["subject"], e["price"], e["reference"]) for e in below] == [("pool center-a/h100-mig (A100-PCIE-40GB)", 1.4, 2.9)]


def test_a_model_priced_first_with_no_pool_yet_needs_its_approval_now(tmp_path: Path) -> None:
    # Else a change could price it alone, and a later one add its pool at that price, vouched by the base.
    def priced(env: dict) -> None:
        env["prices"]["H100-CHEAP"] = 0.01

    _, _, below = _priced(tmp_path, priced)
    assert [(e["subject"], e["reference"], e["resource"]) for e in below] == [("device model H100-CHEAP", 2.9, {"kind": "Price", "name": "H100-CHEAP"})]


def test_an_unchanged_fleet_is_judged_at_its_own_prices(tmp_path: Path) -> None:
    # A spot pool far below its model's on-demand price, a cheap edge group: nothing is below its
    # reference, and nothing costs more than it did, when nothing changed.
    before, judged, below = _priced(tmp_path, lambda env: None)
    assert (judged, below) == (pytest.approx(before), [])
