"""The command line in-process (cli.main(argv)): exact messages and exit codes for input
that needs no database. Any command line that got past validation would meet a DSN that
does not parse (exit 125), never a server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata

import pytest

import pglock
from pglock.cli import app as cli

from ..inprocess import process_state_kept

# Parsed before anything connects, and refused with exit 125: no test here reaches a server.
NO_DATABASE = "pglock-unit-tests-reach-no-database"


@dataclass(frozen=True)
class Said:
    code: int
    out: str
    err: str


Pglock = Callable[..., Said]


@pytest.fixture
def pglock_cli(capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Pglock]:
    """Call cli.main(argv) as a fresh process would: main() sets up logging each call, so
    the process's state is put back after every call."""
    monkeypatch.setenv("PGLOCK_DSN", NO_DATABASE)

    def call(*argv: str) -> Said:
        capsys.readouterr()
        with process_state_kept():
            code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return Said(code, out, err)

    yield call


RUN = ("run", "--job", "x")

# argv -> exit code, the one line on stderr (stdout stays empty).
USAGE = [
    # --print-grants SQL that would fail when applied (sweep L18).
    *(pytest.param(("init", "--print-grants", option, role), 2,
                   f"pglock: {option}: {role!r} is {why}; name the login role that is to be "
                   "a member", id=f"grants-{option}-{role}")
      for option, role, why in (
          ("--runner-role", "pglock_runner", "one of pglock's own group roles"),
          ("--reader-role", "pglock_operator", "one of pglock's own group roles"),
          ("--operator-role", "public", "PostgreSQL's name for every role, not a role"),
          ("--runner-role", "pg_monitor", "one of PostgreSQL's reserved roles"))),
    # Accepted without effect, once (issue 37, N-L11).
    pytest.param((*RUN, "--catch-up-limit", "5", "--", "true"), 2,
                 "pglock: --catch-up-limit needs --catch-up latest or all",
                 id="catch-up-limit-alone"),
    pytest.param((*RUN, "--schedule", "@daily", "--catch-up-limit", "5", "--", "true"), 2,
                 "pglock: --catch-up-limit needs --catch-up latest or all",
                 id="catch-up-limit-without-catch-up"),
    pytest.param((*RUN, "--expect-duration", "1s..5s", "--expect-duration", "..9s", "--",
                  "true"), 2, "pglock: --expect-duration: given 2 times; it takes one value",
                 id="expect-duration-twice"),
    pytest.param((*RUN, "--ttl=1m", "--ttl", "2m", "--", "true"), 2,
                 "pglock: --ttl: given 2 times; it takes one value", id="ttl-twice"),
    pytest.param(("history", "--limit", "5", "--limit", "9"), 2,
                 "pglock: --limit: given 2 times; it takes one value", id="history-limit-twice"),
    pytest.param((*RUN, "--event-log", "  ", "--", "true"), 2,
                 "pglock: --event-log: give a file path, 'syslog' or 'syslog:/path/to/socket'",
                 id="event-log-blank"),
    pytest.param(("run", "--", "true"), 2,
                 "pglock: --job is missing: pglock run --job NAME [-- COMMAND [ARG...]]",
                 id="run-without-job"),
    pytest.param(("run", "--job", "x", "--holder", "", "--", "true"), 2,
                 "pglock: --holder: the holder name is empty (leave --holder out for the "
                 "host name)", id="run-empty-holder"),
    pytest.param(("run", "--job", "", "--", "true"), 2, "pglock: --job: the job name is empty",
                 id="run-empty-job"),
    pytest.param(("run", "--job", "a\x01b", "--", "true"), 2,
                 "pglock: --job: the job name 'a\\x01b' contains a control character",
                 id="job-control-character"),
    pytest.param(("run", "--job", "a\nb", "--", "true"), 2,
                 "pglock: --job: the job name 'a\\nb' contains a control character",
                 id="job-newline"),
    pytest.param(("run", "--job", "j" * 201, "--", "true"), 2,
                 "pglock: --job: the job name is 201 characters long; the limit is 200",
                 id="job-201-characters"),
    pytest.param(RUN, 2, "pglock: no command given: pglock run --job NAME -- COMMAND [ARG...]",
                 id="no-command"),
    pytest.param((*RUN, "--"), 2,
                 "pglock: no command given: pglock run --job NAME -- COMMAND [ARG...]",
                 id="no-command-after-dashes"),
    pytest.param((*RUN, "--ttl", "5x", "--", "true"), 2,
                 "pglock: --ttl: '5x' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="bad-ttl"),
    pytest.param((*RUN, "--wait", "-1s", "--", "true"), 2,
                 "pglock: --wait: '-1s' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="negative-wait"),
    pytest.param((*RUN, "--kill-after", "soon", "--", "true"), 2,
                 "pglock: --kill-after: 'soon' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="bad-kill-after"),
    pytest.param((*RUN, "--connect-timeout", "1 m", "--", "true"), 2,
                 "pglock: --connect-timeout: '1 m' is not a duration "
                 "(examples: 90, 90s, 5m, 1h30m)", id="bad-connect-timeout"),
    pytest.param((*RUN, "--ttl", "4s", "--", "true"), 2,
                 "pglock: --ttl: 4s is out of range (5s to 7d)", id="ttl-too-short"),
    pytest.param((*RUN, "--mode", "bogus", "--", "true"), 2,
                 "pglock: --mode: 'bogus' is not one of lease, advisory", id="bad-mode"),
    pytest.param((*RUN, "--on-lost", "maybe", "--", "true"), 2,
                 "pglock: --on-lost: 'maybe' is not one of kill, continue", id="bad-on-lost"),
    pytest.param((*RUN, "--conflict-exit-code", "300", "--", "true"), 2,
                 "pglock: --conflict-exit-code must be between 0 and 255",
                 id="conflict-exit-code-300"),
    pytest.param((*RUN, "--conflict-exit-code", "-1", "--", "true"), 2,
                 "pglock: --conflict-exit-code must be between 0 and 255",
                 id="conflict-exit-code-negative"),
    pytest.param((*RUN, "--max-runtime", "0", "--", "true"), 2,
                 "pglock: --max-runtime: 0 is out of range (more than 0 to 366d)",
                 id="max-runtime-0"),
    pytest.param((*RUN, "--holder", "h" * 201, "--", "true"), 2,
                 "pglock: --holder must be 1-200 characters", id="holder-201"),
    pytest.param((*RUN, "--output-tail", "2GiB", "--", "true"), 2,
                 "pglock: --output-tail: at most 1MiB is kept in history", id="tail-too-big"),
    pytest.param((*RUN, "--output-tail", "4 lots", "--", "true"), 2,
                 "pglock: --output-tail: '4 lots' is not a size (examples: 0, 4096, 4KiB, 1MiB)",
                 id="bad-tail"),
    pytest.param((*RUN, "--schema", "", "--", "true"), 2,
                 "pglock: --schema: '' is not a usable schema name (1-63 bytes, "
                 "no control characters)",
                 id="empty-schema"),
    pytest.param((*RUN, "--tz", "UTC", "--", "true"), 2, "pglock: --tz needs --schedule",
                 id="tz-without-schedule"),
    pytest.param((*RUN, "--deadline", "1m", "--", "true"), 2,
                 "pglock: --deadline needs --schedule", id="deadline-without-schedule"),
    pytest.param((*RUN, "--limit", "2", "--schedule", "* * * * *", "--", "true"), 2,
                 "pglock: --limit cannot be used with --schedule: each slot runs once",
                 id="limit-with-schedule"),
    pytest.param((*RUN, "--limit", "3", "--mode", "advisory", "--", "true"), 2,
                 "pglock: --limit needs --mode lease: a session advisory lock is one holder's "
                 "(docs/lease.md, Semaphores)", id="limit-with-advisory"),
    pytest.param((*RUN, "--limit", "0", "--", "true"), 2,
                 "pglock: --limit: 0 is out of range (1 to 1000)", id="limit-0"),
    pytest.param((*RUN, "--limit", "many", "--", "true"), 2,
                 "pglock: Invalid value for '--limit': 'many' is not a valid int. (see 'pglock "
                 "run --help')", id="limit-not-a-number"),
    pytest.param((*RUN, "--grace", "1m", "--", "true"), 2, "pglock: --grace needs --schedule",
                 id="grace-without-schedule"),
    pytest.param((*RUN, "--schedule", "61 * * * *", "--", "true"), 2,
                 "pglock: --schedule: '61 * * * *' is not a cron expression cron reads alike: "
                 "the minute field '61' has 61, out of 0-59", id="cron-out-of-range"),
    pytest.param((*RUN, "--schedule", "every day", "--", "true"), 2,
                 "pglock: --schedule: 'every day' is not a cron expression (five fields "
                 "'MIN HOUR DAY MONTH WEEKDAY', or @hourly, @daily, @weekly, ...)",
                 id="cron-not-five-fields"),
    pytest.param((*RUN, "--schedule", "0 0 30 2 *", "--", "true"), 2,
                 "pglock: --schedule: '0 0 30 2 *' is not a valid cron expression "
                 "(failed to find next date)", id="cron-never-fires"),
    pytest.param((*RUN, "--schedule", "* * * * *", "--tz", "Mars/Olympus", "--", "true"), 2,
                 "pglock: --tz: 'Mars/Olympus' is not a known time zone "
                 "(examples: UTC, Europe/Berlin, America/New_York)", id="unknown-zone"),
    pytest.param((*RUN, "--schedule", "* * * * *", "--deadline", "soon", "--", "true"), 2,
                 "pglock: --deadline: 'soon' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="bad-deadline"),
    pytest.param((*RUN, "--schedule", "* * * * *", "--deadline", "0", "--", "true"), 2,
                 "pglock: --deadline: 0 is out of range (more than 0 to 366d)", id="deadline-0"),
    # click's own messages, in pglock's one-line form.
    pytest.param((*RUN, "--xyzzy", "--", "true"), 2,
                 "pglock: No such option: --xyzzy (see 'pglock run --help')",
                 id="unknown-option"),
    pytest.param((*RUN, "--conflict-exit-code", "abc", "--", "true"), 2,
                 "pglock: Invalid value for '--conflict-exit-code': 'abc' is not a valid int. "
                 "(see 'pglock run --help')", id="conflict-exit-code-not-a-number"),
    pytest.param(("run", "--job"), 2,
                 "pglock: Option '--job' requires an argument. (see 'pglock run --help')",
                 id="job-without-value"),
    pytest.param(("bogus",), 2, "pglock: No such command 'bogus'. (see 'pglock --help')",
                 id="unknown-command"),
    # The operator commands refuse bad input before they connect, too.
    pytest.param(("init", "--print-sql", "--schema", "x" * 64), 2,
                 f"pglock: --schema: {'x' * 64!r} is not a usable schema name (1-63 bytes, "
                 "no control characters)",
                 id="init-long-schema"),
    pytest.param(("history", "--outcome", "exploded"), 2,
                 "pglock: --outcome: 'exploded' is not one of running, succeeded, failed, "
                 "timed_out, lock_lost, killed, abandoned, cleared, stopped",
                 id="history-bad-outcome"),
    pytest.param(("history", "--limit", "0"), 2, "pglock: --limit: 0 is out of range (1 to 100000)",
                 id="history-limit-0"),
    pytest.param(("history", "--since", "yesterday"), 2,
                 "pglock: --since: 'yesterday' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="history-bad-since"),
    pytest.param(("status", "--interval", "often"), 2,
                 "pglock: --interval: 'often' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="status-bad-interval"),
    pytest.param(("status", "--json", "--watch"), 2,
                 "pglock: --json and --watch do not go together", id="status-json-watch"),
    pytest.param(("prune", "--older-than", "3 weeks", "--yes"), 2,
                 "pglock: --older-than: '3 weeks' is not a duration "
                 "(examples: 90, 90s, 5m, 1h30m)", id="prune-bad-older-than"),
    pytest.param(("clear",), 2, "pglock: Missing option '--job' / '-j'. "
                 "(see 'pglock clear --help')", id="clear-without-job"),
    pytest.param(("history", "--job", "bad\x01name"), 2,
                 "pglock: --job: the job name 'bad\\x01name' contains a control character",
                 id="history-job-control-character"),
    pytest.param(("clear", "--job", "bad\x01name"), 2,
                 "pglock: --job: the job name 'bad\\x01name' contains a control character",
                 id="clear-job-control-character"),
    pytest.param(("status", "--job", "bad\x01name"), 2,
                 "pglock: --job: the job name 'bad\\x01name' contains a control character",
                 id="status-job-control-character"),
    *(pytest.param((command, "--job", "j", "--reason", "r" * 1001), 2,
                   "pglock: --reason: 1001 characters; at most 1000", id=f"{command}-long-reason")
      for command in ("pause", "resume", "stop", "forget", "clear")),
    pytest.param(("replay", "--job", "j", "--slot", "2024-01-01T00:00", "--reason",
                  "r" * 5000), 2, "pglock: --reason: 5000 characters; at most 1000",
                 id="replay-long-reason"),
    pytest.param(("pause", "--job", "j", "--reason", "a\x00b"), 2,
                 "pglock: --reason: contains a NUL character", id="pause-nul-reason"),
    pytest.param(("clear", "--job", "j", "--reason", "a\x00b"), 2,
                 "pglock: --reason: contains a NUL character", id="clear-nul-reason"),
]


@pytest.mark.parametrize(("argv", "code", "line"), USAGE)
def test_bad_input_is_one_line_and_its_exit_code(pglock_cli: Pglock, argv: tuple[str, ...],
                                                 code: int, line: str) -> None:
    said = pglock_cli(*argv)
    assert (said.code, said.out, said.err) == (code, "", line + "\n")


@pytest.mark.parametrize(("argv", "line"), [
    pytest.param(("check", "--xyzzy"), "No such option: --xyzzy", id="unknown-option"),
    pytest.param(("check", "--missed-warning", "3", "--missed-critical", "2"),
                 "--missed-warning (3) is above --missed-critical (2)", id="thresholds"),
    pytest.param(("check", "--missed-warning", "0"),
                 "--missed-warning and --missed-critical must be 1 or more", id="threshold-0"),
    pytest.param(("check", "--job", "bad\x01name"),
                 "--job: the job name 'bad\\x01name' contains a control character",
                 id="job-control-character"),
])
def test_check_says_unknown_on_stdout_for_a_monitoring_system(pglock_cli: Pglock,
                                                              argv: tuple[str, ...],
                                                              line: str) -> None:
    said = pglock_cli(*argv)
    assert said.code == 3
    assert said.out == f"PGLOCK UNKNOWN - {line}\n"
    assert said.err.startswith(f"pglock: {line}") and said.err.count("\n") == 1


def test_version(pglock_cli: Pglock) -> None:
    assert pglock_cli("--version") == Said(0, f"pglock {pglock.__version__}\n", "")
    assert pglock.__version__ == metadata.version("pglock")


@pytest.mark.parametrize(("argv", "usage"), [
    (("--help",), "Usage: pglock [OPTIONS] COMMAND [ARGS]..."),
    (("-h",), "Usage: pglock [OPTIONS] COMMAND [ARGS]..."),
    (("run", "--help"), "Usage: pglock run [OPTIONS] [-- COMMAND [ARG]...]"),
    (("status", "-h"), "Usage: pglock status [OPTIONS]"),
    (("check", "--help"), "Usage: pglock check [OPTIONS]"),
])
def test_help_goes_to_stdout_and_exits_0(pglock_cli: Pglock, argv: tuple[str, ...],
                                         usage: str) -> None:
    said = pglock_cli(*argv)
    assert (said.code, said.err) == (0, "")
    assert said.out.splitlines()[0] == usage


def test_a_valid_command_line_gets_as_far_as_the_dsn(pglock_cli: Pglock) -> None:
    """The guard of this module: what passes validation meets NO_DATABASE, and says so."""
    said = pglock_cli(*RUN, "--", "true")
    assert (said.code, said.out) == (125, "")
    assert said.err.startswith("pglock: the DSN does not parse: ")


def test_quiet_prints_nothing_but_keeps_the_exit_code(pglock_cli: Pglock) -> None:
    assert pglock_cli(*RUN, "--quiet", "--ttl", "5x", "--", "true") == Said(2, "", "")
    assert pglock_cli(*RUN, "-q", "--", "true") == Said(125, "", "")


def test_verbose_adds_the_traceback_before_the_line(pglock_cli: Pglock) -> None:
    said = pglock_cli(*RUN, "-v", "--ttl", "5x", "--", "true")
    assert said.code == 2
    lines = said.err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "pglock: --ttl: '5x' is not a duration (examples: 90, 90s, 5m, 1h30m)"
    assert pglock_cli(*RUN, "--ttl", "5x", "--", "true").err.count("\n") == 1


def test_variables_are_read_like_options(pglock_cli: Pglock,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGLOCK_MODE", "sideways")
    # A value from a variable is named by the variable, which is what to fix (D17).
    assert pglock_cli(*RUN, "--", "true").err == (
        "pglock: PGLOCK_MODE: 'sideways' is not one of lease, advisory\n")
    # The option wins over the variable.
    monkeypatch.setenv("PGLOCK_TTL", "1s")
    assert pglock_cli(*RUN, "--mode", "lease", "--ttl", "5x", "--", "true").err == (
        "pglock: --ttl: '5x' is not a duration (examples: 90, 90s, 5m, 1h30m)\n")


@pytest.mark.parametrize(("variables", "argv", "line"), [
    ({"PGLOCK_TTL": "bogus"}, RUN,
     "PGLOCK_TTL: 'bogus' is not a duration (examples: 90, 90s, 5m, 1h30m)"),
    ({"PGLOCK_TTL": "2s"}, RUN, "PGLOCK_TTL: 2s is out of range (5s to 7d)"),
    ({"PGLOCK_WAIT": "soon"}, RUN,
     "PGLOCK_WAIT: 'soon' is not a duration (examples: 90, 90s, 5m, 1h30m)"),
    ({"PGLOCK_CONNECT_TIMEOUT": "1y"}, RUN,
     "PGLOCK_CONNECT_TIMEOUT: '1y' is not a duration (examples: 90, 90s, 5m, 1h30m)"),
    ({"PGLOCK_CONNECT_TIMEOUT": "1y"}, ("status",),
     "PGLOCK_CONNECT_TIMEOUT: '1y' is not a duration (examples: 90, 90s, 5m, 1h30m)"),
    ({"PGLOCK_SCHEMA": " "}, ("status",),
     "PGLOCK_SCHEMA: ' ' is not a usable schema name (1-63 bytes, no control characters)"),
    ({"PGLOCK_TZ": " "}, (*RUN, "--schedule", "@daily"),
     "PGLOCK_TZ: ' ' is not a known time zone (examples: UTC, Europe/Berlin, "
     "America/New_York)"),
    ({"PGLOCK_SERVE_USERS": "/nonexistent"}, ("serve",),
     "PGLOCK_SERVE_USERS: cannot read '/nonexistent': No such file or directory"),
    # The option given on the command line is what the line names, the variable aside.
    ({"PGLOCK_TTL": "bogus"}, (*RUN, "--ttl=4s"), "--ttl: 4s is out of range (5s to 7d)"),
])
def test_a_bad_value_from_a_variable_is_named_by_the_variable(
        pglock_cli: Pglock, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
        argv: tuple[str, ...], line: str) -> None:
    """`--ttl: 'bogus' is not a duration` sent an operator whose crontab has no --ttl
    looking for one; PGLOCK_TTL=bogus in the crontab's environment was it (issue 46, D17)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    said = pglock_cli(*argv, "--", "true") if argv[0] == "run" else pglock_cli(*argv)
    assert (said.code, said.out, said.err) == (2, "", f"pglock: {line}\n")


@pytest.mark.parametrize("window", ["* * * * * 10m;", "   ", " ; ;", ";* * * * * 10m"])
def test_blank_items_of_pglock_window_add_no_window(pglock_cli: Pglock,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    window: str) -> None:
    """A trailing ';' or a blank variable was `--window: '' is not 'CRON DURATION'` on
    every trigger (D17): only what is there is read, and the run gets to the database."""
    monkeypatch.setenv("PGLOCK_WINDOW", window)
    said = pglock_cli(*RUN, "--schedule", "* * * * *", "--", "true")
    assert (said.code, said.out) == (125, ""), said
    assert "window" not in said.err and said.err.count("\n") == 1, said


def test_a_dsn_that_does_not_parse_never_shows_the_password(pglock_cli: Pglock) -> None:
    said = pglock_cli(*RUN, "--dsn", "host=x password=supersecret foo", "--", "true")
    assert said.code == 125
    assert said.err.startswith("pglock: the DSN does not parse: ")
    assert "supersecret" not in said.out + said.err


def test_main_called_twice_says_each_error_once(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGLOCK_DSN", NO_DATABASE)
    # Both calls in one process state: a second main() must not add a second handler.
    with process_state_kept():
        for _ in range(2):
            assert cli.main([*RUN, "--ttl", "5x", "--", "true"]) == 2
            assert capsys.readouterr().err.count("\n") == 1
