"""`fleetops plan --prometheus`: measured utilisation and spend of what a change touches, in the review,
the JSON, the decision record and the policy input; unknown use said so, never read as zero."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jsonschema
import pytest

from fleetops import envelope, spec, usage
from fleetops.prometheus import Prometheus
from tests.fake_prometheus import Fake, serve, server  # noqa: F401 - server is a fixture
from tests.plan.test_plan import ROOT, commit, edit, make_repo, plan

VISION = "guaranteed: 96, burst: 160, guaranteed_per_pool: {h100-train: 48, a100-infer: 48}"
VISION_RAISED = "guaranteed: 140, burst: 160, guaranteed_per_pool: {h100-train: 92, a100-infer: 48}"
TOKEN = "tok-5ecret-never-shown"


def held(h100: float, a100: float) -> dict[str, list]:
    """What Prometheus holds over the window: vision on two pools of center-bj (its guarantee: 48 H100
    whole + 48 time-sliced A100 units, 4 per GPU = 60 physical devices), llm-pretrain on h100-train."""
    return {
        usage.DEVICES: [({"cluster": "center-bj", "pool": "h100-train", "tenant": "vision"}, h100),
                        ({"cluster": "center-bj", "pool": "a100-infer", "tenant": "vision"}, a100),
                        ({"cluster": "center-bj", "pool": "h100-train", "tenant": "llm-pretrain"}, 40.0)],
        usage.SPEND: [({"cluster": "center-bj", "tenant": "vision", "currency": "USD"}, 41210.0)],
    }


@pytest.fixture
def raised(tmp_path: Path) -> Path:
    """A change raising vision's guarantee on center-bj and adding 4 nodes (32 H100) to h100-train."""
    repo = make_repo(tmp_path)
    edit(repo, VISION, VISION_RAISED)
    edit(repo, "nodes: 16", "nodes: 20")
    commit(repo, "vision: more H100")
    return repo


def plan_with(repo: Path, *args: str) -> tuple[int, dict, str]:
    """The plan as JSON, and its comment (from --artifacts: both forms of one run)."""
    out = plan(repo, "--env", "prod", "--output", "json", "--artifacts", repo.parent / "artifacts", *args)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout), (repo.parent / "artifacts" / "comment.md").read_text()


def rules(result: dict, status: str) -> set[str]:
    return {d["rule"] for d in result["decisions"] if d["status"] == status}


def test_utilisation_divides_what_was_held_by_the_physical_devices_behind_the_guarantee() -> None:
    text = (ROOT / "environments" / "prod.yaml").read_text()
    env = spec.parse_environment(text, "prod.yaml").env
    head = spec.parse_environment(text.replace("nodes: 16", "nodes: 20", 1), "prod.yaml").env
    quota = [{"tenant": "vision", "cluster": "center-bj", "resource": "nvidia.com/gpu",
              "before": {"guaranteed": 96, "burst": 160}, "after": {"guaranteed": 140, "burst": 160}}]
    with serve(Fake(held(15.0, 3.6))) as fake:
        source = Prometheus(fake.url)
        measured = usage.measure(source, usage.parse_window("30d"), env, head, quota, dt.datetime.now(dt.timezone.utc))
    (tenant,), (pool,) = measured.tenants, measured.pools
    assert measured.status is usage.Status.measured
    assert (tenant.guaranteed_devices, tenant.used_devices, tenant.utilisation, tenant.spend) == (60, 18.6, 0.31, 41210.0)
    assert (pool.pool, pool.physical_devices, pool.physical_devices_after, pool.used_devices) == ("h100-train", 128, 160, 55.0)
    assert pool.utilisation == round(55 / 128, 4)
    assert source.queries == 2  # grouped by label: the same two whatever the number of tenants


def test_a_tenant_without_a_spend_series_has_spent_an_unknown_amount_not_zero() -> None:
    # Its devices are measured, but Prometheus holds no fleetops:tenant_spend:per_hour for it (no price
    # recorded, the rule not loaded): the review read "0 USD spent".
    text = (ROOT / "environments" / "prod.yaml").read_text()
    env = spec.parse_environment(text, "prod.yaml").env
    quota = [{"tenant": "vision", "cluster": "center-bj", "resource": "nvidia.com/gpu",
              "before": {"guaranteed": 96, "burst": 160}, "after": {"guaranteed": 140, "burst": 160}}]
    with serve(Fake({usage.DEVICES: held(15.0, 3.6)[usage.DEVICES]})) as fake:
        measured = usage.measure(Prometheus(fake.url), usage.parse_window("30d"), env, env, quota, dt.datetime.now(dt.timezone.utc))
    (tenant,) = measured.tenants
    assert (tenant.status, tenant.utilisation, tenant.spend) == (usage.Status.measured, 0.31, None)
    assert usage.lines(measured) == ["vision on center-bj: 96 → 140 nvidia.com/gpu guaranteed, 31% used over 30 days; spend unknown: "
                                     "Prometheus has no fleetops:tenant_spend:per_hour series for vision on center-bj in the last 30d"]


