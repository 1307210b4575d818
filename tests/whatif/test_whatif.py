"""`fleetops whatif` without servers: the trace a user writes or generates, the derived sides, the figures.

The replay on the real Kueue is tests/whatif/test_whatif_real.py.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path

import pytest

from fleetops import render, spec
from fleetops.errors import WhatifError
from fleetops.whatif import figures, sides, trace
from fleetops.whatif.replay import Record, Run
from fleetops.why.live import Live
from tests.command import run as run_cli

ROOT = Path(__file__).resolve().parents[2]
PROD = ROOT / "environments" / "prod.yaml"
HEADER = "arrival,tenant,class,resource,units,pods,duration\n"


@pytest.fixture(scope="module")
def prod() -> spec.Environment:
    return spec.load_environment(PROD)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


def test_a_csv_trace_is_read_in_arrival_order_onto_the_tenants_cluster(prod: spec.Environment, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "3600,vision,training-high,nvidia.com/gpu,8,2,7200\n0,speech,inference-critical,nvidia.com/gpu,1,1,600\n")
    read = trace.read_csv(path, prod)
    assert [(j.arrival, j.tenant, j.cluster, j.devices) for j in read.jobs] == [(0, "speech", "center-bj", 1), (3600, "vision", "center-bj", 16)]
    assert [j.index for j in read.jobs] == [0, 1]
    assert read.window == trace.DAY


@pytest.mark.parametrize(("row", "column", "words"), [
    ("x,vision,training-high,nvidia.com/gpu,1,1,60", "arrival", "a number of seconds expected, got 'x'"),
    ("0,nobody,training-high,nvidia.com/gpu,1,1,60", "tenant", "no tenant 'nobody'"),
    ("0,vision,batch-low,nvidia.com/gpu,1,1,60", "class", "may not use priority class 'batch-low'"),
    ("0,vision,training-high,fpga.intel.com/region-ce48969398f05f33946d560708be108a,1,1,60", "resource", "has no quota"),
    ("0,vision,training-high,nvidia.com/gpu,1.5,1,60", "units", "a whole number expected"),
    ("0,vision,training-high,nvidia.com/gpu,0,1,60", "units", "must be >= 1"),
    ("0,vision,training-high,nvidia.com/gpu,1,1,-5", "duration", "must be >= 1"),
    ("0,vision,training-high,nvidia.com/gpu,81,2,60", "units", "more than tenant vision's burst 160: it could never be admitted"),
])
def test_a_bad_row_is_refused_at_its_line_naming_the_column(prod: spec.Environment, tmp_path: Path, row: str, column: str, words: str) -> None:
    path = write(tmp_path, HEADER + "0,speech,inference-critical,nvidia.com/gpu,1,1,600\n" + row + "\n")
    with pytest.raises(WhatifError) as caught:
        trace.read_csv(path, prod, display="jobs.csv")
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.path) == ("jobs.csv", 3, column)
    assert words in problem.message
    assert str(problem).startswith(f"jobs.csv:3: {column}: ")


def test_a_cluster_column_must_name_one_of_the_tenants_clusters_with_the_resource(prod: spec.Environment, tmp_path: Path) -> None:
    path = write(tmp_path, "arrival,tenant,class,resource,units,pods,duration,cluster\n0,llm-pretrain,training-high,nvidia.com/gpu,8,1,60,center-sh\n"
                           "0,llm-pretrain,training-high,nvidia.com/gpu,8,1,60,edge-gz-gateway\n")
    with pytest.raises(WhatifError) as caught:
        trace.read_csv(path, prod, display="jobs.csv")
    assert [str(p) for p in caught.value.problems] == [
        "jobs.csv:3: cluster: tenant llm-pretrain has no nvidia.com/gpu on cluster 'edge-gz-gateway' (it has: center-bj, center-sh)"]


@pytest.mark.parametrize("text", ["arrival,tenant,class\n0,vision,training-high\n", HEADER, HEADER.replace("duration", "duration,colour")])
def test_a_header_without_the_columns_or_a_file_without_jobs_is_refused_at_line_1(prod: spec.Environment, tmp_path: Path, text: str) -> None:
    with pytest.raises(WhatifError) as caught:
        trace.read_csv(write(tmp_path, text), prod, display="jobs.csv")
    assert caught.value.problems[0].line == 1


def test_the_same_seed_generates_the_same_jobs_and_another_seed_others(prod: spec.Environment) -> None:
    one, again, other = (trace.generate(prod, 7, 400, 0.5, seed) for seed in (1, 1, 2))
    assert one.jobs == again.jobs
    assert one.jobs != other.jobs


def test_generated_jobs_offer_the_load_asked_of_each_resource_with_the_traces_shape(prod: spec.Environment) -> None:
    made = trace.generate(prod, 30, 20_000, 0.5, 3, ["center-bj"])
    offered = made.offered(prod)
    assert set(offered) == {("center-bj", "nvidia.com/gpu"), ("center-bj", "huawei.com/Ascend910")}
    assert all(0.45 <= load <= 0.55 for load in offered.values()), offered
    hours = [j.arrival % trace.DAY // 3600 for j in made.jobs]
    assert sum(1 for h in hours if 10 <= h < 17) > 2 * sum(1 for h in hours if 0 <= h < 7)  # diurnal: working hours busier than the night
    assert statistics.mode(j.units for j in made.jobs) == 1 and max(j.pods for j in made.jobs) > 1  # one unit most often; multi-pod tasks


def test_every_parameter_of_the_shape_names_its_source() -> None:
    for name, parameter in trace.shape().items():
        if name != "about":
            assert "NSDI'22" in parameter["source"] or "Not given" in parameter["source"], name


def test_a_written_trace_reads_back_as_the_same_jobs(prod: spec.Environment, tmp_path: Path) -> None:
    made = trace.generate(prod, 2, 50, 0.5, 1)
    trace.write_csv(made, tmp_path / "t.csv")
    again = trace.read_csv(tmp_path / "t.csv", prod, made.window)
    assert [(j.tenant, j.priority_class, j.resource, j.units, j.pods, j.cluster, round(j.arrival), round(j.duration)) for j in again.jobs] == \
        [(j.tenant, j.priority_class, j.resource, j.units, j.pods, j.cluster, round(j.arrival), round(j.duration)) for j in made.jobs]


# --- the sides derived from one environment -------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(prod: spec.Environment) -> sides.ReplaySide:
    return sides.side_of(sides.SideKind.BASE, "r1", prod, render.render(PROD, revision="r1").clusters)


def test_static_lends_nothing_between_tenants_and_never_preempts(base: sides.ReplaySide) -> None:
    objects = sides.derived(base, sides.SideKind.STATIC).clusters["center-bj"]
    assert not [o for o in objects if o["kind"] == "Cohort" and "parentName" in o["spec"]]
    queues = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert queues and all(q["spec"]["preemption"] == sides.NEVER for q in queues)
    # each tenant's queues keep its guarantee as their quota: the tenant's own cohort still joins them
    assert {q["spec"]["cohortName"] for q in queues} == {o["spec"]["cohortName"] for o in base.clusters["center-bj"] if o["kind"] == "ClusterQueue"}


def test_pooled_is_one_queue_holding_the_whole_capacity_every_tenant_queue_points_at(base: sides.ReplaySide, prod: spec.Environment) -> None:
    objects = sides.derived(base, sides.SideKind.POOLED).clusters["center-bj"]
    (queue,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    held = {(f["name"], r["name"]): r["nominalQuota"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"]}
    cluster = spec.cluster_by_name(prod, "center-bj")
    assert held == {(g.name, r): n for g in cluster.pools for r, n in spec.group_capacity(g).items()}
    assert {o["spec"]["clusterQueue"] for o in objects if o["kind"] == "LocalQueue"} == {sides.POOLED}
    assert not [o for o in objects if o["kind"] == "Cohort"]


def test_a_class_that_never_preempts_is_sent_to_the_tenants_non_preempting_queue(base: sides.ReplaySide) -> None:
    assert base.queues[("research", "batch-low")] == "research-non-preempting-queue"
    assert base.queues[("research", "training-standard")] == "research-queue"
    job = trace.TraceJob(0, 0, "vision", "training-high", "nvidia.com/gpu", 8, 1, 60, "center-bj")
    made = base.submission(job)
    assert (made.queue, made.priority) == ("vision-queue", 10000)
    assert ("dedicated", "training", "NoSchedule") in made.tolerations  # h100-train's taint: the tenant's job may land there


# --- figures ---------------------------------------------------------------------------------------------------


def job(index: int, tenant: str, arrival: float, devices: int = 8, cls: str = "training-high") -> trace.TraceJob:
    return trace.TraceJob(index, arrival, tenant, cls, "nvidia.com/gpu", devices, 1, 3600, "center-bj")


def test_waits_count_a_job_never_admitted_with_the_wait_it_had_by_the_end() -> None:
    records = [Record(job(0, "vision", 0), [Run(0, "h100-train", 3600)], 3600), Record(job(1, "vision", 0), [Run(7200, "h100-train", None)]),
               Record(job(2, "vision", 3600))]
    w = figures.waits("vision", records, end=4 * 3600)
    assert (w.jobs, w.p50, w.p99, w.never_admitted) == (3, 2.0, 3.0, 1)
    assert w.over_an_hour == pytest.approx(2 / 3, abs=1e-3)


def test_a_guarantee_is_unhonoured_while_its_tenant_waits_below_it_and_another_borrows(prod: spec.Environment) -> None:
    # research (guarantee 8) holds 40 from the start; speech (guarantee 120) waits for 64 from t=600 until 1800
    hog = Record(job(0, "research", 0, 40, "training-standard"), [Run(0, "a100-infer", 1800)], 1800)
    waiting = Record(job(1, "speech", 600, 64, "inference-critical"), [Run(1800, "a100-infer", None)])
    found = {g.tenant: g for g in figures._guarantees(prod, [hog, waiting], 3600)}
    assert (found["speech"].unhonoured_minutes, found["speech"].episodes, found["speech"].longest_minutes) == (20.0, 1, 20.0)
    assert found["research"].unhonoured_minutes == 0


def test_jain_is_one_when_every_tenant_gets_the_same_share_of_its_guarantee_and_less_when_not(prod: spec.Environment) -> None:
    even = [Record(job(0, "vision", 0, 96), [Run(0, "h100-train", None)]), Record(job(1, "speech", 0, 120), [Run(0, "a100-infer", None)])]
    skewed = [Record(job(0, "vision", 0, 96), [Run(0, "h100-train", None)]), Record(job(1, "speech", 0, 12), [Run(0, "a100-infer", None)])]
    assert figures._fairness(prod, even, 3600) == 1.0
    assert figures._fairness(prod, skewed, 3600) < 0.7


def test_the_impact_of_a_change_is_each_tenant_s_wait_and_device_hours_base_to_head(prod: spec.Environment) -> None:
    from fleetops.whatif import report

    made = trace.Trace((job(0, "vision", 0), job(1, "speech", 0)), 4 * 3600, "jobs.csv")
    # base: both admitted at once; head: vision's first run preempted after 1 h, run again from 2 h; speech waits 3 h
    base = figures.side_figures("base", "b", prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", 3600)], 3600),
                                                          1: Record(made.jobs[1], [Run(0, "a100-infer", 3600)], 3600)})
    head = figures.side_figures("head", "h", prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", 3600, reason="Preempted"),
                                                                                   Run(7200, "h100-train", 10800)], 10800),
                                                          1: Record(made.jobs[1], [Run(10800, "a100-infer", None)])})
    assert head.device_hours_by_tenant == {"speech": 8.0, "vision": 16.0}  # the run thrown away was held too
    found = report.impact(base, head, made)
    rows = {t["tenant"]: t for t in found["tenants"]}
    assert (rows["speech"]["wait_p99_hours"], rows["speech"]["wait_p99_hours_after"]) == (0.0, 3.0)
    assert (rows["vision"]["device_hours"], rows["vision"]["device_hours_after"]) == (8.0, 16.0)
    assert (found["source"], found["jobs"], found["window_hours"]) == ("jobs.csv", 2, 4.0)
    assert found["offered_load"] == base.offered_load and found["utilisation_after"] == head.total_utilisation


def test_utilisation_over_time_holds_each_hours_share_and_averages_to_the_windows(prod: spec.Environment) -> None:
    made = trace.Trace((job(0, "vision", 0, 96), job(1, "speech", 1800, 48)), 3 * 3600 + 1800, "jobs.csv")
    # vision holds 96 GPUs from 0 to 2 h; speech 48 from 0.5 h to the end of the window (3.5 h)
    side = figures.side_figures("base", "b", prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", 7200)], 7200),
                                                          1: Record(made.jobs[1], [Run(1800, "a100-infer", None)])})
    gpus = next(u.available_device_hours for u in side.utilisation if (u.cluster, u.resource, u.flavor) == ("center-bj", "nvidia.com/gpu", "")) / 3.5
    assert side.step_hours == 1.0 and len(side.utilisation_over_time) == 4  # the last step is the half hour left
    assert side.utilisation_over_time == pytest.approx([(96 + 24) / gpus, (96 + 48) / gpus, 48 / gpus, 48 / gpus], abs=1e-4)
    weighted = sum(share * hours for share, hours in zip(side.utilisation_over_time, (1, 1, 1, 0.5))) / 3.5
    assert weighted == pytest.approx(side.total_utilisation, abs=1e-3)


def test_a_year_long_window_is_kept_in_at_most_a_thousand_steps(prod: spec.Environment) -> None:
    made = trace.Trace((job(0, "vision", 0, 8),), 366 * 86400, "jobs.csv")
    side = figures.side_figures("base", "b", prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", None)])})
    assert len(side.utilisation_over_time) <= figures.MOST_STEPS and side.step_hours == 9.0
    assert len(set(side.utilisation_over_time)) == 1  # held the whole year: every step alike


def test_the_pictures_draw_each_side_under_the_offered_load_and_each_tenants_waits(prod: spec.Environment) -> None:
    import xml.etree.ElementTree as ET

    from fleetops.whatif import pictures

    made = trace.Trace((job(0, "vision", 0, 96), job(1, "speech", 0, 48)), 4 * 3600, "jobs.csv")
    base = figures.side_figures("base", "b" * 40, prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", 3600)], 3600),
                                                               1: Record(made.jobs[1], [Run(0, "a100-infer", 3600)], 3600)})
    head = figures.side_figures("head", "h" * 40, prod, made, {0: Record(made.jobs[0], [Run(7200, "h100-train", None)]),
                                                               1: Record(made.jobs[1], [Run(3600, "a100-infer", 7200)], 7200)})
    svg = "{http://www.w3.org/2000/svg}"
    drawn = ET.fromstring(pictures.utilisation([base, head], made.window / 3600))
    lines = drawn.findall(f"{svg}polyline")
    assert [line.find(f"{svg}title").text.split(":")[0] for line in lines] == ["base", "head"]
    heights = {float(point.split(",")[1]) for point in lines[0].get("points").split()}
    assert len(heights) == 2  # base: busy in the first hour, idle after
    assert "offered load" in "".join(drawn.itertext()) and drawn.find(f"{svg}title").text.startswith("Allocation utilisation")
    marks = [t.text for t in drawn.findall(f"{svg}text")]
    assert "hour of the window" in marks and ["0", "1", "2", "3", "4"] == marks[marks.index("100%") + 1:marks.index("hour of the window")]  # 4 h: read in hours

    drawn = ET.fromstring(pictures.waits([base, head]))
    bars = [g.find(f"{svg}title").text for g in drawn.iter(f"{svg}g")]
    assert bars == ["speech on base: p50 0 h, p90 0 h, p99 0 h, 1 jobs", "speech on head: p50 1 h, p90 1 h, p99 1 h, 1 jobs",
                    "vision on base: p50 0 h, p90 0 h, p99 0 h, 1 jobs", "vision on head: p50 2 h, p90 2 h, p99 2 h, 1 jobs"]


def a_replay(prod: spec.Environment, tmp_path: Path) -> Path:
    """A `whatif --output json` document of two sides: base admits both jobs at once, head makes them wait."""
    from fleetops.output import json as json_form

    made = trace.Trace((job(0, "vision", 0, 96), job(1, "speech", 0, 48)), 4 * 3600, "jobs.csv")
    base = figures.side_figures("base", "b" * 40, prod, made, {0: Record(made.jobs[0], [Run(0, "h100-train", 3600)], 3600),
                                                               1: Record(made.jobs[1], [Run(0, "a100-infer", 3600)], 3600)})
    head = figures.side_figures("head", "h" * 40, prod, made, {0: Record(made.jobs[0], [Run(7200, "h100-train", 10800)], 10800),
                                                               1: Record(made.jobs[1], [Run(3600, "a100-infer", 7200)], 7200)})
    path = tmp_path / "whatif.json"
    path.write_text(json_form.whatif("prod", made, [base, head]))
    return path


def test_a_replay_given_to_the_audit_shows_each_sides_figures_and_in_html_its_pictures(prod: spec.Environment, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    replay = a_replay(prod, tmp_path)
    sides = json.loads(replay.read_text())["sides"]
    out = {form: tmp_path / f"audit.{form}" for form in ("html", "markdown", "json")}
    (log := tmp_path / "decisions.jsonl").write_text("")
    for form, path in out.items():
        done = run_cli("audit", "--env", "prod", "--output", form, "-o", str(path), "--whatif", str(replay), "--decision-log", str(log))
        assert done.returncode == 0, done.stderr
    page = out["html"].read_text()
    section = page[page.index('<section id="work"'):]
    section = section[:section.index("</section>")]
    svg = "{http://www.w3.org/2000/svg}"
    titles = [ET.fromstring(f"<svg{part.split('</figure>')[0].split('<svg', 1)[1]}").find(f"{svg}title").text for part in section.split("<figure>")[1:]]
    assert titles == ["Allocation utilisation over the window, per side", "Queueing delay per tenant, per side"]
    assert f"{sides[0]['total_utilisation']:.1%}" in section and f"{sides[1]['total_utilisation']:.1%}" in section
    text = out["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| head |"))
    assert f"| {sides[1]['total_utilisation']:.1%} | {sides[1]['offered_load']:.1%} |" in row and "| 1 / 2 |" in row  # head: they wait 1 h and 2 h
    work = json.loads(out["json"].read_text())["work"]
    assert [(s["side"], s["wait_p99_hours"]) for s in work["sides"]] == [("base", 0.0), ("head", 2.0)]
    assert work["source"] == "jobs.csv" and work["window_hours"] == 4 and work["assumptions"]


def test_a_file_that_is_no_replay_or_of_another_environment_is_one_line_and_no_audit(prod: spec.Environment, tmp_path: Path) -> None:
    replay = a_replay(prod, tmp_path)
    document = json.loads(replay.read_text())
    del document["sides"][1]["utilisation_over_time"][0:]
    document["sides"][1]["waits_all"] = {"group": "all"}
    replay.write_text(json.dumps(document))
    out = tmp_path / "audit.html"
    done = run_cli("audit", "--env", "prod", "-o", str(out), "--whatif", str(replay))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip() == f"{replay}: not the JSON of `fleetops whatif --output json`: sides.1.waits_all.jobs: Field required"
    replay = a_replay(prod, tmp_path)
    done = run_cli("audit", "--env", "dev", "-o", str(out), "--whatif", str(replay))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip() == f"{replay}: a replay of environment prod, which this report does not cover (dev)"


def workload(name: str, namespace: str, created: str, gpus: int = 8, pods: int = 1, cls: str = "training-high",
             reserved: str | None = None, finished: str | None = None, queue: str = "main") -> dict:
    """A Workload as Kueue v0.17 keeps it: quota reserved and admitted at `reserved`, Finished at `finished`."""
    conditions = []
    if reserved:
        conditions += [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": reserved} for t in ("QuotaReserved", "Admitted")]
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": finished})
    container = {"name": "c", "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": str(gpus)}}}
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"queueName": queue, "priorityClassName": cls, "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": [container]}}}]},
            "status": {"conditions": conditions}}


def live_of(workloads: list[dict]) -> Live:
    from fleetops import inventory
    from fleetops.why.jobs import read_job

    return Live("center-bj", [read_job(w) for w in workloads], [], {("vision", "main"): "cq-vision", ("speech", "main"): "cq-speech"},
                {"cq-vision": "vision", "cq-speech": "speech"}, {}, inventory.read_inventory("center-bj", []), [], None)


def test_a_clusters_finished_workloads_are_a_trace_and_what_is_not_a_job_is_counted_not_replayed(prod: spec.Environment) -> None:
    from fleetops.whatif import history

    live = live_of([
        workload("a", "vision", "2026-11-02T09:00:00Z", 16, 2, reserved="2026-11-02T09:30:00Z", finished="2026-11-02T11:30:00Z"),
        workload("b", "speech", "2026-11-03T00:00:10Z", 8, cls="inference-critical", reserved="2026-11-03T00:00:10Z", finished="2026-11-03T00:10:10Z"),
        workload("running", "vision", "2026-11-03T01:00:00Z", reserved="2026-11-03T01:00:00Z"),
        workload("waiting", "speech", "2026-11-03T02:00:00Z", cls="inference-critical"),
        workload("stray", "elsewhere", "2026-11-02T10:00:00Z", reserved="2026-11-02T10:00:00Z", finished="2026-11-02T11:00:00Z"),
        workload("classless", "speech", "2026-11-02T12:00:00Z", cls="training-high", reserved="2026-11-02T12:00:00Z", finished="2026-11-02T13:00:00Z"),
    ])
    made = history.trace(live, prod)
    assert [(j.tenant, j.priority_class, j.arrival, j.units, j.pods, j.duration, j.cluster) for j in made.jobs] == [
        ("vision", "training-high", 9 * 3600, 16, 2, 2 * 3600, "center-bj"),  # the wait before admission is not the job's duration
        ("speech", "inference-critical", 86400 + 10, 8, 1, 600, "center-bj")]
    assert made.window == 2 * 86400  # whole days from the midnight before the first arrival
    assert made.source == ("center-bj's Workloads from 2026-11-02: 2 finished jobs (2 not finished (duration unknown), "
                           "1 not in a tenant's queue, 1 outside the environment's rules (class) left out)")
    later = history.trace(live, prod, since=dt.datetime(2026, 11, 3, tzinfo=dt.timezone.utc))
    assert [j.tenant for j in later.jobs] == ["speech"] and later.jobs[0].arrival == 10


def test_a_history_with_no_finished_job_is_refused_in_one_line(prod: spec.Environment) -> None:
    from fleetops.whatif import history

    with pytest.raises(WhatifError, match=r"^center-bj: none of its 1 Workloads is a finished job of a tenant \(1 not finished"):
        history.trace(live_of([workload("running", "vision", "2026-11-03T01:00:00Z", reserved="2026-11-03T01:00:00Z")]), prod)


# --- the command -----------------------------------------------------------------------------------------------


def test_whatif_refuses_a_bad_trace_at_its_line_before_any_server_starts(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "0,vision,training-high,nvidia.com/gpu,1,1,60\n0,vision,nope,nvidia.com/gpu,1,1,60\n")
    result = run_cli("whatif", "--env", "prod", "--trace", str(path), "--head", "HEAD", "--base", "HEAD", "--keep", str(tmp_path / "servers"))
    assert result.returncode == 2
    assert f"{path}:3: class: tenant vision may not use priority class 'nope'" in result.stderr
    assert not (tmp_path / "servers").exists()


@pytest.mark.parametrize("sources", [(), ("--generate", "--history", "center-bj"), ("--trace", "jobs.csv", "--generate")])
def test_whatif_asks_for_one_source_of_jobs_and_says_so(sources: tuple[str, ...]) -> None:
    result = run_cli("whatif", "--env", "prod", *sources)
    assert result.returncode == 2
    assert "give a --trace FILE, --generate or --history CLUSTER (one of them)" in result.stderr


def test_a_live_clusters_options_without_history_are_refused_not_ignored(tmp_path: Path) -> None:
    result = run_cli("whatif", "--env", "prod", "--generate", "--context", "center-bj", "--since", "2026-11-01", "--keep", str(tmp_path / "servers"))
    assert result.returncode == 2 and not (tmp_path / "servers").exists()
    assert result.stderr.strip() == "whatif: --since, --context read a live cluster's history: give --history CLUSTER too"


def test_a_history_of_a_cluster_the_environment_lacks_is_refused_in_one_line_before_any_server_starts() -> None:
    result = run_cli("whatif", "--env", "prod", "--history", "center-nowhere", "--side", "head")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "--history: no cluster 'center-nowhere' in prod (clusters: center-bj, center-sh, edge-sh-factory, edge-gz-gateway)")


def test_the_json_document_is_in_the_one_envelope(prod: spec.Environment) -> None:
    from fleetops.envelope import json_schema
    from fleetops.output import json as output_json

    made = trace.generate(prod, 1, 5, 0.5, 1, ["center-bj"])
    records = {j.index: Record(j, [Run(j.arrival, "h100-train", None)]) for j in made.jobs}
    document = output_json.whatif_document("prod", made, [figures.side_figures("base", "r1", prod, made, records)])
    import jsonschema

    jsonschema.validate(json.loads(json.dumps(document)), json_schema())
    assert document["command"] == "whatif" and document["sides"][0]["side"] == "base"


def test_a_missing_server_is_one_line_naming_it_before_any_starts(prod: spec.Environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetops.whatif import run

    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it, and no .tools/bin under tmp_path
    made = trace.generate(prod, 1, 3, 0.5, 1, ["center-bj"])
    with pytest.raises(WhatifError) as caught:
        run.replay([], made, run.ReplayOptions(root=tmp_path, keep=tmp_path / "servers"))
    assert caught.value.lines == [f"whatif: no etcd in {tmp_path}/.tools/bin or on $PATH: `make tools` builds the real servers"]
    assert not (tmp_path / "servers").exists()
