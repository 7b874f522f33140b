"""Schema versions: a database of every earlier version is upgraded in place, its data kept
and its running holders unharmed; a new database and an upgraded one are the same.

A database of an earlier version is built from that version's DDL as it was released
(schemas/vN.sql, frozen), not from today's files: today's migrations no longer create the
functions of their version (sql/functions.sql holds the current ones)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Env
from psycopg import sql

from pglock.db import schema
from pglock.lock import lease, ledger

COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable, column_default
FROM information_schema.columns WHERE table_schema = %s ORDER BY 1, 2
"""
CONSTRAINTS = """
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = %s::regnamespace ORDER BY 1, 2
"""
INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1"
FUNCTIONS = """
SELECT proname, pg_get_function_identity_arguments(oid), pg_get_functiondef(oid), proacl
FROM pg_proc WHERE pronamespace = %s::regnamespace ORDER BY 1, 2
"""
# Relations (tables, indexes, sequences) and their privileges, and their columns'.
RELATIONS = """
SELECT c.relname, c.relkind, c.relacl::text, c.reloptions,
       array_agg(a.attname || ' ' || coalesce(a.attacl::text, '') ORDER BY a.attname)
FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                          AND NOT a.attisdropped
WHERE c.relnamespace = %s::regnamespace GROUP BY 1, 2, 3, 4 ORDER BY 1
"""

# The DDL of each earlier version as released, frozen: vN.sql upgraded N-1 to N.
RELEASED = Path(__file__).with_name("schemas")


def as_released(name: str, version: int) -> sql.Composed:
    """The DDL with which pglock of `version` created a new schema."""
    return sql.Composed([schema.query((RELEASED / f"v{n}.sql").read_text(), name)
                         for n in range(1, version + 1)])


# What a pglock of version 3 sends to renew and release its lock: a holder that started
# before the upgrade goes on with these, straight on the tables, as the owner's role.
V3_RENEW = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true))
UPDATE {schema}.locks
SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + ttl
FROM durable
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
RETURNING expires_at
"""
V3_RELEASE = """
UPDATE {schema}.locks SET expires_at = clock_timestamp(), released_at = clock_timestamp()
WHERE job = %(job)s AND holder_id = %(holder_id)s AND fencing_token = %(fencing_token)s
  AND cleared_at IS NULL
