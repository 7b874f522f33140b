"""Text from users is data; surprising input is refused in one line, before any lock."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from pglock.cli import render
from pglock.run.options import RunOptions
from pglock.settings import config

from ..inprocess import UNREACHABLE, invoke

RUN = ["run", "--job", "x", "--connect-timeout", "0"]


def one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1 and stderr.startswith("pglock: "), stderr
    assert "Traceback" not in stderr
    return stderr


# Config files --------------------------------------------------------------------------


DEEP = "x = " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.mark.parametrize(("content", "code", "mentions"), [
    ("schema = 5\n", 125, "schema must be a non-empty string"),
    ("dsn = 5\n", 125, "dsn must be a non-empty string"),
    ("dsn = ''\n", 125, "dsn must be a non-empty string"),
    ("dsn = '   '\n", 125, "dsn must be a non-empty string"),
    ("schema = ' '\n", 125, "schema must be a non-empty string"),
    ('dsn = "host=127.0.0.1\\u0000 dbname=nope"\n', 125, "dsn contains a NUL character"),
    ("schema = ['a']\n", 125, "schema must be a non-empty string"),
    ("dsm = 'host=db'\n", 125,
     "unknown key 'dsm' (known: dsn, schema, embedded, embedded_linger, jobs, host)"),
    ("embedded_linger = true\n", 125,
     'embedded_linger must be a duration ("10m") or a number of seconds'),
    # The jobs file's shape is bad input, as a bad table in it is.
    ("jobs = 'x'\n", 2, "jobs must be tables, one per job ([jobs.NAME])"),
    ("jobs = 5\n", 2, "jobs must be tables, one per job ([jobs.NAME])"),
    ("[[jobs]]\ncommand = ['true']\n", 2, "jobs must be tables, one per job ([jobs.NAME])"),
    ("[dsn]\nhost = 'db'\n", 125, "dsn must be a non-empty string"),
    (DEEP, 125, "nested too deeply"),
    ("# " + "x" * (4 << 20) + "\n", 125, "larger than 4 MiB; not a config file"),
])
def test_every_config_key_is_checked(tmp_path: Path, content: str, code: int,
                                     mentions: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(content)
    called = invoke(*RUN, "--", "true", env={"PGLOCK_CONFIG": str(path)})
    assert called.code == code
    line = one_line(called.stderr)
    assert f"config file {path}: {mentions}" in line
    # check answers UNKNOWN with the same words.
    checked = invoke("check", env={"PGLOCK_CONFIG": str(path)})
    assert checked.code == 3
    assert checked.stdout.startswith("PGLOCK UNKNOWN - ") and mentions in checked.stdout


@pytest.mark.parametrize(("content", "mentions"), [
    ("host = ''\n", "host: the host name is empty"),
    ("host = '  '\n", "host: the host name is empty"),
    ("host = 5\n", "host must be a string (this host's name in the census)"),
    ('host = "web\\u0000"\n', "host: the host name 'web^@' contains a control character"),
    ('host = "a\\nb"\n', "host: the host name 'a^Jb' contains a control character"),
    (f"host = '{'h' * 256}'\n", "host: the host name is 256 bytes long; the limit is 255"),
    (f"host = '{'é' * 128}'\n", "host: the host name is 256 bytes long; the limit is 255"),
])
def test_the_config_files_host_is_checked_before_any_connection(
        tmp_path: Path, content: str, mentions: str) -> None:
    """The census's name for this host (docs/operators.md, "The census"): bad input, exit 2,
    one line naming the file; the CLI tests' DSN does not parse, so nothing connected."""
    path = tmp_path / "config.toml"
    path.write_text(content)
    called = invoke(*RUN, "--", "true", env={"PGLOCK_CONFIG": str(path)})
    assert called.code == 2, called
    assert one_line(called.stderr) == f"pglock: config file {path}: {mentions}\n"


@pytest.mark.parametrize(("value", "mentions"), [
    ("", "PGLOCK_HOST: the host name is empty"),
    (" ", "PGLOCK_HOST: the host name is empty"),
    ("web\x01one", "PGLOCK_HOST: the host name 'web^Aone' contains a control character"),
    ("web\x1b[31m", "PGLOCK_HOST: the host name 'web^[[31m' contains a control character"),
    ("web\x85", "PGLOCK_HOST: the host name 'web\\x85' contains a control character"),
    ("h" * 256, "PGLOCK_HOST: the host name is 256 bytes long; the limit is 255"),
])
def test_pglock_host_is_checked_before_any_connection(value: str, mentions: str) -> None:
    called = invoke(*RUN, "--", "true", env={"PGLOCK_HOST": value})
    assert called.code == 2, called
    assert one_line(called.stderr) == f"pglock: {mentions}\n"


