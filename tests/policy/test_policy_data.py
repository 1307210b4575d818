"""The policy data's schema (policies/data.schema.json): a key of policies/data.yaml misspelt, missing or
of the wrong kind, and a rule reading a key the schema does not declare, fail closed at their line
wherever the policies are loaded (check, plan's judge on the base revision, policy test, the Pulumi
policy pack, audit); before, the rule reading such a key was undefined and never fired."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from fleetops import policy
from fleetops.policy.dataschema import ANY, data_reads, declared_paths, declares
from tests import command
from tests.plan.test_plan import commit, make_repo, plan
from tests.policy.test_policy import MUTATIONS
from tests.policy.test_policy_pack import pack, rendered, stack_resources, validate  # noqa: F401 - pack is a fixture

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "policies"
MISSPELT = ("  max_latency_ms: 20\n", "  max_latncy_ms: 20\n")  # edge.latency reads edge.max_latency_ms
# What the misspelling is refused with: its own line, one line for the unknown and the missing key it stands for.
REFUSED = (r"data\.yaml:(?P<line>\d+):3: edge\.max_latncy_ms: unknown key: did you mean max_latency_ms\? max_latency_ms is missing, "
           r"and the rules that read it would never fire \(.*data\.schema\.json\)")


def copy_policies(target: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    shutil.copytree(SHIPPED, target, ignore=shutil.ignore_patterns("pack"))
    for name, (old, new) in (edits or {}).items():
        text = (target / name).read_text()
        assert old in text, f"test setup: {old!r} not in {name}"
        (target / name).write_text(text.replace(old, new, 1))
    return target


def line_of(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def refusal(policies: Path) -> list[str]:
    with pytest.raises(policy.PolicyError) as caught:
        policy.load_bundle(policies)
    return caught.value.lines


def with_latency(directory: Path) -> Path:
    """prod with an edge group over the latency bound: edge.latency denies it."""
    directory.mkdir()
    doc = yaml.safe_load((ROOT / "environments" / "prod.yaml").read_text())
    MUTATIONS["edge.latency"](doc)
    (directory / "prod.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


# --- the data ----------------------------------------------------------------------------------------


def test_a_misspelt_threshold_is_no_decision_at_its_line_not_a_rule_that_never_fires(tmp_path: Path) -> None:
    # Before: edge.latency read an undefined max_latency_ms and never fired: exit 0, the change allowed.
    policies = copy_policies(tmp_path / "policies", {"data.yaml": MISSPELT})
    environments = with_latency(tmp_path / "environments")
    shipped = command.run("check", "--env", "prod", "--environments", environments, env={"FLEETOPS_OPA_URL": "", "FLEETOPS_DECISION_LOG": str(tmp_path / "d.jsonl")})
    assert shipped.returncode == 1 and "edge.latency" in shipped.stdout
    proc = command.run("check", "--env", "prod", "--environments", environments, "--policies", policies,
                   env={"FLEETOPS_OPA_URL": "", "FLEETOPS_DECISION_LOG": str(tmp_path / "decisions.jsonl")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    match = re.fullmatch(rf".*{REFUSED} \(no decision: failing closed\)", line)
    assert match and int(match["line"]) == line_of(policies / "data.yaml", "max_latncy_ms"), line
    assert "Traceback" not in proc.stderr and not (tmp_path / "decisions.jsonl").exists()


EDITS: dict[str, tuple[tuple[str, str], str, str, str]] = {
    # name: (edit of data.yaml, the path the problem names, what it says, the text of the line it names)
    "a section misspelt": (("\nedge:\n", "\negde:\n"), "egde", r"unknown key: did you mean edge\? edge is missing", "egde:"),
    "a threshold removed": (("  max_tenant_share: 0.5", "  # max_tenant_share: 0.5"), "quota.max_tenant_share",
                            r"missing: the rules that read it would never fire", "quota:"),  # the mapping that lacks it
    "a workload's band removed": (("    batch: {min: 0, max: 999}", "    # batch: {min: 0, max: 999}"), "priority.bands.batch", r"missing", "bands:"),
    "an optional key of a list item misspelt": (("      privileged: true\n      host_namespaces", "      privilegd: true\n      host_namespaces"),
                                                "workloads.system_components[2].privilegd", r"unknown key: did you mean privileged\? no rule reads it", "privilegd:"),
    "a key no rule reads": (("  max_time_slicing_replicas: 4", "  max_time_slicing_replicas: 4\n  min_time_slicing_replicas: 2"),
                            "devices.min_time_slicing_replicas", r"unknown key: .*declares max_time_slicing_replicas\)", "min_time_slicing_replicas:"),
    "a count that is a word": (("  max_time_slicing_replicas: 4", "  max_time_slicing_replicas: four"), "devices.max_time_slicing_replicas",
                               r"'four' is not of type 'integer'", "max_time_slicing_replicas: four"),
    "a share above the whole": (("  max_tenant_share: 0.5", "  max_tenant_share: 50"), "quota.max_tenant_share",
                                r"50 is greater than the maximum of 1", "max_tenant_share: 50"),
    "a pod security level misspelt": (("tenant_pod_security: [baseline, restricted]", "tenant_pod_security: [baseline, restrictd]"),
                                      r"workloads.tenant_pod_security[1]", r"'restrictd' is not one of \['privileged', 'baseline', 'restricted'\]",
                                      "tenant_pod_security:"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_each_way_the_data_breaks_its_schema_is_one_line_at_its_place(tmp_path: Path, name: str) -> None:
    (old, new), path, says, at = EDITS[name]
    policies = copy_policies(tmp_path / "policies", {"data.yaml": (old, new)})
    (line,) = refusal(policies)
    match = re.fullmatch(rf".*data\.yaml:(?P<line>\d+):\d+: {re.escape(path)}: {says}.*", line)
    assert match, line
    assert int(match["line"]) == line_of(policies / "data.yaml", at), line


def test_no_data_file_with_rules_that_read_it_is_refused(tmp_path: Path) -> None:
    policies = copy_policies(tmp_path / "policies")
    (policies / "data.yaml").unlink()
    lines = refusal(policies)
    assert len(lines) == 10 and re.fullmatch(r".*data\.yaml:1:1: quota: missing: the rules that read it would never fire \(.*data\.schema\.json requires it\)", lines[0]), lines


def test_without_a_schema_no_data_is_declared_and_every_read_is_refused(tmp_path: Path) -> None:
    policies = copy_policies(tmp_path / "policies")
    (policies / "data.schema.json").unlink()
    lines = refusal(policies)
    assert any(re.fullmatch(r".*data\.yaml:\d+:\d+: quota: unknown key: no rule reads it \(.*data\.schema\.json declares none\)", x) for x in lines), lines
    assert any(re.fullmatch(r".*edge\.rego:\d+:\d+: reads data\.fleet_data\.edge\.max_latency_ms, which .*data\.schema\.json \(there is none\) does not declare.*", x)
               for x in lines), lines


@pytest.mark.parametrize("text, says", [("{\n  \"type\": \"object\",\n}\n", r"data\.schema\.json:3:1: not JSON: "),
                                        ('{"type": "objekt"}\n', r"data\.schema\.json: not a JSON Schema at type: ")])
def test_a_schema_that_is_not_one_is_refused_naming_it(tmp_path: Path, text: str, says: str) -> None:
    policies = copy_policies(tmp_path / "policies")
    (policies / "data.schema.json").write_text(text)
    (line,) = refusal(policies)
    assert re.match(rf".*{says}", line), line


# --- the rules' reads --------------------------------------------------------------------------------


def test_a_rule_reading_a_key_the_schema_does_not_declare_is_refused_at_its_line(tmp_path: Path) -> None:
    # Before: edge.latency compared with an undefined cfg.max_latency and never fired.
    policies = copy_policies(tmp_path / "policies", {"edge.rego": ("group.latency_ms > cfg.max_latency_ms", "group.latency_ms > cfg.max_latency")})
    lines = refusal(policies)
    row = line_of(policies / "edge.rego", "> cfg.max_latency")
    column = (policies / "edge.rego").read_text().splitlines()[row - 1].index("cfg.max_latency") + 1
    assert lines[0] == (f"{policy.display_path(policies / 'edge.rego')}:{row}:{column}: reads data.fleet_data.edge.max_latency, "
                        f"which {policy.display_path(policies / 'data.schema.json')} does not declare: the rule would never fire")


@pytest.mark.parametrize("rego, edit, read", [
    # through a package alias, a list item bound by `some`, and a function's parameter (lib.rego)
    ("usage.rego", ("cfg.min_pool_utilisation", "cfg.min_pool_utilization"), "usage.min_pool_utilization"),
    ("rbac.rego", ("name in entry.may", "name in entry.mays"), "rbac.system_roles.*.mays"),
    ("lib.rego", ("r.kind == entry.kind", "r.kind == entry.kinds"), "rbac.system_roles.*.kinds"),
    ("workloads.rego", ('object.get(entry, "host_paths", [])', 'object.get(entry, "hostpaths", [])'), "workloads.system_components.*.hostpaths"),
    ("priority.rego", ("value < band.min", "value < band.minimum"), "priority.bands.*.minimum"),
])
def test_a_misspelt_read_is_found_however_the_rule_reaches_the_data(tmp_path: Path, rego: str, edit: tuple[str, str], read: str) -> None:
    policies = copy_policies(tmp_path / "policies", {rego: edit})
    lines = refusal(policies)
    shown = "data.fleet_data." + read
    assert any(f"{rego}:{line_of(policies / rego, edit[1])}:" in x and f"reads {shown}," in x for x in lines), lines


def test_a_key_named_in_a_string_or_a_comment_is_no_read(tmp_path: Path) -> None:
    policies = copy_policies(tmp_path / "policies")
    with (policies / "edge.rego").open("a") as fh:
        fh.write('\n# cfg.max_latency in a comment\nnote := sprintf("cfg.max_latency, data.fleet_data.edge.nothing %v", [cfg.max_latency_ms])\n')
    assert policy.load_bundle(policies).policies["edge.rego"].endswith("[cfg.max_latency_ms])\n")


def test_the_schema_declares_every_key_the_shipped_rules_read_and_nothing_they_do_not() -> None:
    """A new rule that reads a new key must declare it in policies/data.schema.json (the load refuses it
    otherwise), and a key the schema declares that no rule reads would be a threshold that does nothing."""
    bundle = policy.load_bundle(SHIPPED)
    schema = json.loads((SHIPPED / "data.schema.json").read_text())
    reads = {r.path for r in data_reads(bundle.policies)}
    assert all(declares(schema, path) for path in reads)
    # Not a vacuous walk: reads through a package alias, `some ... in`, `object.get` and two levels of function parameters.
    assert {("edge", "max_latency_ms"), ("rbac", "system_roles", ANY, "may"), ("rbac", "system_roles", ANY, "account_namespace"),
            ("workloads", "system_components", ANY, "privileged"), ("rbac", "system_roles", ANY, "kind"), ("priority", "bands", ANY, "min")} <= reads

    def read(key: tuple[str, ...]) -> bool:
        return any(len(r) >= len(key) and all(a in (b, ANY) for a, b in zip(r, key)) for r in reads)

    keys = {p for p in declared_paths(schema) if p and p[-1] != ANY}
    assert sorted(k for k in keys if not read(k)) == []
    assert len(keys) > 50


# --- every place that loads the policies ---------------------------------------------------------------


def test_policy_test_and_audit_refuse_the_misspelt_data(tmp_path: Path) -> None:
    policies = copy_policies(tmp_path / "policies", {"data.yaml": MISSPELT})
    environ = {"FLEETOPS_OPA_URL": "", "FLEETOPS_DECISION_LOG": str(tmp_path / "decisions.jsonl")}
    for args in (("policy", "test", "--policies", policies), ("audit", "--env", "prod", "--output", "json", "--policies", policies)):
        proc = command.run(*args, env=environ)
        assert proc.returncode == 2, (args, proc.stdout[-500:], proc.stderr)
        assert re.search(REFUSED, proc.stderr), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_the_pulumi_policy_pack_refuses_the_misspelt_data(pack: dict, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    # Before: the stack's edge group over the latency bound deployed with no violation.
    project = tmp_path / "fleet"
    shutil.copytree(ROOT / "environments", project / "environments")
    copy_policies(project / "policies", {"data.yaml": MISSPELT})
    _, state = rendered(tmp_path, MUTATIONS["edge.latency"])
    violations = validate(pack, "validate_denies", stack_resources(state), project)
    assert [m for m, _ in violations if m.startswith("fleetops policy gate could not decide: ") and re.search(REFUSED, m)], violations


def test_plan_refuses_a_base_whose_data_is_misspelt(tmp_path: Path) -> None:
    # The judge reads the base's policies: a base whose data misspells a threshold judges nothing.
    repo = make_repo(tmp_path)
    data = repo / "policies" / "data.yaml"
    data.write_text(data.read_text().replace(*MISSPELT, 1))
    base = commit(repo, "policy data with a misspelt threshold")
    environment = repo / "environments" / "prod.yaml"
    doc = yaml.safe_load(environment.read_text())
    MUTATIONS["edge.latency"](doc)
    environment.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = plan(repo, "--env", "prod", "--base", base, "--output", "json")
    assert proc.returncode == 2, proc.stdout[-800:] + proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "invalid"
    assert any(re.search(REFUSED.replace(r"data\.yaml", r"policies/data\.yaml"), d["msg"]) for d in result["decisions"]), result["decisions"]