RETURNING released_at
"""


def shape(env: Env, name: str) -> list[Any]:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        found: list[Any] = []
        for text in (COLUMNS, CONSTRAINTS, INDEXES, FUNCTIONS, RELATIONS):
            rows = conn.execute(text, (name,)).fetchall()
            # Index and constraint text names the schema; compare them without it.
            found += [tuple(str(v).replace(f'"{name}".', "").replace(f"{name}.", "")
                            for v in row) for row in rows]
        return found


def test_version_is_the_newest_migration() -> None:
    folder = resources.files("pglock.db").joinpath("sql/migrations")
    numbers = sorted(int(f.name.split("_")[0]) for f in folder.iterdir()
                     if f.name.endswith(".sql"))
    assert numbers == list(range(2, schema.VERSION + 1))
    for number, text in schema.migrations():
        assert re.search(rf"SET value = '{number}' WHERE key = 'version'", text), number


def test_functions_are_written_once() -> None:
    """Migrations change tables (and drop a function whose signature changes): every
    function is created in sql/functions.sql, once, and no migration sets its body. (An
    overload, such as start_run's of version 8 kept for the pglocks running through an
    upgrade, is a function of its own: its argument types differ.)"""
    folder = resources.files("pglock.db").joinpath("sql")
    tables = [folder.joinpath("schema.sql").read_text()] + [text for _, text in
                                                             schema.migrations()]
    assert not any(re.search(r"CREATE (OR REPLACE )?FUNCTION", text) for text in tables)
    found = re.findall(r"CREATE OR REPLACE FUNCTION \{schema\}\.(\w+)\(([^)]*)\)",
                       folder.joinpath("functions.sql").read_text())
    signatures = [(name, tuple(p.split()[1] for p in params.split(",") if p.strip()))
                  for name, params in found]
    assert len(signatures) == len(set(signatures)), signatures


def test_every_earlier_version_is_frozen_as_released() -> None:
    """Upgrades are tested from what exists in the field: when version N comes, the DDL of
    N-1 as released joins schemas/ (a copy from git, never edited)."""
    frozen = sorted(int(f.stem[1:]) for f in RELEASED.glob("v*.sql"))
    assert frozen[:schema.VERSION - 1] == list(range(1, schema.VERSION))
    assert frozen == list(range(1, len(frozen) + 1))


@pytest.mark.parametrize("old", range(1, schema.VERSION))
def test_every_earlier_version_upgrades_in_place(env: Env, old: int) -> None:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, old))
        conn.execute(sql.SQL(
            "INSERT INTO {}.runs (job, mode, holder, holder_pid, command, started_at, outcome) "
            "VALUES ('kept', 'lease', 'h', 1, 'true', now(), 'succeeded')").format(
                sql.Identifier(env.schema)))
        claim = lease.Claim(job="held", schema=env.schema, ttl=60)
        row = conn.execute(schema.query(
            "INSERT INTO {schema}.locks (job, mode, holder, holder_pid, holder_id, fencing_token,"
            " ttl, acquired_at, renewed_at, expires_at) VALUES (%(job)s, 'lease', %(holder)s, "
            "%(holder_pid)s, %(holder_id)s, 7, %(ttl)s, now(), now(), now() + %(ttl)s) "
            "RETURNING fencing_token", env.schema), claim.params()).fetchone()
        assert row is not None
        claim.fencing_token = row[0]
    # The first pglock of the new version upgrades the schema in place.
    result = env.run("run", "--job", "after", "--", "true")
    assert (result.returncode, result.stderr) == (0, ""), result
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [
        (str(schema.VERSION),)]
    assert env.query("SELECT job, outcome FROM {schema}.runs ORDER BY id") == [
        ("kept", "succeeded"), ("after", "succeeded")]
    # The holder from before the upgrade still renews and releases its lock, with its own
    # statements; and the functions know its row too.
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        renewed = conn.execute(schema.query(V3_RENEW, env.schema), claim.params()).fetchone()
        assert renewed is not None
        assert lease.renew(conn, claim)[0] is lease.Renewal.OURS
        released = conn.execute(schema.query(V3_RELEASE, env.schema), claim.params())
        assert released.fetchone() is not None
    contender = env.run("run", "--job", "held", "--", "true")
    assert contender.returncode == 0, contender
    assert env.query("SELECT fencing_token FROM {schema}.locks WHERE job = 'held'") == [(8,)]


@pytest.fixture
def fresh(env: Env) -> Iterator[str]:
    """A second schema beside the test's, created new by this pglock."""
    name = env.schema + "_new"
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(schema.ddl(name))
    yield name
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.parametrize("old", range(1, schema.VERSION))
def test_an_upgraded_schema_is_a_new_one(env: Env, fresh: str, old: int) -> None:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, old))
        schema.ensure(conn, env.schema)
    assert_same(env, env.schema, fresh)


def test_a_new_schema_is_the_released_one(env: Env, fresh: str) -> None:
    """A new schema of a version that was released is the one its release created, to each
    function's body and grant: the files may be reorganised, a released version not
    changed (a change to a function is a new version)."""
    if not (RELEASED / f"v{schema.VERSION}.sql").exists():
        pytest.skip(f"version {schema.VERSION} is not frozen yet (not released)")
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, schema.VERSION))
    assert_same(env, env.schema, fresh)


def assert_same(env: Env, name: str, fresh: str) -> None:
    found, new = shape(env, name), shape(env, fresh)
    assert found == [tuple(str(v).replace(fresh, name) for v in r) for r in new]


def test_reports_upgrade_an_older_schema(env: Env) -> None:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 1))
    result = env.run("status", "--json")
    assert (result.returncode, result.stderr) == (0, ""), result
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [
        (str(schema.VERSION),)]


