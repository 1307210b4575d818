"""What an operator reads of a pass: the table, its last line, one line for bad input, the metrics and the log."""

from __future__ import annotations

import copy
import io
import json
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from rich.console import Console
from typer.testing import CliRunner

from fleetops import cli, diff, errors, reconcile, spec
from fleetops.output import table, terminal
from fleetops.reconcile import result as result_mod
from fleetops.cluster import TIMEOUT, ApiError, KubeCluster
from tests.fakes import Faults, MemoryCluster
from tests.backends import RealCluster
from tests.reconcile_support import DEV, allow, commit, dev, key_fingerprint, kubelet_csr, new_repo, options

CRD_VERSIONS = ("kueue.x-k8s.io/v1beta2", "apps.kubeedge.io/v1alpha1",
                "apps.openyurt.io/v1beta2", "monitoring.coreos.com/v1")
QUOTA = ("v1", "ResourceQuota", "platform-dev", "device-nvidia-com-gpu")


def printed(result: reconcile.PassResult, monkeypatch: pytest.MonkeyPatch, width: int = 100) -> tuple[str, str]:
    """What `reconcile --once` prints of a pass, on a terminal `width` columns wide: (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(terminal, "out", Console(file=out, width=width, color_system=None, soft_wrap=True))
    monkeypatch.setattr(terminal, "err", Console(file=err, width=width, color_system=None, soft_wrap=True))
    table.reconcile_pass(result)
    return out.getvalue(), err.getvalue()


def column(table: str, header: str, row: str) -> str:
    """The text of one column of the table row whose first line holds `row`, its wrapped lines joined."""
    lines = table.splitlines()
    heading = next(i for i, line in enumerate(lines) if header in line)
    cells = lambda line: [c.strip() for c in line.replace("┃", "│").split("│")]  # noqa: E731
    index = cells(lines[heading]).index(header)
    start = next(i for i, line in enumerate(lines) if row in line)
    parts = [cells(lines[start])[index]]
    for line in lines[start + 1:]:
        if "─" in line or cells(line)[1]:  # a rule, or the next row (its cluster column is filled)
            break
        parts.append(cells(line)[index])
    return "".join(parts)


def converged(backend) -> tuple:
    env, state = dev()
    apis = backend(env)
    assert reconcile.run_pass(env, state, apis, allow, options()).status == "applied"
    return env, state, apis


def hand_edit(state, api, value: str = "999") -> None:
    quota = copy.deepcopy(next(m for m in state.clusters["dev-center"] if (m["kind"], m["metadata"]["name"]) == QUOTA[1::2]
                               and m["metadata"]["namespace"] == QUOTA[2]))
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = value
    api.put(quota, manager="kubectl-edit")


# --- item 5: operator output -------------------------------------------------------------------


def test_detect_only_says_which_revision_the_clusters_last_applied(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    env, state, apis = converged(backend)
    result = reconcile.run_pass(env, state, apis, allow, options(detect_only=True))  # a new process: it remembers nothing
    assert result.status == "clean" and result.last_applied == "rev-1"
    assert result.clusters["dev-center"].last_applied == "rev-1"
    assert printed(result, monkeypatch)[0].rstrip().endswith("last applied: rev-1")


def test_a_missing_kubeconfig_is_one_line_naming_the_file_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repo(tmp_path / "fleet")
    commit(repo, DEV.read_text(), "dev")
    missing = tmp_path / "nowhere" / "config"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    result = CliRunner().invoke(cli.app, ["reconcile", "--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c"), "--once"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"{missing}: no such kubeconfig file (cluster dev-center: set its kubeconfig in the environment, --kubeconfig or $KUBECONFIG)"]


@pytest.mark.parametrize("text, says", [
    ("apiVersion: v1\nkind: Config\ncontexts: []\n", "cannot load context dev (cluster c1): Invalid kube-config file. Expected object with name dev"),
    ("users:\n- name: x\n  user: {token: s3cr3t-token\n", "cannot load context dev (cluster c1): ParserError"),
])
def test_an_unreadable_kubeconfig_is_bad_input_named_with_its_context_never_its_contents(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(errors.KubeconfigError) as raised:
        KubeCluster("c1", kubeconfig=str(path), context="dev")
    # Bad input, not an API call that went unanswered: no retry, exit 2.
    assert not isinstance(raised.value, ApiError) and raised.value.exit_code == errors.ExitCode.BAD_INPUT
    assert str(raised.value).startswith(f"{path}: {says}") and "s3cr3t" not in str(raised.value)


def test_a_reconcile_given_a_kubeconfig_it_cannot_load_says_so_in_one_line_without_its_token(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "fleet")
    commit(repo, DEV.read_text(), "dev")
    config = tmp_path / "kubeconfig"
    config.write_text("users:\n- name: x\n  user: {token: s3cr3t-token\n")
    result = CliRunner().invoke(cli.app, ["reconcile", "--env", "dev", "--repo", str(repo), "--cache-dir", str(tmp_path / "c"), "--once",
                                          "--kubeconfig", str(config)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"{config}: cannot load context dev (cluster dev-center): ParserError"]


@pytest.fixture(params=["memory", pytest.param("real", marks=pytest.mark.real)])
def bare(request: pytest.FixtureRequest, tmp_path: Path):
    """Clusters as they come: Kubernetes' own APIs only, no CRD of Kueue, KubeEdge, OpenYurt or prometheus-operator."""
    if request.param == "memory":
        return lambda env: {c.name: MemoryCluster(c.name, unserved=CRD_VERSIONS) for c in env.clusters}
    start = request.getfixturevalue("api_servers")

    def real(env):
        started = start(*(c.name for c in env.clusters), crds=False)
        return {name: RealCluster(name, server, tmp_path / f"{name}.kubeconfig") for name, server in started.items()}

    return real


