"""`pglock run` basics, with real processes: exit codes, environment, history, output, input."""

from __future__ import annotations

import signal
import socket
from typing import Any

import psycopg
import pytest
from conftest import PGLOCK, Env, one_line
from operating import holding
from psycopg import sql

from pglock.db import schema


def table_exists(env: Env, table: str) -> bool:
    rows = env.query("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s",
                     (env.schema, table))
    return bool(rows)


def run_count(env: Env) -> int:
    """All runs recorded in the test's schema (0 when the schema was never created)."""
    if not table_exists(env, "runs"):
        return 0
    return int(env.query("SELECT count(*) FROM {schema}.runs")[0][0])


def running_rows(env: Env, job: str) -> int:
    try:
        rows = env.query("SELECT count(*) FROM {schema}.runs WHERE job = %s "
                         "AND outcome = 'running'", (job,))
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return 0
    return int(rows[0][0])


def job_row(env: Env, job: str) -> dict[str, Any]:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
        cursor.execute(sql.SQL("SELECT * FROM {}.jobs WHERE job = %s").format(
            sql.Identifier(env.schema)), (job,))
        row = cursor.fetchone()
    assert row is not None, f"no jobs row for {job!r}"
    return row


def counts(row: dict[str, Any]) -> dict[str, int]:
    """A jobs row's outcome counts, without outcomes that never happened (a 0 is no count)."""
    return {outcome: n for outcome, n in row["outcome_counts"].items() if n}


def application_connected(env: Env, job: str, holder: str) -> bool:
    name = f"pglock run {job} on {holder}"[:63]
    rows = env.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                     (name,))
    return bool(rows[0][0])


# 1. Exit codes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "outcome"), [(0, "succeeded"), (3, "failed"), (42, "failed")])
def test_exit_code_is_passed_through(env: Env, code: int, outcome: str) -> None:
    result = env.run("run", "--job", "exit", "--", "sh", "-c", f"exit {code}")
    assert (result.returncode, result.stdout, result.stderr) == (code, "", "")
    [row] = env.runs("exit")
    assert (row["outcome"], row["exit_code"], row["signal"], row["error"]) == (
        outcome, code, None, None)


def test_command_killed_by_a_signal_exits_128_plus_n(env: Env) -> None:
    result = env.run("run", "--job", "killed", "--", "sh", "-c", "kill -KILL $$")
    assert (result.returncode, result.stdout, result.stderr) == (137, "", "")
    [row] = env.runs("killed")
    assert (row["outcome"], row["signal"], row["exit_code"]) == ("killed", 9, 137)
    assert row["finished_at"] is not None


def test_missing_command_exits_127_and_is_recorded_as_failed(env: Env) -> None:
    result = env.run("run", "--job", "missing", "--", "pglock-test-no-such-command", "arg")
    assert result.returncode == 127
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert "pglock-test-no-such-command" in line
    assert "not found" in line
    [row] = env.runs("missing")
    assert (row["outcome"], row["exit_code"], row["signal"]) == ("failed", 127, None)
    assert row["error"] == line.removeprefix("pglock: ")
    assert row["command"] == "pglock-test-no-such-command"
    assert row["finished_at"] is not None and row["duration"] is not None
    assert job_row(env, "missing")["last_outcome"] == "failed"


def test_non_executable_file_exits_126_and_is_recorded_as_failed(env: Env) -> None:
    script = env.tmp / "not-executable.sh"
    script.write_text("#!/bin/sh\necho should-not-run\n")
    script.chmod(0o644)
    result = env.run("run", "--job", "noexec", "--", str(script))
    assert result.returncode == 126
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert str(script) in line
    [row] = env.runs("noexec")
    assert (row["outcome"], row["exit_code"], row["signal"]) == ("failed", 126, None)
    assert row["error"] == line.removeprefix("pglock: ")
    assert job_row(env, "noexec")["last_exit_code"] == 126


# 2. The command's environment -------------------------------------------------------------

PRINT_ENV = ["sh", "-c", 'printf "%s|%s|%s" "$PGLOCK_JOB" "$PGLOCK_RUN_ID" "$PGLOCK_FENCING_TOKEN"']


def run_printing_env(env: Env, job: str) -> tuple[str, int, int]:
    result = env.run("run", "--job", job, "--rerun", "--", *PRINT_ENV)
    assert (result.returncode, result.stderr) == (0, ""), result
    name, run_id, token = result.stdout.split("|")
    return name, int(run_id), int(token)


