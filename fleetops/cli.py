"""`fleetops` command line. Exit codes (`errors.ExitCode`): 0 ok, 1 policy denied or drift found, 2 bad input or usage.

No `from __future__ import annotations` here: typer would evaluate every command's annotations from
strings at start-up (an eval per option, a fifth of `validate`'s time); names imported only for type
checking are quoted instead.
"""

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

# fleetops's models are its own: no third-party pydantic plugin observes the environment files, and
# not discovering plugins (a scan of every installed package's entry points) saves a fifth of `validate`.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from fleetops import memory  # noqa: E402

if __name__ == "__main__":  # `python -m fleetops.cli`: as `fleetops` starts (fleetops.__main__), the collector off before the imports
    memory.for_a_command()

import typer  # noqa: E402

from fleetops import __version__, errors, spec  # noqa: E402
from fleetops.envelope import as_json, decision_counts, envelope  # noqa: E402
from fleetops.output import Format as PlanFormat  # noqa: E402

if TYPE_CHECKING:  # imported where used: `validate` must not pay for rich, the policy engine or JSON Schema
    from rich.table import Table

    from fleetops import cluster, emit, policy
    from fleetops import render

app = typer.Typer(
    help="Declarative, policy-gated GitOps for AI compute fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's own help: rich's option panel cut option names and env vars short at 80 columns
    # (`--only-on-chan…`); click wraps the descriptions and never cuts a name.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"fleetops {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit")] = False,
) -> None:
    """Declarative, policy-gated GitOps for AI compute fleets."""




class _Console:
    """A rich Console made on first use: `validate` and the other quick paths never import rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


out = _Console(soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 160)
err = _Console(stderr=True, soft_wrap=True, emoji=False)


def _env_name(name: str | None) -> str | None:
    """An environment is named, never given as a path: `../x`, `/abs` or `a/b` would reach outside the folder."""
    if name is not None and not spec.is_dns_label(name):
        fail(f"--env: an environment name must be {spec.DNS_LABEL_RULE}, got {name!r}")
    return name


EnvOpt = Annotated[str, typer.Option("--env", "-e", help="Environment name: environments/NAME.yaml", callback=_env_name)]
DirOpt = Annotated[Path, typer.Option("--environments", help="Folder of environment files", envvar="FLEETOPS_ENVIRONMENTS")]
DEFAULT_DIR = spec.ENVIRONMENTS


class Format(str, Enum):
    yaml = "yaml"
    json = "json"


class Engine(str, Enum):
    direct = "direct"
    pulumi = "pulumi"


class Output(str, Enum):
    table = "table"
    json = "json"


STATUS_STYLE = {"deny": "bold red", "approval": "bold magenta", "warn": "yellow", "waived": "dim"}


@contextlib.contextmanager
def progress(what: str) -> Iterator[None]:
    """A spinner on stderr while `what` runs, on a terminal only: pipes and CI logs get none of it."""
    if not err.is_terminal:
        yield
        return
    with err.status(what, spinner="dots"):
        yield


def fail(message: str, code: int = errors.ExitCode.BAD_INPUT) -> NoReturn:
    err.print(message, markup=False, highlight=False)
    raise typer.Exit(code)


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


def print_summary(env: spec.Environment, state: "render.DesiredState", console: _Console) -> None:
    from rich.table import Table

    pools = Table(title=f"{env.environment}: pools and edge groups", title_justify="left")
    for col in ("cluster", "group", "device", "nodes", "sharing", "schedulable"):
        pools.add_column(col)
    for cluster in env.clusters:
        for group in (*cluster.pools, *cluster.edge_groups):
            sharing = group.sharing.mode if isinstance(group, spec.Pool) else "edge"
            units = ", ".join(f"{r}={n}" for r, n in spec.group_capacity(group).items())
            pools.add_row(cluster.name, group.name, f"{group.device.model} x{group.device.per_node}", str(group.nodes), sharing, units)
    quota = Table(title="capacity and quota per cluster", title_justify="left")
    for col in ("cluster", "resource", "physical", "schedulable", "sharing", "guaranteed", "burst", "headroom %"):
        quota.add_column(col, justify="right" if col not in ("cluster", "resource") else "left")
    for row in spec.capacity_rows(env):
        quota.add_row(row["cluster"], row["resource"], str(row["physical"]), str(row["capacity"]), f"x{row['sharing_factor']:g}",
                      *(str(row[k]) for k in ("guaranteed", "burst", "headroom_percent")))
    console.print(pools)
    console.print(quota)
    console.print(
        f"{state.object_count} objects in {len(state.clusters)} clusters, {len(env.tenants)} tenants, "
        f"monthly cost {spec.monthly_cost(env):,.0f} {env.budget.currency} of budget {env.budget.monthly:,.0f}, revision {state.revision}"
    )


def write_files(files: dict[Path, str], what: str) -> None:
    """Each file beside its target, then all renamed into place: a failure leaves no half-written file."""
    from fleetops import emit

    with emit.Files(what) as out:  # a file that cannot be written is an emit.WriteError: main's one line, exit 2
        for path, text in files.items():
            out.put(path, text)
        out.commit()


def dump(manifests: list[dict[str, Any]], fmt: Format) -> str:
    """A cluster's manifests as text in `fmt`: on stdout, and in the files of `render -o`."""
    from fleetops import emit

    return emit.documents(manifests) if fmt is Format.yaml else emit.json_text(manifests)


PrometheusTokenOpt = Annotated[Path | None, typer.Option("--prometheus-token-file", envvar="FLEETOPS_PROMETHEUS_TOKEN_FILE", help="A bearer token for Prometheus, read from this file (never printed)")]


