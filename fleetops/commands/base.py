"""What every command shares: its common options, reading and checking the environment files, writing files
whole, and failing in one line with an exit code (`errors.ExitCode`: 0 ok, 1 denied or drift, 2 bad input).

No `from __future__ import annotations` here: typer evaluates the annotations of the options defined here."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from fleetops import errors, spec
from fleetops.output.terminal import progress, say

if TYPE_CHECKING:  # imported where used: `validate` must not pay for the policy engine or the clusters' client
    from fleetops import cluster, render


def fail(message: str, code: int = errors.ExitCode.BAD_INPUT) -> NoReturn:
    say(message)
    raise typer.Exit(code)


def _env_name(name: str | None) -> str | None:
    """An environment is named, never given as a path: `../x`, `/abs` or `a/b` would reach outside the folder."""
    if name is not None and not spec.is_dns_label(name):
        fail(f"--env: an environment name must be {spec.DNS_LABEL_RULE}, got {name!r}")
    return name


EnvOpt = Annotated[str, typer.Option("--env", "-e", help="Environment name: environments/NAME.yaml", callback=_env_name)]
DirOpt = Annotated[Path, typer.Option("--environments", help="Folder of environment files", envvar="FLEETOPS_ENVIRONMENTS")]
DEFAULT_DIR = spec.ENVIRONMENTS

PoliciesOpt = Annotated[Path, typer.Option("--policies", help="Folder of Rego policies, data and waivers (default: policies/ of the repository here)", envvar="FLEETOPS_POLICIES")]
# The repository being judged brings its own policies, as it brings its environments: never the
# copy installed with fleetops.
DEFAULT_POLICIES = Path("policies")


PrometheusTokenOpt = Annotated[Path | None, typer.Option("--prometheus-token-file", envvar="FLEETOPS_PROMETHEUS_TOKEN_FILE", help="A bearer token for Prometheus, read from this file (never printed)")]


def env_file(directory: Path, name: str) -> Path:
    path = spec.environment_path(name, directory)
    if not path.exists():  # what exists but is no regular file is refused, and said so, as it is read
        fail(str(spec.no_environment(path, name, (p.stem for p in directory.glob("*.yaml")))))
    return path


def given_file(path: Path, option: str) -> None:
    """A file named on the command line to be read is one, or exit 2 in one line: one that is not there is no empty file."""
    if not path.exists():
        fail(f"{option} {path}: no such file")
    if not path.is_file():
        fail(f"{option} {path}: {'a folder, not a file' if path.is_dir() else 'not a regular file'}")


def checked_or_problems(path: Path, revision: str | None = None, engine: str = "direct",
                        each_cluster: "render.Each | None" = None) -> "render.Checked | list[errors.Problem]":
    """`render.load_checked`, the validation every command shares, or its problems, one line each."""
    from fleetops import render

    try:
        return render.load_checked(path, revision=revision, engine=engine, each_cluster=each_cluster)
    except errors.FleetopsError as exc:
        return exc.problems


# The revision is only stamped on objects; a command that prints none need not ask Git for it.
UNSTAMPED = "unstamped"


def problems_of(path: Path) -> list[errors.Problem]:
    """Everything `checked_or_problems` refuses, a promise the rendered Kueue queues cannot keep
    (the policies deny that too, `quota.burst_unreachable`: validate says it at the file's line), and a
    policy input past spec.LIMITS.policy_input_bytes (every command that judges the fleet refuses it)."""
    checked = checked_or_problems(path, revision=UNSTAMPED)
    if isinstance(checked, list):
        return checked
    import orjson

    from fleetops import grants

    problems = grants.problems(checked.document, checked.state.clusters)
    # The policy input holds every object whole: a fleet whose objects are a quarter of its limit or less is far
    # below it, and validate (editors, pre-commit hooks) then loads no policy engine to say so.
    if 4 * sum(len(orjson.dumps(m)) for _, m in checked.state.objects()) < spec.LIMITS.policy_input_bytes:
        return problems
    from fleetops import policy

    oversized = policy.too_large(*policy.input_size(checked.env, checked.state))
    return problems if oversized is None else [errors.Problem(oversized, str(path)), *problems]


def render_or_fail(path: Path, revision: str | None = None, engine: str = "direct",
                   each_cluster: "render.Each | None" = None) -> tuple[spec.Environment, "render.DesiredState"]:
    """The environment and its rendered objects, schema-checked; bad input is exit 2 with a line per problem."""
    with progress(f"rendering {path}"):
        checked = checked_or_problems(path, revision, engine, each_cluster)
    if isinstance(checked, list):
        fail("\n".join(map(str, checked)))
    return checked.env, checked.state


def write_files(files: dict[Path, str], what: str) -> None:
    """Each file beside its target, then all renamed into place: a failure leaves no half-written file."""
    from fleetops import emit

    try:
        with emit.Files(what) as out:
            for path, text in files.items():
                out.put(path, text)
            out.commit()
    except emit.WriteError as exc:
        fail(str(exc))


def parse_interval(text: str, option: str) -> float:
    """A duration option (fleetops.durations: 30s, 5m, 1h, 1d, 1w) -> seconds, or exit 2 in one line."""
    from fleetops import durations

    try:
        return float(durations.parse(text).seconds)
    except ValueError as exc:
        fail(f"{option}: {exc}")


# --- the options of commands that reach live clusters (reconcile, why, standing) -----------------------

KubeconfigOpt = Annotated[Path | None, typer.Option(help="kubeconfig file (default: the cluster's kubeconfig, $KUBECONFIG, ~/.kube/config)")]
ContextOpt = Annotated[str | None, typer.Option(help="kubeconfig context, instead of the cluster's own (needs a single cluster)")]
InClusterOpt = Annotated[bool, typer.Option("--in-cluster", help="Use the pod's service account")]
TimeoutOpt = Annotated[str, typer.Option(help="How long one API call may wait for an answer (30s, 2m)")]


@dataclass(frozen=True)
class LiveOptions:
    """How a command reaches its clusters: --kubeconfig, --context, --in-cluster and --request-timeout, checked once."""

    kubeconfig: Path | None
    context: str | None
    in_cluster: bool
    timeout: float

    @classmethod
    def of(cls, kubeconfig: Path | None, context: str | None, in_cluster: bool, request_timeout: str, clusters: list[str]) -> "LiveOptions":
        """The options as given, or exit 2 in one line: a context or the pod's account reaches one of `clusters` only."""
        if (context or in_cluster) and len(clusters) != 1:
            fail(f"{'--context' if context else '--in-cluster'} reaches one cluster: use it with exactly one --cluster")
        if kubeconfig is not None and not kubeconfig.is_file():
            fail(f"{kubeconfig}:1:1: no such kubeconfig file")
        return cls(kubeconfig, context, in_cluster, parse_interval(request_timeout, "--request-timeout"))

    def connect(self, c: spec.Cluster) -> "cluster.ClusterAPI":
        from fleetops import cluster

        return cluster.connect(c.name, str(self.kubeconfig) if self.kubeconfig else c.kubeconfig, self.context or c.context, self.in_cluster, self.timeout)


def live_cluster(document: spec.Document, name: str, reach: "LiveOptions", namespace: str | None) -> "tuple[spec.Cluster, Any]":
    """The cluster of the environment named `name`, read live once (`why.live.read`); bad input is exit 2 in one line."""
    from fleetops.why import live

    found = next((c for c in document.env.clusters if c.name == name), None)
    if found is None:
        fail(f"--cluster: no cluster {name!r} in {document.env.environment} (clusters: {', '.join(c.name for c in document.env.clusters)})")
    api = reach.connect(found)
    with progress(f"reading {found.name}"):
        return found, live.read(api, document.env, found, namespace)


def read_document(environments: Path, env: str) -> spec.Document:
    try:
        return spec.read_environment(env_file(environments, env))
    except errors.SpecError as exc:
        fail("\n".join(exc.lines))


