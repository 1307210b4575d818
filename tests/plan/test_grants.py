"""What Kueue will grant each tenant (fleetops/grants.py), from the rendered objects of the bundled
environments, and validate's refusal of a promise the rendered cohort cannot keep.

tests/render/test_real_kueue.py::test_the_reachable_burst_fleetops_computes_is_what_kueue_admits_and_no_more
proves the 60 below against the real Kueue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetops import grants, render, spec
from tests.command import run
from tests.helpers import ROOT


def rendered(path: Path) -> dict[str, list[dict[str, Any]]]:
    return render.render(path, revision="r1").clusters


def half_lent(tmp_path: Path) -> Path:
    """prod.yaml as it was before this check: every tenant keeps half its guarantee from lending."""
    folder = tmp_path / "environments"
    folder.mkdir()
    path = folder / "prod.yaml"
    text = (ROOT / "environments" / "prod.yaml").read_text()
    assert "  lend_fraction: 1.0" in text
    path.write_text(text.replace("  lend_fraction: 1.0", "  lend_fraction: 0.5"))
    return path


def test_every_bundled_kueue_tenant_is_granted_what_its_file_declares() -> None:
    """Each (tenant, cluster, resource) of dev and prod: Kueue holds the guarantee and lets the tenant
    reach exactly its burst on an idle cluster (prod's lend_fraction of 0.5 did not: see below)."""
    for name in ("dev", "prod"):
        path = ROOT / "environments" / f"{name}.yaml"
        env, granted = spec.load_environment(path), grants.facts(rendered(path))
        declared = {(t.name, c, r): (q.guaranteed, q.burst) for t in env.tenants for c in t.clusters for r, q in t.quota.items()}
        # A spill-over's manager (modules/multikueue.py) holds, per resource, the burst the tenant may reach on each
        # worker, summed, all of it its own: it stops dispatching only when every worker is taken.
        declared |= {(t.name, t.spill_over.manager, r): (q.burst * len(t.spill_over.workers),) * 2
                     for t in env.tenants if t.spill_over is not None for r, q in t.quota.items()}
        got = {(t, c, r): (g["guaranteed"], g["reachable"]) for c, per in granted.items() for t, rs in per.items() for r, g in rs.items()}
        assert got == declared, name


def test_a_tenant_on_two_pools_reaches_its_burst_over_both_but_one_job_only_within_one() -> None:
    """prod.yaml: research (nvidia.com/gpu 8/48) on center-bj's h100-mig (224 MIG slices) and a100-infer
    (128 time-sliced units): its guarantee is held whole by a100-infer (the least room that holds it) and
    what it may borrow is spread over both flavors by what it can borrow on each (the units the others'
    guarantees leave and what they lend), so 48 one-GPU jobs are admitted but no single job of more than 26."""
    granted = grants.facts(rendered(ROOT / "environments" / "prod.yaml"))["center-bj"]["research"]["nvidia.com/gpu"]
    assert granted["flavors"] == {"h100-mig": {"guaranteed": 0, "reachable": 26, "lends": 0},
                                  "a100-infer": {"guaranteed": 8, "reachable": 22, "lends": 8}}
    assert (granted["guaranteed"], granted["reachable"], granted["lends"]) == (8, 48, 8)


def test_what_a_tenant_keeps_from_lending_is_missing_from_the_others_burst(tmp_path: Path) -> None:
    """center-sh's a100-train has 64 GPUs; llm-pretrain guarantees 48 and research 8, each lending half.
    llm-pretrain holds the 24 it keeps and borrows what the cluster's cohort holds: 8 no one guarantees,
    the 24 it lends and research's 4: 60 of its 64. research: 4 + 36 = 40 of its 48."""
    granted = grants.facts(rendered(half_lent(tmp_path)))["center-sh"]
    assert granted["llm-pretrain"]["nvidia.com/gpu"]["reachable"] == 60
    assert granted["llm-pretrain"]["nvidia.com/gpu"]["lends"] == 24
    assert granted["research"]["nvidia.com/gpu"]["reachable"] == 40


def queue(name: str, cohort: str | None, flavor: str, nominal: int, tenant: str, **limits: int) -> dict[str, Any]:
    body: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["gpu"], "flavors": [
        {"name": flavor, "resources": [{"name": "gpu", "nominalQuota": nominal, **limits}]}]}]}
    if cohort:
        body["cohortName"] = cohort
    return {"kind": "ClusterQueue", "metadata": {"name": name, "labels": {grants.TENANT_LABEL: tenant}}, "spec": body}