def test_a_bare_cluster_gets_one_line_per_missing_api_naming_what_to_install(bare, monkeypatch: pytest.MonkeyPatch) -> None:
    env, state = dev()
    apis = bare(env)
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert result.status == "errors"
    for name, manifests in state.clusters.items():
        needed = sorted({m["apiVersion"] for m in manifests if m["apiVersion"] in CRD_VERSIONS})
        errors = result.clusters[name].errors
        assert [e.split(": ")[1].split()[0] for e in errors] == needed, errors  # one line per API version, no 404 per object
        kinds = sorted({m["kind"] for m in manifests if m["apiVersion"] == "kueue.x-k8s.io/v1beta2"})
        count = sum(m["apiVersion"] == "kueue.x-k8s.io/v1beta2" for m in manifests)
        assert f"{name}: kueue.x-k8s.io/v1beta2 not served: install Kueue (its CRDs and controller) before fleetops applies {', '.join(kinds)} ({count} object(s) not applied)" in errors
        assert not any(a.error for a in result.clusters[name].actions)
        # What Kubernetes serves is applied all the same.
        namespace = next(m for m in manifests if m["kind"] == "Namespace")["metadata"]["name"]
        assert apis[name].peek("v1", "Namespace", "", namespace) is not None
    if "monitoring.coreos.com/v1" in {m["apiVersion"] for m in state.clusters["dev-center"]}:
        assert any("install prometheus-operator" in e for e in result.errors)
    stdout, stderr = printed(result, monkeypatch)
    assert stderr.splitlines() == result.errors  # each on one line of its own, nothing else
    assert "No matches found" not in stdout + stderr and "404" not in stdout + stderr


def test_a_field_conflict_says_force_conflicts_and_is_not_retried(backend) -> None:
    env, state, apis = converged(backend)
    hand_edit(state, apis["dev-center"])
    opts = options()
    result = reconcile.run_pass(env, state, apis, allow, opts)
    [error] = result.errors
    assert "ResourceQuota platform-dev/device-nvidia-com-gpu" in error and "--force-conflicts takes it back for Git" in error
    assert opts.sleep == []  # sending the same apply again cannot take the field: no backoff, no retries