def test_a_version_2_database_with_scheduled_runs_upgrades(env: Env) -> None:
    """Slots that ran before version 3 are done (one run each); attempts start at 1 after."""
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 2))
        conn.execute(schema.query(
            "INSERT INTO {schema}.runs (job, slot, mode, holder, holder_pid, command, "
            "started_at, outcome) VALUES "
            "('yearly', date_trunc('year', now()), 'lease', 'h', 1, 'true', now(), 'failed'), "
            "('yearly', date_trunc('year', now()) - interval '1 year', 'lease', 'h', 1, 'true',"
            " now(), 'succeeded')", env.schema))
    args = ("run", "--job", "yearly", "--schedule", "0 0 1 1 *", "--tz", "UTC",
            "--retries", "2")
    # This year's slot had its one run before the upgrade: done, whatever --retries says.
    skipped = env.run(*args, "--", "true")
    assert (skipped.returncode, skipped.stderr) == (75, ""), skipped
    assert env.query("SELECT slot = date_trunc('year', now()), attempts, attempt_limit, "
                     "succeeded_run_id IS NOT NULL FROM {schema}.slots ORDER BY slot") == [
        (False, 1, 1, True), (True, 1, 1, False)]
    assert env.query("SELECT attempt, manual FROM {schema}.runs ORDER BY id") == [
        (None, False), (None, False)]
    # An older pglock still running through the upgrade writes runs without an attempt
    # number: one per slot still holds for them.
    with psycopg.connect(env.dsn, autocommit=True) as conn, pytest.raises(
            psycopg.errors.UniqueViolation):
        conn.execute(schema.query(
            "INSERT INTO {schema}.runs (job, slot, mode, holder, holder_pid, command, "
            "started_at, outcome) VALUES "
            "('yearly', date_trunc('year', now()), 'lease', 'h', 1, 'true', now(), 'running')",
            env.schema))


# What a pglock of version 4 sends to take a lock and record its run (acquire had no limit).
V4_ACQUIRE = """
SELECT token, run_id FROM {schema}.acquire(
    4, %(job)s, 'lease', %(holder)s, %(holder_pid)s, %(holder_id)s, %(ttl)s, NULL, NULL,
    false, 'true', NULL, NULL, NULL, NULL, 0, 1)
"""


# What a pglock of versions 4 and 5 sends to end a run (version 6 adds p_expected, last and
# with a default, so this still resolves).
V5_FINISH = """
SELECT * FROM {schema}.finish(
    %(run_id)s, %(job)s, %(holder_id)s, %(fencing_token)s, %(min_hold)s, %(keep)s,
    %(duration)s, %(exit_code)s, %(signal)s, %(outcome)s, %(error)s, %(output_tail)b,
    %(closes)s, %(hopeless)s, %(error_line)s, %(lost_error)s, %(lost_error_line)s)
"""


def test_a_run_started_under_version_4_ends_after_the_seats_came(env: Env) -> None:
    """Version 5 adds the seats and a limit to acquire: a holder that took its lock and
    started its run through version 4's functions still ends it (finish keeps its
    signature), and a semaphore of the same name waits for it."""
    claim = lease.Claim(job="old", schema=env.schema, ttl=60)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 4))
        row = conn.execute(schema.query(V4_ACQUIRE, env.schema), claim.params()).fetchone()
        assert row is not None
        claim.fencing_token, run_id = row
    beside = env.run("run", "--job", "old", "--limit", "2", "--", "true")
    assert (beside.returncode, beside.stderr) == (75, ""), beside
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [
        (str(schema.VERSION),)]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        ended = conn.execute(schema.query(V5_FINISH, env.schema), claim.params(
            run_id=run_id, min_hold=None, keep=False, duration=None, exit_code=0, signal=None,
            outcome="succeeded", error=None, output_tail=None, closes=False, hopeless=False,
            error_line=None, lost_error=None, lost_error_line=None)).fetchone()
        assert ended is not None and ended[:3] == (True, False, True)
    after = env.run("run", "--job", "old", "--limit", "2", "--",
                    "sh", "-c", 'echo "$PGLOCK_SEAT $PGLOCK_FENCING_TOKEN"')
    assert (after.returncode, after.stdout) == (0, "1 1\n"), after
    assert [(r["seat"], r["outcome"]) for r in env.runs("old")] == [
        (None, "succeeded"), (1, "succeeded")]


