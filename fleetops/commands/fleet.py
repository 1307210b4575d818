"""The commands on the environment files and the policies: validate, render, check, policy test and schema."""

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from fleetops import errors
from fleetops.commands.base import DEFAULT_DIR, DEFAULT_POLICIES, DirOpt, EnvOpt, PoliciesOpt, env_file, fail, problems_of, render_or_fail, _env_name
from fleetops.output import CheckFormat, ObjectFormat, TableFormat, dump, verdict_form
from fleetops.output.terminal import err, out, progress, say


class RenderEngine(str, Enum):
    direct = "direct"
    pulumi = "pulumi"


def validate(
    env: Annotated[str | None, typer.Option("--env", "-e", help="One environment; default: all of them", callback=_env_name)] = None,
    environments: DirOpt = DEFAULT_DIR,
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """Check environment files as every other command does: fields, references, sharing modes, names,
    limits, and every rendered object against its schema. Exit 2 on any problem."""
    paths = [env_file(environments, env)] if env else sorted(environments.glob("*.yaml"))
    if not paths:
        fail(f"{environments}: no environment files")
    problems: list[errors.Problem] = []
    for path in paths:
        problems += problems_of(path)
    if output is TableFormat.json:
        from fleetops.output import json

        sys.stdout.write(json.validate(paths, problems))
    elif not problems:
        from fleetops.output import table

        table.validate(paths)
    if problems:
        if output is TableFormat.table:
            fail("\n".join(map(str, problems)))
        raise typer.Exit(errors.ExitCode.BAD_INPUT)


def render_command(
    env: EnvOpt,
    environments: DirOpt = DEFAULT_DIR,
    out_dir: Annotated[Path | None, typer.Option("-o", "--out", help="Write one file per cluster into this folder")] = None,
    output: Annotated[ObjectFormat, typer.Option("--output", help="yaml or json")] = ObjectFormat.yaml,
    revision: Annotated[str | None, typer.Option(help="Revision to stamp (default: the Git HEAD)")] = None,
    summary: Annotated[bool, typer.Option(help="Print a summary of clusters, pools, devices and quotas (to stderr when objects go to stdout)")] = False,
    engine: Annotated[RenderEngine, typer.Option(help="direct: walk the fleet's parts (fast); pulumi: run stacks/__main__.py under the Pulumi SDK's mocks (same bytes)")] = RenderEngine.direct,
) -> None:
    """Render every cluster's Kubernetes objects: exactly what `pulumi up` would send."""
    path = env_file(environments, env)
    if out_dir is None:
        model, state = render_or_fail(path, revision, engine.value)
        for cluster, manifests in state.clusters.items():
            sys.stdout.write(f"# cluster: {cluster}\n" if output is ObjectFormat.yaml else "")
            sys.stdout.write(dump(manifests, output))
    else:
        from fleetops import emit

        try:
            with emit.Files("rendered objects") as files:
                model, state = render_or_fail(path, revision, engine.value,
                                              each_cluster=lambda cluster, objects: files.put(out_dir / f"{cluster}.{output.value}", dump(objects, output)))
                written = files.commit()
        except emit.WriteError as exc:
            fail(str(exc))
        err.print(f"wrote {written} file(s) to {out_dir}", highlight=False)
    if summary:  # never into YAML or JSON on stdout: a pipe to kubectl must stay parseable
        from fleetops.output import table

        table.summary(model, state, out if out_dir is not None else err)


def check(
    env: EnvOpt,
    environments: DirOpt = DEFAULT_DIR,
    live: Annotated[Path | None, typer.Option("--live", help="Live node inventory JSON: nodes with cluster, name, labels, capacity, allocatable, ready")] = None,
    output: Annotated[CheckFormat, typer.Option("--output", help="table, json, junit, sarif (GitHub code scanning) or tap")] = CheckFormat.table,
    decision_log: Annotated[Path | None, typer.Option("--decision-log", help="JSONL decision log (default: $FLEETOPS_DECISION_LOG or .fleetops/decisions.jsonl)")] = None,
    opa_url: Annotated[str | None, typer.Option("--opa-url", help="Evaluate on this OPA server (default: $FLEETOPS_OPA_URL, else the embedded engine); token from $FLEETOPS_OPA_TOKEN")] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    revision: Annotated[str | None, typer.Option(help="Revision to stamp (default: the Git HEAD)")] = None,
) -> None:
    """Judge an environment by the policies: exit 1 on any unwaived deny, 2 when no decision could be made."""
    from fleetops import policy
    path = env_file(environments, env)
    model, state = render_or_fail(path, revision)
    try:
        inventory = policy.load_inventory(live) if live is not None else None
        engine = policy.engine_from(opa_url)
        with progress(f"judging {model.environment} by {policies}"):
            verdict = policy.evaluate(model, state, live=inventory, engine=engine, policies_dir=policies)
        policy.log_decisions(policy.decision_log_path(decision_log), policy.verdict_record(verdict, "check"))
    except policy.PolicyError as exc:
        fail(f"{exc} (no decision: failing closed)")
    for problem in verdict.waiver_problems:
        say(f"waiver ignored: {problem}")
    if output is CheckFormat.table:
        from fleetops.output import table

        table.check(verdict)
    else:
        sys.stdout.write(verdict_form(verdict, output, path, policies))
    if not verdict.ok:
        raise typer.Exit(errors.ExitCode.DENIED)


def policy_test(
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
    policies: PoliciesOpt = DEFAULT_POLICIES,
) -> None:
    """Run every *_test.rego with the embedded engine and report line coverage per policy file. Exit 1 on a failing test."""
    from fleetops import policy
    report = policy.run_tests(policies)
    if output is TableFormat.json:
        from fleetops.output import json

        sys.stdout.write(json.policy_tests(report))
    else:
        from fleetops.output import table

        table.policy_tests(report)
    if not report.passed:
        raise typer.Exit(errors.ExitCode.DENIED)


def schema() -> None:
    """Print the JSON Schema of every command's --output json (versioned: the `schema` field of each output)."""
    import json

    from fleetops import envelope

    sys.stdout.write(json.dumps(envelope.json_schema(), indent=2) + "\n")
