"""`fleetops deploy`: the fleet's Pulumi program, previewed or deployed through the Automation API.

The Pulumi CLI `make tools` builds has no Python language host, so the program (`stacks/__main__.py`,
the file `pulumi up` would run) runs inline in this process, and the policy pack as the binary
analyzer `policies/pack/analyzer`. Everything Pulumi keeps lives in a state folder outside the
repository: the local file backend (`backend/`), the plugins (`home/`), the project and stack
settings with their `encryptionsalt` (`work/`) and the provider's temporary files (`tmp/`); the
tracked `stacks/Pulumi.<env>.yaml` files are never written. The passphrase that encrypts the stack's
secrets is Pulumi's own `PULUMI_CONFIG_PASSPHRASE` or `PULUMI_CONFIG_PASSPHRASE_FILE`; it is handed
to the engine's environment only, never printed.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from fleetops import git, render, spec
from fleetops.cluster import KubeCluster
from fleetops.errors import ApiError, FleetopsError, KubeconfigError

PROGRAM = Path("stacks") / "__main__.py"
PACK = Path("policies") / "pack" / "analyzer"
PASSPHRASE_VARIABLES = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
# What of a failed Pulumi command is shown: its last lines, enough for the error and the violations.
MAX_ERROR_LINES = 40
MAX_DIFF_LINES = 5000  # a preview's diff shown; the rest is counted, not printed


CRDS = Path(__file__).resolve().parent / "crds"
# What installs each API group the fleet's custom resources belong to, as the README's "Deploying with
# Pulumi" says; `fleetops deploy --install-crds` installs the CRDs fleetops ships (fleetops/crds/).
INSTALLED_BY = {
    "kueue.x-k8s.io": "Kueue v0.17.0 (its Helm chart oci://registry.k8s.io/kueue/charts/kueue --version 0.17.0, or its manifests)",
    "monitoring.coreos.com": "prometheus-operator's CRDs (the prometheus-operator-crds Helm chart of prometheus-community)",
    "apps.kubeedge.io": "KubeEdge's CloudCore (keadm init)",
    "apps.openyurt.io": "OpenYurt's yurt-manager (the openyurt/yurt-manager Helm chart)",
}
# How long a CRD `--install-crds` applied may take to be served.
ESTABLISH_SECONDS = 60


class DeployError(FleetopsError):
    """Bad input: no Pulumi CLI or provider, no passphrase, no such environment."""


def shipped_crds() -> dict[tuple[str, str], dict[str, Any]]:
    """The CRDs fleetops ships, by (group, kind) of the objects they serve."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]
    return {(c["spec"]["group"], c["spec"]["names"]["kind"]): c for c in crds}


