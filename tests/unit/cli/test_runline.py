"""runline's parser of `pglock run` against typer's: the same parameters from the same
command line and environment, or it steps aside (None) and typer parses."""

from __future__ import annotations

import os
from typing import Any

import pytest
from typer._click.core import ParameterSource

from pglock.cli import app as cli
from pglock.cli import runline, starting
from pglock.run import flags as run_flags

from .test_cli import NO_DATABASE

# (arguments after `run`, environment): typer's parse and runline's must agree.
LINES: list[tuple[list[str], dict[str, str]]] = [
    (["--job", "x", "--", "true"], {}),
    (["-j", "x", "true", "-v", "--job", "y"], {}),
    (["--job=x", "--ttl=90s", "--wait", "5m", "--", "sh", "-c", "exit 3"], {}),
    (["--job", "x", "--rerun", "--min-hold", "0", "-q", "-v", "--", "true"], {}),
    (["--job", "x", "--output-on-failure", "--no-leave-descendants", "--", "true"], {}),
    (["--job", "x", "--no-output-on-failure", "--leave-descendants", "true"], {}),
    (["--job", "x", "--conflict-exit-code", "0", "--", "true"], {}),
    (["--job", "x", "--conflict-exit-code=+12", "--", "true"], {}),
    (["--job", "é", "--", "true"], {}),
    (["--job", "e\u0301", "--", "true"], {}),
    (["--job", "x", "--", "--job", "y"], {}),
    (["--job", "x", "cmd", "--", "arg"], {}),
    (["--job", "x", "-"], {}),
    (["--job", "x"], {}),
    (["--job", "x", "--schedule", "* * * * *", "--tz", "UTC", "--", "true"], {}),
    (["--job", "x", "--", "true"], {"PGLOCK_TZ": "UTC", "PGLOCK_DEADLINE": "1m",
                                    "PGLOCK_GRACE": "2m", "PGLOCK_TTL": "30s"}),
    (["--job", "x", "--schedule", "0 3 * * *", "--", "true"], {"PGLOCK_TZ": "UTC"}),
    (["--job", "x", "--schedule", "0 3 * * *", "--", "true"],
     {"PGLOCK_WINDOW": "0 2 * * 6 4h; 30 1 * * * 10m"}),
    (["--job", "x", "--window", "0 2 * * 6 4h", "--", "true"],
     {"PGLOCK_WINDOW": "30 1 * * * 10m"}),
    # Blank items of the variable add no window, in either parser (issue 46, D17).
    *((["--job", "x", "--schedule", "0 3 * * *", "--", "true"], {"PGLOCK_WINDOW": window})
      for window in ("0 2 * * 6 4h;", "  ", "; ;", ";30 1 * * * 10m")),
    (["--job", "x", "--", "true"], {"PGLOCK_VERBOSE": "1", "PGLOCK_QUIET": "no"}),
    (["--job", "x", "--", "true"], {"PGLOCK_VERBOSE": "TRUE", "PGLOCK_QUIET": " off "}),
    (["--job", "x", "--", "true"], {"PGLOCK_OUTPUT_ON_FAILURE": "yes"}),
    (["--job", "x", "--", "true"], {"PGLOCK_CONFLICT_EXIT_CODE": "3"}),
    (["--job", "x", "--", "true"], {"PGLOCK_HOLDER": "", "PGLOCK_MODE": "advisory"}),
    (["--job", "x", "--quiet", "--", "true"], {"PGLOCK_QUIET": "0"}),
    (["--job", "x", "--dsn", "host=db", "--schema", "s", "--", "true"], {"PGLOCK_DSN": "x"}),
]
# Lines runline leaves to typer (help, errors, what it is not sure of).
ASIDE: list[tuple[list[str], dict[str, str]]] = [
    (["--help"], {}), (["-h"], {}), (["--job", "x", "-h", "--", "true"], {}),
    (["--bogus", "--", "true"], {}), (["--jo", "x", "--", "true"], {}),
    (["--job"], {}), (["--job", "--", "true"], {}), (["-jx", "--", "true"], {}),
    (["-vq", "--job", "x", "--", "true"], {}), (["--rerun=yes", "--job", "x", "true"], {}),
    (["--job", "x", "--conflict-exit-code", "1_0", "--", "true"], {}),
    (["--job", "x", "--conflict-exit-code", "lots", "--", "true"], {}),
    (["--", "true"], {}), (["--job", "", "--", "true"], {}),
    (["--job", "a\x01b", "--", "true"], {}),
    (["--job", "\udcff", "--", "true"], {}),
    (["--job", "x", "--", "true"], {"PGLOCK_VERBOSE": "maybe"}),
    (["--job", "x", "--", "true"], {"PGLOCK_QUIET": "y"}),
    (["--job", "x", "--", "true"], {"PGLOCK_CONFLICT_EXIT_CODE": "x"}),
    # Digits other than 0-9: typer's to refuse (D18).
    (["--job", "x", "--retries", "\u0661", "--", "true"], {}),
    (["--job", "x", "--", "true"], {"PGLOCK_LIMIT": "\u0662"}),
    (["--version"], {}),
]
ENVIRONMENT = {name for _, variables in LINES + ASIDE for name in variables}


def typer_parse(args: list[str]) -> tuple[dict[str, Any], set[str]]:
    command, _, _ = cli._parser(["run", *args])
    with command.make_context("pglock run", list(args)) as ctx:
        sourced = {name for name in ctx.params
                   if ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT}
        params = dict(ctx.params)
    # click gives the arguments as a tuple; typer hands the command a list (or None).
    params["command"] = list(params["command"]) if params["command"] else None
    return params, sourced


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENVIRONMENT | {v for v in os.environ if v.startswith("PGLOCK_")}:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("args", "variables"), LINES)
def test_runline_parses_as_typer_does(clean_env: pytest.MonkeyPatch, args: list[str],
                                      variables: dict[str, str]) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    parsed = runline.parse(args, os.environ)
    assert parsed is not None
    assert parsed == typer_parse(args)


@pytest.mark.parametrize(("args", "variables"), ASIDE)
def test_runline_leaves_to_typer_what_it_is_not_sure_of(clean_env: pytest.MonkeyPatch,
                                                        args: list[str],
                                                        variables: dict[str, str]) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    assert runline.parse(args, os.environ) is None


@pytest.mark.parametrize(("args", "variables"), LINES + ASIDE)
def test_the_program_answers_alike_through_either_parser(
        clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        variables: dict[str, str]) -> None:
    # The unit layer's DSN does not parse: a line that gets past validation ends there.
    clean_env.setenv("PGLOCK_DSN", NO_DATABASE)
    clean_env.setenv("PGLOCK_CONFIG", os.devnull)
    for name, value in variables.items():
        clean_env.setenv(name, value)
    through_typer = cli.main(["run", *args]), capsys.readouterr()
    through_runline = runline.main(["run", *args]), capsys.readouterr()
    if "-v" in args or variables.get("PGLOCK_VERBOSE"):
        # A traceback's frames differ by the parser; its last line, and the rest, do not.
        assert through_runline[0] == through_typer[0]
        assert through_runline[1].out == through_typer[1].out
        last = [out[1].err.strip().splitlines()[-1:] for out in (through_runline, through_typer)]
        assert last[0] == last[1]
    else:
        assert through_runline == through_typer


def test_start_passes_on_every_parameter_of_run() -> None:
    # A parameter added to cli.run (and so to run_flags.py) must reach RunOptions.
    assert set(run_flags.DEFAULTS) | {run_flags.ARGUMENT} == \
        starting.STARTED_FROM
