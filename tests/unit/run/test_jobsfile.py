"""The jobs file: its tables checked in one line naming file, job and key (exit 2), the
precedence of its values through either parser, and the crontab it produces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from typer._click.core import ParameterSource

from pglock.cli import app as cli
from pglock.cli import runline, starting
from pglock.errors import UsageError
from pglock.operate import crontab
from pglock.reports import configured
from pglock.run import flags as run_flags
from pglock.run import jobsfile

from .. import jobfactory, strategies
from ..inprocess import UNREACHABLE, invoke

GOOD = """
[jobs.good]
command = ["sh", "-c", "echo good"]
ttl = "5m"
retries = 2
"retry-delay" = 10
schedule = "*/5 * * * *"
tz = "UTC"
"output-on-failure" = true
"""


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


# Each bad table: (its text, the line after "config file PATH: ").
BAD = [
    pytest.param('[jobs.x]\ncommand = ["true"]\ntll = "5m"\n',
                 "[jobs.x] tll: unknown key (a job's table holds command and run's options by "
                 "their long names: ttl, schedule, retries, on-failure, ...)", id="unknown-key"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nmin_hold = "1m"\n',
                 "[jobs.x] min_hold: unknown key (the option's long name is 'min-hold')",
                 id="underscore"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nretries = "3"\n',
                 "[jobs.x] retries: must be a whole number", id="wrong-type-int"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nttl = true\n',
                 '[jobs.x] ttl: must be a duration in a string ("90s", "5m", "1h30m") or a '
                 "number of seconds", id="wrong-type-duration"),
    pytest.param('[jobs.x]\ncommand = ["true"]\n"output-on-failure" = "yes"\n',
                 "[jobs.x] output-on-failure: must be true or false", id="wrong-type-flag"),
    pytest.param("[jobs.x]\ncommand = 5\n",
                 "[jobs.x] command: must be a list of strings (the program and its arguments) "
                 "or a non-empty string run by /bin/sh -c", id="wrong-type-command"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nttl = "5x"\n',
                 "[jobs.x] ttl: '5x' is not a duration (examples: 90, 90s, 5m, 1h30m)",
                 id="bad-duration"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nttl = "1s"\n',
                 "[jobs.x] ttl: 1s is out of range (5s to 7d)", id="duration-out-of-range"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nmode = "fast"\n',
                 "[jobs.x] mode: 'fast' is not one of lease, advisory", id="bad-mode"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nretries = 101\n',
                 "[jobs.x] retries: 101 is out of range (0 to 100)", id="bad-count"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nschedule = "*/5 * * *"\n',
                 "[jobs.x] schedule: '*/5 * * *' is not a cron expression (five fields "
                 "'MIN HOUR DAY MONTH WEEKDAY', or @hourly, @daily, @weekly, ...)",
                 id="bad-schedule"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nschedule = "@daily"\ntz = "Mars/Base"\n',
                 "[jobs.x] tz: 'Mars/Base' is not a known time zone (examples: UTC, "
                 "Europe/Berlin, America/New_York)", id="bad-zone"),
    pytest.param('[jobs.x]\ncommand = ["true"]\ntz = "UTC"\n',
                 "[jobs.x] tz: needs schedule in the same table", id="tz-without-schedule"),
    pytest.param('[jobs.x]\ncommand = ["true"]\ncatch-up = "latest"\n',
                 "[jobs.x] catch-up: needs schedule in the same table",
                 id="catch-up-without-schedule"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nwindow = "0 2 * * 6 4h"\n',
                 "[jobs.x] window: needs schedule in the same table",
                 id="window-without-schedule"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nschedule = "@daily"\ncatch-up = "some"\n',
                 "[jobs.x] catch-up: 'some' is not one of none, latest, all",
                 id="bad-catch-up"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nschedule = "@daily"\nwindow = ["0 2 * * 6"]\n',
                 "[jobs.x] window: '0 2 * * 6' lacks a length with its unit after "
                 "the expression (for example '0 2 * * 6 4h': Saturdays from 02:00 for 4 "
                 "hours)", id="window-without-length"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nlimit = 0\n',
                 "[jobs.x] limit: 0 is out of range (1 to 1000)", id="limit-0"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nlimit = 2\nschedule = "@daily"\n',
                 "[jobs.x]: --limit cannot be used with --schedule: each slot runs once",
                 id="limit-with-schedule"),
    pytest.param('[jobs.x]\nttl = "5m"\n',
                 "[jobs.x] command: missing: the job's command (command = "
                 '["/path/to/program", "arg"], or a string run by /bin/sh -c)',
                 id="missing-command"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nrerun = true\n',
                 "[jobs.x] rerun: not a job setting: a rerun is a deliberate act, never a "
                 "setting", id="rerun"),
    pytest.param('[jobs.x]\ncommand = ["true"]\ndsn = "host=elsewhere"\n',
                 "[jobs.x] dsn: not a job setting: the file's own top-level dsn says where "
                 "every job's lock lives", id="dsn"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nping-url = "http://[::1/secret"\n',
                 "[jobs.x] ping-url: not a URL (Invalid IPv6 URL)", id="ping-url-n14"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nping-url = "https://h/secret "\n',
                 "[jobs.x] ping-url: a space, control or non-ASCII character at position 17 "
                 "(percent-encode it)", id="ping-url-n6"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nevent-log = "  "\n',
                 "[jobs.x] event-log: give a file path, 'syslog' or 'syslog:/path/to/socket'",
                 id="event-log-blank"),
    pytest.param('[jobs.x]\ncommand = ["true"]\nschedule = "@daily"\ncatch-up-limit = 5\n',
                 "[jobs.x]: --catch-up-limit needs --catch-up latest or all",
                 id="catch-up-limit-without-catch-up"),
    pytest.param("[jobs]\nx = 5\n",
                 "[jobs.x]: must be a table of the job's command and options (command = [...], "
                 'schedule = "...", ...)', id="not-a-table"),
]


@pytest.mark.parametrize("parser", ["typer", "runline"])
@pytest.mark.parametrize(("text", "line"), BAD)
def test_a_bad_table_is_one_line_naming_file_job_and_key(
        tmp_path: Path, text: str, line: str, parser: str) -> None:
    path = config_file(tmp_path, text)
    environ = {"PGLOCK_CONFIG": str(path), "PGLOCK_DSN": UNREACHABLE}
    if parser == "typer":
        called = invoke("run", "--job", "x", env=environ)
        code, stderr = called.code, called.stderr
    else:
        code, stderr = _runline(["run", "--job", "x"], environ)
    assert code == 2
    assert stderr == f"pglock: config file {path}: {line}\n"


def _runline(argv: list[str], environ: dict[str, str]) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    saved = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    try:
        with contextlib.redirect_stderr(err):
            code = runline.main(argv)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return code, err.getvalue()


def test_a_bad_table_stops_its_own_job_only(tmp_path: Path) -> None:
    path = config_file(tmp_path, GOOD + '\n[jobs.bad]\ncommand = ["true"]\nttl = "5x"\n')
    environ = {"PGLOCK_CONFIG": str(path), "PGLOCK_DSN": UNREACHABLE,
               "PGLOCK_CONNECT_TIMEOUT": "0"}
    # Past every check, to the database that is not there.
    assert invoke("run", "--job", "good", env=environ).code == 125
    assert invoke("run", "--job", "bad", env=environ).code == 2
    # ... while crontab and jobs check every table.
    assert invoke("crontab", env=environ).code == 2


def test_a_job_not_in_the_file_still_needs_a_command(tmp_path: Path) -> None:
    path = config_file(tmp_path, GOOD)
    called = invoke("run", "--job", "other", env={"PGLOCK_CONFIG": str(path),
                                                  "PGLOCK_DSN": UNREACHABLE})
    assert (called.code, called.stderr) == (
        2, f"pglock: no command given, and config file {path} has no [jobs.other] table: "
           "pglock run --job NAME -- COMMAND [ARG...]\n")
    # A file without job tables: as before.
    path.write_text("embedded = true\n")
    called = invoke("run", "--job", "other", env={"PGLOCK_CONFIG": str(path),
                                                  "PGLOCK_DSN": UNREACHABLE})
    assert (called.code, called.stderr) == (
        2, "pglock: no command given: pglock run --job NAME -- COMMAND [ARG...]\n")


def test_every_key_is_a_run_option_by_its_long_name() -> None:
    keys = jobsfile.table_keys()
    options = {flag[2:] for flag, (param, kind) in run_flags.FLAGS.items()
               if flag.startswith("--") and kind is not False}
    assert set(keys) == options - set(jobsfile.NOT_IN_A_TABLE) | {"command"}
    assert keys["on-failure"] == ("on_failure", "text")
    assert keys["output-on-failure"] == ("output_on_failure", True)


def test_a_string_command_runs_in_the_shell_with_the_job_as_its_name(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[jobs."nightly report"]\ncommand = "a | b > c"\n')
    job = jobsfile.checked(path, "nightly report", {"command": "a | b > c"})
    assert job.command == ["/bin/sh", "-c", "a | b > c", "nightly report"]
    assert jobsfile.table_name(job.name) == '[jobs."nightly report"]'


# Precedence: the command line, PGLOCK_* variables, the job's table, the defaults ---------


def _through_runline(args: list[str]) -> dict[str, Any]:
    parsed = runline.parse(args, os.environ)
    assert parsed is not None
    values, from_environment = parsed
    given = runline._options(args)
    assert given is not None
    defaulted = set(run_flags.DEFAULTS) - from_environment - set(given[0])
    return starting.resolved(values, from_environment, defaulted)


def _through_typer(args: list[str]) -> dict[str, Any]:
    command, _, _ = cli._parser(["run", *args])
    with command.make_context("pglock run", list(args)) as ctx:
        sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
        params = dict(ctx.params)
    params["command"] = list(params["command"]) if params["command"] else None
    return starting.resolved(
        params, {n for n, s in sources.items() if s is ParameterSource.ENVIRONMENT},
        {n for n, s in sources.items() if s is ParameterSource.DEFAULT})


PRECEDENCE = [
    # (arguments, variables, what the run gets)
    pytest.param(["--job", "good"], {},
                 {"ttl": "5m", "retries": 2, "retry_delay": "10", "schedule": "*/5 * * * *",
                  "tz": "UTC", "output_on_failure": True, "mode": "lease",
                  "command": ["sh", "-c", "echo good"]}, id="the-file"),
    pytest.param(["--job", "good", "--ttl", "90s", "--retries", "0"], {"PGLOCK_TTL": "2m"},
                 {"ttl": "90s", "retries": 0, "retry_delay": "10"}, id="command-line-first"),
    pytest.param(["--job", "good"], {"PGLOCK_TTL": "2m", "PGLOCK_MODE": "advisory"},
                 {"ttl": "2m", "mode": "advisory", "retries": 2}, id="variables-next"),
    pytest.param(["--job", "good", "--no-output-on-failure", "--", "echo", "mine"], {},
                 {"output_on_failure": False, "command": ["echo", "mine"], "ttl": "5m"},
                 id="a-command-given-wins"),
    pytest.param(["--job", "good"], {"PGLOCK_TZ": "Europe/Berlin"},
                 {"tz": "Europe/Berlin", "schedule": "*/5 * * * *"},
                 id="a-zone-variable-with-the-file's-schedule"),
    pytest.param(["--job", "other", "--", "true"], {"PGLOCK_TZ": "Europe/Berlin"},
                 {"tz": None, "ttl": "60s", "command": ["true"]}, id="not-in-the-file"),
]


@pytest.mark.parametrize("through", [_through_runline, _through_typer],
                         ids=["runline", "typer"])
@pytest.mark.parametrize(("args", "variables", "expected"), PRECEDENCE)
def test_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, through: Any,
                    args: list[str], variables: dict[str, str],
                    expected: dict[str, Any]) -> None:
    for name in [v for v in os.environ if v.startswith("PGLOCK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PGLOCK_CONFIG", str(config_file(tmp_path, GOOD)))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    values = through(args)
    assert {name: values[name] for name in expected} == expected


# The crontab -------------------------------------------------------------------------


THREE = """
[jobs.sync-invoices]
command = ["/opt/app/bin/sync-invoices"]
schedule = "*/5 * * * *"

