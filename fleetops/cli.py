"""`fleetops` command line. Exit codes: 0 ok, 1 policy denied or drift found, 2 bad input or usage."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console
from rich.table import Table

from fleetops import render as render_mod
from fleetops import schema, spec

app = typer.Typer(
    help="Declarative, policy-gated GitOps for AI compute fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

EnvOpt = Annotated[str, typer.Option("--env", "-e", help="Environment name: environments/NAME.yaml")]
DirOpt = Annotated[Path, typer.Option("--environments", help="Folder of environment files", envvar="FLEETOPS_ENVIRONMENTS")]
DEFAULT_DIR = Path("environments")


class Format(str, Enum):
    yaml = "yaml"
    json = "json"


class Output(str, Enum):
    table = "table"
    json = "json"


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(message, markup=False, highlight=False)
    raise typer.Exit(code)


def env_file(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.yaml"))
        fail(f"{path}:1:1: no environment {name!r} (known: {', '.join(known) or 'none'})")
    return path


def load_or_fail(path: Path) -> spec.Environment:
    try:
        return spec.load_environment(path)
    except spec.SpecError as exc:
        fail("\n".join(exc.problems))


def render_or_fail(path: Path, revision: str | None = None) -> render_mod.DesiredState:
    try:
        state = render_mod.render(path, revision=revision)
    except spec.SpecError as exc:
        fail("\n".join(exc.problems))
    except render_mod.RenderError as exc:
        fail(str(exc))
    problems = schema.validate_objects(state.objects())
    if problems:
        fail("\n".join(f"{path}: rendered object fails its schema: {p}" for p in problems))
    return state


def summary_rows(env: spec.Environment) -> list[dict[str, Any]]:
    cap = spec.capacity(env)
    sums = spec.quota_sums(env)
    rows = []
    for cluster in env.clusters:
        for resource, units in sorted(cap[cluster.name].items()):
            q = sums.get(cluster.name, {}).get(resource, {"guaranteed": 0, "burst": 0})
            rows.append(
                {
                    "cluster": cluster.name,
                    "resource": resource,
                    "capacity": units,
                    "guaranteed": q["guaranteed"],
                    "burst": q["burst"],
                    "headroom_percent": round(100 * (units - q["guaranteed"]) / units, 1) if units else 0.0,
                }
            )
    return rows


def print_summary(env: spec.Environment, state: render_mod.DesiredState) -> None:
    pools = Table(title=f"{env.environment}: pools and edge groups", title_justify="left")
    for col in ("cluster", "group", "device", "nodes", "sharing", "schedulable"):
        pools.add_column(col)
    for cluster in env.clusters:
        for group in (*cluster.pools, *cluster.edge_groups):
            sharing = group.sharing.mode if isinstance(group, spec.Pool) else "edge"
            units = ", ".join(f"{r}={n}" for r, n in spec.group_capacity(group).items())
            pools.add_row(cluster.name, group.name, f"{group.device.model} x{group.device.per_node}", str(group.nodes), sharing, units)
    quota = Table(title="capacity and quota per cluster", title_justify="left")
    for col in ("cluster", "resource", "capacity", "guaranteed", "burst", "headroom %"):
        quota.add_column(col, justify="right" if col not in ("cluster", "resource") else "left")
    for row in summary_rows(env):
        quota.add_row(row["cluster"], row["resource"], *(str(row[k]) for k in ("capacity", "guaranteed", "burst", "headroom_percent")))
    out.print(pools)
    out.print(quota)
    out.print(
        f"{state.object_count} objects in {len(state.clusters)} clusters, {len(env.tenants)} tenants, "
        f"monthly cost {spec.monthly_cost(env):,.0f} {env.budget.currency} of budget {env.budget.monthly:,.0f}, revision {state.revision}"
    )


def dump(manifests: list[dict[str, Any]], fmt: Format) -> str:
    if fmt is Format.json:
        return json.dumps(manifests, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump_all(manifests, sort_keys=True, explicit_start=True)


@app.command()
def validate(
    env: Annotated[str | None, typer.Option("--env", "-e", help="One environment; default: all of them")] = None,
    environments: DirOpt = DEFAULT_DIR,
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
) -> None:
    """Check environment files: schema, references, sharing modes, names. Exit 2 on any problem."""
    paths = [env_file(environments, env)] if env else sorted(environments.glob("*.yaml"))
    if not paths:
        fail(f"{environments}: no environment files")
    problems: list[str] = []
    for path in paths:
        try:
            spec.load_environment(path)
        except spec.SpecError as exc:
            problems += exc.problems
    if output is Output.json:
        out.print_json(json.dumps({"files": [str(p) for p in paths], "problems": problems}))
    elif not problems:
        out.print(f"ok: {len(paths)} environment file(s) valid: {', '.join(str(p) for p in paths)}")
    if problems:
        if output is Output.table:
            fail("\n".join(problems))
        raise typer.Exit(2)


@app.command()
def render(
    env: EnvOpt,
    environments: DirOpt = DEFAULT_DIR,
    out_dir: Annotated[Path | None, typer.Option("-o", "--out", help="Write one file per cluster into this folder")] = None,
    output: Annotated[Format, typer.Option("--output", help="yaml or json")] = Format.yaml,
    revision: Annotated[str | None, typer.Option(help="Revision to stamp (default: the Git HEAD)")] = None,
    summary: Annotated[bool, typer.Option(help="Print a summary of clusters, pools, devices and quotas")] = False,
) -> None:
    """Render every cluster's Kubernetes objects by running the stack program under the Pulumi mock monitor."""
    path = env_file(environments, env)
    state = render_or_fail(path, revision)
    if out_dir is None:
        for cluster, manifests in state.clusters.items():
            sys.stdout.write(f"# cluster: {cluster}\n" if output is Format.yaml else "")
            sys.stdout.write(dump(manifests, output))
    else:
        files = {out_dir / f"{cluster}.{output.value}": dump(m, output) for cluster, m in state.clusters.items()}
        out_dir.mkdir(parents=True, exist_ok=True)
        for file, text in files.items():
            file.write_text(text)
        err.print(f"wrote {len(files)} file(s) to {out_dir}", highlight=False)
    if summary:
        print_summary(load_or_fail(path), state)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()


