"""`pglock doctor` against real setups: a synchronous pair, a standby, an asynchronous
standby, a role short of privileges, a transaction-pooling PgBouncer, a skewed clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PGLOCK, Env, one_line
from db.test_pgbouncer import PGBOUNCER, bouncer, session_bouncer  # noqa: F401 (fixtures)
from replication import Pair

from operate.test_roles import roles  # noqa: F401 (a fixture)
from pglock.cli import app as cli
from pglock.db import schema

FAKETIME = shutil.which("faketime")


def doctor(env: Env, *args: str, env_vars: dict[str, str] | None = None,
           prefix: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
    """(exit status, {check: finding}) of `pglock doctor --json`."""
    if prefix:
        done = subprocess.run([*prefix, PGLOCK, "doctor", "--json", *args], capture_output=True,
                              text=True, env={**env.env, **(env_vars or {})}, timeout=60)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        result = env.run("doctor", "--json", *args, env=env_vars)
        code, stdout, stderr = result.returncode, result.stdout, result.stderr
    assert stderr == ""
    shown = json.loads(stdout)
    assert shown["status"] == ["ok", "warn", "fail"][code], shown
    return code, {c["check"]: c for c in shown["checks"]}


@pytest.fixture(scope="module")
def sync_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    pair = Pair(tmp_path_factory.mktemp("sync"), synchronous=True).start()
    yield pair
    pair.close()


@pytest.mark.slow
def test_a_healthy_setup_is_all_ok(env: Env, sync_pair: Pair) -> None:
    env.env["PGLOCK_DSN"] = sync_pair.both_dsn
    assert env.run("init", "-q").returncode == 0
    result = env.run("doctor")
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["OK"] * len(lines)
    assert [line.split()[1] for line in lines] == [
        "database", "password", "server", "engine", "platform", "schema", "census",
        "terminate", "evict", "timeouts", "commit", "connections", "pooling", "replication",
        "clock", "candidates"]
    assert "1 standby(s), 1 synchronous" in result.stdout


@pytest.mark.slow
def test_a_standby_fails(env: Env, sync_pair: Pair) -> None:
    code, found = doctor(env, "--dsn", sync_pair.standby_dsn)
    assert code == 2
    assert found["connection"]["status"] == "fail"
    assert "standby" in found["connection"]["detail"]
    assert found["connection"]["advice"]


@pytest.mark.slow
def test_an_asynchronous_standby_warns(env: Env, tmp_path: Path) -> None:
    pair = Pair(tmp_path, synchronous=False).start()
    try:
        code, found = doctor(env, "--dsn", pair.primary_dsn)
    finally:
        pair.close()
    assert code == 1
    assert found["replication"]["status"] == "warn"
    assert "none synchronous" in found["replication"]["detail"]
    assert "synchronous_mode_strict" in found["replication"]["advice"]


@pytest.fixture
def weak_role(env: Env) -> Iterator[str]:
    """A login role with no privilege on pglock's schema; its DSN."""
    role = f"doctor_{os.getpid()}"
    env.query(f'CREATE ROLE "{role}" LOGIN')
    yield f"{env.dsn} user={role}"
    env.query(f'DROP OWNED BY "{role}"')
    env.query(f'DROP ROLE "{role}"')


