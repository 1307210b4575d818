"""The commands on the live fleet: reconcile, why, standing and deploy."""

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fleetops import errors, spec
from fleetops.commands.base import (DEFAULT_DIR, UNSTAMPED, ContextOpt, DirOpt, EnvOpt, InClusterOpt, KubeconfigOpt, LiveOptions, PrometheusTokenOpt,
                                    TimeoutOpt, env_file, fail, live_cluster, parse_interval, read_document, render_or_fail)
from fleetops.output import TableFormat
from fleetops.output.terminal import progress


def reconcile_command(
    env: EnvOpt,
    repo: Annotated[str, typer.Option("--repo", help="Git URL or path holding environments/", envvar="FLEETOPS_REPO")],
    ref: Annotated[str, typer.Option(help="Branch, tag or commit to follow")] = "main",
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit with its code")] = False,
    interval: Annotated[str | None, typer.Option(help="Service mode: a pass every DURATION (60s, 5m)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what a pass would do; write nothing")] = False,
    detect_only: Annotated[bool, typer.Option("--detect-only", help="Report drift, write nothing, judge nothing (the gate judges writes: `check` judges a revision); exit 1 with --once when drift exists")] = False,
    prune: Annotated[bool, typer.Option("--prune", help="Delete managed objects that Git no longer has")] = False,
    force_conflicts: Annotated[bool, typer.Option("--force-conflicts", help="Take fields other managers own (hand edits) back for Git")] = False,
    clusters: Annotated[list[str] | None, typer.Option("--cluster", help="Only this cluster (repeatable); default: all of the environment")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    in_cluster: InClusterOpt = False,
    cache_dir: Annotated[Path | None, typer.Option(help="Where the repository is cloned (default ~/.cache/fleetops/repos)")] = None,
    identity: Annotated[str | None, typer.Option(help="Leader election identity (default: host name); only the Lease holder writes", envvar="FLEETOPS_IDENTITY")] = None,
    shard_home: Annotated[str | None, typer.Option("--shard-home", metavar="CLUSTER", help="Share the clusters with the other replicas: a slot Lease each on this cluster, clusters hashed to slots by their pass cost (README: Sharded replicas); needs --interval")] = None,
    shards: Annotated[int | None, typer.Option("--shards", metavar="N", help="With --shard-home: slots (default: the environment's reconciler.replicas)")] = None,
    metrics_host: Annotated[str, typer.Option(help="Address for /metrics, /healthz, /readyz")] = "127.0.0.1",
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics, /healthz, /readyz and /drift (a detect-only pass now, its JSON) on this port")] = None,
    request_timeout: TimeoutOpt = "30s",
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """Keep the live fleet equal to Git: fetch, validate, render, gate, then apply, prune and fix nodes per cluster."""
    import signal
    import socket
    import threading

    from fleetops import reconcile

    if once == (interval is not None):
        fail("choose one of --once or --interval DURATION")
    if dry_run and detect_only:
        fail("--dry-run and --detect-only are alternatives; choose one")
    if shards is not None and shard_home is None:
        fail("--shards N needs --shard-home CLUSTER")
    if shards is not None and shards < 1:
        fail(f"--shards: must be 1 or more, got {shards}")
    if shard_home is not None and (once or dry_run or detect_only):
        fail("--shard-home shares the writes of a running service: use it with --interval, without --dry-run or --detect-only")
    reach = LiveOptions.of(kubeconfig, context, in_cluster, request_timeout, clusters or [])
    period = parse_interval(interval, "--interval") if interval is not None else 0.0
    opts = reconcile.Options(prune=prune, dry_run=dry_run, detect_only=detect_only, force_conflicts=force_conflicts)
    reconciler = reconcile.ReconcileLoop(
        env, reconcile.GitSource(repo, ref, cache_dir), reach.connect, gate=None, opts=opts, only=clusters or None,
        identity=identity or socket.gethostname(),  # a one-off run also yields to a running leader
        shards=reconcile.Shards(shard_home, shards) if shard_home is not None else None,
    )
    if shard_home is not None:
        _check_shard_home(reconciler, shard_home)
    if once:
        try:
            with progress(f"reconciling {env}"):
                result = reconciler.run_once()
        except Exception as exc:  # an engine fault: one line, not a traceback
            fail(f"reconcile failed: {type(exc).__name__}: {reconcile.redact(str(exc))}", errors.ExitCode.DENIED)
        if output is TableFormat.json:
            sys.stdout.write(_document(result))
        else:
            from fleetops.output import table

            table.reconcile_pass(result)
        raise typer.Exit(result.exit_code())
    reconciler.lease_seconds = max(15, int(3 * period))
    if metrics_port is not None:
        try:
            reconcile.serve_http(metrics_host, metrics_port, reconciler.metrics, ready=lambda: reconciler.ready,
                                 drift=lambda: _document(reconciler.detect()).encode())
        except OSError as exc:
            fail(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc.strerror or exc}")
    reconcile.json_logging()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the pod is stopping: finish this pass, then exit
    reconciler.serve(period, stop)


def _document(result: Any) -> str:
    """A pass as `--output json` prints it, and /drift answers it."""
    from fleetops.output import json

    return json.reconcile(result)


def _check_shard_home(reconciler: Any, home: str) -> None:
    """--shard-home names a cluster of the environment at the followed revision (when it can be read now: else each pass says why)."""
    fetched = reconciler.source.fetch()
    loaded = reconciler.load(fetched.path, fetched.revision) if fetched.path is not None and fetched.revision is not None else None
    if isinstance(loaded, tuple) and home not in {c.name for c in loaded[0].clusters}:
        fail(f"--shard-home: no cluster {home} in environment {loaded[0].environment} (its clusters: {', '.join(c.name for c in loaded[0].clusters)})")


def why_command(
    env: EnvOpt,
    cluster_name: Annotated[str, typer.Option("--cluster", help="The cluster the job was submitted to")],
    job: Annotated[str | None, typer.Option("--job", help="NAMESPACE/NAME of the job (its Kueue Workload's owner, or the Workload)")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Every pending job of this tenant instead of one")] = None,
    environments: DirOpt = DEFAULT_DIR,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    in_cluster: InClusterOpt = False,
    request_timeout: TimeoutOpt = "30s",
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """Why a job waits, in the environment file's terms: what blocks it at which line, who holds the capacity, whether it
    can ever be admitted as asked, node-level causes and what would let it in. Exit 0 answered, 1 when a job can never be
    admitted as asked, 2 on bad input or when the cluster cannot be read."""
    from fleetops.kube import DNS_SUBDOMAIN
    from fleetops.why import answer as why_answer
    from fleetops.why.jobs import select

    if (job is None) == (tenant is None):
        fail("choose one of --job NAMESPACE/NAME or --tenant T")
    namespace, _, name = (job or "").partition("/")
    if job is not None and not (spec.is_dns_label(namespace) and name and DNS_SUBDOMAIN.fullmatch(name)):
        fail(f"--job: expected NAMESPACE/NAME, got {job!r}")
    document = read_document(environments, env)
    if tenant is not None and tenant not in {t.name for t in document.env.tenants}:
        fail(f"--tenant: no tenant {tenant!r} in {env}")
    reach = LiveOptions.of(kubeconfig, context, in_cluster, request_timeout, [cluster_name])
    found, live = live_cluster(document, cluster_name, reach, namespace or tenant)
    jobs = select(live.jobs, namespace or tenant or "", name or None)
    if job is not None and not jobs:
        fail(f"--job {job}: no Kueue Workload of that job on {found.name} (was it submitted to a LocalQueue?)")
    answers = why_answer.explain_all(document, found, live, jobs)
    never = sum(not a.can_ever for a in answers)
    if output is TableFormat.json:
        from fleetops.output import json

        sys.stdout.write(json.why(env, found.name, live.status, answers, live.problems))
    else:
        from fleetops.output import table

        table.why(found.name, live.status, answers, tenant, live.problems)
    raise typer.Exit(errors.ExitCode.DENIED if never else errors.ExitCode.OK)


def standing_command(
    env: EnvOpt,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant")],
    cluster_names: Annotated[list[str] | None, typer.Option("--cluster", help="Only this cluster (repeatable); default: every cluster of the tenant")] = None,
    environments: DirOpt = DEFAULT_DIR,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    in_cluster: InClusterOpt = False,
    request_timeout: TimeoutOpt = "30s",
    prometheus: Annotated[str | None, typer.Option("--prometheus", envvar="FLEETOPS_PROMETHEUS_URL", help="Prometheus holding metering's history: the minutes below guarantee while others borrowed (unknown without it)")] = None,
    prometheus_token_file: PrometheusTokenOpt = None,
    window: Annotated[str, typer.Option("--window", help="How far back the minutes below guarantee are counted (24h, 7d)")] = "24h",
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """A tenant's standing on each of its clusters, per device resource: guarantee, reachable burst, in use, borrowed,
    lent and pending, from the live queues, and with --prometheus the minutes it spent below its guarantee while others
    borrowed. Exit 0, or 2 on bad input or when a cluster or Prometheus cannot be read."""
    from fleetops import prometheus as prom, usage
    from fleetops.why import answer as why_answer, history, standing as why_standing

    document = read_document(environments, env)
    found = next((t for t in document.env.tenants if t.name == tenant), None)
    if found is None:
        fail(f"--tenant: no tenant {tenant!r} in {env}")
    try:
        span = usage.parse_window(window)
    except ValueError as exc:
        fail(f"--window: {exc}")
    names = cluster_names or found.clusters
    for name in names:
        if name not in found.clusters:
            fail(f"--cluster: tenant {tenant} is not on {name} (its clusters: {', '.join(found.clusters)})")
    reach = LiveOptions.of(kubeconfig, context, in_cluster, request_timeout, names)
    source = prom.Prometheus(prometheus, token_file=prometheus_token_file) if prometheus else None
    rows: list[Any] = []
    problems: list[str] = []
    for name in names:
        c, live = live_cluster(document, name, reach, tenant)
        past = (lambda resource, c=c: history.measure(source, document.env, c, tenant, resource, span)) if source else None
        try:
            rows += why_standing.standing(why_answer.ClusterContext(document, c, live), tenant, past)
        except prom.PrometheusError as exc:
            fail(exc.lines[0])
        problems += live.problems
    if output is TableFormat.json:
        from fleetops.output import json

        sys.stdout.write(json.standing(env, tenant, rows, problems))
        return
    from fleetops.output import table

    table.standing(rows, problems, f"{tenant} in {env}")


def deploy_command(
    env: EnvOpt,
    stack: Annotated[str | None, typer.Option(help="Pulumi stack name (default: the environment's name)")] = None,
    preview: Annotated[bool, typer.Option("--preview", help="Show what would change, change nothing")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="With --preview: each object's changed fields, as `pulumi preview --diff` prints them")] = False,
    repo: Annotated[Path, typer.Option(help="The fleet repository: environments/, stacks/, policies/")] = Path("."),
    state: Annotated[Path | None, typer.Option(help="Pulumi's state, plugins and stack settings (default: $XDG_STATE_HOME/fleetops/pulumi, ~/.local/state/fleetops/pulumi)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig file (default: the cluster's kubeconfig, $KUBECONFIG, ~/.kube/config)")] = None,
    passphrase_file: Annotated[Path | None, typer.Option(help="File holding the passphrase of the stack's secrets (default: $PULUMI_CONFIG_PASSPHRASE_FILE or $PULUMI_CONFIG_PASSPHRASE)")] = None,
    pulumi: Annotated[Path | None, typer.Option(help="Pulumi CLI (default: .tools/bin/pulumi from `make tools`, else pulumi on PATH)")] = None,
    provider: Annotated[Path | None, typer.Option(help="pulumi-resource-kubernetes binary to install (default: beside the Pulumi CLI)")] = None,
    install_crds: Annotated[bool, typer.Option("--install-crds", help="First install the CRDs fleetops ships (fleetops/crds/) that the fleet's objects need, where a cluster lacks them")] = False,
    parallelism: Annotated[int | None, typer.Option(min=1, help="Resource operations Pulumi runs at once (default: Pulumi's, 4 per CPU; benchmarks/README.md)")] = None,
    step_checkpoints: Annotated[bool, typer.Option("--step-checkpoints", help="Write the stack's state after every step, as Pulumi does by default (slower at fleet scale: benchmarks/README.md); by default it is written once, at the end")] = False,
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """Deploy (or --preview) an environment with Pulumi, through the Automation API, with the policy pack: exit 0 done, 1 denied by policy, 2 bad input or a failed deploy."""
    from fleetops import deploy

    if diff and not preview:
        fail("--diff shows what a preview would change: give --preview too")
    operation = deploy.Operation.preview if preview else deploy.Operation.up
    # What render refuses is refused here, in one line each, before Pulumi or its state is touched:
    # the policy pack would judge it, but the API server would refuse it halfway through an update.
    environment, _ = render_or_fail(env_file(repo / spec.ENVIRONMENTS, env), UNSTAMPED)
    try:
        with progress(f"pulumi {operation.value} {stack or env}"):
            result = deploy.run(repo, env, stack or env, operation, state or deploy.default_state(), install_crds=install_crds,
                                parallelism=parallelism, step_checkpoints=step_checkpoints, diff=diff, kubeconfig=kubeconfig, passphrase_file=passphrase_file, pulumi=pulumi, provider=provider)
    except deploy.DeployError as exc:
        fail(str(exc))
    if result.ok and operation is deploy.Operation.up and (revision := result.outputs.get("revision")):
        from fleetops import reconcile  # the clusters record what they hold: `reconcile` reads its last applied revision there

        result.messages.extend(reconcile.record_deploy(environment, revision, result.stack, lambda c: deploy.cluster_api(c, kubeconfig)))
    code = 0 if result.ok else 1 if result.denied else 2
    if output is TableFormat.json:
        from fleetops.output import json

        sys.stdout.write(json.deploy(env, result))
    else:
        from fleetops.output import table

        table.deploy(result, operation, env)
    raise typer.Exit(code)