# --- reconcile ---------------------------------------------------------------------------------


def parse_interval(text: str) -> float:
    """`60s`, `5m`, `1h` or plain seconds -> seconds."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        fail(f"--interval: expected a duration like 60s, 5m or 1h, got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2) or "s"]


def print_pass(result: Any) -> None:
    table = Table(title=f"{result.environment} at {result.revision or '(no revision)'}: {result.status}", title_justify="left")
    for col in ("cluster", "action", "object", "detail", "result"):
        table.add_column(col)
    for name, cluster in result.clusters.items():
        if not cluster.leader:
            table.add_row(name, "standby", "", "another replica holds the Lease", "")
        for a in cluster.actions:
            detail = a.detail if isinstance(a.detail, str) else (", ".join(c.path for c in a.detail) if isinstance(a.detail, list) else "")
            outcome = a.error or ("done" if a.done else ("planned" if a.write else ""))
            table.add_row(name, a.verb, a.target, detail, outcome)
        for problem in cluster.problems:
            table.add_row(name, "malformed", "", problem, "left out")
    if table.row_count:
        out.print(table)
    capacity = Table(title="capacity: declared vs live", title_justify="left")
    for col in ("cluster", "group", "resource", "nodes ready/declared", "units allocatable/declared", "unavailable"):
        capacity.add_column(col)
    for name, cluster in result.clusters.items():
        for row in cluster.capacity:
            capacity.add_row(name, row.group, row.resource, f"{row.ready_nodes}/{row.declared_nodes}", f"{row.allocatable}/{row.declared}", str(row.unavailable))
    if capacity.row_count:
        out.print(capacity)
    for reason in result.reasons:
        out.print(reason, markup=False, highlight=False)
    out.print(f"drift: {result.drift}, errors: {len(result.errors)}, last applied: {result.last_applied or 'none'}", highlight=False)


@app.command()
def reconcile(
    env: EnvOpt,
    repo: Annotated[str, typer.Option("--repo", help="Git URL or path holding environments/", envvar="FLEETOPS_REPO")],
    ref: Annotated[str, typer.Option(help="Branch, tag or commit to follow")] = "main",
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit with its code")] = False,
    interval: Annotated[str | None, typer.Option(help="Service mode: a pass every DURATION (60s, 5m)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what a pass would do; write nothing")] = False,
    detect_only: Annotated[bool, typer.Option("--detect-only", help="Report drift, write nothing; exit 1 with --once when drift exists")] = False,
    prune: Annotated[bool, typer.Option("--prune", help="Delete managed objects that Git no longer has")] = False,
    force_conflicts: Annotated[bool, typer.Option("--force-conflicts", help="Take fields other managers own (hand edits) back for Git")] = False,
    cluster: Annotated[list[str] | None, typer.Option("--cluster", help="Only this cluster (repeatable); default: all of the environment")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig file (default: the cluster's kubeconfig, $KUBECONFIG, ~/.kube/config)")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context, instead of the cluster's own (needs a single cluster)")] = None,
    in_cluster: Annotated[bool, typer.Option("--in-cluster", help="Use the pod's service account")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="Where the repository is cloned (default ~/.cache/fleetops/repos)")] = None,
    identity: Annotated[str | None, typer.Option(help="Leader election identity (default: host name); only the Lease holder writes", envvar="FLEETOPS_IDENTITY")] = None,
    metrics_host: Annotated[str, typer.Option(help="Address for /metrics, /healthz, /readyz")] = "127.0.0.1",
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics, /healthz and /readyz on this port")] = None,
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
) -> None:
    """Keep the live fleet equal to Git: fetch, validate, render, gate, then apply, prune and fix nodes per cluster."""
    import signal
    import socket
    import threading

    from fleetops import cluster as cluster_mod
    from fleetops import reconcile as rec

    if once == (interval is not None):
        fail("choose one of --once or --interval DURATION")
    if dry_run and detect_only:
        fail("--dry-run and --detect-only are alternatives; choose one")
    if (context or in_cluster) and len(cluster or []) != 1:
        fail(f"{'--context' if context else '--in-cluster'} reaches one cluster: use it with exactly one --cluster")
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"{kubeconfig}:1:1: no such kubeconfig file")
    period = parse_interval(interval) if interval else 0.0

    def connect(c: spec.Cluster) -> cluster_mod.ClusterAPI:
        config = str(kubeconfig) if kubeconfig else c.kubeconfig
        return cluster_mod.connect(c.name, config, context or c.context, in_cluster)

    opts = rec.Options(prune=prune, dry_run=dry_run, detect_only=detect_only, force_conflicts=force_conflicts)
    reconciler = rec.Reconciler(
        env, rec.GitSource(repo, ref, cache_dir), connect, gate=rec.default_gate, opts=opts, only=cluster or None,
        identity=identity or socket.gethostname(),  # a one-off run also yields to a running leader
    )
    if once:
        try:
            result = reconciler.run_once()
        except Exception as exc:  # an engine fault: one line, not a traceback
            fail(f"reconcile failed: {type(exc).__name__}: {rec.redact(str(exc))}", 1)
        if output is Output.json:
            sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        else:
            print_pass(result)
        raise typer.Exit(result.exit_code())
    reconciler.lease_seconds = max(15, int(3 * period))
    if metrics_port is not None:
        try:
            rec.serve_http(metrics_host, metrics_port, reconciler.metrics, ready=lambda: reconciler.ready)
        except OSError as exc:
            fail(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc.strerror or exc}")
    rec.json_logging()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the pod is stopping: finish this pass, then exit
    reconciler.serve(period, stop)