def test_a_role_short_of_privileges_is_told_what_to_grant(env: Env, weak_role: str) -> None:
    role = weak_role.split("user=")[-1]
    # No schema, and no right to create one.
    code, found = doctor(env, "--dsn", weak_role)
    assert code == 2
    assert found["schema"]["status"] == "fail"
    assert "init --print-sql" in found["schema"]["advice"]
    assert found["terminate"]["status"] == "warn"

    assert env.run("init", "-q").returncode == 0
    env.query(f'GRANT USAGE ON SCHEMA {{schema}} TO "{role}"')
    env.query(f'GRANT SELECT ON ALL TABLES IN SCHEMA {{schema}} TO "{role}"')
    # Judged by what it can do (a reader host), its reading is enough; a host meant to
    # run jobs says so (--purpose runner) and is told what it lacks.
    _, found = doctor(env, "--dsn", weak_role)
    assert found["schema"]["status"] == "ok", found["schema"]
    assert "cannot run jobs" in found["schema"]["detail"]
    assert "judged as a reader host" in found["schema"]["detail"]
    code, found = doctor(env, "--dsn", weak_role, "--purpose", "runner")
    assert (code, found["schema"]["status"]) == (2, "fail"), found["schema"]
    assert "a runner host needs to run jobs" in found["schema"]["detail"]
    assert "--print-grants --runner-role" in found["schema"]["advice"]
    refused = env.run("run", "--job", "weak", "--dsn", weak_role, "--", "true")
    assert refused.returncode == 125, refused
    assert "needs the pglock_runner role" in refused.stderr

    # What doctor advises is enough for a run.
    granted = env.run("init", "--print-grants", "--runner-role", role)
    assert granted.returncode == 0, granted
    env.query(granted.stdout.replace("{", "{{").replace("}", "}}"))
    code, found = doctor(env, "--dsn", weak_role)
    assert found["schema"]["status"] == "ok", found["schema"]
    ran = env.run("run", "--job", "weak", "--dsn", weak_role, "--", "true")
    assert (ran.returncode, ran.stderr) == (0, "")
    assert [r["outcome"] for r in env.runs("weak")] == ["succeeded"]

    env.query(f'GRANT pg_signal_backend TO "{role}"')
    code, found = doctor(env, "--dsn", weak_role)
    assert found["terminate"]["status"] == "ok"


def test_an_owner_that_cannot_end_a_stopped_holders_session_is_warned(
        env: Env, weak_role: str) -> None:
    """acquire ends the session of an advisory holder stopped past its horizon as the
    schema's owner: an owner without pg_signal_backend leaves such a job skipped by every
    host until the holder wakes."""
    role = weak_role.split("user=")[-1]
    assert env.run("init", "-q").returncode == 0
    assert doctor(env)[1]["evict"]["status"] == "ok"
    env.query(f'ALTER SCHEMA {{schema}} OWNER TO "{role}"')
    try:
        _, found = doctor(env)
    finally:
        env.query("ALTER SCHEMA {schema} OWNER TO CURRENT_USER")
    assert found["evict"]["status"] == "warn", found["evict"]
    assert role in found["evict"]["detail"] and "pg_signal_backend" in found["evict"]["advice"]


def test_a_runner_or_reader_host_set_up_as_documented_exits_0(
        env: Env, roles: dict[str, str]) -> None:  # noqa: F811 (the fixture)
    """doctor can gate configuration management: what a runner or reader never needs
    (pg_signal_backend, the operator's privileges, a standby) is no WARN for it."""
    for kind in ("runner", "reader"):
        code, found = doctor(env, "--dsn", roles[kind])
        assert code == 0, (kind, [f for f in found.values() if f["status"] != "ok"])
        assert f"judged as a {kind} host" in found["schema"]["detail"]
        assert "does not need" in found["terminate"]["detail"]
        assert doctor(env, "--dsn", roles[kind], "--purpose", kind)[0] == 0
    # The operator's host is told about what its clear --terminate cannot do.
    code, found = doctor(env, "--dsn", roles["operator"])
    assert (code, found["terminate"]["status"]) == (1, "warn"), found
    # A reader host asked to be a runner's fails: it cannot run jobs.
    assert doctor(env, "--dsn", roles["reader"], "--purpose", "runner")[0] == 2
    bad = env.run("doctor", "--purpose", "cook")
    assert (bad.returncode, one_line(bad.stderr)) == (
        2, "pglock: --purpose: 'cook' is not one of runner, reader, operator")


def test_role_timeouts_that_cut_sessions_warn(env: Env, weak_role: str) -> None:
    role = weak_role.split("user=")[-1]
    env.query(f"ALTER ROLE \"{role}\" SET idle_session_timeout = '5min'")
    env.query(f"ALTER ROLE \"{role}\" SET statement_timeout = '2s'")
    _, found = doctor(env, "--dsn", weak_role)
    assert found["timeouts"]["status"] == "warn"
    assert "idle_session_timeout" in found["timeouts"]["detail"]
    assert "statement_timeout 2000ms" in found["timeouts"]["detail"]


@pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed")
def test_transaction_pooling_warns_for_advisory_mode(env: Env, bouncer: str) -> None:  # noqa: F811
    _, found = doctor(env, "--dsn", bouncer)
    assert found["pooling"]["status"] == "warn"
    assert "advisory" in found["pooling"]["detail"]
    _, direct = doctor(env)
    assert direct["pooling"]["status"] == "ok"


@pytest.mark.slow
@pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed")
def test_doctor_names_the_pooler_in_both_pgbouncer_modes(
        env: Env, bouncer: str, session_bouncer: str) -> None:  # noqa: F811
    """Issue 38: the pooler is seen as one connection's server session changing between
    two transactions (transaction pooling); session pooling changes nothing for pglock."""
    _, pooled = doctor(env, "--dsn", bouncer)
    assert pooled["pooling"]["status"] == "warn"
    assert pooled["pooling"]["detail"].startswith(
        "a transaction- or statement-pooling proxy (PgBouncer, pgcat, PgDog, ...) is in the "
        "path (one connection's server session changed between two transactions)")
    _, session = doctor(env, "--dsn", session_bouncer)
    assert session["pooling"] == {
        "check": "pooling", "status": "ok",
        "detail": "each connection keeps its own server session", "advice": None}
    # The test server is PostgreSQL of its own: no vendor's roles or settings.
    for found in (pooled, session):
        assert found["platform"]["status"] == "ok"
        assert found["platform"]["detail"].startswith("no managed service recognised")
        assert "failover" not in found