@app.command()
def validate(
    env: Annotated[str | None, typer.Option("--env", "-e", help="One environment; default: all of them", callback=_env_name)] = None,
    environments: DirOpt = DEFAULT_DIR,
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
) -> None:
    """Check environment files as every other command does: fields, references, sharing modes, names,
    limits, and every rendered object against its schema. Exit 2 on any problem."""
    paths = [env_file(environments, env)] if env else sorted(environments.glob("*.yaml"))
    if not paths:
        fail(f"{environments}: no environment files")
    problems: list[errors.Problem] = []
    for path in paths:
        problems += problems_of(path)
    if output is Output.json:
        sys.stdout.write(as_json(envelope("validate", not problems, {"problems": len(problems)}, problems, files=[str(p) for p in paths])))
    elif not problems:
        sys.stdout.write(f"ok: {len(paths)} environment file(s) valid: {', '.join(str(p) for p in paths)}\n")
    if problems:
        if output is Output.table:
            fail("\n".join(map(str, problems)))
        raise typer.Exit(errors.ExitCode.BAD_INPUT)


@app.command("render")  # named apart from the module it runs
def render_command(
    env: EnvOpt,
    environments: DirOpt = DEFAULT_DIR,
    out_dir: Annotated[Path | None, typer.Option("-o", "--out", help="Write one file per cluster into this folder")] = None,
    output: Annotated[Format, typer.Option("--output", help="yaml or json")] = Format.yaml,
    revision: Annotated[str | None, typer.Option(help="Revision to stamp (default: the Git HEAD)")] = None,
    summary: Annotated[bool, typer.Option(help="Print a summary of clusters, pools, devices and quotas (to stderr when objects go to stdout)")] = False,
    engine: Annotated[Engine, typer.Option(help="direct: walk the fleet's parts (fast); pulumi: run stacks/__main__.py under the Pulumi SDK's mocks (same bytes)")] = Engine.direct,
) -> None:
    """Render every cluster's Kubernetes objects: exactly what `pulumi up` would send."""
    path = env_file(environments, env)
    if out_dir is None:
        model, state = render_or_fail(path, revision, engine.value)
        for cluster, manifests in state.clusters.items():
            sys.stdout.write(f"# cluster: {cluster}\n" if output is Format.yaml else "")
            sys.stdout.write(dump(manifests, output))
    else:
        from fleetops import emit

        with emit.Files("rendered objects") as files:
            model, state = render_or_fail(path, revision, engine.value,
                                          each_cluster=lambda cluster, objects: files.put(out_dir / f"{cluster}.{output.value}", dump(objects, output)))
            written = files.commit()
        err.print(f"wrote {written} file(s) to {out_dir}", highlight=False)
    if summary:  # never into YAML or JSON on stdout: a pipe to kubectl must stay parseable
        print_summary(model, state, out if out_dir is not None else err)


# --- policy gate ------------------------------------------------------------------------------


class CheckOutput(str, Enum):
    table = "table"
    json = "json"
    junit = "junit"


PoliciesOpt = Annotated[Path, typer.Option("--policies", help="Folder of Rego policies, data and waivers (default: policies/ of the repository here)", envvar="FLEETOPS_POLICIES")]
# The repository being judged brings its own policies, as it brings its environments: never the
# copy installed with fleetops.
DEFAULT_POLICIES = Path("policies")


def verdict_table(verdict: "policy.Verdict") -> "Table":
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{verdict.environment}: policy decisions", title_justify="left")
    for col in ("status", "rule", "severity", "resource", "message"):
        table.add_column(col)
    for d in verdict.decisions:
        table.add_row(Text(d.status, style=STATUS_STYLE.get(d.status, "")), d.rule, d.severity, d.resource_ref(),
                      d.msg + (f" (waiver {d.waived_by})" if d.waived_by else ""))
    return table


@app.command()
def check(
    env: EnvOpt,
    environments: DirOpt = DEFAULT_DIR,
    live: Annotated[Path | None, typer.Option("--live", help="Live node inventory JSON: nodes with cluster, name, labels, capacity, allocatable, ready")] = None,
    output: Annotated[CheckOutput, typer.Option("--output", help="table, json or junit")] = CheckOutput.table,
    decision_log: Annotated[Path | None, typer.Option("--decision-log", help="JSONL decision log (default: $FLEETOPS_DECISION_LOG or .fleetops/decisions.jsonl)")] = None,
    opa_url: Annotated[str | None, typer.Option("--opa-url", help="Evaluate on this OPA server (default: $FLEETOPS_OPA_URL, else the embedded engine); token from $FLEETOPS_OPA_TOKEN")] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    revision: Annotated[str | None, typer.Option(help="Revision to stamp (default: the Git HEAD)")] = None,
) -> None:
    """Judge an environment by the policies: exit 1 on any unwaived deny, 2 when no decision could be made."""
    from fleetops import policy
    from fleetops.envelope import DecisionStatus
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
        err.print(f"waiver ignored: {problem}", markup=False, highlight=False)
    if output is CheckOutput.json:
        body = verdict.as_dict()
        sys.stdout.write(as_json(envelope("check", verdict.ok, decision_counts(body["decisions"]), verdict.waiver_problems,
                                          **{k: v for k, v in body.items() if k != "waiver_problems"})))
    elif output is CheckOutput.junit:
        sys.stdout.write(policy.junit_report(f"fleetops check {verdict.environment}", "fleetops.check", policy.report_rows(verdict)))
    else:
        if verdict.decisions:
            out.print(verdict_table(verdict))
        out.print(
            f"{verdict.environment}: {'pass' if verdict.ok else 'FAIL'}: {len(verdict.of(DecisionStatus.DENY))} denied, "
            f"{len(verdict.of(DecisionStatus.WARN))} warning(s), {len(verdict.of(DecisionStatus.WAIVED))} waived ({verdict.engine} engine, "
            f"policies {verdict.policy_digest[:19]}, {verdict.duration_seconds:.2f}s)",
            markup=False,
            highlight=False,
        )
    if not verdict.ok:
        raise typer.Exit(errors.ExitCode.DENIED)


