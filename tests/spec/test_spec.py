"""Reading environment YAML: one walk builds what PyYAML builds and knows where every node is."""

from __future__ import annotations

import datetime
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.generate import synthetic_yaml
from fleetops import spec
from tests.helpers import ROOT, small_env, spot_env, write_env

PLAIN = """\
bools: [yes, no, on, off, true, False, y, n]
nulls: [~, null, '', "~"]
ints: [0x1F, 0o17, 017, 1_000, -0, +12, 0b101, 190:20:30]
floats: [1e3, .inf, -.inf, .nan, 1.5, 6.8523015e+5, 190:20:30.15]
dates: [2026-01-01, 2026-01-01 10:00:00, 2001-12-14t21:59:43.10-05:00]
binary: !!binary aGVsbG8=
tagged: !!str 123
keys: {1: a, true: b, null: c, 2026-01-01: d, 1.5: e}
anchor: &a {x: [1, 2]}
alias: *a
aliases: [*a, *a]
quoted: ["yes", '0x1F', "2026-01-01", "<<"]
literal: |
  line
folded: >
  a
  b
empty:
recursive: &r [1, *r]
"""

UNUSUAL = """\
base: &b {x: 1, y: 2}
merged: {<<: *b, y: 3}
merged_list: {<<: [*b, {z: 4}], x: 0}
set: !!set {a, b}
omap: !!omap [{a: 1}, {b: 2}]
pairs: !!pairs [{a: 1}, {a: 2}]
"""

BUNDLED = sorted((ROOT / "environments").glob("*.yaml"))


def same(a: Any, b: Any, seen: set[tuple[int, int]] | None = None) -> bool:
    """Equal with the same types all the way down (True is not 1), NaN equal to NaN, cycles allowed."""
    seen = set() if seen is None else seen
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict | list):
        if (id(a), id(b)) in seen:
            return True
        seen.add((id(a), id(b)))
        if isinstance(a, dict):
            return [(type(k), k) for k in a] == [(type(k), k) for k in b] and all(same(a[k], b[k], seen) for k in a)
        return len(a) == len(b) and all(same(x, y, seen) for x, y in zip(a, b))
    return bool(a == b)


def pyyaml(text: str) -> Any:
    return yaml.load(text, Loader=spec.YAML_LOADER)


@pytest.mark.parametrize(
    "text",
    [PLAIN, UNUSUAL, synthetic_yaml(0.05)] + [path.read_text() for path in BUNDLED],
    ids=["plain", "unusual", "generated"] + [path.stem for path in BUNDLED],
)
def test_the_walk_builds_what_pyyaml_builds(text: str) -> None:
    data, _ = spec.parse_yaml(text, "f.yaml")
    assert same(data, pyyaml(text))


def test_plain_yaml_is_built_without_pyyamls_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise AssertionError("PyYAML's constructor was used")

    monkeypatch.setattr(spec.YAML_LOADER, "construct_document", refuse)
    for text in [PLAIN, synthetic_yaml(0.05)] + [path.read_text() for path in BUNDLED]:
        spec.parse_yaml(text, "f.yaml")
    with pytest.raises(AssertionError, match="constructor was used"):
        spec.parse_yaml(UNUSUAL, "f.yaml")


def test_an_alias_is_the_anchored_value_itself() -> None:
    data, _ = spec.parse_yaml(PLAIN, "f.yaml")
    assert data["alias"] is data["anchor"] and data["aliases"][1] is data["anchor"]
    assert data["recursive"][1] is data["recursive"]


def test_every_node_has_its_place_and_a_field_points_at_its_key() -> None:
    text = "a:\n  b: [x, {c: 1}]\n  d: &n {e: 2}\nf: *n\n"
    _, positions = spec.parse_yaml(text, "f.yaml")
    assert positions.nodes == {
        (): (1, 1),
        ("a",): (1, 1),
        ("a", "b"): (2, 3),
        ("a", "b", 0): (2, 7),
        ("a", "b", 1): (2, 10),
        ("a", "b", 1, "c"): (2, 11),
        ("a", "d"): (3, 3),
        ("a", "d", "e"): (3, 10),
        ("f",): (4, 1),  # the alias's own place; what it holds was placed where it was written
    }


@pytest.mark.parametrize("text", ["a: 1\nb:\n  c: 2\n  c: 3\n", "m: {<<: {x: 1}}\nb:\n  c: 2\n  c: 3\n"], ids=["plain", "unusual"])
def test_a_duplicate_key_is_refused_at_its_second_place(text: str) -> None:
    with pytest.raises(spec.SpecError) as raised:
        spec.parse_yaml(text, "f.yaml")
    assert raised.value.lines == ["f.yaml:4:3: b.c: duplicate key"]