@pytest.mark.skipif(FAKETIME is None, reason="faketime is not installed (.ci/run installs it)")
def test_a_skewed_host_clock_warns(env: Env) -> None:
    _, found = doctor(env)
    assert found["clock"]["status"] == "ok"
    assert FAKETIME is not None
    _, skewed = doctor(env, prefix=(FAKETIME, "-f", "+30s"),
                       env_vars={"FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    assert skewed["clock"]["status"] == "warn"
    assert "ahead of the server's" in skewed["clock"]["detail"]


def test_candidates_rosters_and_clock_are_checked(env: Env, tmp_path: Path) -> None:
    """--candidates (docs/fleet.md): a state directory that cannot be written warns (the
    host would contend at every trigger); a clock further from the database's than the
    shortest --candidate-step in use warns, naming it."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    home = {"XDG_DATA_HOME": str(tmp_path / "state")}
    _, found = doctor(env, env_vars=home)
    assert found["candidates"]["status"] == "ok"
    assert str(tmp_path / "state" / "pglock" / "candidates") in found["candidates"]["detail"]
    _, found = doctor(env, env_vars={"XDG_DATA_HOME": str(blocked)})
    assert found["candidates"]["status"] == "warn"
    assert "cannot be written" in found["candidates"]["detail"]
    if FAKETIME is None:
        return
    done = env.run("run", "--job", "gated", "--candidates", "2", "--candidate-step", "5s",
                   "--", "true", env=home)
    assert done.returncode == 0, done
    _, skewed = doctor(env, prefix=(FAKETIME, "-f", "+30s"),
                       env_vars={"FAKETIME_DONT_FAKE_MONOTONIC": "1", **home})
    assert skewed["clock"]["status"] == "warn"
    assert "more than --candidate-step (5s)" in skewed["clock"]["detail"]


def test_an_unreachable_server_fails_in_one_line(env: Env, tmp_path: Path) -> None:
    code, found = doctor(env, "--dsn", f"host={tmp_path} port=1 dbname=x",
                         "--connect-timeout", "1s")
    assert code == 2
    assert found["connection"]["status"] == "fail"


def test_an_unparseable_dsn_is_a_failed_check(env: Env) -> None:
    code, found = doctor(env, "--dsn", "host='unterminated")
    assert code == 2
    assert found["database"]["status"] == "fail"


def test_bad_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--connect-timeout", "soon"]) == 2
    assert "--connect-timeout" in one_line(capsys.readouterr().err)


def test_a_platforms_role_names_it_and_its_failover_is_held_against_the_ttl(
        env: Env) -> None:
    """Issue 38, end to end: a server with RDS's rds_superuser role (made here: the test
    server is this session's own) is named RDS, and the default ttl is told it does not
    ride out an RDS Multi-AZ failover."""
    env.query("CREATE ROLE rds_superuser NOLOGIN")
    try:
        _, found = doctor(env, env_vars={"PGLOCK_TTL": ""})
    finally:
        env.query("DROP ROLE rds_superuser")
    assert found["platform"]["detail"].startswith(
        "Amazon RDS for PostgreSQL (the rds_superuser role); failovers take up to 120 s")
    assert found["failover"]["status"] == "warn"
    assert "at the ttl of the default (1m)" in found["failover"]["detail"]
    assert found["failover"]["advice"].startswith("a ttl of at least 235s ")


@pytest.mark.parametrize(("body", "shown"), [
    ("SELECT E'1\\x1b[31mred\\nline2'", "aurora_version() = 1^[[31mred^Jline2"),
    ("SELECT repeat('x', 1000000)", "aurora_version() = " + "x" * 60 + "..."),
    ("SELECT NULL::text", "aurora_version() = NULL"),
    ("SELECT '16.4.2'", "aurora_version() = 16.4.2"),
])
def test_aurora_versions_answer_is_shown_escaped_and_cut(env: Env, body: str,
                                                         shown: str) -> None:
    """A function named aurora_version() may be anyone's and answer anything: one short
    printable line in doctor's finding (issue 46, D14). It is found through the session's
    search_path, so only this test's doctor sees it."""
    fake = env.schema + "_aurora"
    env.query(f'CREATE SCHEMA "{fake}"')
    try:
        env.query(f'CREATE FUNCTION "{fake}".aurora_version() RETURNS text '
                  f"LANGUAGE sql AS $$ {body} $$")
        dsn = env.dsn + f" options='-c search_path={fake}'"
        _, found = doctor(env, "--dsn", dsn)
        assert found["platform"]["detail"].startswith(
            f"Amazon Aurora PostgreSQL ({shown}); failovers take up to "), found["platform"]
    finally:
        env.query(f'DROP SCHEMA "{fake}" CASCADE')


@pytest.mark.slow
def test_aurora_version_is_bounded_by_the_connect_timeout(env: Env) -> None:
    """A function that does not answer held doctor as long as it took, whatever
    --connect-timeout said (D14)."""
    fake = env.schema + "_slow"
    env.query(f'CREATE SCHEMA "{fake}"')
    try:
        env.query(f'CREATE FUNCTION "{fake}".aurora_version() RETURNS text '
                  "LANGUAGE sql AS $$ SELECT pg_sleep(30)::text $$")
        dsn = env.dsn + f" options='-c search_path={fake}'"
        started = time.monotonic()
        _, found = doctor(env, "--dsn", dsn, "--connect-timeout", "2s")
        took = time.monotonic() - started
        assert found["platform"]["detail"].startswith(
            "Amazon Aurora PostgreSQL (aurora_version() = (no answer within 2s));")
        assert took < 20, took
    finally:
        env.query(f'DROP SCHEMA "{fake}" CASCADE')


def test_a_schema_made_empty_for_pglock_is_ok_one_of_another_application_fails(
        env: Env) -> None:
    """As run now reads them (issue 46, D22): an empty schema is one the first run fills;
    one holding someone else's tables and no version record is refused by every command,
    and doctor names its tables (it said "holds no pglock tables" of both)."""
    env.query("CREATE SCHEMA {schema}")
    _, found = doctor(env)
    assert (found["schema"]["status"], found["schema"]["detail"]) == (
        "ok", f"schema {env.schema!r} is empty; the first run creates pglock's tables in it "
              f"(version {schema.VERSION})")
    env.query("CREATE TABLE {schema}.locks (id int)")
    code, found = doctor(env)
    assert code == 2
    assert found["schema"]["detail"] == (
        f"schema {env.schema!r} holds tables that are not pglock's (locks), which every "
        "pglock command refuses")
