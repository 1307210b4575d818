"""`fleetops plan --whatif`: what the change does to the work in the review, the JSON and the policy input.

The figures here are the plain data `fleetops.whatif.report.impact` makes, handed to the plan as the CLI
hands them (`plan.Meter.work`), so that the comment, the published JSON and the approval rule are tested
without servers; tests/whatif/test_whatif_real.py replays a trace through `plan --whatif` on the real Kueue.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from fleetops import envelope, plan
from fleetops.output import json as output_json, markdown
from tests.plan.test_plan import commit, edit, make_repo, plan as run_plan

CUT = ("nvidia.com/gpu: {guaranteed: 8, burst: 32}", "nvidia.com/gpu: {guaranteed: 8, burst: 8}")


def tenant(name: str, p99: float, p99_after: float, used: float, used_after: float) -> dict[str, Any]:
    return {"tenant": name, "jobs": 3, "wait_p50_hours": 0.0, "wait_p50_hours_after": p99_after / 2, "wait_p99_hours": p99,
            "wait_p99_hours_after": p99_after, "device_hours": used, "device_hours_after": used_after, "never_admitted": 0,
            "never_admitted_after": 0}


def work(*tenants: dict[str, Any]) -> dict[str, Any]:
    return {"source": "jobs.csv", "jobs": 6, "window_hours": 24.0, "utilisation": 0.1667, "utilisation_after": 0.125,
            "offered_load": 0.1667, "offered_load_after": 0.1667, "backlog_jobs": 0, "backlog_jobs_after": 0,
            "tenants": list(tenants), "assumptions": ["a preempted job starts over"]}


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    """A change cutting ml-sandbox's burst on dev from 32 to 8."""
    repo = make_repo(tmp_path)
    edit(repo, *CUT, env="dev")
    commit(repo, "ml-sandbox: burst 8")
    return repo


def planned(repo: Path, figures: dict[str, Any] | None, approvals: int = 0) -> plan.PlanResult:
    seen: list[tuple[plan.RenderedSide, plan.RenderedSide]] = []

    def replayed(before: plan.RenderedSide, after: plan.RenderedSide) -> dict[str, Any]:
        seen.append((before, after))
        return figures  # type: ignore[return-value]

    result = plan.build(repo, "dev", None, None, approvals, plan.Meter(work=replayed if figures is not None else None))
    if figures is not None:  # the caller replays on the plan's own rendered sides: base's burst 32, head's 8
        ((before, after),) = seen
        quota = [next(t for t in side.env.tenants if t.name == "ml-sandbox").quota["nvidia.com/gpu"].burst for side in (before, after)]
        assert quota == [32, 8] and before.clusters and after.clusters
    return result


def test_a_tenant_that_waits_much_longer_needs_approvals_at_its_quota(cut: Path) -> None:
    result = planned(cut, work(tenant("ml-sandbox", 0.0, 4.0, 48.0, 48.0), tenant("platform-dev", 0.0, 0.0, 16.0, 16.0)))
    (decision,) = [d for d in result.decisions if d.rule == "work.wait_worse"]
    assert decision.status.value == "approval" and result.verdict is plan.PlanVerdict.NEEDS_APPROVAL
    assert decision.msg == ("tenant ml-sandbox's p99 wait grows 0 h -> 4 h over the 3 jobs of jobs.csv replayed at base and head "
                            "(more than 1 h and 50% longer): needs 2 approvals, has 0")
    assert decision.fix.endswith("so that its p99 wait grows by at most 1 h")
    line = next(n for n, text in enumerate((cut / "environments" / "dev.yaml").read_text().splitlines(), 1) if CUT[1] in text)
    assert decision.location is not None and (decision.location.file, decision.location.line) == ("environments/dev.yaml", line)


def test_two_approvals_or_a_wait_that_does_not_grow_pass_the_work_rule(cut: Path) -> None:
    assert "work.wait_worse" not in {d.rule for d in planned(cut, work(tenant("ml-sandbox", 0.0, 4.0, 48.0, 48.0)), approvals=2).decisions}
    assert "work.wait_worse" not in {d.rule for d in planned(cut, work(tenant("ml-sandbox", 2.0, 2.5, 48.0, 48.0))).decisions}


def test_the_comment_shows_the_work_folded_with_what_its_figures_depend_on(cut: Path) -> None:
    result = planned(cut, work(tenant("platform-dev", 0.0, 0.0, 16.0, 16.0), tenant("ml-sandbox", 0.0, 4.0, 48.0, 40.5)))
    text = markdown.comment(result)
    assert "<details><summary>What it does to the work (2)</summary>" in text
    assert ("`jobs.csv`: 6 job(s) over 24 h, replayed on the real Kueue at base and at head (simulated time: docs/whatif.md).") in text
    assert "**Allocation utilisation** 16.7% → 12.5% at an offered load (the ceiling) of 16.7%; **backlog at the end** 0 job(s)." in text
    section = text.split("What it does to the work (2)", 1)[1].split("</details>", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ml-sandbox |") or line.startswith("| platform-dev |")]
    # the tenant whose p99 grows most first
    assert rows == ["| ml-sandbox | 3 | 0.00 → 2.00 | 0.00 → 4.00 | 48 → 40.50 | 0 |", "| platform-dev | 3 | 0.00 | 0.00 | 16 | 0 |"]


def test_a_short_comment_keeps_the_work_s_figures_and_counts_the_tenants_left_out(cut: Path) -> None:
    many = [tenant(f"tenant-{i:03d}", 0.0, i / 10, 10.0, 10.0) for i in range(400)]
    text = markdown.comment(planned(cut, work(*many)), max_chars=8000)
    assert len(text) <= 8000
    assert "**Allocation utilisation** 16.7% → 12.5%" in text
    assert "more tenant(s) not shown here" in text and "| tenant-399 |" in text  # the longest p99 wait first


def test_the_json_carries_the_work_as_the_published_schema_describes_it(cut: Path) -> None:
    figures = work(tenant("ml-sandbox", 0.0, 4.0, 48.0, 48.0))
    document = json.loads(output_json.render(planned(cut, figures)))
    jsonschema.Draft202012Validator(envelope.json_schema()).validate(document)
    assert document["work"] == figures


def test_without_whatif_the_plan_and_the_policy_input_are_as_before(cut: Path) -> None:
    result = planned(cut, None)
    assert result.work is None and "work" not in result.to_json()
    assert "What it does to the work" not in markdown.full(result)
    assert "work.wait_worse" not in {d.rule for d in result.decisions}


def test_a_trace_that_cannot_be_read_is_one_line_exit_2_before_any_server_starts(cut: Path, tmp_path: Path) -> None:
    missing = run_plan(cut, "--env", "dev", "--whatif", tmp_path / "nope.csv")
    assert missing.returncode == 2 and missing.stdout == ""
    assert f"{tmp_path / 'nope.csv'}: no such file" in missing.stderr and "Traceback" not in missing.stderr
    bad = tmp_path / "jobs.csv"
    bad.write_text("arrival,tenant,class,resource,units,pods,duration\n0,ml-sandbox,training-standard,nvidia.com/gpu,16,1,600\n")
    refused = run_plan(cut, "--env", "dev", "--whatif", bad)
    assert refused.returncode == 2 and refused.stdout == ""
    # read against head, as `fleetops whatif` reads it: 16 units is more than head's burst of 8
    assert f"{bad}:2" in refused.stderr and "more than tenant ml-sandbox's burst 8" in refused.stderr