def test_command_gets_job_run_id_and_fencing_token(env: Env) -> None:
    name, run_id, token = run_printing_env(env, "env-job")
    assert name == "env-job"
    [row] = env.runs("env-job")
    assert run_id == row["id"]
    assert token == row["fencing_token"]
    assert env.query("SELECT fencing_token FROM {schema}.locks WHERE job = %s",
                     ("env-job",)) == [(token,)]


def test_the_command_and_its_hooks_get_pglock_dsn_without_its_password(env: Env) -> None:
    """docs/security.md: PGLOCK_DSN reaches the command with no password, still naming the
    same database, so a nested run works (libpq's own ways in; the test server trusts its
    socket) and the job's code never sees the secret."""
    secret = "s3cret-Pw-4711"
    dsn = f"{env.dsn} password={secret}"
    seen, hooked = env.tmp / "seen", env.tmp / "hooked"
    result = env.run(
        "run", "--job", "outer", "--on-success", f'echo "$PGLOCK_DSN" > {hooked}', "--",
        "sh", "-c", f'echo "$PGLOCK_DSN" > {seen} && exec "$0" run --job inner -- true',
        PGLOCK, env={"PGLOCK_DSN": dsn})
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result
    for path in (seen, hooked):
        passed = path.read_text().strip()
        assert secret not in passed and "password" not in passed, passed
        assert psycopg.conninfo.conninfo_to_dict(passed) == {
            k: v for k, v in psycopg.conninfo.conninfo_to_dict(dsn).items() if k != "password"}
    assert [r["outcome"] for r in env.runs("inner")] == ["succeeded"]


def test_fencing_token_increases_per_job_and_jobs_are_independent(env: Env) -> None:
    seen: dict[str, list[int]] = {"a": [], "b": []}
    run_ids = []
    for job in ["a", "a", "b", "a"]:
        name, run_id, token = run_printing_env(env, job)
        assert name == job
        seen[job].append(token)
        run_ids.append(run_id)
    assert seen == {"a": [1, 2, 3], "b": [1]}
    assert run_ids == sorted(set(run_ids))
    assert [r["fencing_token"] for r in env.runs("a")] == [1, 2, 3]
    assert [r["id"] for r in env.runs("a")] == [run_ids[0], run_ids[1], run_ids[3]]


# 3. History rows and the jobs summary ----------------------------------------------------


def test_history_rows_and_job_summary(env: Env) -> None:
    job = "summary"
    commands = [["sh", "-c", "exit 3"], ["true"], ["sh", "-c", "exit 4"]]
    pids = []
    summaries = []
    for command in commands:
        process = env.popen("run", "--job", job, "--rerun", "--", *command)
        stdout, stderr = process.communicate(timeout=60)
        assert (stdout, stderr) == ("", "")
        pids.append(process.pid)
        summaries.append(job_row(env, job))
    runs = env.runs(job)
    assert [(r["outcome"], r["exit_code"], r["signal"], r["error"]) for r in runs] == [
        ("failed", 3, None, None), ("succeeded", 0, None, None), ("failed", 4, None, None)]
    assert [r["command"] for r in runs] == ["sh", "true", "sh"]
    assert [r["holder_pid"] for r in runs] == pids
    for row in runs:
        assert row["job"] == job
        assert row["mode"] == "lease"
        assert row["holder"] == socket.gethostname()
        assert row["slot"] is None
        assert row["duration"] is not None
        assert row["finished_at"] >= row["started_at"]
        assert row["finished_at"] == row["started_at"] + row["duration"]
    assert runs[0]["finished_at"] <= runs[1]["started_at"]
    assert runs[1]["finished_at"] <= runs[2]["started_at"]

    first, second, third = summaries
    assert (first["last_outcome"], first["last_exit_code"], first["last_success_at"]) == (
        "failed", 3, None)
    assert counts(first) == {"failed": 1}
    assert (second["last_outcome"], second["last_exit_code"]) == ("succeeded", 0)
    assert second["last_success_at"] == runs[1]["finished_at"]
    assert counts(second) == {"failed": 1, "succeeded": 1}
    assert (third["last_outcome"], third["last_exit_code"]) == ("failed", 4)
    assert third["last_success_at"] == runs[1]["finished_at"]
    assert counts(third) == {"failed": 2, "succeeded": 1}
    assert third["last_run_id"] == third["last_finished_run_id"] == runs[2]["id"]
    assert third["last_finished_at"] == runs[2]["finished_at"]
    assert third["last_duration"] == runs[2]["duration"]
    assert third["last_started_at"] == runs[2]["started_at"]
    assert third["last_holder"] == socket.gethostname()
    assert third["mode"] == "lease"


# 4. Output discipline ---------------------------------------------------------------------