@pytest.mark.parametrize(
    "text",
    [
        "when: 2026-02-30\n",
        "k: {? [a, b] : c}\n",
        "x: !!python/name:os.system ''\n",
        "b: !!binary a\n",
        "a: [1, {b: 2026-13-01}]\nc: 2026-02-30\n",
        "a: [!!int '']\nb: 2026-02-30\n",  # PyYAML builds b before a's items: its error is the one reported
        "a: [!!bool x]\nb: !!foo x\n",
        "a: {b: !!timestamp x}\n? [k]\n: 1\n",
        "a: !!bool maybe\n",
        "a: !!float ''\n",
        "a: !!timestamp foo\n",
    ],
    ids=["bad-date", "list-key", "unknown-tag", "bad-binary", "first-of-two", "scalars-first", "unknown-tag-later",
         "list-key-later", "bad-bool", "empty-float", "bad-timestamp"],
)
def test_what_pyyaml_cannot_build_is_refused_with_pyyamls_reason(text: str) -> None:
    with pytest.raises((yaml.YAMLError, ValueError, KeyError, IndexError, AttributeError)) as reference:
        pyyaml(text)
    with pytest.raises(spec.SpecError) as raised:
        spec.parse_yaml(text, "f.yaml")
    [problem] = raised.value.lines
    reason = getattr(reference.value, "problem", None) or str(reference.value).strip("'")
    assert problem.startswith("f.yaml:") and reason in problem, (problem, reason)


def test_deep_nesting_is_read_and_deeper_nesting_is_one_line() -> None:
    data, positions = spec.parse_yaml("a: " + "[" * 900 + "]" * 900 + "\n", "f.yaml")
    innermost = data["a"]
    for _ in range(899):
        [innermost] = innermost
    assert innermost == []
    assert positions.at(("a",) + (0,) * 899) == (1, 903)
    for depth, problem in ((999, "f.yaml:1:1: invalid YAML: maximum recursion depth exceeded"),
                           (1001, "f.yaml:1:1003: invalid YAML: while increasing flow level: exceeded maximum nesting depth")):
        with pytest.raises(spec.SpecError) as raised:
            spec.parse_yaml("a: " + "[" * depth + "]" * depth + "\n", "f.yaml")
        [line] = raised.value.lines
        assert line.startswith(problem)


def test_a_merged_key_may_be_overridden_and_is_placed_where_it_was_written() -> None:
    data, positions = spec.parse_yaml(UNUSUAL, "f.yaml")
    assert data["merged"] == {"x": 1, "y": 3}
    assert positions.at(("merged", "y")) == (2, 18)
    assert positions.at(("merged", "x")) == (2, 1)  # merged in from `base`: the mapping it went into


def test_merge_keys_may_be_written_twice_beside_a_quoted_one() -> None:
    text = 'm: {<<: {a: 1}, <<: {b: 2}, "<<": 3}\n'
    data, _ = spec.parse_yaml(text, "f.yaml")
    assert same(data, pyyaml(text))


def test_a_collection_key_full_of_aliases_is_refused_without_expanding_them() -> None:
    lines = ["x0: &x0 [a, b]"] + [f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}]" for i in range(1, 40)] + ["? *x39", ": 1"]
    with pytest.raises(spec.SpecError) as raised:  # its text is 2^40 nodes long
        spec.parse_yaml("\n".join(lines) + "\n", "f.yaml")
    [problem] = raised.value.lines
    assert "found unhashable key" in problem


# --- every pattern holds to the end of the value; reads are bounded (issue 20, items 8, 9) ---------

def _set(path: tuple[str | int, ...], value: Any) -> Any:
    def apply(env: dict[str, Any]) -> None:
        target: Any = env
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return apply


NEWLINE_FIELDS = {
    "tenant name": (("tenants", 0, "name"), "ml-sandbox\n"),
    "cluster name": (("clusters", 0, "name"), "center-a\n"),
    "pool name": (("clusters", 0, "pools", 0, "name"), "a100-ts\n"),
    "device resource": (("clusters", 0, "pools", 2, "device", "resource"), "huawei.com/Ascend910\n"),
    "fingerprint": (("clusters", 1, "edge_groups", 0, "fingerprints", 0), "sha256:" + "ab" * 32 + "\n"),
    "label key": (("clusters", 0, "pools", 0, "labels"), {"team\n": "a"}),
    "label value": (("clusters", 0, "pools", 0, "labels"), {"team": "a\n"}),
    "taint key": (("clusters", 0, "pools", 0, "taints", 0, "key"), "dedicated\n"),
    "taint value": (("clusters", 0, "pools", 0, "taints", 0, "value"), "inference\n"),
    "mig profile": (("clusters", 0, "pools", 1, "sharing", "mig", "profiles"), {"1g.10gb\n": 7}),
    "currency": (("budget", "currency"), "USD\n"),
}


@pytest.mark.parametrize("field", NEWLINE_FIELDS)
def test_a_value_ending_in_a_newline_matches_no_pattern(field: str, tmp_path: Path) -> None:
    # Python's `$` matches before a final newline: "ml-sandbox\n" passed as a DNS label, and the
    # revision was refused only later, by the schema check or the API server.
    env = small_env()
    path, value = NEWLINE_FIELDS[field]
    _set(path, value)(env)
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(write_env(tmp_path, env))
    [problem] = raised.value.lines
    assert "\n" not in problem and "\\n'" in problem, problem  # one line, naming the value as written