def histogram(env: Env, job: str) -> dict[str, float]:
    """The job's pglock_job_duration_seconds samples, by `le` (and `sum`, `count`)."""
    result = env.run("metrics", "--job", job)
    assert (result.returncode, result.stderr) == (0, ""), result
    found: dict[str, float] = {}
    for line in result.stdout.splitlines():
        matched = re.match(r'pglock_job_duration_seconds_(\w+)\{job="[^"]*"(?:,le="([^"]+)")?\}'
                           r" (\S+)$", line)
        if matched:
            kind, le, value = matched.groups()
            found[le if kind == "bucket" else kind] = float(value)
    return found


def test_version_6_fills_the_duration_histograms_from_the_history(env: Env) -> None:
    """The histogram's counters start from the runs a version 5 database keeps: each run
    whose end was recorded, in the buckets at or above its duration (a run of exactly a
    bound is in that bound's bucket); abandoned, running and cleared rows are not counted.
    Runs that end after the upgrade add to them."""
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 5))
        conn.execute(schema.query(
            "INSERT INTO {schema}.jobs (job, mode) VALUES ('timed', 'lease'), "
            "('other', 'lease')", env.schema))
        conn.execute(schema.query(
            "INSERT INTO {schema}.runs (job, mode, holder, holder_pid, command, started_at,"
            " duration, outcome) SELECT job, 'lease', 'h', 1, 'true', now(), took, outcome"
            " FROM (VALUES ('timed', interval '0.5 s', 'succeeded'),"
            " ('timed', interval '0.500001 s', 'failed'), ('timed', interval '1 s', 'killed'),"
            " ('timed', interval '1 day', 'succeeded'),"
            " ('timed', interval '25 hours', 'timed_out'),"
            " ('timed', interval '2 s', 'abandoned'), ('timed', NULL, 'running'),"
            " ('timed', NULL, 'cleared'), ('other', interval '10 s', 'succeeded'))"
            " AS v(job, took, outcome)", env.schema))
    result = env.run("run", "--job", "after", "--", "true")  # upgrades it
    assert (result.returncode, result.stderr) == (0, ""), result
    found = histogram(env, "timed")
    assert (found["0.5"], found["1.0"], found["2.5"], found["28800.0"]) == (1, 3, 3, 3)
    assert (found["86400.0"], found["+Inf"], found["count"]) == (4, 5, 5)
    assert found["sum"] == pytest.approx(0.5 + 0.500001 + 1 + 86400 + 90000)
    assert histogram(env, "other")["10.0"] == 1 and histogram(env, "other")["5.0"] == 0
    result = env.run("run", "--job", "timed", "--", "true")
    assert (result.returncode, result.stderr) == (0, ""), result
    after = histogram(env, "timed")
    assert (after["0.5"], after["86400.0"], after["count"]) == (2, 5, 6)


def test_the_histogram_bounds_rise_from_a_second_to_a_day(env: Env) -> None:
    """The bounds of migration 006, as finish and metrics read them: each at most 3x the
    one below, so a quantile is never off by more than that."""
    assert env.run("init", "-q").returncode == 0
    [(bounds,)] = env.query(
        "SELECT value::float8[] FROM {schema}.meta WHERE key = 'duration_bounds'")
    assert bounds == sorted(set(bounds)) and bounds[0] <= 1 and bounds[-1] == 86400
    assert all(b / a <= 3 for a, b in itertools.pairwise(bounds))


def test_print_upgrade_prints_what_a_dba_applies_and_runs_nothing(env: Env, fresh: str) -> None:
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 4))
    printed = env.run("init", "--print-upgrade")
    assert (printed.returncode, printed.stderr) == (0, ""), printed
    assert printed.stdout.startswith("\nBEGIN;\n") and printed.stdout.endswith("COMMIT;\n")
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [("4",)]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(printed.stdout.encode())
    assert_same(env, env.schema, fresh)
    # The same script once more: its guard refuses it, and it changes nothing.
    with psycopg.connect(env.dsn, autocommit=True) as conn, pytest.raises(
            psycopg.errors.RaiseException, match="is not version 4: print the upgrade again"):
        conn.execute(printed.stdout.encode())
    again = env.run("init", "--print-upgrade")
    assert (again.returncode, again.stderr) == (0, ""), again
    assert again.stdout == (f"-- schema {env.schema!r} is version {schema.VERSION} already: "
                            "nothing to apply\n")