def established(live: dict[str, Any] | None) -> bool:
    conditions = ((live or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def needed_crds(state: render.DesiredState, crds: dict[tuple[str, str], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """By cluster, the shipped CRDs its rendered custom resources need, each once."""
    needed: dict[str, list[dict[str, Any]]] = {}
    for cluster, manifests in state.clusters.items():
        kinds = sorted({(m["apiVersion"].split("/")[0], m["kind"]) for m in manifests} & set(crds))
        needed[cluster] = [crds[k] for k in kinds]
    return needed


def cluster_api(cluster: spec.Cluster, kubeconfig: Path | None) -> KubeCluster:
    """The cluster as the provider reaches it: --kubeconfig, else the cluster's own, else $KUBECONFIG."""
    return KubeCluster(cluster.name, kubeconfig=str(kubeconfig) if kubeconfig else cluster.kubeconfig, context=cluster.context)


def missing_apis(env: spec.Environment, state: render.DesiredState, kubeconfig: Path | None, install: bool = False) -> list[str]:
    """What each cluster lacks to accept the fleet's custom resources: one line per CRD not served, with
    what installs it. With `install`, the CRDs fleetops ships are applied first (and waited for)."""
    import time

    needed = needed_crds(state, shipped_crds())
    missing: list[str] = []
    for cluster in env.clusters:
        api = cluster_api(cluster, kubeconfig)
        for crd in needed[cluster.name]:
            name = crd["metadata"]["name"]
            if install:
                api.apply(crd, field_manager="fleetops")
            deadline = time.monotonic() + (ESTABLISH_SECONDS if install else 0)
            while not (ok := established(api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name))) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not ok:
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                missing.append(f"{cluster.name} (context {cluster.context}): {kind}.{group} is not served (no CRD {name}): "
                               f"install {INSTALLED_BY.get(group, 'its operator')}, or `fleetops deploy --install-crds`")
    return missing


class Operation(str, Enum):
    preview = "preview"
    up = "up"


@dataclass(frozen=True)
class Result:
    stack: str
    environment: str
    operation: Operation
    ok: bool
    denied: bool  # the policy pack's mandatory policy refused the stack
    changes: dict[str, int]
    outputs: dict[str, Any]
    state: str
    messages: list[str]
    diff: str = ""  # a preview's per-property diff, as `pulumi preview --diff` prints it (bounded)

    def to_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "operation": self.operation.value, "denied": self.denied, "changes": self.changes,
                "outputs": self.outputs, "state": self.state, "messages": self.messages, "diff": self.diff}


def default_state() -> Path:
    """`$XDG_STATE_HOME/fleetops/pulumi`, by default `~/.local/state/fleetops/pulumi`: never in the repository."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fleetops" / "pulumi"


def find_pulumi(repo: Path, given: Path | None) -> Path:
    """The Pulumi CLI: `given`, else the one `make tools` built (`.tools/bin/pulumi`), else `pulumi` on PATH."""
    candidates = [given] if given else [repo / ".tools" / "bin" / "pulumi", Path(shutil.which("pulumi") or "")]
    for path in candidates:
        if path and path.name and path.is_file() and os.access(path, os.X_OK):
            return path.absolute()
    raise DeployError(f"{given or 'pulumi'}: no Pulumi CLI there: `make tools` builds one into .tools/bin, or pass --pulumi FILE")


def provider_version() -> str:
    """The Kubernetes provider the program's SDK is made for: its version is pinned to the provider's."""
    return metadata.version("pulumi_kubernetes")


def install_provider(cli: Path, home: Path, given: Path | None) -> None:
    """The Kubernetes provider plugin in `home`, from `given` or the binary beside the CLI, once."""
    version = provider_version()
    if (home / "plugins" / f"resource-kubernetes-v{version}").is_dir():
        return
    binary = given or cli.parent / "pulumi-resource-kubernetes"
    if not binary.is_file():
        raise DeployError(f"{binary}: no Kubernetes provider plugin there: `make tools` builds it, or pass --provider FILE")
    done = subprocess.run([str(cli), "plugin", "install", "resource", "kubernetes", version, "--file", str(binary)],
                          env={**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"},
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise DeployError(f"{binary}: pulumi plugin install failed: {last_lines(done.stderr or done.stdout, 3)}")


def passphrase_env(passphrase_file: Path | None) -> dict[str, str]:
    """The passphrase variable the engine gets: --passphrase-file, else the caller's own; none is bad input."""
    if passphrase_file is not None:
        if not passphrase_file.is_file() or passphrase_file.stat().st_size == 0:
            raise DeployError(f"{passphrase_file}: --passphrase-file is not a non-empty file")
        return {"PULUMI_CONFIG_PASSPHRASE_FILE": str(passphrase_file.resolve())}
    given = {name: os.environ[name] for name in PASSPHRASE_VARIABLES if os.environ.get(name)}
    if not given:
        raise DeployError("no passphrase for the stack's secrets: set PULUMI_CONFIG_PASSPHRASE_FILE (or "
                          "PULUMI_CONFIG_PASSPHRASE), or pass --passphrase-file FILE")
    return given


def engine_env(state: Path, passphrase: dict[str, str], kubeconfig: Path | None) -> dict[str, str]:
    tmp = state / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PULUMI_HOME": str(state / "home"),
        "PULUMI_BACKEND_URL": f"file://{state / 'backend'}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",  # the installed provider, not a binary that happens to be on PATH
        "FLEETOPS_PYTHON": sys.executable,  # the policy pack runs with this fleetops
        # The Kubernetes provider writes a copy of the kubeconfig it is given (tokens and all) into
        # TMPDIR at every start and never removes it: into the state folder, not a shared /tmp.
        "TMPDIR": str(tmp),
        **passphrase,
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig.resolve())
    return env


def last_lines(text: str, count: int = MAX_ERROR_LINES) -> str:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def bounded(text: str, limit: int = MAX_DIFF_LINES) -> str:
    """At most `limit` lines of `text`, and how many more there were."""
    lines = text.splitlines()
    more = f"\n… {len(lines) - limit:,} more lines\n" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + ("\n" if lines else "") + more


_VIOLATION = re.compile(r"\[mandatory\]\s+fleetops-deny")


@dataclass(frozen=True)
class PulumiEngine:
    """The Pulumi CLI and the environment its commands run with (state, plugins, passphrase, kubeconfig)."""

    cli: Path
    env: dict[str, str]
    state: Path


def prepare(repo: Path, state: Path, *, kubeconfig: Path | None = None, passphrase_file: Path | None = None,
            pulumi: Path | None = None, provider: Path | None = None) -> PulumiEngine:
    """The CLI, its state folder and the provider plugin, checked and installed; bad input is a DeployError."""
    if kubeconfig is not None and not kubeconfig.is_file():
        raise DeployError(f"{kubeconfig}:1:1: no such kubeconfig file")
    cli = find_pulumi(repo, pulumi)
    env = engine_env(state, passphrase_env(passphrase_file), kubeconfig)
    install_provider(cli, Path(env["PULUMI_HOME"]), provider)
    for folder in ("work", "backend", "cli/bin"):
        (state / folder).mkdir(parents=True, exist_ok=True)
    # The Automation API runs `<root>/bin/pulumi`: the CLI, linked where it looks.
    link = state / "cli" / "bin" / "pulumi"
    if not link.is_symlink() or link.readlink() != cli:
        link.unlink(missing_ok=True)
        link.symlink_to(cli)
    return PulumiEngine(cli, env, state)


def open_stack(engine: PulumiEngine, repo: Path, environment: str, stack_name: str) -> Any:
    """Stack `stack_name` of the fleetops project, whose program is the repository's stacks/__main__.py, set
    up as its tracked Pulumi.<env>.yaml says, with its settings written in the state folder."""
    from pulumi import automation as auto

    # The inline program and the providers it starts read the kubeconfig and passphrase in this process.
    os.environ.update({k: v for k, v in engine.env.items() if k in ("KUBECONFIG", *PASSPHRASE_VARIABLES)})
    options = auto.LocalWorkspaceOptions(
        work_dir=str(engine.state / "work"), pulumi_home=engine.env["PULUMI_HOME"], env_vars=engine.env,
        pulumi_command=auto.PulumiCommand(root=str(engine.state / "cli"), skip_version_check=True),
        project_settings=auto.ProjectSettings(name="fleetops", runtime="python"),
    )
    program = lambda: runpy.run_path(str(repo / PROGRAM), run_name="__main__")  # noqa: E731 - the file `pulumi up` runs
    stack = auto.create_or_select_stack(stack_name=stack_name, project_name="fleetops", program=program, opts=options)
    stack.set_all_config({
        "fleetops:environment": auto.ConfigValue(environment),
        "fleetops:specFile": auto.ConfigValue(str(spec.environment_path(environment, repo / spec.ENVIRONMENTS))),
        "fleetops:revision": auto.ConfigValue(git.revision(repo)),
    })
    return stack


class Tally:
    """What the engine did, step by step, from its events: a failed `up` still created what it created."""

    def __init__(self) -> None:
        self.changes: dict[str, int] = {}

    def __call__(self, event: Any) -> None:
        if event.res_outputs_event is not None and not event.res_outputs_event.planning:
            self.count(str(event.res_outputs_event.metadata.op.value))
        elif event.res_op_failed_event is not None:
            self.count("failed")

    def count(self, op: str) -> None:
        if op != "same":
            self.changes[op] = self.changes.get(op, 0) + 1


def run(repo: Path, environment: str, stack_name: str, operation: Operation, state: Path, *, install_crds: bool = False,
        parallelism: int | None = None, step_checkpoints: bool = False, diff: bool = False, **engine: Any) -> Result:
    """Preview or deploy `environment` as stack `stack_name`, with the policy pack, state in `state`
    (`engine`: the options of `prepare`; `parallelism`: Pulumi's, by default its own, 4 per CPU). The CRDs its custom resources need must be served first (with
    `install_crds`, those fleetops ships are installed): a cluster lacking one is said, and nothing runs.
    With `diff`, a preview carries Pulumi's per-property diff of what would change.

    The engine writes the stack's state once, at the end (PULUMI_SKIP_CHECKPOINTS), unless
    `step_checkpoints`: Pulumi's default rewrites the whole state after every step, which left the
    first `up` of a 1,584-resource fleet unfinished after 17 minutes against 285 s for the whole of it
    (benchmarks/README.md, "deploy at fleet scale"). What a crash then leaves unrecorded, the next `up` adopts: the Kubernetes provider fleetops
    builds creates with server-side apply, an upsert (its pkg/await/await.go)."""
    from pulumi import automation as auto

    repo = repo.resolve()
    spec_file = spec.environment_path(environment, repo / spec.ENVIRONMENTS)
    if not (repo / PROGRAM).is_file() or not spec_file.is_file():
        raise DeployError(f"{spec_file}: no such environment (or no {PROGRAM} in {repo}): run from the fleet repository or pass --repo")
    prepared = prepare(repo, state, **engine)
    if not step_checkpoints:
        prepared.env["PULUMI_SKIP_CHECKPOINTS"] = "true"
    common = {"stack": stack_name, "environment": environment, "operation": operation, "state": str(state)}
    desired = render.render(spec_file, revision="-")
    try:
        missing = missing_apis(spec.load_environment(spec_file), desired, engine.get("kubeconfig"), install=install_crds)
    except (ApiError, KubeconfigError) as exc:  # a cluster that cannot be read cannot be deployed to either
        missing = [str(exc)]
    if missing:
        return Result(**common, ok=False, denied=False, changes={}, outputs={},
                      messages=["the clusters lack APIs the fleet's objects need; nothing was changed:", *missing])
    # An inline program's project folder is this process's: the policy pack judges the repository there.
    os.chdir(repo)
    packs = [str(repo / PACK)]
    tally = Tally()
    knobs = {"parallel": parallelism} if parallelism else {}
    try:
        stack = open_stack(prepared, repo, environment, stack_name)
        if operation is Operation.preview:
            preview = stack.preview(policy_packs=packs, diff=diff, **knobs)
            changes = {op: n for op, n in preview.change_summary.items() if op != "same"}
            return Result(**common, ok=True, denied=False, changes=changes, outputs={}, messages=[],
                          diff=bounded(preview.stdout) if diff else "")
        up = stack.up(policy_packs=packs, on_event=tally, **knobs)
    except auto.CommandError as exc:  # the engine's own words, its last lines: a violation, a refused object, a wrong passphrase
        text = str(exc)
        return Result(**common, ok=False, denied=bool(_VIOLATION.search(text)), changes=tally.changes, outputs={}, messages=[last_lines(text)])
    changes = {op: n for op, n in (up.summary.resource_changes or {}).items() if op != "same"}
    outputs = {name: value.value for name, value in up.outputs.items() if not value.secret}
    return Result(**common, ok=up.summary.result == "succeeded", denied=False, changes=changes, outputs=outputs, messages=[])