@pytest.mark.parametrize("h100,a100", [(15.0, float("nan")), (15.0, float("inf")), (-15.0, 3.6)])
def test_a_sample_that_is_no_number_or_negative_is_unknown_use_not_zero(h100: float, a100: float) -> None:
    text = (ROOT / "environments" / "prod.yaml").read_text()
    env = spec.parse_environment(text, "prod.yaml").env
    head = spec.parse_environment(text.replace("nodes: 16", "nodes: 20", 1), "prod.yaml").env
    quota = [{"tenant": "vision", "cluster": "center-bj", "resource": "nvidia.com/gpu",
              "before": {"guaranteed": 96, "burst": 160}, "after": {"guaranteed": 140, "burst": 160}}]
    with serve(Fake(held(h100, a100))) as fake:
        measured = usage.measure(Prometheus(fake.url), usage.parse_window("30d"), env, head, quota, dt.datetime.now(dt.timezone.utc))
    (tenant,), (pool,) = measured.tenants, measured.pools
    bad = a100 if a100 != 3.6 else h100
    assert measured.status is usage.Status.unavailable
    assert (tenant.status, tenant.used_devices, tenant.utilisation) == (usage.Status.unavailable, None, None)
    assert tenant.reason.startswith(f"Prometheus answered {bad!r} for fleetops:tenant_devices:physical of vision on center-bj/")
    # h100-train's figure is read only when every sample of it is a number of devices
    assert (pool.status is usage.Status.measured) == (h100 >= 0)


def test_a_prometheus_that_trickles_its_answer_is_unknown_use_at_the_query_s_deadline(server) -> None:  # noqa: F811
    from fleetops import plan as plan_mod
    from fleetops.plan_result import PlanQuota, PlanQuotaChange

    url, script = server
    script.body, script.pace = b'{"status": "success", "data": {"resultType": "vector", "result": []}}', 0.2
    text = (ROOT / "environments" / "prod.yaml").read_text()
    env = spec.parse_environment(text, "prod.yaml").env
    quota = [PlanQuotaChange("vision", "center-bj", "nvidia.com/gpu", PlanQuota(96, 160), PlanQuota(140, 160))]
    meter = plan_mod.Meter(Prometheus(url, read_timeout=1, query_deadline=2, retries=0), usage.parse_window("30d"))
    measured = plan_mod.measured(meter, env, env, quota)
    assert measured.status is usage.Status.unavailable
    assert measured.tenants[0].reason.endswith("no whole answer within 2 s (the server answers too slowly, or trickles)")


def test_what_a_tenant_borrows_on_a_pool_that_does_not_hold_its_guarantee_counts_as_used() -> None:
    # speech's 120 nvidia.com/gpu are held whole by h100-mig (7 MIG slices a GPU: 17.14 GPUs); it also runs on a100-infer.
    env = spec.parse_environment((ROOT / "environments" / "prod.yaml").read_text(), "prod.yaml").env
    quota = [{"tenant": "speech", "cluster": "center-bj", "resource": "nvidia.com/gpu",
              "before": {"guaranteed": 120, "burst": 200}, "after": {"guaranteed": 140, "burst": 200}}]
    answers = {usage.DEVICES: [({"cluster": "center-bj", "pool": "h100-mig", "tenant": "speech"}, 10.0),
                               ({"cluster": "center-bj", "pool": "a100-infer", "tenant": "speech"}, 5.0),
                               ({"cluster": "center-bj", "pool": "a100-infer", "tenant": "vision"}, 9.0)]}
    with serve(Fake(answers)) as fake:
        measured = usage.measure(Prometheus(fake.url), usage.parse_window("7d"), env, env, quota, dt.datetime.now(dt.timezone.utc))
    (tenant,) = measured.tenants
    assert (tenant.guaranteed_devices, tenant.used_devices) == (round(120 / 7, 4), 15.0)
    assert tenant.utilisation == round(15 / (120 / 7), 4) and not measured.pools  # no pool changed: none measured


def test_the_comment_and_json_show_each_touched_tenant_and_pool_and_the_policy_asks_approval(raised: Path) -> None:
    with serve(Fake(held(15.0, 3.6))) as fake:
        code, result, comment = plan_with(raised, "--prometheus", fake.url)
    assert "- vision on center-bj: 96 → 140 nvidia.com/gpu guaranteed, 31% used over 30 days; 41,210 USD spent" in comment
    assert "- pool h100-train on center-bj: 128 → 160 devices, 43% used over 30 days" in comment
    assert result["usage"]["status"] == "measured" and result["usage"]["window"] == "30d"
    jsonschema.Draft202012Validator(envelope.json_schema()).validate(result)
    assert {"usage.guarantee_raise_underused", "usage.pool_growth_idle"} <= rules(result, "approval")
    assert "usage.unmeasured" not in rules(result, "warn")
    assert code == 1
    assert len(fake.asked) == 2 and all(path == "/api/v1/query" for path, _, _ in fake.asked)