def cohort(name: str, parent: str | None, flavor: str, nominal: int) -> dict[str, Any]:
    body: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["gpu"], "flavors": [
        {"name": flavor, "resources": [{"name": "gpu", "nominalQuota": nominal}]}]}]}
    if parent:
        body["parentName"] = parent
    return {"kind": "Cohort", "metadata": {"name": name}, "spec": body}


FLAVOR = {"kind": "ResourceFlavor", "metadata": {"name": "pool"}}


def test_borrowing_and_lending_limits_quantities_and_a_missing_flavor_as_kueue_reads_them() -> None:
    objects = [
        FLAVOR,
        cohort("root", None, "pool", 10),
        # the root holds, of flavor pool, its 10 and what its queues lend: a's 8 and b's 2 (20)
        queue("a", "root", "pool", 8, "a", borrowingLimit=4),  # 8 + at most 4 borrowed
        queue("b", "root", "pool", "4", "b", lendingLimit=2),  # keeps 2 from the root: 2 + 20
        queue("c", "elsewhere", "pool", 6, "c"),  # an implicit cohort holding only c's 6
        queue("d", "root", "gone", 5, "d"),  # its flavor is not rendered: admits nothing, lends its quota still
        queue("e", "alone", "pool", "1500m", "e"),  # Kueue's Quantity.Value() rounds a fraction up: 2 devices
    ]
    got = {t: grants.total(per["gpu"]) for t, per in grants.of_cluster(objects).items()}
    assert got == {"a": grants.Grant(8, 12, 8), "b": grants.Grant(4, 22, 2), "c": grants.Grant(6, 6, 6), "d": grants.Grant(5, 0, 5),
                   "e": grants.Grant(2, 2, 2)}


def test_a_cohort_cycle_grants_nothing_and_ends() -> None:
    objects = [FLAVOR, cohort("x", "y", "pool", 4), cohort("y", "x", "pool", 4), queue("a", "x", "pool", 2, "a")]
    assert grants.total(grants.of_cluster(objects)["a"]["gpu"]) == grants.Grant(2, 0, 0)


def test_validate_refuses_a_burst_the_cohort_cannot_lend_at_its_line(tmp_path: Path) -> None:
    path = half_lent(tmp_path)
    done = run("validate", "--environments", path.parent)
    lines = done.stderr.strip().splitlines()
    text = path.read_text().splitlines()
    llm = text.index("      nvidia.com/gpu: {guaranteed: 48, burst: 64}") + 1
    research = text.index("      nvidia.com/gpu: {guaranteed: 8, burst: 48}") + 1
    assert done.returncode == 2 and len(lines) == 2, done.stderr
    assert lines[0] == (f"{path}:{llm}:40: tenants[llm-pretrain].quota[\"nvidia.com/gpu\"].burst: Kueue grants at most 60 on center-sh "
                        "even when it is idle, not the declared 64 (guaranteed 48, the rest borrowed from what the cluster's cohort holds): "
                        "lower burst to 60, or add 4 units no tenant guarantees to its pools, "
                        "or let the tenants lend more of their guarantee (scheduler.lend_fraction)")
    assert lines[1].startswith(f"{path}:{research}:39: tenants[research].quota[\"nvidia.com/gpu\"].burst: Kueue grants at most 40 on center-sh")
    assert "Traceback" not in done.stderr
    as_json = json.loads(run("validate", "--environments", path.parent, "--output", "json").stdout)
    assert [(p["line"], p["path"]) for p in as_json["problems"]] == [(llm, 'tenants[llm-pretrain].quota["nvidia.com/gpu"].burst'),
                                                                     (research, 'tenants[research].quota["nvidia.com/gpu"].burst')]


def test_a_chain_of_cohorts_deeper_than_python_recursion_is_read_to_its_end() -> None:
    """A program may nest cohorts as deep as the object limit allows: no RecursionError, no traceback."""
    chain = [cohort(f"c{i}", f"c{i + 1}" if i < 5000 else None, "pool", 1) for i in range(5001)]
    assert grants.total(grants.of_cluster([FLAVOR, *chain, queue("a", "c0", "pool", 2, "a")])["a"]["gpu"]) == grants.Grant(2, 5003, 2)


