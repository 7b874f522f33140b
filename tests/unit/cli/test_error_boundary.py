"""The one error boundary, in process: exact stderr lines and exit codes."""

from __future__ import annotations

import json

import pytest

from pglock.cli import app as cli
from pglock.settings import config

SECRET = "postgresql://app:hunter2@db.example:5432/app"


def test_an_unexpected_error_prints_a_fixed_line_never_its_text(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(dsn: str | None) -> config.Target:
        raise RuntimeError(f"could not use {SECRET}")

    monkeypatch.setattr(config, "resolve_target", broken)
    assert cli.main(["status"]) == 125
    captured = capsys.readouterr()
    assert captured.err == "pglock: internal error: RuntimeError (-v shows the traceback)\n"
    assert captured.out == ""
    # check still answers as a plugin, inside 0-3.
    assert cli.main(["check"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "PGLOCK UNKNOWN - internal error: RuntimeError\n"
    assert "hunter2" not in captured.err + captured.out
    # -v: the traceback, for the developer at the terminal.
    assert cli.main(["status", "-v"]) == 125
    assert "Traceback" in capsys.readouterr().err


def test_bare_pglock_prints_a_short_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == cli.usage() + "\n"
    assert len(captured.err.splitlines()) == 1
    # Every command, the operator's and the monitoring ones included (issue 21, item 8).
    listed = captured.err.split("(")[1].split(")")[0].split(", ")
    assert listed == [cli._name(info) for info in cli.full_app().registered_commands]
    assert {"pause", "resume", "stop", "forget", "replay", "doctor"} <= set(listed)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_run_takes_h_as_help(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", flag]) == 0
    assert capsys.readouterr().out.startswith("Usage: pglock run [OPTIONS]")


def test_usage_errors_say_one_line_unless_quiet(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--zzz"]) == 2
    assert capsys.readouterr().err == (
        "pglock: No such option: --zzz (see 'pglock status --help')\n")
    assert cli.main(["status", "--zzz", "-q"]) == 2
    assert capsys.readouterr().err == ""
    assert cli.main(["run", "--quiet", "--job", "x", "--zzz", "--", "true"]) == 2
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PGLOCK_QUIET", "1")
    assert cli.main(["history", "--limit", "zero"]) == 2
    assert capsys.readouterr().err == ""


def test_errors_of_pglock_are_one_line_and_quiet_silences_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["history", "--since", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pglock: --since") and len(err.splitlines()) == 1
    assert cli.main(["history", "--since", "soon", "-q"]) == 2
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("args", "words"), [
    (["--bogus"], "No such option: --bogus"),
    (["--job", ""], "--job: the job name is empty"),
    (["--missed-warning", "3", "--missed-critical", "2"], "--missed-warning (3) is above"),
    (["--failures-warning", "many"], "'many' is not a valid int"),
])
def test_check_answers_unknown_whatever_is_wrong(args: list[str], words: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", *args]) == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("PGLOCK UNKNOWN - ") and words in captured.out
    assert words in captured.err
    assert cli.main(["check", "--json", *args]) == 3
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["exit_code"], answer["jobs"]) == ("UNKNOWN", 3, [])
    assert words in answer["summary"]


def test_check_with_a_config_it_cannot_read_is_unknown(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PGLOCK_CONFIG", "/nonexistent/pglock.toml")
    assert cli.main(["check"]) == 3
    assert capsys.readouterr().out == (
        "PGLOCK UNKNOWN - config file /nonexistent/pglock.toml (PGLOCK_CONFIG) does not exist\n")
    assert cli.main(["metrics"]) == 125
    captured = capsys.readouterr()
    assert captured.out == "" and "does not exist" in captured.err


@pytest.mark.parametrize(("argv", "code", "role"), [
    (["run", "--job", "x", "--", "true"], 125, "pglock_runner"),
    (["status"], 1, "pglock_reader"),
    (["history", "--job", "x"], 1, "pglock_reader"),
    (["metrics"], 125, "pglock_reader"),
    (["clear", "--job", "x", "--yes"], 1, "pglock_operator"),
    (["prune", "--older-than", "1d", "--yes"], 1, "pglock_operator"),
    (["pause", "--job", "x", "--reason", "r"], 1, "pglock_operator"),
    (["resume", "--job", "x"], 1, "pglock_operator"),
    (["forget", "--job", "x", "--reason", "r"], 1, "pglock_operator"),
])
def test_a_refused_privilege_names_the_role_that_has_it(
        argv: list[str], code: int, role: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    from pglock.errors import DatabaseError

    def refused(dsn: str | None) -> config.Target:
        try:
            raise psycopg.errors.InsufficientPrivilege("permission denied for table locks")
        except psycopg.Error as error:
            # As database.translated wraps it, on the run path; bare elsewhere.
            if argv[0] == "run":
                raise DatabaseError(f"cannot take the lock: {error}") from error
            raise

    monkeypatch.setattr(config, "resolve_target", refused)
    assert cli.main(argv) == code
    captured = capsys.readouterr()
    assert captured.err == (f"pglock: pglock {argv[0]} needs the {role} role "
                            "(permission denied for table locks)\n")
    assert captured.out == ""


def test_check_answers_unknown_for_a_refused_privilege(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    def refused(dsn: str | None) -> config.Target:
        raise psycopg.errors.InsufficientPrivilege("permission denied for table jobs")

    monkeypatch.setattr(config, "resolve_target", refused)
    assert cli.main(["check"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ("PGLOCK UNKNOWN - pglock check needs the pglock_reader role "
                            "(permission denied for table jobs)\n")


def test_a_schema_that_cannot_be_created_keeps_its_own_advice(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    from pglock.errors import SchemaError

    def refused(dsn: str | None) -> config.Target:
        try:
            raise psycopg.errors.InsufficientPrivilege("permission denied for database x")
        except psycopg.Error as error:
            raise SchemaError("cannot create or upgrade schema 'pglock': ask a DBA") from error

    monkeypatch.setattr(config, "resolve_target", refused)
    assert cli.main(["run", "--job", "x", "--", "true"]) == 125
    assert capsys.readouterr().err == (
        "pglock: cannot create or upgrade schema 'pglock': ask a DBA\n")
