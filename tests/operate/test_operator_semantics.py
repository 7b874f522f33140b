"""What operator commands do to what they were not asked about (issue 21, item 7): forget
ends a pause with the job (N9), no operator command creates a schema, doctor starts no
server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from conftest import PGLOCK, TEST_SETTINGS, Env, one_line

from pglock.db.embedded import EmbeddedServer


def test_forget_of_a_paused_job_ends_the_pause_and_audits_both(env: Env) -> None:
    assert env.run("run", "--job", "old", "--", "true").returncode == 0
    assert env.run("pause", "--job", "old", "--reason", "maintenance").returncode == 0
    forgot = env.run("forget", "--job", "old", "--reason", "removed from the crontab")
    assert (forgot.returncode, forgot.stderr) == (0, "")
    assert forgot.stdout == ("forgot job old; its pause ended with it; its history stays "
                             "until pruned\n")
    assert env.query("SELECT action, reason, detail FROM {schema}.audit ORDER BY id")[1:] in (
        [("forget", "removed from the crontab", None),
         ("resume", "removed from the crontab", "with forget")],
        [("resume", "removed from the crontab", "with forget"),
         ("forget", "removed from the crontab", None)])
    # A run that brings the job back runs: nothing left that no status shows.
    back = env.run("run", "--job", "old", "--rerun", "--", "echo", "back")
    assert (back.returncode, back.stdout) == (0, "back\n")


def test_forget_leaves_a_fleet_wide_pause_alone(env: Env) -> None:
    assert env.run("run", "--job", "old", "--", "true").returncode == 0
    assert env.run("pause", "--all", "--reason", "migration").returncode == 0
    forgot = env.run("forget", "--job", "old", "--reason", "gone")
    assert forgot.stdout == "forgot job old; its history stays until pruned\n"
    assert env.run("run", "--job", "other", "--", "true").returncode == 75


OPERATOR_COMMANDS = [
    ["pause", "--job", "j", "--reason", "r"], ["pause", "--all", "--reason", "r"],
    ["resume", "--all"], ["resume", "--job", "j"], ["stop", "--job", "j", "--reason", "r"],
    ["forget", "--job", "j", "--reason", "r"], ["replay", "--job", "j", "--reason", "r"],
    ["prune", "--older-than", "1d", "--yes"], ["clear", "--job", "j", "--yes"],
]


@pytest.mark.parametrize("args", OPERATOR_COMMANDS, ids=" ".join)
def test_an_operator_command_never_creates_a_schema(env: Env, args: list[str]) -> None:
    assert env.run("run", "--job", "j", "--", "true").returncode == 0
    typo = env.schema + "_typo"
    result = env.run(*args, "--schema", typo)
    assert result.returncode == 125, result
    assert f"schema '{typo}' does not exist" in one_line(result.stderr)
    assert env.query("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (typo,)) == [(0,)]


def _doctor(data_home: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "PGLOCK_TEST_DSN"}
    return subprocess.run([PGLOCK, "doctor"], env={**environ, "XDG_DATA_HOME": str(data_home)},
                          capture_output=True, text=True, timeout=60, check=False)


def test_doctor_does_not_start_the_embedded_server(tmp_path: Path) -> None:
    result = _doctor(tmp_path)
    assert result.returncode == 1, result
    assert "WARN  server       the embedded server is not running" in result.stdout
    assert not (tmp_path / "pglock").exists()


def test_doctor_looks_at_a_running_embedded_server_without_joining_it(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "pglock", settings=TEST_SETTINGS)
    server.join()
    try:
        result = _doctor(tmp_path)
        assert "OK    engine       PostgreSQL " in result.stdout, result
        assert "not running" not in result.stdout
        with psycopg.connect(server.conninfo) as conn:
            # Nothing of pglock's was made there.
            assert conn.execute("SELECT count(*) FROM pg_namespace "
                                "WHERE nspname = 'pglock'").fetchone() == (0,)
    finally:
        server.leave()