def test_success_prints_exactly_the_commands_output(env: Env) -> None:
    result = env.run("run", "--job", "out", "--", "sh", "-c",
                     "echo first; printf 'no newline'; echo to-stderr >&2")
    assert result.returncode == 0
    assert result.stdout == "first\nno newline"
    assert result.stderr == "to-stderr\n"
    quiet = env.run("run", "--job", "out", "--rerun", "--", "echo", "hello")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "hello\n", "")


def test_skipped_run_prints_nothing_and_exits_75_or_the_conflict_code(env: Env) -> None:
    with holding(env, "busy", "--holder", "holder", command=["sleep", "60"]) as holder:
        skipped = env.run("run", "--job", "busy", "--", "echo", "must-not-run")
        assert (skipped.returncode, skipped.stdout, skipped.stderr) == (75, "", "")
        custom = env.run("run", "--job", "busy", "--conflict-exit-code", "3", "--",
                         "echo", "must-not-run")
        assert (custom.returncode, custom.stdout, custom.stderr) == (3, "", "")
        assert holder.poll() is None
        # Skipped attempts are not recorded.
        assert [r["outcome"] for r in env.runs("busy")] == ["running"]
        assert run_count(env) == 1


# 5. --wait --------------------------------------------------------------------------------


@pytest.mark.slow  # waits for a 2 s holder
def test_wait_runs_after_the_holder_finishes(env: Env) -> None:
    with holding(env, "queue", "--holder", "holder", command=["sleep", "2"]) as holder:
        waiter = env.run("run", "--job", "queue", "--wait", "20s", "--holder", "waiter", "--",
                         "echo", "second")
        assert (waiter.returncode, waiter.stdout, waiter.stderr) == (0, "second\n", "")
        assert holder.wait(timeout=30) == 0
    first, second = env.runs("queue")
    assert (first["holder"], first["outcome"]) == ("holder", "succeeded")
    assert (second["holder"], second["outcome"]) == ("waiter", "succeeded")
    assert second["started_at"] >= first["finished_at"]
    assert (first["fencing_token"], second["fencing_token"]) == (1, 2)


@pytest.mark.slow  # waits out --wait
def test_wait_gives_up_with_75_while_the_holder_still_runs(env: Env) -> None:
    with holding(env, "long", "--holder", "holder", command=["sleep", "60"]) as holder:
        waiter = env.run("run", "--job", "long", "--wait", "1s", "--holder", "waiter", "--",
                         "echo", "must-not-run")
        assert (waiter.returncode, waiter.stdout, waiter.stderr) == (75, "", "")
        assert holder.poll() is None
        assert [r["holder"] for r in env.runs("long")] == ["holder"]


# 6. A signal while waiting ----------------------------------------------------------------


@pytest.mark.slow  # a signal to a waiting contender
def test_sigterm_while_waiting_exits_143_silently_and_records_nothing(env: Env) -> None:
    with holding(env, "term", "--holder", "holder", command=["sleep", "60"]) as holder:
        waiter = env.popen("run", "--job", "term", "--wait", "60s", "--holder", "waiter", "--",
                           "echo", "must-not-run")
        try:
            env.wait_for(lambda: waiter.poll() is not None
                         or application_connected(env, "term", "waiter"),
                         timeout=60, what="the waiter to connect")
            assert waiter.poll() is None, waiter.communicate()
            waiter.send_signal(signal.SIGTERM)
            stdout, stderr = waiter.communicate(timeout=20)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.communicate()
        assert (waiter.returncode, stdout, stderr) == (143, "", "")
        assert holder.poll() is None
        assert [r["holder"] for r in env.runs("term")] == ["holder"]
        assert not application_connected(env, "term", "waiter")


# 7. Bad input -----------------------------------------------------------------------------

# Every message and exit code of bad input is pinned in-process (tests/unit/test_cli.py);
# through the binary, one case per stage that refuses it, each leaving no trace.
BAD_INPUT = [
    pytest.param(["--", "true"], "job", id="no-job"),
    pytest.param(["--job", "a\nb", "--", "true"], "control", id="job-newline"),
    pytest.param(["--job", "x", "--"], "command", id="no-command"),
    pytest.param(["--job", "x", "--bogus", "--", "true"], "--bogus", id="unknown-option"),
    pytest.param(["--job", "x", "--ttl", "5x", "--", "true"], "--ttl", id="ttl-5x"),
    pytest.param(["--job", "x", "--ttl", "2s", "--", "true"], "--ttl", id="ttl-too-short"),
]


@pytest.mark.parametrize(("args", "mentions"), BAD_INPUT)
def test_bad_input_is_a_usage_error(env: Env, args: list[str], mentions: str) -> None:
    result = env.run("run", *args)
    assert result.returncode == 2, result
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert mentions in line
    assert run_count(env) == 0