@pytest.mark.parametrize(("path", "value", "message"), [
    # a quote ended the PromQL string of the node-offline alert that the glob is written into
    (("clusters", 1, "edge_groups", 0, "match", "name_pattern"), 'jetson-*"} or vector(1) #',
     "must be a glob over node names: lowercase letters, digits, '-', '.', and '*', '?', '[...]'"),
    # the API server refuses an image with white space: the reconciler's Deployment would never apply
    (("reconciler",), {"image": "ghcr.io/fleetops/fleetops:0.1.0\n"}, "must be a container image reference without spaces"),
], ids=["node glob", "image"])
def test_free_strings_that_reach_objects_hold_to_what_their_readers_take(path: tuple[str | int, ...], value: Any, message: str,
                                                                          tmp_path: Path) -> None:
    env = small_env()
    _set(path, value)(env)
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(write_env(tmp_path, env))
    [problem] = raised.value.lines
    assert message in problem, problem


def test_an_environment_is_read_from_a_regular_file_only(tmp_path: Path) -> None:
    # reconcile reads environments/NAME.yaml of a checkout with no other check: a link to /dev/zero
    # there was read until memory ran out.
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    with pytest.raises(spec.SpecError) as raised:
        spec.read_environment(tmp_path / "zero.yaml", display="environments/zero.yaml")
    assert raised.value.lines == [
        "environments/zero.yaml:1:1: is a character device, not a regular file: an environment is read from a regular file only"]


def test_a_file_longer_than_its_reported_size_is_read_only_to_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc files report size 0 whatever they hold: the bytes read are bounded, not the size believed.
    monkeypatch.setattr(spec.document, "LIMITS", spec.Limits(file_bytes=64))  # the limits read_environment reads
    (tmp_path / "maps.yaml").symlink_to("/proc/self/maps")
    assert (tmp_path / "maps.yaml").stat().st_size == 0
    with pytest.raises(spec.SpecError) as raised:
        spec.read_environment(tmp_path / "maps.yaml")
    assert raised.value.lines == [f"{tmp_path / 'maps.yaml'}:1:1: more than the 64 byte limit for an environment"]


def test_the_limits_hold_the_generated_large_fleet(tmp_path: Path) -> None:
    # scale 4 is the largest fleet the generator writes (benchmarks/scale_bench.py measures it): its tenants are
    # as many as the policy input holds (tests/policy/test_policy.py), the other counts far below their limits.
    env = spec.load_environment(_written(tmp_path, synthetic_yaml(4)))
    groups = sum(len(c.pools) + len(c.edge_groups) for c in env.clusters)
    clusters = {c.name: c for c in env.clusters}
    placements = sum(spec.open_groups(t, clusters[name]) for t in env.tenants for name in t.clusters)
    assert (len(env.clusters), groups, len(env.tenants), placements) == (32, 1600, 4000, 12400)  # 16 edge clusters of 50 groups: Kueue holds 64
    assert spec.LIMITS.clusters >= 15 * len(env.clusters) and spec.LIMITS.groups >= 5 * groups and spec.LIMITS.tenants >= len(env.tenants)
    assert spec.LIMITS.placements >= 10 * placements and spec.LIMITS.quotas >= 100 * max(len(t.quota) for t in env.tenants)


def test_the_generator_refuses_a_fleet_past_the_tenants_an_environment_holds() -> None:
    # Scales 5 and 10 wrote fleets that validate refused (and whose policy input check refused).
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"
    done = subprocess.run([sys.executable, str(script), "--scale", "5"], capture_output=True, text=True, check=False, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"generate.py: --scale 5: 5,000 tenants: an environment holds at most {spec.LIMITS.tenants:,} (fleetops.spec.LIMITS.tenants, "
                           f"as many as its policy input of at most {spec.LIMITS.policy_input_bytes:,} bytes holds): --scale {spec.LIMITS.tenants / 1000:g} at most\n")


def _written(directory: Path, text: str) -> Path:
    path = directory / "large.yaml"
    path.write_text(text)
    return path


def _problems(tmp_path: Path, env: dict[str, Any]) -> list[str]:
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(write_env(tmp_path, env))
    return [p.split(": ", 1)[1] for p in raised.value.lines]  # without file:line:col


