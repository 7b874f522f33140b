"""The one error boundary, in process: exact stderr lines and exit codes."""

from __future__ import annotations

import json

import pytest

from pglock import cli, config

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
    assert captured.out == "" and captured.err == cli.USAGE + "\n"
    assert len(captured.err.splitlines()) == 1


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
