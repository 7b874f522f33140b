"""One test per exit status: each documented code, from a situation that gives it.

Real processes where the code comes from a command that runs (signals, exec); the
others in-process through cli.main(argv)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Env
from operating import holding

from pglock.cli import app as cli
from pglock.errors import EVERY, ExitStatus

TESTED = {
    ExitStatus.OK: "test_ok", ExitStatus.FAILURE: "test_failure",
    ExitStatus.USAGE: "test_usage", ExitStatus.CONFLICT: "test_conflict",
    ExitStatus.TIMED_OUT: "test_timed_out", ExitStatus.INTERNAL: "test_internal",
    ExitStatus.CANNOT_EXECUTE: "test_cannot_execute", ExitStatus.NOT_FOUND: "test_not_found",
    ExitStatus.SIGNALLED: "test_signalled", ExitStatus.OUTPUT_CLOSED: "test_output_closed",
}


def test_every_exit_status_has_its_test_and_its_meaning() -> None:
    assert set(TESTED) == set(ExitStatus)
    assert all(name in globals() for name in TESTED.values())
    for status in ExitStatus:
        assert status.meaning and status.commands <= EVERY, status
    assert [status.label for status in ExitStatus][-2:] == ["128+N", "141"]


@pytest.fixture
def database(env: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.setenv("PGLOCK_DSN", env.dsn)
    monkeypatch.setenv("PGLOCK_SCHEMA", env.schema)
    return env


def test_ok(capsys: pytest.CaptureFixture[str]) -> None:
    from pglock import __version__

    assert cli.main(["--version"]) == ExitStatus.OK
    assert int(ExitStatus.OK) == 0
    assert capsys.readouterr().out == f"pglock {__version__}\n"


def test_failure(database: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert database.run("run", "--job", "real", "--", "true").returncode == 0
    assert cli.main(["status", "--job", "typo"]) == ExitStatus.FAILURE
    assert int(ExitStatus.FAILURE) == 1
    assert capsys.readouterr().err == (
        f"pglock: no job named 'typo' has run here (schema {database.schema!r})\n")


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["history", "--limit", "0"]) == ExitStatus.USAGE
    assert int(ExitStatus.USAGE) == 2
    assert capsys.readouterr().err.startswith("pglock: --limit")


def test_conflict(env: Env) -> None:
    with holding(env, "busy"):
        assert env.run("run", "--job", "busy", "--", "true").returncode == 75


def test_timed_out(env: Env) -> None:
    result = env.run("run", "--job", "slow", "--max-runtime", "0.2s", "--kill-after", "1s",
                     "--", "sleep", "30")
    assert result.returncode == ExitStatus.TIMED_OUT
    assert int(ExitStatus.TIMED_OUT) == 124


def test_internal(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["metrics", "--dsn", "host=/nonexistent port=1", "--connect-timeout", "1"])
    assert code == ExitStatus.INTERNAL
    assert int(ExitStatus.INTERNAL) == 125
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("pglock: cannot connect to ")


def test_cannot_execute(env: Env, tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    result = env.run("run", "--job", "noexec", "--", str(script))
    assert result.returncode == ExitStatus.CANNOT_EXECUTE
    assert int(ExitStatus.CANNOT_EXECUTE) == 126


def test_not_found(env: Env) -> None:
    result = env.run("run", "--job", "missing", "--", "/nonexistent/command")
    assert result.returncode == ExitStatus.NOT_FOUND
    assert int(ExitStatus.NOT_FOUND) == 127


def test_signalled(env: Env) -> None:
    result = env.run("run", "--job", "killed", "--", "sh", "-c", "kill -TERM $$")
    assert result.returncode == 143 == int(ExitStatus.SIGNALLED) + 15


def test_output_closed(env: Env) -> None:
    read, write = os.pipe()
    os.close(read)
    with env.popen("init", "--print-sql", stdout=write) as process:
        os.close(write)
        _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr) == (ExitStatus.OUTPUT_CLOSED, "")
    assert int(ExitStatus.OUTPUT_CLOSED) == 141