def test_a_role_that_may_not_create_the_schema_is_told_what_a_dba_applies(
        env: Env, fresh: str) -> None:
    role = f"{env.schema}_nobody"[:63]
    env.query(f'CREATE ROLE "{role}" LOGIN')
    try:
        refused = env.run("init", "--dsn", f"{env.dsn} user={role}")
        assert refused.returncode == 125, refused
        assert "`pglock init --print-upgrade`" in refused.stderr, refused
        # That command exists and works for that very role: it reads, never writes.
        printed = env.run("init", "--print-upgrade", "--dsn", f"{env.dsn} user={role}")
        assert (printed.returncode, printed.stderr) == (0, ""), printed
    finally:
        env.query(f'DROP ROLE "{role}"')
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(printed.stdout.encode())
    assert_same(env, env.schema, fresh)


def test_version_7_keeps_the_tokens_in_use_and_the_next_one_is_higher(env: Env) -> None:
    """A lock and a seat held under version 6, with tokens in use: the upgrade records the
    timeline it runs on as the schema's first and stamps the rows with it (so nothing
    waits), their holders renew and release through the new functions, and the next
    tokens are higher (on timeline 1, one higher: the high bits carry the timeline - 1)."""
    claim = lease.Claim(job="held", schema=env.schema, ttl=60)
    seat = lease.Claim(job="sem", schema=env.schema, ttl=60)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 6))
        for held, table, extra in ((claim, "locks", ""), (seat, "seats", "seat, seat_limit, ")):
            row = conn.execute(schema.query(
                f"INSERT INTO {{schema}}.{table} (job, {extra}mode, holder, holder_pid, "
                "holder_id, fencing_token, ttl, acquired_at, renewed_at, expires_at) VALUES "
                f"(%(job)s, {'1, 2, ' if extra else ''}'lease', %(holder)s, %(holder_pid)s, "
                "%(holder_id)s, 41, %(ttl)s, now(), now(), now() + %(ttl)s) "
                "RETURNING fencing_token", env.schema), held.params()).fetchone()
            assert row is not None
            held.fencing_token = row[0]
    result = env.run("run", "--job", "after", "--", "true")  # upgrades it
    assert (result.returncode, result.stderr) == (0, ""), result
    assert env.query("SELECT timeline FROM {schema}.timelines") == [(1,)]
    assert env.query("SELECT job, timeline FROM {schema}.locks ORDER BY job") == [
        ("after", 1), ("held", 1)]
    assert env.query("SELECT timeline FROM {schema}.seats") == [(1,)]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        for held in (claim, seat):
            assert lease.renew(conn, held)[0] is lease.Renewal.OURS
            assert lease.release(conn, held)
    lock = env.run("run", "--job", "held", "--", "sh", "-c", 'echo "$PGLOCK_FENCING_TOKEN"')
    seats = env.run("run", "--job", "sem", "--limit", "2", "--", "sh", "-c",
                    'echo "$PGLOCK_SEAT $PGLOCK_FENCING_TOKEN"')
    assert (lock.returncode, lock.stdout) == (0, "42\n"), lock
    assert (seats.returncode, seats.stdout) == (0, "1 42\n"), seats


# What a pglock of version 8 sends to take a lock and record its first attempt, and to
# record a further attempt (version 9 adds the trace ids to both: acquire's is dropped,
# start_run's stays beside the new one).
V8_ACQUIRE = """
SELECT token, run_id FROM {schema}.acquire(
    8, %(job)s, 'lease', %(holder)s, %(holder_pid)s, %(holder_id)s, %(ttl)s, NULL, NULL,
    false, 'true', NULL, NULL, NULL, NULL, 1, 1, 1, true, NULL, NULL)
"""
V8_START = """
SELECT run_id, attempt FROM {schema}.start_run(
    %(job)s, %(holder_id)s, %(fencing_token)s, 'true', NULL, NULL, NULL, NULL, NULL, 1, 2)
"""