def test_every_problem_of_a_file_is_reported_in_one_run(tmp_path: Path) -> None:
    # Schema errors came first and alone; the cross-field ones appeared only once those were fixed.
    env = small_env()
    env["clusters"][0]["pools"][0]["nodes"] = "two"  # schema: the pool cannot be judged further
    env["tenants"][1]["workloadz"] = env["tenants"][1].pop("workloads")  # schema, with a suggestion
    env["tenants"][0]["quota"]["nvidia.com/gpu"] = {"guaranteed": 8, "burst": 4}  # cross-field, in a valid tenant
    env["tenants"][0]["priority_classes"] = ["nowhere"]  # cross-field
    env["tenants"][0]["pools"] = ["a100-ts", "h100-mig"]  # names the invalid pool: no "unknown pool" for it
    problems = _problems(tmp_path, env)
    assert problems == [
        "clusters[center-a].pools[a100-ts].nodes: must be an integer, got 'two'",
        "tenants[factory].workloads: required field is missing",
        "tenants[factory].workloadz: unknown field (did you mean 'workloads'?)",
        "tenants[vision].priority_classes[0]: unknown priority class 'nowhere'",
        'tenants[vision].quota["nvidia.com/gpu"].burst: must be >= guaranteed (8), got 4',
    ]


def test_a_problem_names_its_item_as_the_plan_names_the_field(tmp_path: Path) -> None:
    from fleetops import changes

    base, head = small_env(), small_env()
    head["clusters"][0]["pools"][2]["nodes"] = -1
    [edit] = changes.spec_changes(changes.parse(yaml.safe_dump(base), "base.yaml"), changes.parse(yaml.safe_dump(head), "head.yaml"))
    [problem] = _problems(tmp_path, head)
    assert problem.startswith(f"{edit.path}: ") and edit.path == "clusters[center-a].pools[ascend].nodes", (edit, problem)


def test_items_whose_names_do_not_say_which_keep_their_index(tmp_path: Path) -> None:
    env = small_env()
    env["tenants"][1]["name"] = "vision"  # twice: "tenants[vision]" would be either
    env["tenants"][1]["quota"]["nvidia.com/gpu"]["guaranteed"] = -1
    assert 'tenants[1].quota["nvidia.com/gpu"].guaranteed: must be >= 0, got -1' in _problems(tmp_path, env)


def test_a_file_naming_another_environment_is_told_so_with_its_other_problems(tmp_path: Path) -> None:
    env = small_env()
    env["environment"] = "prod"
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["burst"] = 1
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(env))
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(path)
    problems = [p.split(": ", 1)[1] for p in raised.value.lines]
    assert problems == ["environment: must equal the file name 'test', got 'prod'",
                        'tenants[vision].quota["nvidia.com/gpu"].burst: must be >= guaranteed (20), got 1']


# --- spot pools ---------------------------------------------------------------------------------


def test_a_spot_pool_is_priced_at_its_own_spot_price(tmp_path: Path) -> None:
    # 2 nodes x 8 GPUs at 0.6 a device-hour; its model has no price in `prices` and needs none.
    small = spec.load_environment(write_env(tmp_path, small_env()))
    env = spec.load_environment(write_env(tmp_path, spot_env()))
    assert spec.monthly_cost(env) - spec.monthly_cost(small) == pytest.approx(16 * 0.6 * 730)
    same_model = spot_env()
    same_model["prices"]["A100-SXM4-80GB"] = 1.8  # the on-demand price of its model is not what it costs
    assert spec.monthly_cost(spec.load_environment(write_env(tmp_path, same_model))) == spec.monthly_cost(env) + 0.0


def _spot_problems(tmp_path: Path, change: Any) -> list[str]:
    """The problems of the spot environment once `change`d, none when it loads."""
    env = spot_env()
    change(env)
    try:
        spec.load_environment(write_env(tmp_path, env))
    except spec.SpecError as exc:
        return [p.split(": ", 1)[1] for p in exc.lines]
    return []


def test_a_spot_pool_no_class_of_its_tenants_may_use_is_refused(tmp_path: Path) -> None:
    def no_preemptible_class(env: dict[str, Any]) -> None:
        env["tenants"][0]["priority_classes"] = ["high"]

    assert _spot_problems(tmp_path, no_preemptible_class) == [
        "tenants[vision].pools[3]: a100-spot is a spot pool, but none of the tenant's priority classes is preemptible: its work "
        "could never run there; mark a class it uses `preemptible: true`, or accept one for this tenant in its preemptible_classes, "
        "or remove the pool"]

    def named_by_none(env: dict[str, Any]) -> None:
        env["tenants"][0].pop("pools")  # every pool but the spot one

    assert _spot_problems(tmp_path, named_by_none) == [
        "clusters[center-a].pools[a100-spot].spot: no tenant may use spot pool a100-spot: name it in the pools of a tenant "
        "of cluster center-a with a preemptible priority class"]


def test_a_tenant_may_accept_preemption_for_its_own_classes_on_its_spot_pools(tmp_path: Path) -> None:
    # vision's only classes are high (not preemptible) and low (preemptible). Accepting preemption for
    # high, for itself, opens its spot pool to high's work without making high preemptible elsewhere.
    def accepted_by_tenant(env: dict[str, Any]) -> None:
        env["tenants"][0]["priority_classes"] = ["high"]
        env["tenants"][0]["preemptible_classes"] = ["high"]

    assert _spot_problems(tmp_path, accepted_by_tenant) == []
    env = spot_env()
    accepted_by_tenant(env)
    loaded = spec.load_environment(write_env(tmp_path, env))
    assert spec.preemptible_classes(loaded.tenants[0], loaded) == ["high"]
    assert spec.preemptible_classes(loaded.tenants[1], loaded) == ["low"]  # factory: every class, low alone preemptible