def test_a_drift_row_shows_the_values_and_who_changed_them(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    env, state, apis = converged(backend)
    hand_edit(state, apis["dev-center"])
    result = reconcile.run_pass(env, state, apis, allow, options(detect_only=True))
    [update] = [a for a in result.clusters["dev-center"].actions if a.verb == "update"]
    stdout = printed(result, monkeypatch, width=250)[0]
    assert column(stdout, "detail", "ResourceQuota platform-dev/device-nvidia-com-gpu") == \
        'spec.hard["requests.nvidia.com/gpu"]: "999" → "32" (changed by kubectl-edit)'
    assert update.to_dict()["detail"] == [{"op": "replace", "path": "/spec/hard/requests.nvidia.com~1gpu", "old": "999", "new": "32",
                                           "changed_by": "kubectl-edit"}]


def test_a_drifted_field_is_written_as_a_problem_in_an_environment_file_is() -> None:
    # One form for a field, wherever fleetops prints one: a key with a '-' or a non-ASCII letter is quoted, as read.
    change = diff.FieldChange("replace", "/metadata/labels/k8s-app~1tier/0/café", "a", "b")
    assert result_mod.change_text(change, None) == 'metadata.labels["k8s-app/tier"][0]["café"]: "a" → "b"'
    assert result_mod.field_path(change.path) == spec.format_loc(("metadata", "labels", "k8s-app/tier", 0, "café"))
    assert result_mod.field_path("/metadata/labels/k8s-app") == 'metadata.labels["k8s-app"]'


def test_a_denied_requests_fingerprint_is_shown_whole(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    env, state = dev()
    apis = backend(env)
    apis["dev-edge"].put(kubelet_csr("csr-stranger", "dev-orin-1", key="stranger"))
    result = reconcile.run_pass(env, state, apis, allow, options(detect_only=True))
    [deny] = [a for a in result.clusters["dev-edge"].actions if a.verb == "deny"]
    fingerprint = key_fingerprint("stranger")
    assert fingerprint in deny.detail
    stdout = printed(result, monkeypatch, width=100)[0]
    assert fingerprint in column(stdout, "detail", "CertificateSigningRe")


# --- item 6: metrics and the pass log ----------------------------------------------------------


def samples(metrics: reconcile.Metrics, name: str) -> dict[str, float]:
    """A metric's samples by their labels as the exposition writes them (`cluster="a",kind="b"`)."""
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            out[labels] = float(value)
    return out


def test_drift_is_present_at_zero_for_every_cluster_and_after_a_repair(backend) -> None:
    env, state = dev()
    apis = backend(env)
    metrics = reconcile.Metrics()
    for opts in (options(detect_only=True), options(), options()):  # found, repaired, equal
        metrics.observe(reconcile.run_pass(env, state, apis, allow, opts), 0.1, 0)
    drift = samples(metrics, "fleetops_drift_objects")
    for name, manifests in state.clusters.items():
        for kind in {m["kind"] for m in manifests} | {"Node"}:
            assert drift[f'cluster="{name}",kind="{kind}"'] == 0
    hand_edit(state, apis["dev-center"])
    metrics.observe(reconcile.run_pass(env, state, apis, allow, options(detect_only=True)), 0.1, 0)
    assert samples(metrics, "fleetops_drift_objects")['cluster="dev-center",kind="ResourceQuota"'] == 1


def test_an_unreachable_api_server_keeps_its_last_capacity_and_counts_its_error() -> None:
    env, state = dev()
    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    metrics = reconcile.Metrics()
    metrics.observe(reconcile.run_pass(env, state, apis, allow, options()), 0.1, 1000)
    before = samples(metrics, "fleetops_capacity_devices")
    assert before['cluster="dev-center",resource="nvidia.com/gpu",state="declared"'] == 32 + 8  # dev-a100 time-sliced, dev-spot
    apis["dev-center"].faults = Faults(rate=1.0, statuses=(TIMEOUT,))
    result = reconcile.run_pass(env, state, apis, allow, options())
    assert result.clusters["dev-center"].unreachable
    metrics.observe(result, 0.1, 2000)
    assert samples(metrics, "fleetops_capacity_devices") == before  # the last known figures, not a hole
    assert samples(metrics, "fleetops_cluster_up") == {'cluster="dev-center"': 0, 'cluster="dev-edge"': 1}
    assert samples(metrics, "fleetops_capacity_read_timestamp_seconds") == {'cluster="dev-center"': 1000, 'cluster="dev-edge"': 2000}
    assert samples(metrics, "fleetops_reconcile_errors_total") == {'cluster="dev-center"': 1, 'cluster="dev-edge"': 0}
    assert samples(metrics, "fleetops_drift_objects")['cluster="dev-center",kind="ResourceQuota"'] > 0  # as last measured


def test_the_pass_log_names_the_drifted_objects_first_twenty_and_a_count(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "fleet")
    commit(repo, DEV.read_text(), "dev")
    env, state = dev()
    apis = {c.name: MemoryCluster(c.name) for c in env.clusters}
    rec = reconcile.ReconcileLoop("dev", reconcile.GitSource(str(repo), "main", tmp_path / "cache"), lambda c: apis[c.name],
                               gate=allow, opts=options())
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(reconcile.JsonFormatter())
    logger = logging.getLogger("fleetops.reconcile")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        first = rec.run_once()
        hand_edit(state, apis["dev-center"], value="64")
        rec.opts.force_conflicts = True
        rec.run_once()
    finally:
        logger.removeHandler(handler)
    created, repaired = (json.loads(line) for line in stream.getvalue().splitlines())
    assert len(created["drifted"]) == reconcile.LOG_ITEMS and created["drifted_more"] == first.drift - reconcile.LOG_ITEMS
    assert repaired["drift"] == 1 and repaired["drifted_more"] == 0
    assert repaired["drifted"] == ["dev-center: update ResourceQuota platform-dev/device-nvidia-com-gpu"]