def test_a_host_name_of_255_bytes_passes_the_check() -> None:
    """The limit itself is a name (and the holder's default): the run gets past validation,
    to a server that is not there (exit 125)."""
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--", "true", env={"PGLOCK_HOST": "h" * 255})
    assert called.code == 125, called
    assert "host name" not in one_line(called.stderr)


def test_an_endless_config_file_is_read_no_further_than_the_limit() -> None:
    called = invoke("status", env={"PGLOCK_CONFIG": "/dev/zero"})
    assert called.code == 125
    assert one_line(called.stderr) == ("pglock: config file /dev/zero: larger than 4 MiB; not "
                                       "a config file\n")


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_config_variable_is_refused_not_skipped(value: str) -> None:
    called = invoke("status", env={"PGLOCK_CONFIG": value})
    assert called.code == 125
    assert one_line(called.stderr) == ("pglock: PGLOCK_CONFIG: empty; unset it to read the "
                                       "default config files\n")


def test_a_config_file_with_a_non_utf8_name_is_named_escaped(tmp_path: Path) -> None:
    path = os.fsdecode(bytes(tmp_path) + b"/caf\xe9.toml")
    called = invoke("check", env={"PGLOCK_CONFIG": path})
    assert called.code == 3
    assert "caf\\xe9.toml" in called.stdout


# Empty DSN, schedule-only variables, PGHOST -------------------------------------------


@pytest.mark.parametrize("how", ["--dsn", "PGLOCK_DSN"])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_dsn_is_an_error_not_the_embedded_server(how: str, value: str) -> None:
    args, env = ([*RUN, "--dsn", value], {}) if how == "--dsn" else (RUN, {"PGLOCK_DSN": value})
    called = invoke(*args, "--", "true", env=env)
    assert called.code == 2
    assert one_line(called.stderr) == (f"pglock: {how}: an empty DSN; unset it to use the "
                                       "config file, libpq's variables or the embedded server\n")


@pytest.mark.parametrize("name", ["PGLOCK_TZ", "PGLOCK_DEADLINE", "PGLOCK_GRACE",
                                  "PGLOCK_WINDOW"])
def test_schedule_variables_are_ignored_without_a_schedule(name: str) -> None:
    value = {"PGLOCK_TZ": "UTC", "PGLOCK_WINDOW": "* * * * * 1h"}.get(name, "5m")
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--", "true", env={name: value})
    # Past option checking, to the database: the variable did not make it a usage error.
    assert called.code == 125 and "cannot connect" in called.stderr


@pytest.mark.parametrize(("option", "value"), [("--tz", "UTC"), ("--deadline", "5m"),
                                                ("--grace", "5m")])
def test_schedule_options_still_need_a_schedule(option: str, value: str) -> None:
    called = invoke(*RUN, "--dsn", UNREACHABLE, option, value, "--", "true")
    assert (called.code, called.stderr) == (2, f"pglock: {option} needs --schedule\n")


@pytest.mark.parametrize("windows", ["* * * * * 1h", "0 3 1 1 * 1m; * * * * * 1h"])
def test_a_window_from_the_environment_skips_the_trigger(windows: str) -> None:
    """PGLOCK_WINDOW is read as --window (issue 38: it was ignored, and a crontab-wide
    window let every job run through the maintenance); ';' separates several."""
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--schedule", "* * * * *", "--tz", "UTC",
                    "--", "true", env={"PGLOCK_WINDOW": windows})
    # Inside the window: skipped before any connection (the DSN leads nowhere).
    assert (called.code, called.stderr) == (75, "")


def test_schedule_variables_apply_with_a_schedule() -> None:
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--schedule", "* * * * *", "--", "true",
                    env={"PGLOCK_TZ": "Nowhere/Atlantis"})
    assert called.code == 2 and "Nowhere/Atlantis" in called.stderr


# Non-UTF-8 arguments --------------------------------------------------------------------