def test_a_tenant_accepts_preemption_only_for_its_classes_and_where_it_names_a_spot_pool(tmp_path: Path) -> None:
    env = spot_env()
    env["priority_classes"].append({"name": "critical", "value": 100000, "workload": "inference"})
    env["tenants"][0]["preemptible_classes"] = ["critical", "nowhere"]
    env["tenants"][1]["priority_classes"] = ["high"]
    env["tenants"][1]["preemptible_classes"] = ["high"]
    path, problems = _refusals(tmp_path, env)
    accepts = place(path, "name: vision", "preemptible_classes").split(":")
    assert problems == [
        f"{path}:{int(accepts[0]) + 1}:{int(accepts[1]) + 2}: tenants[vision].preemptible_classes[0]: tenant vision may not use priority "
        "class critical (its classes: high, low)",
        f"{path}:{int(accepts[0]) + 2}:{int(accepts[1]) + 2}: tenants[vision].preemptible_classes[1]: unknown priority class 'nowhere'",
        f'{path}:{place(path, "name: factory", "preemptible_classes")}: tenants[factory].preemptible_classes: the tenant names no spot '
        "pool, where alone preemption is accepted: name one in its pools, or remove preemptible_classes"]


def test_a_guarantee_that_only_spot_capacity_could_hold_is_refused(tmp_path: Path) -> None:
    def only_spot(env: dict[str, Any]) -> None:
        env["tenants"][0]["pools"] = ["ascend", "a100-spot"]

    assert _spot_problems(tmp_path, only_spot) == [
        'tenants[vision].quota["nvidia.com/gpu"].guaranteed: 20 cannot be guaranteed: cluster center-a offers nvidia.com/gpu to '
        "this tenant only on spot pools, which the provider may reclaim; set guaranteed: 0 and use burst, or name a pool that is not spot"]

    def burst_only(env: dict[str, Any]) -> None:
        only_spot(env)
        env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed"] = 0

    assert _spot_problems(tmp_path, burst_only) == []


def test_the_spot_taint_is_fleetops_own(tmp_path: Path) -> None:
    def by_hand(env: dict[str, Any]) -> None:
        env["clusters"][0]["pools"][1]["taints"] = [{"key": "fleetops.io/spot", "value": "true", "effect": "NoSchedule"}]

    assert _spot_problems(tmp_path, by_hand) == [
        "clusters[center-a].pools[h100-mig].taints[0].key: fleetops.io/spot is set by fleetops on spot pools (spot: {price: ...})"]


def test_the_review_says_what_a_spot_price_change_costs(tmp_path: Path) -> None:
    from fleetops import changes

    before, after = spot_env(), spot_env()
    before["prices"]["A100-SXM4-80GB"] = 1.8
    after["prices"]["A100-SXM4-80GB"] = 9.9  # the model's on-demand price moves no spot pool
    after["clusters"][0]["pools"][3]["spot"]["price"] = 0.4
    base = spec.load_environment(write_env(tmp_path, before))
    texts = {c.text: c.cost for c in changes.fleet_changes(base, spec.load_environment(write_env(tmp_path, after)))}
    assert texts == {"center-a/a100-spot: spot at 0.6/device-hour → spot at 0.4/device-hour (-2,336 USD/mo)": pytest.approx(-16 * 0.2 * 730),
                     "price of A100-SXM4-80GB: 1.8 → 9.9 USD/device-hour (+0 USD/mo on 0 devices)": 0.0}
    # The plan's share of the cost from prices is the same computation, in spec.cost, as the lines' own figures.
    assert spec.price_change_cost(base, spec.load_environment(write_env(tmp_path, after))) == pytest.approx(-16 * 0.2 * 730)


def _refusals(tmp_path: Path, env: dict[str, Any]) -> tuple[Path, list[str]]:
    """The file `env` is written to, and validate's problems with it, each with its file:line:col."""
    path = write_env(tmp_path, env)
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(path)
    return path, raised.value.lines