def test_a_tenant_and_pool_that_use_what_they_have_are_not_gated(raised: Path) -> None:
    with serve(Fake(held(40.0, 8.0))) as fake:  # vision 48 of 60 devices, h100-train 80 of 128
        _, result, comment = plan_with(raised, "--prometheus", fake.url)
    assert "80% used over 30 days" in comment and "62% used over 30 days" in comment
    assert not {"usage.guarantee_raise_underused", "usage.pool_growth_idle"} & rules(result, "approval")


def test_with_two_approvals_an_underused_raise_passes_the_usage_rules(raised: Path) -> None:
    with serve(Fake(held(15.0, 3.6))) as fake:
        _, result, _ = plan_with(raised, "--prometheus", fake.url, "--approvals", "2")
    assert not {r for r in rules(result, "approval") if r.startswith("usage.")}


def test_no_prometheus_is_unknown_use_in_the_comment_and_the_decision_record_never_zero(raised: Path) -> None:
    code, result, comment = plan_with(raised)
    assert "- vision on center-bj: 96 → 140 nvidia.com/gpu guaranteed, utilisation unknown: no --prometheus given" in comment
    assert "% used" not in comment
    assert result["usage"]["status"] == "unavailable" and all(t["utilisation"] is None for t in result["usage"]["tenants"])
    assert rules(result, "warn") >= {"usage.unmeasured"} and not {r for r in rules(result, "approval") if r.startswith("usage.")}
    record = json.loads((raised.parent / "decisions.jsonl").read_text().splitlines()[-1])
    assert record["usage"] == {"status": "unavailable", "reason": "no --prometheus given", "window": "30d"}
    assert code == 1  # denied by the budget, as without this feature


@pytest.mark.parametrize("failure", ["error", "unreachable"])
def test_a_prometheus_that_does_not_answer_is_unknown_use_with_its_reason(raised: Path, failure: str) -> None:
    if failure == "error":
        with serve(Fake(status=400, error="parse error at char 3")) as fake:
            _, result, comment = plan_with(raised, "--prometheus", fake.url)
        reason = "bad_data: parse error at char 3"
    else:
        with serve(Fake()) as fake:
            url = fake.url  # closed below: nothing listens there any more
        _, result, comment = plan_with(raised, "--prometheus", url)
        reason = "no answer: connection refused"
    assert result["usage"]["status"] == "unavailable" and reason in result["usage"]["reason"]
    assert f"utilisation unknown: Prometheus did not answer: {url if failure == 'unreachable' else fake.url}" in comment
    assert "usage.unmeasured" in rules(result, "warn")


def test_a_cluster_without_metering_series_is_unknown_not_zero(raised: Path) -> None:
    answers = {usage.DEVICES: [({"cluster": "center-sh", "pool": "a100-train", "tenant": "research"}, 3.0)], usage.SPEND: []}
    with serve(Fake(answers)) as fake:
        _, result, comment = plan_with(raised, "--prometheus", fake.url)
    assert "vision on center-bj: 96 → 140 nvidia.com/gpu guaranteed, utilisation unknown: Prometheus has no " \
           "fleetops:tenant_devices:physical series for cluster center-bj" in comment
    assert "usage.guarantee_raise_underused" not in rules(result, "approval")


def test_the_token_reaches_prometheus_and_nothing_else(raised: Path) -> None:
    token_file = raised.parent / "token"
    token_file.write_text(TOKEN + "\n")
    artifacts = raised.parent / "artifacts"
    for fake in (Fake(held(15.0, 3.6)), Fake(status=400, error=f"bad token {TOKEN}")):  # an error that echoes it
        with serve(fake):
            out = plan(raised, "--env", "prod", "--prometheus", fake.url, "--prometheus-token-file", token_file, "--artifacts", artifacts)
        assert fake.asked and all(headers["Authorization"] == f"Bearer {TOKEN}" for _, _, headers in fake.asked)
        written = [out.stdout, out.stderr, (raised.parent / "decisions.jsonl").read_text(), *(f.read_text() for f in artifacts.iterdir())]
        assert all(TOKEN not in text for text in written)
    assert "bad token ***" in (artifacts / "plan.json").read_text()


def test_bad_window_and_unreadable_token_file_are_one_line_exit_2(raised: Path) -> None:
    for args, message in ((["--usage-window", "30 days"], "--usage-window: '30 days' is not a duration like 30s"),
                          (["--prometheus", "http://127.0.0.1:9", "--prometheus-token-file", str(raised / "missing")],
                           "cannot read the Prometheus token file"),
                          (["--prometheus", "ftp://x"], "not an http(s) URL")):
        out = plan(raised, "--env", "prod", *args)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr

