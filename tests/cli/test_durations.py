"""One duration syntax for every option: a whole number and one of s, m, h, d, w. Each command that takes a
duration reads it with the same parser, so the same text is accepted or refused everywhere, with the same line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetops import durations, usage
from fleetops.cli import app

GOOD = {"600s": 600, "10m": 600, "12h": 43200, "30d": 2592000, "2w": 1209600}
BAD = ["30 days", "1.5h", "60", "0s", "-5m", "5y", "", "m"]

# Each command and option that reads a duration, with the arguments that let it reach the duration.
COMMANDS = {
    "--usage-window": ["plan", "--env", "prod"],
    "--window": ["standing", "--env", "prod", "--tenant", "vision"],
    "--deadline": ["statements", "--env", "prod", "--prometheus", "http://127.0.0.1:9", "--period", "2026-11"],
    "--interval": ["reconcile", "--env", "prod", "--repo", "."],
    "--request-timeout": ["reconcile", "--env", "prod", "--repo", ".", "--once"],
    "--refresh": ["serve", "--env", "prod", "--tokens", "tokens.json"],
}


@pytest.mark.parametrize(("text", "seconds"), GOOD.items())
def test_each_unit_reads_as_its_seconds_in_a_plan_window_as_in_an_interval(text: str, seconds: int) -> None:
    assert durations.parse(text).seconds == seconds
    assert usage.parse_window(text).seconds == seconds
    assert durations.parse(f" {text} ").text == text  # as Prometheus reads it in a query


@pytest.mark.parametrize("text", BAD)
def test_every_command_refuses_a_bad_duration_with_the_same_line_and_exit_2(text: str) -> None:
    said = f"{text!r} is not a duration like 30s, 5m, 12h, 30d or 2w (a whole number and one of s, m, h, d, w)"
    for option, command in COMMANDS.items():
        result = CliRunner().invoke(app, [*command, option, text])
        assert (result.exit_code, result.output) == (2, f"{option}: {said}\n"), command


def test_a_window_outside_its_bounds_is_refused_in_the_same_syntax() -> None:
    with pytest.raises(ValueError, match="at least 5 minutes"):
        usage.parse_window("60s")
    assert durations.parse("60s").spoken() == "60 seconds" and durations.parse("1w").spoken() == "1 week"