def place(path: Path, after: str, key: str) -> str:
    """`line:col` of `key:` in the file, on the first line holding it at or after the line holding `after`."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    found = next(i for i in range(start, len(lines)) if lines[i].lstrip(" -").startswith(f"{key}:"))
    return f"{found + 1}:{lines[found].index(key) + 1}"


def test_a_guarantee_no_one_pool_has_room_for_is_refused_unless_its_split_is_declared(tmp_path: Path) -> None:
    # center-a: a100-ts 32 units, h100-mig 56. 60 fits both together but neither alone, and Kueue
    # admits one job in one pool: a 60-GPU job "within the guarantee" could never be admitted.
    env = small_env()
    env["tenants"][0]["quota"]["nvidia.com/gpu"] = {"guaranteed": 60, "burst": 80}
    path, problems = _refusals(tmp_path, env)
    assert problems == [
        f'{path}:{place(path, "name: vision", "guaranteed")}: tenants[vision].quota["nvidia.com/gpu"].guaranteed: 60 nvidia.com/gpu on center-a '
        "fits no one pool's room (a100-ts 32, h100-mig 56 left after the other tenants' guarantees), and Kueue admits a job in one pool: "
        "declare the split, e.g. guaranteed_per_pool: {h100-mig: 56, a100-ts: 4}, so that a job within it is bounded by its pool's share, "
        "or lower guaranteed to 56"]
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed_per_pool"] = {"a100-ts": 32, "h100-mig": 28}
    spec.load_environment(write_env(tmp_path, env))
    # More than the pools hold however split is the policies' to judge (quota.guaranteed_over_capacity).
    env["tenants"][0]["quota"]["nvidia.com/gpu"] = {"guaranteed": 100, "burst": 100}
    spec.load_environment(write_env(tmp_path, env))


def test_declared_shares_that_over_commit_a_pool_are_refused_at_each_share_with_a_split_that_fits(tmp_path: Path) -> None:
    # center-a: a100-ts 32 units, h100-mig 56: vision's 20 and speech's 24, both declared on a100-ts, are 44
    # on 32 units while the cluster has 88 for the 44 guaranteed. Kueue held both, and neither tenant's
    # jobs within the guarantee could all run.
    env = small_env()
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed_per_pool"] = {"a100-ts": 20}
    env["tenants"].append({"name": "speech", "clusters": ["center-a"], "workloads": ["inference"],
                           "quota": {"nvidia.com/gpu": {"guaranteed": 24, "burst": 24, "guaranteed_per_pool": {"a100-ts": 24}}}})
    path, problems = _refusals(tmp_path, env)
    assert problems == [
        f'{path}:{place(path, "name: vision", "a100-ts")}: tenants[vision].quota["nvidia.com/gpu"].guaranteed_per_pool["a100-ts"]: 20 of '
        "a100-ts's 32 nvidia.com/gpu, but the shares declared on it add up to 44 (with speech 24), while cluster center-a has room for "
        "every guarantee: declare e.g. guaranteed_per_pool: {h100-mig: 20}",
        f'{path}:{place(path, "name: speech", "a100-ts")}: tenants[speech].quota["nvidia.com/gpu"].guaranteed_per_pool["a100-ts"]: 24 of '
        "a100-ts's 32 nvidia.com/gpu, but the shares declared on it add up to 44 (with vision 20), while cluster center-a has room for "
        "every guarantee: declare e.g. guaranteed_per_pool: {h100-mig: 24}"]
    # Taking one suggestion makes the file valid.
    env["tenants"][2]["quota"]["nvidia.com/gpu"]["guaranteed_per_pool"] = {"h100-mig": 24}
    spec.load_environment(write_env(tmp_path, env))


def test_a_guarantee_its_pools_have_no_room_for_is_refused_while_the_cluster_has_room(tmp_path: Path) -> None:
    # vision may use a100-ts alone (32 units) and asks 40; the cluster has 88 for it. Held on a100-ts
    # anyway, it over-committed the pool; the policies judge only the cluster's sum (40 of 88).
    env = small_env()
    env["tenants"][0]["pools"] = ["a100-ts", "ascend"]
    env["tenants"][0]["quota"]["nvidia.com/gpu"] = {"guaranteed": 40, "burst": 40}
    path, problems = _refusals(tmp_path, env)
    assert problems == [
        f'{path}:{place(path, "name: vision", "guaranteed")}: tenants[vision].quota["nvidia.com/gpu"].guaranteed: 40 nvidia.com/gpu on '
        "center-a does not fit the pools open to this tenant (a100-ts 32 left after the other tenants' guarantees), though the cluster "
        "has room for it elsewhere: open another pool to the tenant (pools), or lower guaranteed to 32"]
    # Beyond what the whole cluster holds, it is the policies' quota.guaranteed_over_capacity (a waiver may accept it).
    env["tenants"][0]["quota"]["nvidia.com/gpu"] = {"guaranteed": 90, "burst": 90}
    spec.load_environment(write_env(tmp_path, env))


def test_a_declared_split_names_the_tenant_s_pools_and_adds_up_to_the_guarantee(tmp_path: Path) -> None:
    env = small_env()
    env["tenants"][0]["pools"] = ["a100-ts", "ascend"]
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed_per_pool"] = {"a100-ts": 8, "h100-mig": 12}
    assert _problems(tmp_path, env) == [
        'tenants[vision].quota["nvidia.com/gpu"].guaranteed_per_pool["h100-mig"]: h100-mig is no pool or edge group open to this tenant that offers nvidia.com/gpu (open: a100-ts)',
        'tenants[vision].quota["nvidia.com/gpu"].guaranteed_per_pool: the shares of center-a\'s pools (a100-ts) add up to 8, not the guarantee 20: the guarantee applies in each cluster of the tenant',
    ]


def test_a_tenant_named_as_another_tenant_s_non_preempting_queue_is_refused(tmp_path: Path) -> None:
    # vision may use `batch` (preemption: Never): its work of that class goes to the ClusterQueue
    # vision-non-preempting, which a tenant of that name would also render on center-a.
    env = small_env()
    env["priority_classes"].append({"name": "batch", "value": 10, "workload": "batch", "preemption": "Never"})
    env["tenants"][0]["priority_classes"] = ["high", "batch"]
    env["tenants"].append({"name": "vision-non-preempting", "clusters": ["center-a"], "workloads": ["inference"]})
    assert _problems(tmp_path, env) == [
        "tenants[vision-non-preempting].name: 'vision-non-preempting' is the name of tenant vision's non-preempting ClusterQueue on center-a "
        "(for its classes declared preemption: Never): pick another tenant name"]
    env["tenants"][-1]["clusters"] = ["edge-b"]  # on another cluster: no clash
    env["tenants"][-1]["edge_groups"] = ["jetson"]
    spec.load_environment(write_env(tmp_path, env))


def _fpga_pools(count: int) -> list[dict[str, Any]]:
    """`count` FPGA pools, each of its own region: a device resource of its own, so a Kueue resource group each."""
    return [{"name": f"fpga-{i}", "device": {"resource": f"fpga.intel.com/region-{i:032x}", "model": "Arria10-GX1150", "per_node": 1}, "nodes": 1}
            for i in range(count)]


def test_resource_groups_past_kueue_s_limits_are_refused_at_their_lines(tmp_path: Path) -> None:
    env = small_env()
    env["prices"]["Arria10-GX1150"] = 0.9
    env["clusters"][0]["pools"] += _fpga_pools(15)  # with nvidia.com/gpu and Ascend: 17 resources that share no pool
    env["tenants"][0]["quota"].update({f"fpga.intel.com/region-{i:032x}": {"guaranteed": 0, "burst": 1} for i in range(15)})
    assert _problems(tmp_path, env) == [
        "clusters[center-a].pools: 17 Kueue resource groups (device resources that share no pool), more than the 16 Kueue holds "
        "(the cluster's Cohort center-a): move pools to another cluster",
        "tenants[vision].quota: 17 Kueue resource groups (device resources that share no pool), more than the 16 Kueue holds "
        "(its ClusterQueue on center-a): name fewer pools, or fewer device resources",
    ]
    env = small_env()
    env["clusters"][0]["pools"] = [{"name": f"h100-{i}", "device": {"resource": "nvidia.com/gpu", "model": "H100-SXM-80GB", "per_node": 8}, "nodes": 1}
                                   for i in range(65)] + env["clusters"][0]["pools"][2:]
    env["tenants"][0]["pools"] = ["h100-0", "ascend"]
    env["tenants"][0]["quota"]["nvidia.com/gpu"]["guaranteed"] = 8  # what h100-0 holds: 20 over-commits it (refused at its line)
    assert _problems(tmp_path, env) == [
        "clusters[center-a].pools: nvidia.com/gpu: 65 pools and edge groups in one Kueue resource group, more than the 64 flavors it holds "
        "(the cluster's Cohort center-a): move pools to another cluster"]
    del env["clusters"][0]["pools"][64]
    spec.load_environment(write_env(tmp_path, env))  # 64 is what Kueue holds


def test_kueue_s_webhook_limits_on_a_cluster_queue_are_known() -> None:
    # Kueue v0.17.0's ClusterQueue webhook, beyond its CRD: 512 flavor-resource pairs in a group, 256 flavors in all.
    nine_by_57 = [([f"example.com/r{i}" for i in range(9)], [f"pool-{j}" for j in range(57)])]
    assert spec.kueue_limit_problem(nine_by_57) == ("example.com/r0 and 8 more resources sharing its pools: 57 pools x 9 resources in one "
                                                    "Kueue resource group, more than the 512 flavor-resource combinations it holds")
    five_groups = [([f"example.com/r{i}"], [f"pool-{i}-{j}" for j in range(52)]) for i in range(5)]
    assert spec.kueue_limit_problem(five_groups) == "260 pools and edge groups over the Kueue resource groups, more than the 256 a ClusterQueue holds"
    assert spec.kueue_limit_problem(five_groups[:4]) is None


def test_the_volcano_backend_is_refused_with_the_fix(tmp_path: Path) -> None:
    # Its queues' `deserved` needed a capacity plugin fleetops never configured, and nothing proved them.
    env = small_env()
    env["scheduler"] = {"backend": "volcano"}
    with pytest.raises(spec.SpecError) as raised:
        spec.load_environment(write_env(tmp_path, env))
    [problem] = raised.value.lines
    line = next(n for n, text in enumerate(write_env(tmp_path, env).read_text().splitlines(), start=1) if "backend: volcano" in text)
    assert problem.startswith(f"{tmp_path / 'test.yaml'}:{line}:") and problem.endswith(
        "scheduler.backend: volcano is no longer offered: fleetops proves what its quotas do on the real Kueue only; use backend: kueue"), problem


def test_billing_that_contradicts_its_mode_is_refused_at_its_field(tmp_path: Path) -> None:
    import datetime

    env = small_env()
    env["tenants"][0]["billing"] = {"mode": "postpaid", "top_ups": [{"date": datetime.date(2026, 11, 1), "amount": 10}], "low_balance_at": 5}
    env["tenants"][1]["billing"] = {"mode": "prepaid"}
    assert _problems(tmp_path, env) == [
        "tenants[vision].billing.top_ups: top-ups are for prepaid tenants; this one is postpaid (set mode: prepaid, or remove them)",
        "tenants[vision].billing.low_balance_at: a low-balance alert is for prepaid tenants; this one is postpaid",
        "tenants[factory].billing.top_ups: a prepaid tenant needs at least one top-up (top_ups: [{date: 2026-11-01, amount: ...}])",
    ]


def test_a_prepaid_tenant_carries_its_dated_top_ups(tmp_path: Path) -> None:
    import datetime

    env = small_env()
    env["tenants"][0]["billing"] = {"mode": "prepaid", "top_ups": [{"date": datetime.date(2026, 11, 15), "amount": 500.5}], "low_balance_at": 50}
    billing = spec.load_environment(write_env(tmp_path, env)).tenants[0].billing
    assert (billing.mode, billing.top_ups[0].date, billing.top_ups[0].amount, billing.low_balance_at) == ("prepaid", datetime.date(2026, 11, 15), 500.5, 50)
    env["tenants"][0]["billing"]["top_ups"].append({"date": datetime.date(2026, 12, 1), "amount": 0})
    assert _problems(tmp_path, env) == ["tenants[vision].billing.top_ups[1].amount: must be > 0.0, got 0"]


def _fields_trees():
    from hypothesis import strategies as st

    scalars = st.sampled_from([0, 1, 2, 1.0, True, False, None, "a", "1", datetime.date(2026, 1, 2), "2026-01-02"])
    named = st.fixed_dictionaries({"name": st.sampled_from(["x", "y", "z", 1, "1"])}, optional={"a": scalars, "b": scalars})
    return st.recursive(scalars, lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "name"]), kids, max_size=3),
        st.lists(named, max_size=3), st.lists(st.fixed_dictionaries({"name": st.sampled_from(["x", "y"]), "c": kids}), max_size=3)),
        max_leaves=10)


def test_the_field_diff_walking_only_what_differs_finds_what_flattening_both_files_finds() -> None:
    # plan compares the two files top-down and flattens only the parts that differ: its rows, lines
    # and edited fields must be those of flattening both files whole, whatever the files hold
    # (renamed, inserted and duplicate-named items, a mapping turned list, 1 against 1.0 and true,
    # a date against its text).
    from unittest import mock

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fleetops import changes

    def flatten_both(old: Any, new: Any, locs: Any, shown: str, out: Any) -> None:
        for value, loc, leaves in ((old, locs[0], out[0]), (new, locs[1], out[1])):
            if value is not changes._ABSENT:
                changes._leaves(value, loc, shown, leaves)

    @settings(max_examples=300, deadline=None)
    @given(_fields_trees(), _fields_trees(), _fields_trees(), st.booleans(), st.booleans())
    def check(same: Any, was: Any, now: Any, base_exists: bool, head_exists: bool) -> None:
        files = [changes.parse(yaml.safe_dump({"same": same, "edited": part}) if exists else None, name)
                 for part, exists, name in ((was, base_exists, "base.yaml"), (now, head_exists, "head.yaml"))]
        walked = changes.spec_changes_and_fields(*files)
        with mock.patch.object(changes, "_differing_part", flatten_both):
            assert walked == changes.spec_changes_and_fields(*files)

    check()


def test_one_capacity_row_is_what_validate_audit_and_both_sides_of_a_plan_show() -> None:
    # Capacity was a dict in validate and audit and a dataclass in plan, each converting the other's keys.
    from fleetops import plan

    env = spec.load_environment(ROOT / "environments" / "prod.yaml")
    rows = spec.capacity_rows(env)
    moves = plan.capacity_rows(None, env)
    assert {(m.cluster, m.resource): m.after for m in moves} == {(r.cluster, r.resource): r.capacity for r in rows}
    assert all(m.before == spec.NO_CAPACITY and not m.before.physical for m in moves)
    mig = next(r for r in rows if r.capacity.sharing_factor > 1)  # a shared device: units over devices, headroom of units
    c = mig.capacity
    assert c.sharing_factor == round(c.schedulable / c.physical, 2)
    assert c.headroom_percent == round(100 * (c.schedulable - c.guaranteed) / c.schedulable, 1)
    assert mig.to_dict()["capacity"] == c.schedulable and list(mig.to_dict()) == [
        "cluster", "resource", "physical", "capacity", "sharing_factor", "guaranteed", "burst", "headroom_percent"]