def test_a_run_started_under_version_8_retries_through_the_upgrade_to_9(env: Env) -> None:
    """Version 9 records a traced run's ids: a holder of version 8 that took its lock and
    recorded its first attempt before the upgrade records its retry after it with version
    8's start_run, untraced; a new acquire of version 8 finds none of its signature."""
    claim = lease.Claim(job="old", schema=env.schema, ttl=60)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 8))
        row = conn.execute(schema.query(V8_ACQUIRE, env.schema), claim.params()).fetchone()
        assert row is not None
        claim.fencing_token, first = row
        ledger.finish(conn, claim, first, ledger.RunResult(ledger.Outcome.FAILED, 1, 0.1),
                      keep=True)
    traced = env.run("run", "--job", "new", "--", "true",
                     env={"TRACEPARENT": f"00-{'a' * 32}-{'b' * 16}-01"})  # upgrades it
    assert (traced.returncode, traced.stderr) == (0, ""), traced
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        retried = conn.execute(schema.query(V8_START, env.schema), claim.params()).fetchone()
        assert retried is not None and retried[1] == 2
        ended = ledger.finish(conn, claim, retried[0],
                              ledger.RunResult(ledger.Outcome.SUCCEEDED, 0, 0.1))
        assert ended.ours and ended.recorded
        with pytest.raises(psycopg.errors.UndefinedFunction):
            conn.execute(schema.query(V8_ACQUIRE, env.schema), claim.params())
    assert [(r["attempt"], r["outcome"], r["trace_id"]) for r in env.runs("old")] == [
        (1, "failed", None), (2, "succeeded", None)]
    assert env.runs("new")[0]["trace_id"] == "a" * 32


# What a pglock of version 8 sends to take a lock and record its run's start (its acquire,
# before the census's parameters), and to renew it.
V8_HOLD = """
SELECT token, run_id FROM {schema}.acquire(
    8, %(job)s, 'lease', %(holder)s, %(holder_pid)s, %(holder_id)s, %(ttl)s, NULL, NULL,
    false, 'sleep 60', NULL, NULL, NULL, NULL, 0, 1, 1, true, NULL, NULL)
"""


def test_version_9_starts_an_empty_census_and_a_version_8_holder_runs_on(env: Env) -> None:
    """The census (issue 44) is empty after the upgrade and filled by the next runs; a
    holder that took its lock through version 8's acquire renews, is contended for, and
    records its end through the functions it knows."""
    claim = lease.Claim(job="held", schema=env.schema, ttl=60)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(as_released(env.schema, 8))
        row = conn.execute(schema.query(V8_HOLD, env.schema), claim.params()).fetchone()
        assert row is not None and row[0] is not None
        claim.fencing_token, run_id = row
        schema.ensure(conn, env.schema)  # the upgrade, as the first pglock 9 makes it
    assert env.query("SELECT value FROM {schema}.meta WHERE key = 'version'") == [("9",)]
    assert env.query("SELECT count(*) FROM {schema}.hosts") == [(0,)]
    assert env.query("SELECT count(*) FROM {schema}.attendance") == [(0,)]
    # A host of the new version loses to the old holder, and is in the census for it.
    contender = env.run("run", "--job", "held", "--", "true", env={"PGLOCK_HOST": "web-9"})
    assert (contender.returncode, contender.stderr) == (75, ""), contender
    assert env.query("SELECT job, host, outcome FROM {schema}.attendance") == [
        ("held", "web-9", "held")]
    assert env.query("SELECT host, version FROM {schema}.hosts") == [("web-9", "0.1.0")]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        assert lease.renew(conn, claim)[0] is lease.Renewal.OURS
        ended = conn.execute(schema.query(V5_FINISH, env.schema), claim.params(
            run_id=run_id, min_hold=timedelta(0), keep=False, duration=timedelta(seconds=1),
            exit_code=0, signal=None, outcome="succeeded", error=None, output_tail=None,
            closes=False, hopeless=False, error_line=None, lost_error=None,
            lost_error_line=None)).fetchone()
        assert ended is not None and ended[:3] == (True, False, True)
    after = env.run("run", "--job", "held", "--", "true", env={"PGLOCK_HOST": "web-9"})
    assert (after.returncode, after.stderr) == (0, ""), after
    assert [r["outcome"] for r in env.runs("held")] == ["succeeded", "succeeded"]
    # The old holder is in no census: it ran a pglock that knew none.
    assert env.query("SELECT host, outcome FROM {schema}.attendance") == [("web-9", "ran")]