def test_a_plan_reads_each_clusters_kueue_tree_once_for_its_policies_grants_and_services(monkeypatch: Any) -> None:
    """prod (with a service): the policy input (`quota.burst_unreachable`, `autoscaling.*`), plan's `grants`
    and its `services` come from one reading of head's Cohorts and ClusterQueues per cluster (a plan
    read them three times), the base's services from one of the base's; and the policy input's grants
    are those it reads for itself (`of_entries`)."""
    from fleetops import plan, policy

    env_rel = "environments/prod.yaml"
    before, after = (plan.rendered_side(rev, ROOT, env_rel) for rev in ("base", "head"))
    kueue_clusters = {c for c, objects in after.clusters.items() if any(o["kind"] in grants.KINDS for o in objects)}
    reads: list[int] = []
    tree = grants.tree
    monkeypatch.setattr(grants, "tree", lambda objects: reads.append(1) or tree(objects))
    result = plan.assess("prod", env_rel, before, after, ROOT, ([], []), {}, 0, True, "head")
    assert len(reads) == 2 * len(kueue_clusters) > 0  # head's and the base's, each once
    assert [s.name for s in result.services] == ["asr"] and result.grants.tenants
    monkeypatch.undo()
    entries = [policy.resource_entry(c, m) for c, ms in after.clusters.items() for m in ms]
    assert grants.of_fleet(after.clusters).facts == grants.of_entries(entries)
def test_the_review_names_the_taints_a_job_must_tolerate_to_use_a_guarantee_held_on_a_tainted_pool() -> None:
    """environments/prod.yaml: llm-pretrain may use only tainted pools (h100-train, a100-train:
    dedicated=training), recsys's FPGA regions only fpga-arria10 (fpga.intel.com/region); vision declares
    48 of its 96 on h100-train. research's guarantee sits on an untainted pool, and vision's Ascend NPUs on
    a pool tainted by its own device resource, which every pod requesting an NPU tolerates."""
    path = ROOT / "environments" / "prod.yaml"
    granted = grants.review(spec.load_environment(path), grants.of_fleet(rendered(path)))
    tainted = {(r.cluster, r.tenant, r.resource): r.held_on_tainted for r in granted.tenants}
    training = ["dedicated=training:NoSchedule"]
    fpga = "fpga.intel.com/region-ce48969398f05f33946d560708be108a"
    assert tainted[("center-bj", "llm-pretrain", "nvidia.com/gpu")] == {"h100-train": training}
    assert tainted[("center-sh", "llm-pretrain", "nvidia.com/gpu")] == {"a100-train": training}
    assert tainted[("center-bj", "vision", "nvidia.com/gpu")] == {"h100-train": training}
    assert tainted[("center-sh", "recsys", fpga)] == {"fpga-arria10": ["fpga.intel.com/region=present:NoSchedule"]}
    assert tainted[("center-bj", "research", "nvidia.com/gpu")] == tainted[("center-bj", "vision", "huawei.com/Ascend910")] == {}
    from types import SimpleNamespace

    from fleetops.output import markdown

    table = "\n".join(line for row in markdown.grants_table(SimpleNamespace(grants=granted)).rows for line in row)
    assert "| center-bj | vision | `nvidia.com/gpu` | 96 (48 on h100-train: for jobs tolerating `dedicated=training:NoSchedule`) |" in table


def test_each_kueue_function_grants_cites_is_in_the_file_it_names_in_kueue_v0_17_0() -> None:
    """grants.py says which Kueue behaviour each of its rules follows, as `Function (dir/file.go)`: each such
    function is defined in that file of the Kueue release the real-Kueue tests run (from the Go module cache)."""
    import os
    import re
    import shutil
    import subprocess

    import pytest

    go = shutil.which("go") or str(ROOT / ".tools" / "go" / "bin" / "go")
    cache = os.environ.get("GOMODCACHE") or (subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
                                             if Path(go).exists() else "")
    kueue = Path(cache) / "sigs.k8s.io" / "kueue@v0.17.0" / "pkg" if cache else None
    if kueue is None or not kueue.is_dir():
        pytest.skip("Kueue v0.17.0 is not in the Go module cache")
    text = (ROOT / "fleetops" / "grants.py").read_text()
    prose = re.sub(r"\s+", " ", re.sub(r"\n\s*#", " ", text))  # comments and docstrings as one line of words
    cited = re.findall(r"([A-Za-z]+(?:\.[A-Za-z]+)?) \(((?:cache|scheduler|resources)/[a-z/_]+\.go)", prose)
    assert len(cited) == len(re.findall(r"\((?:cache|scheduler|resources)/", prose)) >= 10  # every file named with its function
    missing = []
    for function, file in cited:
        name = function.split(".")[-1]
        if not re.search(rf"^func (\([^)]*\) )?{name}\b", (kueue / file).read_text(), re.MULTILINE):
            missing.append(f"{function} in {file}")
    assert missing == []
