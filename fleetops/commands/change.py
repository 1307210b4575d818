"""The commands on a change: plan (what it does to the fleet), whatif (to its work), and CI's approvals and note."""

import datetime as dt
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetops import errors, spec
from fleetops.commands.base import ContextOpt, EnvOpt, KubeconfigOpt, LiveOptions, PrometheusTokenOpt, TimeoutOpt, fail, write_files
from fleetops.output import PlanFormat, TableFormat
from fleetops.output.terminal import err, progress

if TYPE_CHECKING:
    from fleetops.whatif.trace import Trace


class WhatifSide(str, Enum):
    base = "base"
    head = "head"
    static = "static"
    pooled = "pooled"


class ForgeKind(str, Enum):
    github = "github"
    gitlab = "gitlab"


def _usage_window(text: str) -> str:
    from fleetops import usage

    try:
        return usage.parse_window(text).text
    except ValueError as exc:
        fail(f"--usage-window: {exc}")


def plan_command(
    env: EnvOpt,
    base: Annotated[str | None, typer.Option(help="Base revision (default: merge-base of HEAD with the default branch)")] = None,
    head: Annotated[str | None, typer.Option(help="Head revision (default: the working tree)")] = None,
    approvals: Annotated[int, typer.Option(min=0, envvar="FLEETOPS_APPROVALS", help="Approvals the change has (CI sets FLEETOPS_APPROVALS)")] = 0,
    output: Annotated[PlanFormat, typer.Option("--output", help="markdown (the PR comment), json, junit, github (check annotations on the lines), sarif (GitHub code scanning) or tap")] = PlanFormat.markdown,
    max_chars: Annotated[int, typer.Option(min=2000, help="Longest markdown comment; objects beyond it are summarised per cluster and kind")] = 55_000,
    artifacts: Annotated[Path | None, typer.Option(help="Also write every form of the plan here: plan.json, plan.md (no size limit), comment.md, plan-junit.xml, annotations.txt, plan.sarif, plan.tap")] = None,
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
    sides: Annotated[list[WhatifSide] | None, typer.Option("--side", help="A side to replay on, repeated: base, head, static, pooled (default: base and head)")] = None,
    base: Annotated[str | None, typer.Option(help="Base revision (default: merge-base of HEAD with the default branch)")] = None,
    head: Annotated[str | None, typer.Option(help="Head revision (default: the working tree)")] = None,
    repo: Annotated[Path, typer.Option(help="The fleet's Git repository (its .tools/bin is searched for the servers first)")] = Path("."),
    write_trace: Annotated[Path | None, typer.Option(help="Also write the jobs replayed here, as a CSV trace")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep the servers' folders and logs here (default: a temporary folder, removed)")] = None,
    history: Annotated[str | None, typer.Option("--history", metavar="CLUSTER", help="Replay the finished jobs Kueue keeps on this live cluster instead (--since, --kubeconfig, --context)")] = None,
    since: Annotated[dt.datetime | None, typer.Option(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"], help="History: only the jobs submitted from then on (UTC)")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: TimeoutOpt = "30s",
    pictures: Annotated[Path | None, typer.Option(help="Also draw the figures in this folder: utilisation.svg (per side, under the offered load), waits.svg (each tenant's, per side) "
                                                       "and whatif.json, the figures they are drawn from (for `audit --whatif`)")] = None,
    output: Annotated[TableFormat, typer.Option("--output", help="table or json")] = TableFormat.table,
) -> None:
    """What a change does to the fleet's work: a trace of jobs replayed on the real Kueue, once per side.

    Utilisation per flavor beside the offered load and the backlog, waits per tenant and class,
    preemptions, guarantees not honoured and fairness, side by side (docs/whatif.md). Exit 2 on bad input
    or when a server (etcd, kube-apiserver, Kueue from `make tools`) is missing."""
    from fleetops import git
    from fleetops.whatif import run, sides as whatif_sides, trace as traces

    if [trace is not None, generate, history is not None].count(True) != 1:
        fail("whatif: give a --trace FILE, --generate or --history CLUSTER (one of them)")
    if history is None and (given := [name for name, value in (("--since", since), ("--kubeconfig", kubeconfig), ("--context", context)) if value is not None]):
        fail(f"whatif: {', '.join(given)} read a live cluster's history: give --history CLUSTER too")
    reach = LiveOptions.of(kubeconfig, context, False, request_timeout, [history or ""])
    wanted = [whatif_sides.SideKind(s.value) for s in dict.fromkeys(sides or [WhatifSide.base, WhatifSide.head])]
    try:
        top = Path(git.run(repo, "rev-parse", "--show-toplevel").strip())
    except git.GitError as exc:
        fail(f"{repo}: not a Git repository ({exc})")
    with progress(f"whatif {env}: rendering base and head"), whatif_sides.revisions(top, env, base, head) as (before, after):
        fleet = after.env if whatif_sides.SideKind.HEAD in wanted else before.env
        if history is not None:
            jobs_of = _history(fleet, history, reach, since)
        else:
            jobs_of = (traces.generate(fleet, days, jobs, load, seed, cluster or ()) if generate
                       else traces.read_csv(trace, fleet, window_days * 86400 if window_days else None))  # type: ignore[arg-type]
        chosen = [{whatif_sides.SideKind.BASE: before, whatif_sides.SideKind.HEAD: after}.get(kind) or whatif_sides.derived(before, kind)
                  for kind in wanted]
    if write_trace is not None:
        traces.write_csv(jobs_of, write_trace)
    with progress(f"whatif {env}: replaying {len(jobs_of.jobs)} jobs on {', '.join(wanted)}"):
        figures = run.replay(chosen, jobs_of, run.ReplayOptions(root=top, keep=keep))
    from fleetops.output import json, text

    if pictures is not None:
        from fleetops.whatif import pictures as drawn

        write_files({pictures / "utilisation.svg": drawn.utilisation(figures, jobs_of.window / 3600), pictures / "waits.svg": drawn.waits(figures),
                     pictures / "whatif.json": json.whatif(env, jobs_of, figures)}, "pictures")

    sys.stdout.write(json.whatif(env, jobs_of, figures) if output is TableFormat.json else text.whatif(env, jobs_of, figures))


def _history(fleet: spec.Environment, name: str, reach: LiveOptions, since: dt.datetime | None) -> "Trace":
    """The trace of the finished jobs Kueue keeps on the live cluster `name`; bad input is exit 2 in one line."""
    from fleetops.whatif import history
    from fleetops.why import live

    found = next((c for c in fleet.clusters if c.name == name), None)
    if found is None:
        fail(f"--history: no cluster {name!r} in {fleet.environment} (clusters: {', '.join(c.name for c in fleet.clusters)})")
    with progress(f"reading {found.name}'s Workloads"):
        return history.trace(live.read(reach.connect(found), fleet, found), fleet, since.replace(tzinfo=dt.timezone.utc) if since else None)


def approvals(
    forge: Annotated[ForgeKind, typer.Argument(help="github (current reviews) or gitlab (the MR approvals API); either way only code owners of each protected path count")],
    codeowners: Annotated[Path | None, typer.Option(help="CODEOWNERS file, the base revision's (default: where the forge looks for it here; none: no approval counts)")] = None,
) -> None:
    """Print how many approvals the pull request of this CI job has, for FLEETOPS_APPROVALS: those of the protected path
    (environment, policies, program, CODEOWNERS) with the fewest from its own code owners. Exit 2 when the forge cannot be asked."""
    from fleetops.forge import CODEOWNERS_PLACES, GITLAB_CODEOWNERS_PLACES, ForgeError, fewest, from_environment  # `forge` is the argument here

    places = CODEOWNERS_PLACES if forge is ForgeKind.github else GITLAB_CODEOWNERS_PLACES
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
