"""The reports: audit (for auditors) and statements (for tenants)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from fleetops import errors, spec
from fleetops.commands.base import (DEFAULT_DIR, DEFAULT_POLICIES, DirOpt, EnvOpt, PoliciesOpt, PrometheusTokenOpt, _env_name, checked_or_problems,
                                    env_file, fail, given_file, parse_interval, write_files)
from fleetops.output import AuditFormat, StatementFormat
from fleetops.output.terminal import err, progress, say


def audit_command(
    env: Annotated[str, typer.Option("--env", "-e", help="One environment, or 'all'", callback=_env_name)] = "all",
    environments: DirOpt = DEFAULT_DIR,
    decision_log: Annotated[Path | None, typer.Option("--decision-log", help="JSONL decision log for the history (default: $FLEETOPS_DECISION_LOG or .fleetops/decisions.jsonl)")] = None,
    output: Annotated[AuditFormat, typer.Option("--output", help="html, markdown or json")] = AuditFormat.html,
    out_file: Annotated[Path | None, typer.Option("-o", "--out", help="Write the report here (default: standard output)")] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    opa_url: Annotated[str | None, typer.Option("--opa-url", help="Evaluate on this OPA server (default: $FLEETOPS_OPA_URL, else the embedded engine)")] = None,
    statements_file: Annotated[Path | None, typer.Option("--statements", help="Add these statements (`fleetops statements --output json`) to the report")] = None,
    whatif_file: Annotated[Path | None, typer.Option("--whatif", help="Add this replay (`fleetops whatif --output json`): its figures per side and, in HTML, its pictures")] = None,
) -> None:
    """One self-contained report for auditors: rules, tests and coverage, decisions, waivers, history, capacity, statements, what a configuration does to the work."""
    from fleetops import policy
    from fleetops import audit
    from fleetops import git

    if decision_log is not None:  # a log named is one to read: a typo must not read as an empty history
        given_file(decision_log, "--decision-log")
    paths = sorted(environments.glob("*.yaml")) if env == "all" else [env_file(environments, env)]
    if not paths:
        fail(f"{environments}: no environment files")
    # An environment the other commands refuse is refused here too, before a report says anything of it.
    checked = {path.stem: checked_or_problems(path) for path in paths}
    problems = [p for c in checked.values() if isinstance(c, list) for p in c]
    if problems:
        fail("\n".join(map(str, problems)))
    try:
        repo = Path(git.run(policies, "rev-parse", "--show-toplevel").strip())
    except git.GitError:
        repo = policies.resolve().parent
    try:
        with progress("building the audit report"):
            report = audit.build(
                repo, [(name, c) for name, c in checked.items() if not isinstance(c, list)], policies, policy.decision_log_path(decision_log), engine=policy.engine_from(opa_url),
                statements=statements_file, work=whatif_file,
            )
    except policy.PolicyError as exc:
        fail(f"{exc} (no report written)")
    if skipped := audit.malformed_summary(report.history):
        say(skipped)
    from fleetops.output import html, json, markdown

    text = {AuditFormat.html: html.audit, AuditFormat.markdown: markdown.audit, AuditFormat.json: json.audit}[output](report)
    if out_file is None:
        sys.stdout.write(text)
        return
    write_files({out_file: text}, "the report")
    err.print(f"wrote {out_file} ({len(report.policies)} rules, {len(report.environments)} environment(s))", highlight=False)


def statements_command(
    env: EnvOpt,
    prometheus: Annotated[str, typer.Option("--prometheus", envvar="FLEETOPS_PROMETHEUS_URL", help="Prometheus (or a querier of its API) holding the metering series, e.g. http://prometheus.monitoring:9090")],
    period: Annotated[str, typer.Option("--period", help="The calendar month, UTC: YYYY-MM")],
    environments: DirOpt = DEFAULT_DIR,
    token_file: PrometheusTokenOpt = None,
    output: Annotated[StatementFormat, typer.Option("--output", help="text, json or csv")] = StatementFormat.text,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write one file per tenant here (TENANT.txt, .json or .csv) instead of standard output")] = None,
    deadline: Annotated[str, typer.Option("--deadline", help="The whole time given to Prometheus's answers (30s, 10m); each query has at most 3m of it")] = "10m",
) -> None:
    """Per-tenant statements for a month from Prometheus: postpaid invoices (device-hours x price per cluster, pool and
    device model) and prepaid balances (top-ups to the month's end less spend); and each pool's idle capacity, what no tenant
    held and its cost (standard output only, never in a tenant's file). Exit 1 when a prepaid balance is
    overdrawn, 2 when Prometheus cannot be asked in --deadline, holds no metering for the month, or some use is unknown
    (a cluster without series, a day without a number): then the statements are printed marked incomplete, and --out writes none."""
    from fleetops.metering import statements
    from fleetops.prometheus import QUERY_DEADLINE, Prometheus

    seconds = parse_interval(deadline, "--deadline")
    spec_env = spec.load_environment(env_file(environments, env))
    month = statements.Period.parse(period)
    with progress(f"reading {month.name} from {prometheus}"):
        client = Prometheus(prometheus, token_file, query_deadline=min(QUERY_DEADLINE, seconds), client_deadline=seconds)
        result = statements.build(spec_env, client, month)
    for item in result.unknown:
        say(f"warning: {item}: metered, but no such tenant or pool in {env}: not billed")
    for tenant, reasons in result.incomplete.items():
        for why in reasons:
            say(f"incomplete: {tenant}: {why}")
    for row in result.idle:
        if row.unknown is not None:
            say(f"idle unknown: {row.unknown}")
    overdrawn = [s.tenant for s in result.statements if s.overdrawn]
    counts = {"statements": len(result.statements), "overdrawn": len(overdrawn), "incomplete": len(result.incomplete)}
    if output is StatementFormat.json:
        from fleetops.output import json

        forms, whole = json.statements(result, counts, not overdrawn and not result.incomplete)
    elif output is StatementFormat.csv:
        from fleetops.output import csv

        forms = {s.tenant: csv.csv_text([s], result.incomplete) for s in result.statements}
        whole = csv.csv_text(result.statements, result.incomplete) + csv.idle_csv(result.idle, month.name, spec_env.budget.currency)
    else:
        from fleetops.output import text

        forms = {s.tenant: text.statement(s, result.incomplete.get(s.tenant, [])) for s in result.statements}
        whole = "\n".join([*forms.values(), text.idle(result.idle, month.name, spec_env.budget.currency)])
    if out_dir is None:
        sys.stdout.write(whole)
    elif result.incomplete:  # a file per tenant is what is sent: none while any is unknown
        err.print(f"wrote nothing to {out_dir}: {len(result.incomplete)} statements are incomplete", highlight=False)
    else:
        write_files({out_dir / f"{tenant}.{output.value if output is not StatementFormat.text else 'txt'}": form for tenant, form in forms.items()}, "the statements")
        err.print(f"wrote {len(forms)} statements for {month.name} to {out_dir} ({result.queries} Prometheus queries)", highlight=False)
    if result.incomplete:
        raise typer.Exit(errors.ExitCode.BAD_INPUT)
    if overdrawn:
        say(f"overdrawn: {', '.join(overdrawn)}")
        raise typer.Exit(errors.ExitCode.DENIED)