[jobs.nightly-report]
command = "report --date $(date +%F) | mail -s report ops"
schedule = "30 2 * * *"
tz = "Europe/Berlin"

[jobs.reindex]
command = ["/opt/app/bin/reindex"]
"""


def test_the_crontab_has_one_line_per_scheduled_job(tmp_path: Path) -> None:
    path = config_file(tmp_path, THREE)
    _, jobs = _every(path)
    head = [f"# pglock crontab: the jobs of {path}; edit that file, then run",
            "# `pglock crontab` again. The schedules are read from it by cron and pglock "
            "alike.",
            f"*/5 * * * * PGLOCK_CONFIG={path} /usr/local/bin/pglock run --job sync-invoices",
            "# [jobs.reindex] has no schedule: cron does not start it"]
    text = crontab.fragment(path, jobs, "/usr/local/bin/pglock", tz_by="cron")
    assert text.splitlines() == [
        *head[:2], "# CRON_TZ is read by cronie; Debian's and Ubuntu's cron ignore it.",
        *head[2:], "CRON_TZ=Europe/Berlin",
        f"30 2 * * * PGLOCK_CONFIG={path} /usr/local/bin/pglock run --job nightly-report"]
    # Any cron: started every minute, pglock reads the slot in the job's zone.
    text = crontab.fragment(path, jobs, "/usr/local/bin/pglock", tz_by="pglock")
    assert text.splitlines() == [
        *head, "# [jobs.nightly-report]: 30 2 * * * in Europe/Berlin; pglock runs each slot "
        "once",
        f"* * * * * PGLOCK_CONFIG={path} /usr/local/bin/pglock run --job nightly-report"]
    assert "CRON_TZ" not in text
    user = crontab.fragment(path, jobs, "/usr/local/bin/pglock", "app", "pglock")
    assert f"*/5 * * * * app PGLOCK_CONFIG={path} /usr/local/bin/pglock run --job " \
           "sync-invoices" in user.splitlines()


def test_the_crontab_quotes_and_escapes(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[jobs."50% off"]\n'
                       'command = ["true"]\nschedule = "@hourly"\n')
    _, jobs = _every(path)
    line = crontab.fragment(path, jobs, "/opt/my tools/pglock").splitlines()[-1]
    assert line == (f"@hourly PGLOCK_CONFIG={path} '/opt/my tools/pglock' run --job "
                    "'50\\% off'")


RULE = "(letters, digits, _ . -, starting with a letter or _, at most 32 characters)"


def _every(path: Path) -> tuple[Path | None, list[jobsfile.ConfiguredJob]]:
    os.environ["PGLOCK_CONFIG"] = str(path)
    try:
        return jobsfile.every_job()
    finally:
        del os.environ["PGLOCK_CONFIG"]


@pytest.mark.parametrize(("args", "text", "line"), [
    (["crontab"], "dsn = 'host=db'\n", "pglock: no jobs configured (config file {path}): add "
     "[jobs.NAME] tables with a command and a schedule (docs/jobs-file.md)"),
    (["crontab", "--user", "a b"], THREE, "pglock: --user: 'a b' is not a user name " + RULE),
    # One check for crontab and systemd: control characters shown, not written.
    (["crontab", "--user", "a\x9bb"], THREE, "pglock: --user: 'a\\x9bb' is not a user "
     "name " + RULE),
    # cron.d's user field takes a name, not a uid (a unit's User= takes both).
    (["crontab", "--user", "1000"], THREE, "pglock: --user: '1000' is not a user name " + RULE),
    # Debian's and Ubuntu's cron ignore CRON_TZ: not written unless asked for.
    (["crontab"], THREE, "pglock: [jobs.nightly-report] has tz = 'Europe/Berlin', and "
     "Debian's and Ubuntu's cron ignore CRON_TZ: --tz-by pglock (started every minute, "
     "pglock runs each slot in its zone; any cron) or --tz-by cron (cronie reads CRON_TZ)"),
    (["crontab", "--tz-by", "anacron"], THREE,
     "pglock: --tz-by: 'anacron' is not one of cron, pglock"),
])
def test_crontab_refuses(tmp_path: Path, args: list[str], text: str, line: str) -> None:
    path = config_file(tmp_path, text)
    called = invoke(*args, env={"PGLOCK_CONFIG": str(path)})
    assert (called.code, called.stderr) == (2, line.format(path=path) + "\n")


def test_crontab_prints_the_fragment(tmp_path: Path) -> None:
    path = config_file(tmp_path, THREE)
    called = invoke("crontab", "--user", "app", "--tz-by", "cron",
                    env={"PGLOCK_CONFIG": str(path)})
    assert called.code == 0 and called.stderr == ""
    lines = [line for line in called.stdout.splitlines() if "run --job" in line]
    assert [line.split()[:6] for line in lines] == [
        ["*/5", "*", "*", "*", "*", "app"], ["30", "2", "*", "*", "*", "app"]]
    # An absolute path: cron's PATH is /usr/bin:/bin.
    assert all(Path(line.split()[7]).is_absolute() for line in lines)


# pglock jobs: the file next to the database ------------------------------------------


def test_what_jobs_notes(tmp_path: Path) -> None:
    path = config_file(tmp_path, THREE)
    _, wanted = _every(path)
    known = [
        jobfactory.job("sync-invoices", last_run=jobfactory.last(), schedule="*/10 * * * *",
                       timezone="UTC"),
        jobfactory.job("nightly-report", last_run=jobfactory.last(), schedule="30 2 * * *",
                       timezone="Europe/Berlin"),
        jobfactory.job("old-cleanup", last_run=jobfactory.last())]
    listed = configured.compare(wanted, known)
    assert [(item.name, item.notes) for item in listed] == [
        ("sync-invoices", ("schedule differs: file '*/5 * * * *', hosts ran "
                           "'*/10 * * * *' (UTC)",)),
        ("nightly-report", ()),
        ("reindex", ("never run",)),
        ("old-cleanup", ("not in the jobs file",))]
    moved = [jobfactory.job("nightly-report", last_run=jobfactory.last(),
                            schedule="30 2 * * *", timezone="UTC")]
    assert configured.compare(wanted[1:2], moved)[0].notes == (
        "schedule differs: file '30 2 * * *' (Europe/Berlin), hosts ran "
        "'30 2 * * *' (UTC)",)


def test_the_documented_file_gives_the_documented_crontab() -> None:
    import tomllib

    text = (Path(__file__).parents[3] / "docs" / "jobs-file.md").read_text()
    toml = text.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = text.split("```crontab\n", 1)[1].split("```", 1)[0]
    path = Path("/etc/pglock/config.toml")
    jobs = [jobsfile.checked(path, name, table)
            for name, table in jobsfile.tables(path, tomllib.loads(toml)).values()]
    assert crontab.fragment(path, jobs, "/usr/local/bin/pglock", "app", "pglock") == documented


@pytest.mark.parametrize("name", ["a\n* * * * * root touch /tmp/owned #", "a\rb", "a\x85b",
                                  "a\u2028b", "caf\udce9"])
def test_a_config_path_cron_cannot_carry_adds_no_entry(tmp_path: Path, name: str) -> None:
    try:
        folder = tmp_path / name
        folder.mkdir()
    except (OSError, UnicodeEncodeError):
        pytest.skip("the file system refuses the name")
    path = config_file(folder, THREE)
    called = invoke("crontab", env={"PGLOCK_CONFIG": str(path)})
    assert called.code == 2 and called.stdout == ""
    assert called.stderr.count("\n") == 1
    assert called.stderr.startswith("pglock: the config file's path ")
    assert "a cron line cannot name it" in called.stderr


def test_the_crontab_writes_keywords_as_cron_reads_them(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[jobs.a]\ncommand = ["true"]\nschedule = "@DAILY"\n')
    _, jobs = _every(path)
    assert crontab.fragment(path, jobs, "/usr/bin/pglock").splitlines()[-1].startswith(
        "@daily PGLOCK_CONFIG=")


@strategies.PURE
@given(strategies.jobs_file_tables(), strategies.hostile_text)
def test_any_table_is_checked_or_refused_in_one_line(table: dict[str, Any], name: str) -> None:
    """Generated tables: every key with values of every TOML type and hostile strings. A
    table is accepted whole or refused with one line naming it, never another error."""
    path = Path("/etc/pglock/config.toml")
    try:
        [(written, found)] = jobsfile.tables(path, {"jobs": {name: table}}).values()
        job = jobsfile.checked(path, written, found)
    except UsageError as error:
        message = str(error)
        assert message.startswith("config file /etc/pglock/config.toml: [jobs.")
        assert "\n" not in message and "\x00" not in message
        return
    assert job.command and not any("\x00" in argument for argument in job.command)
    for value in job.values.values():
        assert not (isinstance(value, str) and "\x00" in value)


def test_every_table_key_is_documented() -> None:
    text = (Path(__file__).parents[3] / "docs" / "jobs-file.md").read_text()
    row = next(line for line in text.splitlines()
               if line.startswith("| every option of `pglock run`"))
    missing = [key for key in jobsfile.table_keys() if key != "command" and f"`{key}`" not in row]
    assert missing == []
    needs = next(line for line in text.splitlines() if "need `schedule` in the same table" in line)
    undocumented = [key for key in jobsfile.SCHEDULE_ONLY
                    if f"`{key.replace('_', '-')}`" not in needs]
    assert undocumented == []


def test_catch_up_and_windows_in_a_table(tmp_path: Path) -> None:
    table = {"command": ["true"], "schedule": "0 * * * *", "catch-up": "all",
             "catch-up-limit": 3, "window": ["0 2 * * 6 4h", "0 0 25 12 * 1d"]}
    job = jobsfile.checked(tmp_path / "config.toml", "hourly", table)
    assert (job.values["catch_up"], job.values["catch_up_limit"]) == ("all", 3)
    assert tuple(job.values["window"]) == ("0 2 * * 6 4h", "0 0 25 12 * 1d")
    one = jobsfile.checked(tmp_path / "config.toml", "hourly",
                           {**table, "window": "0 2 * * 6 4h"})
    assert tuple(one.values["window"]) == ("0 2 * * 6 4h",)