@pytest.mark.parametrize("bad_dsn", [
    pytest.param("host=x password=supersecret foo", id="keywords"),
    # libpq quotes the whole URI in its message: "... in URI: \"postgresql://u:...\"".
    pytest.param("postgresql://u:supersecret@[::1", id="uri"),
])
def test_dsn_that_does_not_parse_exits_125_without_the_password(env: Env, bad_dsn: str) -> None:
    # (not named `dsn`: that is the fixture naming the test server)
    result = env.run("run", "--job", "x", "--dsn", bad_dsn, "--", "true")
    assert result.returncode == 125, result
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert "DSN" in line
    assert "supersecret" not in result.stdout + result.stderr
    assert run_count(env) == 0


@pytest.mark.slow  # waits out --connect-timeout
def test_server_down_exits_125_without_the_password(env: Env) -> None:
    result = env.run("run", "--job", "x", "--dsn", "host=127.0.0.1 port=1 user=x password=hunter2",
                     "--connect-timeout", "1", "--", "echo", "must-not-run")
    assert result.returncode == 125, result
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert "connect" in line
    assert "127.0.0.1" in line
    assert "hunter2" not in result.stdout + result.stderr
    assert run_count(env) == 0


# 8. Job names are data --------------------------------------------------------------------


@pytest.mark.parametrize("job", [
    pytest.param("it's \"quoted\" `x` $HOME \\n", id="quotes"),
    pytest.param("x'; DROP TABLE runs; --", id="sql"),
    pytest.param("x\"; DROP TABLE runs; --", id="sql-identifier"),
    pytest.param("sync-ü-日本", id="unicode"),
    pytest.param("j" * 200, id="200-chars"),
    pytest.param("ü" * 199 + "日", id="200-multibyte-chars"),
    pytest.param("%s %(job)s {schema}", id="placeholders"),
])
def test_job_names_are_data(env: Env, job: str) -> None:
    result = env.run("run", "--job", job, "--", "sh", "-c", 'printf %s "$PGLOCK_JOB"')
    assert (result.returncode, result.stdout, result.stderr) == (0, job, "")
    [row] = env.runs(job)
    assert (row["job"], row["outcome"]) == (job, "succeeded")
    assert env.query("SELECT job FROM {schema}.jobs") == [(job,)]
    assert env.query("SELECT job FROM {schema}.locks") == [(job,)]
    assert counts(job_row(env, job)) == {"succeeded": 1}
    assert table_exists(env, "runs")


# 9. --version and init --------------------------------------------------------------------


def test_version(env: Env) -> None:
    result = env.run("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, "pglock 0.1.0\n", "")


def test_init_print_sql_prints_the_ddl_and_applies_nothing(env: Env) -> None:
    result = env.run("init", "--print-sql")
    assert (result.returncode, result.stderr) == (0, "")
    quoted = f'"{env.schema}"'
    for table in ("locks", "runs", "jobs", "meta"):
        assert f"CREATE TABLE {quoted}.{table} (" in result.stdout
    assert f"CREATE SCHEMA IF NOT EXISTS {quoted}" in result.stdout
    assert not table_exists(env, "locks")
    # A DBA applies it by hand; pglock then runs on it as it is.
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(result.stdout.encode())
    assert table_exists(env, "locks")
    run = env.run("run", "--job", "by-hand", "--", "true")
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    assert [r["outcome"] for r in env.runs("by-hand")] == ["succeeded"]


def test_init_creates_the_schema_and_is_repeatable(env: Env) -> None:
    assert not table_exists(env, "locks")
    first = env.run("init")
    assert (first.returncode, first.stderr) == (0, ""), first
    assert env.schema in first.stdout
    for table in ("locks", "runs", "jobs", "meta"):
        assert table_exists(env, table), table
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [
        (str(schema.VERSION),)]
    second = env.run("init")
    assert (second.returncode, second.stderr) == (0, ""), second
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [
        (str(schema.VERSION),)]


# 10. A newer schema -----------------------------------------------------------------------


def test_newer_schema_version_is_refused(env: Env) -> None:
    first = env.run("run", "--job", "v", "--", "true")
    assert (first.returncode, first.stdout, first.stderr) == (0, "", "")
    env.query("UPDATE {schema}.meta SET value = '99' WHERE key = 'version'")
    result = env.run("run", "--job", "v", "--", "echo", "must-not-run")
    assert result.returncode == 125, result
    assert result.stdout == ""
    line = one_line(result.stderr)
    assert "version" in line
    assert "99" in line
    assert [r["outcome"] for r in env.runs("v")] == ["succeeded"]