policy_app = typer.Typer(help="Work on the Rego policies themselves.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("test")
def policy_test(
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
    policies: PoliciesOpt = DEFAULT_POLICIES,
) -> None:
    """Run every *_test.rego with the embedded engine and report line coverage per policy file. Exit 1 on a failing test."""
    from fleetops import policy
    report = policy.run_tests(policies)
    if output is Output.json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        from rich.table import Table

        tests = Table(title="policy tests", title_justify="left")
        for col in ("result", "package", "test", "detail"):
            tests.add_column(col)
        for r in report.results:
            tests.add_row("pass" if r.passed else "FAIL", r.package, r.name, r.error or "")
        cover = Table(title="line coverage", title_justify="left")
        for col in ("file", "covered %", "uncovered lines"):
            cover.add_column(col)
        for c in report.coverage:
            cover.add_row(c.path, f"{c.percent:.1f}", ", ".join(map(str, c.not_covered)))
        out.print(tests)
        out.print(cover)
        failed = sum(not r.passed for r in report.results)
        out.print(f"{len(report.results) - failed} passed, {failed} failed", markup=False, highlight=False)
    if not report.passed:
        raise typer.Exit(errors.ExitCode.DENIED)


# --- plan ---------------------------------------------------------------------------------------


def _usage_window(text: str) -> str:
    from fleetops import usage

    try:
        return usage.parse_window(text).text
    except ValueError as exc:
        fail(f"--usage-window: {exc}")


@app.command("plan")  # named apart from the module it runs
def plan_command(
    env: EnvOpt,
    base: Annotated[str | None, typer.Option(help="Base revision (default: merge-base of HEAD with the default branch)")] = None,
    head: Annotated[str | None, typer.Option(help="Head revision (default: the working tree)")] = None,
    approvals: Annotated[int, typer.Option(min=0, envvar="FLEETOPS_APPROVALS", help="Approvals the change has (CI sets FLEETOPS_APPROVALS)")] = 0,
    output: Annotated[PlanFormat, typer.Option("--output", help="markdown (the PR comment), json, junit, or github (check annotations on the lines)")] = PlanFormat.markdown,
    max_chars: Annotated[int, typer.Option(min=2000, help="Longest markdown comment; objects beyond it are summarised per cluster and kind")] = 55_000,
    artifacts: Annotated[Path | None, typer.Option(help="Also write every form of the plan here: plan.json, plan.md (no size limit), comment.md, plan-junit.xml, annotations.txt")] = None,
    artifacts_url: Annotated[str, typer.Option(envvar="FLEETOPS_ARTIFACTS_URL", help="Where CI keeps --artifacts, named in a shortened comment")] = "",
    only_on_change: Annotated[bool, typer.Option(help="Print nothing when the change has no effect (objects, fields, policies or cost)")] = False,
    repo: Annotated[Path, typer.Option(help="The fleet's Git repository")] = Path("."),
    decision_log: Annotated[Path | None, typer.Option("--decision-log", help="JSONL decision log (default: $FLEETOPS_DECISION_LOG or .fleetops/decisions.jsonl)")] = None,
    require_base_program: Annotated[bool, typer.Option(help="Exit 2 unless the fleetops running is the base revision's program (CI's gate)")] = False,
    prometheus: Annotated[str | None, typer.Option(envvar="FLEETOPS_PROMETHEUS_URL", help="Prometheus to measure the use of what the change touches (the judge's own, never the revision's)")] = None,
    usage_window: Annotated[str, typer.Option(callback=_usage_window, help="How far back use is measured: 30d, 12h, 2w")] = "30d",
    prometheus_token_file: PrometheusTokenOpt = None,
    whatif: Annotated[Path | None, typer.Option("--whatif", metavar="TRACE", help="Also replay this CSV trace of jobs on the real Kueue at base and head: what the change does to the work (docs/whatif.md)")] = None,
) -> None:
    """What a change does to the fleet, objects, capacity, quota, cost and measured use, judged by the base revision's policies.

    Exit 1 when denied or when it needs more approvals, 2 on bad input."""
    from fleetops import git, output as forms, policy, prometheus as prom, usage
    from fleetops import plan

    try:
        top = Path(git.run(repo, "rev-parse", "--show-toplevel").strip())
        source = prom.Prometheus(prometheus, token_file=prometheus_token_file) if prometheus else None
        work = None
        if whatif is not None:  # the trace replayed on the plan's own sides: plan itself never imports whatif
            from fleetops.whatif import run as replay
            work = replay.work(whatif, replay.ReplayOptions(root=top))
        meter = plan.Meter(source, usage.parse_window(usage_window), work)
        with progress(f"planning {env}: rendering base and head, diffing, {f'replaying {whatif}, ' if whatif else ''}judging"):
            result = plan.build(top, env, base, head, approvals, meter)
        if require_base_program and not result.policy.judge_program_is_base:
            fail(f"plan: the fleetops running is not the program of the base revision {result.base.revision[:12]}: "
                 "install the base's checkout and run it there (--require-base-program)")
        policy.log_decisions(policy.decision_log_path(decision_log), policy.decision_record(
            "plan", env, result.head.revision, result.judgement, result.decision_rows(), result.verdict.value, approvals,
            result.usage.model_dump(mode="json") if result.usage else None))
    except git.GitError as exc:
        fail(f"{repo}: not a Git repository ({exc})")
    except (prom.PrometheusError, errors.UnknownEnvironment) as exc:  # bad input, before anything is judged: no plan to show
        fail(str(exc))
    except (plan.PlanError, policy.PolicyError) as exc:
        # Every form of the plan says the change cannot be judged, replacing an earlier verdict; exit 2.
        invalid = plan.cannot_judge(env, base, head, exc.problems)
        if artifacts is not None:
            write_files(forms.forms(invalid, artifacts, max_chars), "the plan")
        sys.stdout.write(forms.render(invalid, output, max_chars))
        fail(str(exc))
    code = errors.ExitCode.OK if result.verdict is plan.PlanVerdict.ALLOWED else errors.ExitCode.DENIED
    where = artifacts_url or (f"`{artifacts / 'plan.md'}`" if artifacts is not None else "")
    if artifacts is not None:  # every form of the one plan, for a CI job that plans once per environment
        write_files(forms.forms(result, artifacts, max_chars, where), "the full plan")
    if only_on_change and result.no_effect:
        raise typer.Exit(code)
    sys.stdout.write(forms.render(result, output, max_chars, where))
    if result.no_effect:
        # A first plan on a fresh clone compares the working tree with itself: say what to try.
        err.print(f"plan: no change between base {result.base.revision[:12]} and head: nothing to review. To see a plan, edit "
                  f"{spec.environment_path(env)} (raise a tenant's nvidia.com/gpu quota, or a pool's nodes) and run plan again, "
                  "or compare two revisions with --base and --head.", markup=False, highlight=False)
    raise typer.Exit(code)


# --- whatif --------------------------------------------------------------------------------------


class Side(str, Enum):
    base = "base"
    head = "head"
    static = "static"
    pooled = "pooled"


@app.command("whatif")
def whatif_command(
    env: EnvOpt,
    trace: Annotated[Path | None, typer.Option(help="A CSV of jobs: arrival,tenant,class,resource,units,pods,duration[,cluster] (docs/whatif.md)")] = None,
    generate: Annotated[bool, typer.Option("--generate", help="Replay jobs shaped after Alibaba PAI's GPU trace instead (--days, --jobs, --load, --seed)")] = False,
    days: Annotated[int, typer.Option(min=1, max=366, help="Generated: the window in days")] = 7,
    jobs: Annotated[int, typer.Option(min=1, max=200_000, help="Generated: how many jobs")] = 300,
    load: Annotated[float, typer.Option(help="Generated: the offered load, device-time asked over device-time there is")] = 0.5,
    seed: Annotated[int, typer.Option(help="Generated: the seed; the same seed gives the same jobs and the same figures")] = 1,
    cluster: Annotated[list[str] | None, typer.Option("--cluster", help="Generated: jobs only on this cluster, repeated (default: every cluster with a tenant's quota)")] = None,
    window_days: Annotated[float | None, typer.Option(help="CSV: the window in days (default: whole days up to the last arrival)")] = None,
    sides: Annotated[list[Side] | None, typer.Option("--side", help="A side to replay on, repeated: base, head, static, pooled (default: base and head)")] = None,
    base: Annotated[str | None, typer.Option(help="Base revision (default: merge-base of HEAD with the default branch)")] = None,
    head: Annotated[str | None, typer.Option(help="Head revision (default: the working tree)")] = None,
    repo: Annotated[Path, typer.Option(help="The fleet's Git repository (its .tools/bin is searched for the servers first)")] = Path("."),
    write_trace: Annotated[Path | None, typer.Option(help="Also write the jobs replayed here, as a CSV trace")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep the servers' folders and logs here (default: a temporary folder, removed)")] = None,
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
) -> None:
    """What a change does to the fleet's work: a trace of jobs replayed on the real Kueue, once per side.

    Utilisation per flavor beside the offered load and the backlog, waits per tenant and class,
    preemptions, guarantees not honoured and fairness, side by side (docs/whatif.md). Exit 2 on bad input
    or when a server (etcd, kube-apiserver, Kueue from `make tools`) is missing."""
    from fleetops import git
    from fleetops.whatif import report, run, sides as whatif_sides, trace as traces

    if (trace is None) == (not generate):
        fail("whatif: give a --trace FILE or --generate (one of them)")
    wanted = [whatif_sides.SideKind(s.value) for s in dict.fromkeys(sides or [Side.base, Side.head])]
    try:
        top = Path(git.run(repo, "rev-parse", "--show-toplevel").strip())
    except git.GitError as exc:
        fail(f"{repo}: not a Git repository ({exc})")
    with progress(f"whatif {env}: rendering base and head"), whatif_sides.revisions(top, env, base, head) as (before, after):
        fleet = after.env if whatif_sides.SideKind.HEAD in wanted else before.env
        jobs_of = (traces.generate(fleet, days, jobs, load, seed, cluster or ()) if generate
                   else traces.read_csv(trace, fleet, window_days * 86400 if window_days else None))  # type: ignore[arg-type]
        chosen = [{whatif_sides.SideKind.BASE: before, whatif_sides.SideKind.HEAD: after}.get(kind) or whatif_sides.derived(before, kind)
                  for kind in wanted]
    if write_trace is not None:
        traces.write_csv(jobs_of, write_trace)
    with progress(f"whatif {env}: replaying {len(jobs_of.jobs)} jobs on {', '.join(wanted)}"):
        figures = run.replay(chosen, jobs_of, run.ReplayOptions(root=top, keep=keep))
    if output is Output.json:
        sys.stdout.write(as_json(report.document(env, jobs_of, figures)))
    else:
        sys.stdout.write(report.table(env, jobs_of, figures))


# --- audit ---------------------------------------------------------------------------------------


class AuditFormat(str, Enum):
    html = "html"
    markdown = "markdown"
    json = "json"


@app.command("audit")  # named apart from the module it runs
def audit_command(
    env: Annotated[str, typer.Option("--env", "-e", help="One environment, or 'all'", callback=_env_name)] = "all",
    environments: DirOpt = DEFAULT_DIR,
    decision_log: Annotated[Path | None, typer.Option("--decision-log", help="JSONL decision log for the history (default: $FLEETOPS_DECISION_LOG or .fleetops/decisions.jsonl)")] = None,
    output: Annotated[AuditFormat, typer.Option("--output", help="html, markdown or json")] = AuditFormat.html,
    out_file: Annotated[Path | None, typer.Option("-o", "--out", help="Write the report here (default: standard output)")] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    opa_url: Annotated[str | None, typer.Option("--opa-url", help="Evaluate on this OPA server (default: $FLEETOPS_OPA_URL, else the embedded engine)")] = None,
    statements_file: Annotated[Path | None, typer.Option("--statements", help="Add these statements (`fleetops statements --output json`) to the report")] = None,
) -> None:
    """One self-contained report for auditors: rules, tests and coverage, decisions, waivers, history, capacity, statements."""
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
                repo, [(name, c) for name, c in checked.items() if not isinstance(c, list)], policies, policy.decision_log_path(decision_log), engine=policy.engine_from(opa_url)
            )
    except policy.PolicyError as exc:
        fail(f"{exc} (no report written)")
    if statements_file is not None:
        from fleetops.metering import statements

        report["statements"] = statements.audit_summary(statements_file)
    if skipped := audit.malformed_summary(report["history"]):
        err.print(skipped, markup=False, highlight=False)
    if output is AuditFormat.json:
        decisions = [d for e in report["environments"] for d in e.get("decisions", [])]
        text = as_json(envelope("audit", not any(d["status"] == "deny" for d in decisions), decision_counts(decisions), **report))
    else:
        text = {AuditFormat.html: audit.html, AuditFormat.markdown: audit.markdown}[output](report)
    if out_file is None:
        sys.stdout.write(text)
        return
    write_files({out_file: text}, "the report")
    err.print(f"wrote {out_file} ({len(report['policies'])} rules, {len(report['environments'])} environment(s))", highlight=False)




# --- statements --------------------------------------------------------------------------------


class StatementFormat(str, Enum):
    text = "text"
    json = "json"
    csv = "csv"




@app.command("statements")
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
    device model) and prepaid balances (top-ups to the month's end less spend). Exit 1 when a prepaid balance is
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
        err.print(f"warning: {item}: metered, but no such tenant or pool in {env}: not billed", markup=False, highlight=False)
    for tenant, reasons in result.incomplete.items():
        for why in reasons:
            err.print(f"incomplete: {tenant}: {why}", markup=False, highlight=False)
    overdrawn = [s.tenant for s in result.statements if s.overdrawn]
    counts = {"statements": len(result.statements), "overdrawn": len(overdrawn), "incomplete": len(result.incomplete)}
    if output is StatementFormat.json:
        forms = {s.tenant: as_json(result.statement_document(s)) for s in result.statements}
        whole = as_json(envelope("statements", not overdrawn and not result.incomplete, counts, **result.document()))
    elif output is StatementFormat.csv:
        forms = {s.tenant: statements.csv_text([s], result.incomplete) for s in result.statements}
        whole = statements.csv_text(result.statements, result.incomplete)
    else:
        forms = {s.tenant: statements.text(s, result.incomplete.get(s.tenant, [])) for s in result.statements}
        whole = "\n".join(forms.values())
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
        err.print(f"overdrawn: {', '.join(overdrawn)}", markup=False, highlight=False)
        raise typer.Exit(errors.ExitCode.DENIED)


# --- reconcile ---------------------------------------------------------------------------------


def parse_interval(text: str, option: str) -> float:
    """`60s`, `5m`, `1h` or plain seconds -> seconds."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        fail(f"{option}: expected a duration like 60s, 5m or 1h, got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2) or "s"]


def print_pass(result: Any) -> None:
    from rich.table import Table

    from fleetops.reconcile import PassStatus

    if result.status in (PassStatus.INVALID, PassStatus.UNAVAILABLE):  # nothing was reconciled: the reasons alone, no table, no counts
        for reason in result.reasons:
            err.print(reason, markup=False, highlight=False)
        return
    table = Table(title=f"{result.environment} at {result.revision or '(no revision)'}: {result.status}", title_justify="left")
    for col in ("cluster", "action", "object", "detail", "result"):
        # A fingerprint or a name is read whole: long words wrap, never end in an ellipsis.
        table.add_column(col, overflow="fold")
    for name, cluster in result.clusters.items():
        if cluster.unreachable is not None:
            table.add_row(name, "unreachable", "", cluster.unreachable, "error")
        elif not cluster.leader and not cluster.errors:
            table.add_row(name, "standby", "", "another replica holds the Lease", "")
        for a in cluster.actions:
            outcome = a.error or ("done" if a.done else ("planned" if a.write else ""))
            table.add_row(name, a.verb, a.target, a.text(), outcome)
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
        if reason not in result.errors:
            out.print(reason, markup=False, highlight=False)
    # Errors of a cluster (not of one object, those are in the table) go to standard error, once each.
    in_table = {f"{a.cluster}: {a.verb} {a.target}: {a.error}" for c in result.clusters.values() for a in c.actions if a.error}
    for error in dict.fromkeys(result.errors):
        if error not in in_table:
            err.print(error, markup=False, highlight=False)
    recorded = {n: c.last_applied for n, c in result.clusters.items() if c.leader}
    if result.last_applied or len(set(recorded.values())) <= 1:
        applied = result.last_applied or "none"
    else:  # the clusters' status records disagree: each one's
        applied = ", ".join(f"{n} {r or 'none'}" for n, r in recorded.items())
    out.print(f"drift: {result.drift}, errors: {len(result.errors)}, last applied: {applied}", highlight=False)


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


@app.command("reconcile")  # named apart from the module it runs
def reconcile_command(
    env: EnvOpt,
    repo: Annotated[str, typer.Option("--repo", help="Git URL or path holding environments/", envvar="FLEETOPS_REPO")],
    ref: Annotated[str, typer.Option(help="Branch, tag or commit to follow")] = "main",
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit with its code")] = False,
    interval: Annotated[str | None, typer.Option(help="Service mode: a pass every DURATION (60s, 5m)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what a pass would do; write nothing")] = False,
    detect_only: Annotated[bool, typer.Option("--detect-only", help="Report drift, write nothing; exit 1 with --once when drift exists")] = False,
    prune: Annotated[bool, typer.Option("--prune", help="Delete managed objects that Git no longer has")] = False,
    force_conflicts: Annotated[bool, typer.Option("--force-conflicts", help="Take fields other managers own (hand edits) back for Git")] = False,
    clusters: Annotated[list[str] | None, typer.Option("--cluster", help="Only this cluster (repeatable); default: all of the environment")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    in_cluster: InClusterOpt = False,
    cache_dir: Annotated[Path | None, typer.Option(help="Where the repository is cloned (default ~/.cache/fleetops/repos)")] = None,
    identity: Annotated[str | None, typer.Option(help="Leader election identity (default: host name); only the Lease holder writes", envvar="FLEETOPS_IDENTITY")] = None,
    metrics_host: Annotated[str, typer.Option(help="Address for /metrics, /healthz, /readyz")] = "127.0.0.1",
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics, /healthz and /readyz on this port")] = None,
    request_timeout: TimeoutOpt = "30s",
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
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
    reach = LiveOptions.of(kubeconfig, context, in_cluster, request_timeout, clusters or [])
    period = parse_interval(interval, "--interval") if interval else 0.0
    opts = reconcile.Options(prune=prune, dry_run=dry_run, detect_only=detect_only, force_conflicts=force_conflicts)
    reconciler = reconcile.ReconcileLoop(
        env, reconcile.GitSource(repo, ref, cache_dir), reach.connect, gate=None, opts=opts, only=clusters or None,
        identity=identity or socket.gethostname(),  # a one-off run also yields to a running leader
    )
    if once:
        try:
            with progress(f"reconciling {env}"):
                result = reconciler.run_once()
        except Exception as exc:  # an engine fault: one line, not a traceback
            fail(f"reconcile failed: {type(exc).__name__}: {reconcile.redact(str(exc))}", errors.ExitCode.DENIED)
        if output is Output.json:
            body = result.to_dict()
            sys.stdout.write(as_json(envelope("reconcile", result.exit_code() == 0, {"drift": result.drift or 0, "errors": len(result.errors)},
                                              [errors.Problem(e) for e in result.errors], **body)))  # a cluster's, not a file's
        else:
            print_pass(result)
        raise typer.Exit(result.exit_code())
    reconciler.lease_seconds = max(15, int(3 * period))
    if metrics_port is not None:
        try:
            reconcile.serve_http(metrics_host, metrics_port, reconciler.metrics, ready=lambda: reconciler.ready)
        except OSError as exc:
            fail(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc.strerror or exc}")
    reconcile.json_logging()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the pod is stopping: finish this pass, then exit
    reconciler.serve(period, stop)


# --- why and standing ---------------------------------------------------------------------------

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


@app.command("why")
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
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
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
    if output is Output.json:
        counts = {"jobs": len(answers), "never": never, "blocked": sum(bool(a.blockers) for a in answers)}
        sys.stdout.write(as_json(envelope("why", not never, counts, [errors.Problem(p) for p in live.problems], environment=env,
                                          cluster=found.name, reconciler=live.status, answers=[a.to_dict() for a in answers])))
    else:
        for problem in live.problems:
            err.print(problem, markup=False, highlight=False)
        sys.stdout.write(why_answer.report(found.name, live.status, answers, tenant))
    raise typer.Exit(errors.ExitCode.DENIED if never else errors.ExitCode.OK)


@app.command("standing")
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
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
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
    if output is Output.json:
        sys.stdout.write(as_json(envelope("standing", True, {"rows": len(rows)}, [errors.Problem(p) for p in problems], environment=env,
                                          tenant=tenant, standing=[r.to_dict() for r in rows])))
        return
    for problem in problems:
        err.print(problem, markup=False, highlight=False)
    out.print(why_standing.table(rows, f"{tenant} in {env}"))
    sys.stdout.write("".join(f"{line}\n" for line in why_standing.notes(rows)))  # whole lines: a wrapped basis reads wrong


@app.command("deploy")  # named apart from the module it runs
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
    output: Annotated[Output, typer.Option("--output", help="table or json")] = Output.table,
) -> None:
    """Deploy (or --preview) an environment with Pulumi, through the Automation API, with the policy pack: exit 0 done, 1 denied by policy, 2 bad input or a failed deploy."""
    from fleetops import deploy

    if diff and not preview:
        fail("--diff shows what a preview would change: give --preview too")
    operation = deploy.Operation.preview if preview else deploy.Operation.up
    # What render refuses is refused here, in one line each, before Pulumi or its state is touched:
    # the policy pack would judge it, but the API server would refuse it halfway through an update.
    environment, _ = render_or_fail(env_file(repo / spec.ENVIRONMENTS, env), UNSTAMPED)
    with progress(f"pulumi {operation.value} {stack or env}"):  # bad input is a deploy.DeployError: main's one line, exit 2
        result = deploy.run(repo, env, stack or env, operation, state or deploy.default_state(), install_crds=install_crds,
                            parallelism=parallelism, step_checkpoints=step_checkpoints, diff=diff, kubeconfig=kubeconfig, passphrase_file=passphrase_file, pulumi=pulumi, provider=provider)
    if result.ok and operation is deploy.Operation.up and (revision := result.outputs.get("revision")):
        from fleetops import reconcile  # the clusters record what they hold: `reconcile` reads its last applied revision there

        result.messages.extend(reconcile.record_deploy(environment, revision, result.stack, lambda c: deploy.cluster_api(c, kubeconfig)))
    code = 0 if result.ok else 1 if result.denied else 2
    if output is Output.json:
        sys.stdout.write(as_json(envelope("deploy", result.ok, result.changes, environment=env, **result.to_dict())))
    else:
        # A preview's changes are to come; an up's were made (a failed up reports what it did and what failed).
        done = operation is deploy.Operation.up
        changes = ", ".join(f"{op} {n}" if done else f"{n} to {op}" for op, n in sorted(result.changes.items())) or "no changes"
        verdict = "done" if result.ok else "denied by the policy pack" if result.denied else "failed"
        out.print(f"pulumi {operation.value} of stack {result.stack} (environment {env}): {changes}; {verdict}", markup=False, highlight=False)
        out.print(f"state: {result.state}", markup=False, highlight=False)
        sys.stdout.write(result.diff)
        for message in result.messages:
            err.print(message, markup=False, highlight=False)
    raise typer.Exit(code)


class Forge(str, Enum):
    github = "github"
    gitlab = "gitlab"


@app.command()
def approvals(
    forge: Annotated[Forge, typer.Argument(help="github (current reviews) or gitlab (the MR approvals API); either way only code owners of each protected path count")],
    codeowners: Annotated[Path | None, typer.Option(help="CODEOWNERS file, the base revision's (default: where the forge looks for it here; none: no approval counts)")] = None,
) -> None:
    """Print how many approvals the pull request of this CI job has, for FLEETOPS_APPROVALS: those of the protected path
    (environment, policies, program, CODEOWNERS) with the fewest from its own code owners. Exit 2 when the forge cannot be asked."""
    from fleetops.forge import CODEOWNERS_PLACES, GITLAB_CODEOWNERS_PLACES, ForgeError, fewest, from_environment  # `forge` is the argument here

    places = CODEOWNERS_PLACES if forge is Forge.github else GITLAB_CODEOWNERS_PLACES
    path = codeowners or next((p for p in map(Path, places) if p.is_file()), None)
    try:
        count, least = fewest(from_environment(forge.value, path.read_text() if path else None))
    except (ForgeError, OSError, KeyError, ValueError) as exc:
        fail(f"approvals: {exc}")
    if path is None:
        err.print("approvals: no CODEOWNERS here: no approval counts (run this in the base revision's checkout)", markup=False)
    elif least is not None:
        err.print(f"approvals: {count} from the code owners of {least}, the protected path with the fewest", markup=False, highlight=False)
    sys.stdout.write(f"{count}\n")


@app.command()
def note(
    file: Annotated[Path, typer.Argument(help="The comment to post, e.g. the plan's comment.md")],
    key: Annotated[str, typer.Option(help="One note per key (the environment): posted once, then edited in place")],
) -> None:
    """Post or update this merge request's plan note on GitLab (FLEETOPS_GITLAB_TOKEN). Exit 2 when GitLab cannot be asked."""
    from fleetops import forge

    try:
        what = forge.gitlab_note(key, file.read_text())
    except (forge.ForgeError, OSError, KeyError, ValueError) as exc:
        fail(f"note: {exc}")
    err.print(f"{what} the note for {key}", highlight=False)


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, the host an address or name ([::1] for IPv6), the port 0-65535 (0: any free one)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        fail(f"--listen: expected HOST:PORT like 127.0.0.1:8443, got {text!r}")
    return host, int(port)


STOP_SECONDS = 10  # serve's requests still answering when it is stopped have this long; then they are cancelled


@app.command()
def serve(
    env: EnvOpt,
    repo: Annotated[str, typer.Option("--repo", help="Git repository (path or URL) holding environments/", envvar="FLEETOPS_REPO")] = ".",
    rev: Annotated[str, typer.Option("--rev", help="The revision to serve: branch, tag or commit")] = "HEAD",
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to listen on")] = "127.0.0.1:8443",
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate (chain); needed beyond loopback")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert")] = None,
    rate_limit: Annotated[str, typer.Option(help="Requests per token (and per address without a valid one), e.g. 120/minute")] = "120/minute",
    max_body_bytes: Annotated[int, typer.Option(min=1024, max=16 << 20, help="Largest request body (a quote); beyond it 413")] = 64 << 10,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig to read each cluster's reconcile status (default: each cluster's own)")] = None,
    in_cluster: Annotated[bool, typer.Option("--in-cluster", help="Read the reconcile status of the cluster the pod runs in (api.cluster) only")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="Where a --repo URL is cloned (default ~/.cache/fleetops/repos)")] = None,
    refresh: Annotated[str | None, typer.Option(help="Follow --rev: look for a newer commit every DURATION (60s, 5m) and serve it once loaded whole")] = None,
    tokens: Annotated[Path | None, typer.Option("--tokens", help="JSON file of the tokens' SHA-256 and scopes (a mounted Secret's key); see README")] = None,
    openapi: Annotated[Path | None, typer.Option("--openapi", help="Write the API's OpenAPI document here and exit (no --tokens needed)")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="Answer use and statements from the metering this Prometheus holds (as `fleetops statements`)")] = None,
    prometheus_token_file: PrometheusTokenOpt = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option("--trusted-proxy", help="An address or network (10.0.0.0/8) of a proxy in front: its X-Forwarded-For names the client that rate limits count (repeatable; none trusted by default)")] = None,
) -> None:
    """Serve the environment at one revision over HTTP, read only: capacity, prices, quotas, decisions, plan, status, quotes and,
    with --prometheus, each tenant's use and statements. SIGTERM stops it within 10 s.

    Exit 2 when the revision does not load or judge, or an option is wrong."""
    import ipaddress
    import socket
    import threading

    import limits
    import uvicorn

    from fleetops import cluster
    from fleetops import reconcile, revisions
    from fleetops.api import app as api_app
    from fleetops.api import auth, guard, metering as api_metering, snapshot
    from fleetops.prometheus import Prometheus

    host, port = parse_listen(listen)
    if tokens is None and openapi is None:
        fail("serve: --tokens FILE is required (the tokens' SHA-256 and scopes; see README)")
    if (tls_cert is None) != (tls_key is None):
        fail("--tls-cert and --tls-key go together")
    if tls_cert is None and host not in ("127.0.0.1", "::1", "localhost"):
        fail(f"--listen {listen}: beyond loopback the API needs --tls-cert and --tls-key (bearer tokens must not cross a network in clear)")
    try:
        limits.parse(rate_limit)
    except ValueError:
        fail(f"--rate-limit: expected COUNT/PERIOD like 120/minute, got {rate_limit!r}")
    proxies = trusted_proxy or []
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            fail(f"--trusted-proxy {proxy!r}: not an address or network (e.g. 10.0.0.5 or 10.0.0.0/8)")
    period = parse_interval(refresh, "--refresh") if refresh else 0.0
    # A bad tokens file, Prometheus URL or token file is said before the revision is loaded (rendered, judged), not
    # after; the tenants the tokens name are checked once it is. The Prometheus client lives as long as
    # the server: each query is bounded, and each request's wait for metering (the app's), not a whole.
    given_tokens = auth.read(tokens) if openapi is None and tokens is not None else None
    meter = api_metering.StatementCache(Prometheus(prometheus, prometheus_token_file, client_deadline=None)) if prometheus is not None else None
    source = None if Path(repo).is_dir() else reconcile.GitSource(repo, rev, cache_dir)  # a URL: cloned, credentials kept out

    def fetch() -> tuple[Path, str]:
        if source is None:
            top = Path(repo)
            return top, revisions.resolve(top, rev)
        fetched = source.fetch()
        if fetched.path is None or fetched.revision is None or fetched.error:
            raise errors.GitError(f"--repo: {fetched.error}")
        return fetched.path, fetched.revision

    stack = contextlib.ExitStack()
    with progress(f"loading {env} at {rev}: rendering, judging, planning"):
        local, revision = fetch()
        loaded = snapshot.load(local, env, revision, stack)
    current = snapshot.Current(loaded, stack)
    try:
        if openapi is not None:
            document = api_app.create_app(current, auth.Tokens([]), lambda: [], clusters=lambda c: None).openapi()
            write_files({openapi: json.dumps(document, indent=2, sort_keys=True) + "\n"}, "the OpenAPI document")
            return
        assert given_tokens is not None
        known = auth.admit(given_tokens, {t.name for t in loaded.env.tenants})
        timeout = 10.0
        own = loaded.env.api.cluster if loaded.env.api else None

        def connect(c: spec.Cluster) -> "cluster.ClusterAPI | None":
            if in_cluster:
                return cluster.connect(c.name, None, None, True, timeout) if c.name == own else None
            return cluster.connect(c.name, str(kubeconfig) if kubeconfig else c.kubeconfig, c.context, False, timeout)

        application = api_app.create_app(current, known, api_app.StatusReader(current, connect),
                                         api_app.Settings(rate=rate_limit, max_body_bytes=max_body_bytes), meter, connect)
        try:
            sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        except OSError as exc:
            fail(f"--listen {listen}: cannot listen: {exc.strerror or exc}")
        # Forwarded headers are read from the trusted proxies only (uvicorn trusts loopback's by default: any local
        # process could then pick the address rate limits count); their connections are not capped per address.
        limits_per_client = guard.ClientLimits(trusted=tuple(proxies))
        config = uvicorn.Config(application, ssl_certfile=tls_cert, ssl_keyfile=tls_key, access_log=False, log_config=None,
                                server_header=False, limit_concurrency=256, timeout_keep_alive=5, http=limits_per_client.protocol(),
                                proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None, timeout_graceful_shutdown=STOP_SECONDS)
        try:
            config.load()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            fail(f"--tls-cert {tls_cert} / --tls-key {tls_key}: cannot load: {getattr(exc, 'strerror', None) or exc}")
        reconcile.json_logging()
        bound = sock.getsockname()
        err.print(f"serving {env} at {loaded.revision[:12]} on {'https' if tls_cert else 'http'}://{listen.rpartition(':')[0]}:{bound[1]}",
                  markup=False, highlight=False)
        stop = threading.Event()
        if period:
            threading.Thread(target=snapshot.follow, args=(current, fetch, period, stop), name="refresh", daemon=True).start()
        uvicorn.Server(config).run(sockets=[sock])
        stop.set()
    finally:
        current.close()


@app.command()
def schema() -> None:
    """Print the JSON Schema of every command's --output json (versioned: the `schema` field of each output)."""
    from fleetops import envelope

    sys.stdout.write(json.dumps(envelope.json_schema(), indent=2) + "\n")


def main() -> None:
    import signal

    memory.for_a_command()

    # Stopped from outside (CI's timeout, kill): unwind as on Ctrl-C, so that confined renders are stopped and
    # temporary files and checkouts removed; `reconcile --serve` sets its own handler.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    except errors.FleetopsError as exc:  # what a command did not say in its own words: one line per problem, its exit code
        err.print("\n".join(exc.lines), markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    finally:  # the command is over: a late signal just ends the process
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":  # `python -m fleetops.cli`: after every command above is registered
    main()