BAD = os.fsdecode(b"caf\xe9")


@pytest.mark.parametrize("args", [
    ["run", "--job", BAD, "--", "true"],
    ["run", f"--job={BAD}", "--", "true"],
    ["run", "--job", "x", "--holder", BAD, "--", "true"],
    ["run", "--job", "x", "--schema", BAD, "--", "true"],
    ["run", "--job", "x", "--dsn", f"host={BAD}", "--", "true"],
    ["status", "--job", BAD],
    ["history", "--host", BAD],
    ["clear", "--job", "x", "--reason", BAD, "--yes"],
    ["check", "--job", BAD],
])
def test_a_non_utf8_argument_is_one_line_and_exit_2(args: list[str]) -> None:
    called = invoke(*args)
    # check answers a monitoring system: UNKNOWN (3), on stdout too.
    assert called.code == (3 if args[0] == "check" else 2)
    line = one_line(called.stderr)
    assert "caf\\xe9' is not valid UTF-8" in line and "\udce9" not in line


@pytest.mark.parametrize("name", ["PGLOCK_HOLDER", "PGLOCK_SCHEMA"])
def test_a_non_utf8_variable_is_one_line_and_exit_2(name: str) -> None:
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--", "true", env={name: BAD})
    assert called.code == 2
    assert "not valid UTF-8" in one_line(called.stderr)


def test_a_non_utf8_dsn_variable_is_refused_without_its_content() -> None:
    called = invoke(*RUN, "--", "true",
                    env={"PGLOCK_DSN": f"host=127.0.0.1 port=1 password=hunter2{BAD}"})
    assert called.code == 125
    assert one_line(called.stderr) == "pglock: the DSN is not valid UTF-8\n"


def test_the_command_itself_may_be_bytes() -> None:
    # Its arguments are not pglock's: exec takes them as they are (a file name is bytes).
    called = invoke(*RUN, "--dsn", UNREACHABLE, "--", BAD, BAD)
    assert called.code == 125 and "cannot connect" in called.stderr


# Job names compared in NFC; user text escaped -------------------------------------------

DECOMPOSED = "caf" + "e\u0301"  # e + combining acute accent
COMPOSED = "caf\u00e9"


def test_job_names_that_look_identical_are_one_job() -> None:
    assert config.check_job(DECOMPOSED) == COMPOSED
    assert RunOptions(job=DECOMPOSED, command=["true"]).job == COMPOSED
    # NFC, not NFKC: a full-width name looks different and stays a name of its own.
    fullwidth = "\uff4a\uff4f\uff42"
    assert config.check_job(fullwidth) == fullwidth
    assert unicodedata.is_normalized("NFC", config.check_job("A\u030a"))


@pytest.mark.parametrize(("text", "shown"), [
    ("web-3", "web-3"),
    ("evil\nSTALE  row", "evil^JSTALE  row"),
    ("\x1b[2J\x1b[31mred", "^[[2J^[[31mred"),
    ("bell\x07 del\x7f c1\x9b", "bell^G del^? c1\\x9b"),
    ("line\u2028sep", "line\\u2028sep"),
    ("日本 ü", "日本 ü"),
])
def test_user_text_is_shown_escaped(text: str, shown: str) -> None:
    assert render.escaped(text) == shown
    assert "\x1b" not in render.clip(text)


@pytest.mark.parametrize(("output", "shown"), [
    ("dos line\r\nnext\r\n", ["    dos line^M", "    next^M"]),
    ("progress 10%\rprogress 99%\n", ["    progress 10%^Mprogress 99%"]),
    ("plain\n", ["    plain"]),
])
def test_a_carriage_return_in_output_is_shown_as_cat_v_does(output: str,
                                                            shown: list[str]) -> None:
    """docs/operators.md: `^M` for a carriage return, the one before a line's end too."""
    from datetime import UTC, datetime

    from pglock.cli import screens
    from pglock.reports.history import RunRow

    start = datetime(2026, 11, 24, tzinfo=UTC)
    run = RunRow(id=1, job="j", started_at=start, finished_at=start, holder="h",
                 holder_pid=1, mode="lease", outcome="succeeded", exit_code=0, signal=None,
                 duration=1.0, fencing_token=1, error=None, output=output.encode())
    assert screens.output_lines(run) == shown
