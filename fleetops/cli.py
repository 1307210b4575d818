"""`fleetops` command line: the one typer app, its commands in the order `--help` lists them, and the exit of every
command. Exit codes (`errors.ExitCode`): 0 ok, 1 policy denied or drift found, 2 bad input or usage.

Each command's arguments are in `fleetops.commands` (one module per job), its output forms in `fleetops.output`.
No `from __future__ import annotations` here or there: typer would evaluate every command's annotations from
strings at start-up (an eval per option, a fifth of `validate`'s time); names imported only for type
checking are quoted instead.
"""

import os
import sys
from typing import Annotated

# fleetops's models are its own: no third-party pydantic plugin observes the environment files, and
# not discovering plugins (a scan of every installed package's entry points) saves a fifth of `validate`.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from fleetops import memory  # noqa: E402

if __name__ == "__main__":  # `python -m fleetops.cli`: as `fleetops` starts (fleetops.__main__), the collector off before the imports
    memory.for_a_command()

import typer  # noqa: E402

from fleetops import __version__, errors  # noqa: E402
from fleetops.commands import change, fleet, live, report, serve  # noqa: E402
from fleetops.output.terminal import err  # noqa: E402

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


# The commands, in the order `fleetops --help` lists them; a command named apart from the module it runs is named here.
app.command()(fleet.validate)
app.command("render")(fleet.render_command)
app.command()(fleet.check)
app.command("plan")(change.plan_command)
app.command("whatif")(change.whatif_command)
app.command("audit")(report.audit_command)
app.command("statements")(report.statements_command)
app.command("reconcile")(live.reconcile_command)
app.command("why")(live.why_command)
app.command("standing")(live.standing_command)
app.command("deploy")(live.deploy_command)
app.command()(change.approvals)
app.command()(change.note)
app.command()(serve.serve)
app.command()(fleet.schema)

policy_app = typer.Typer(help="Work on the Rego policies themselves.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")
policy_app.command("test")(fleet.policy_test)


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
