"""Least privilege: login roles made members of the groups `pglock init --print-grants`
creates; what each may do, what each is refused (in one line), and that a runner cannot
take over, renew, release or finish another holder's claim, by table or by function."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from conftest import PGLOCK, Env, one_line

from pglock.db import schema
from pglock.lock import lease, ledger

KINDS = ("runner", "reader", "operator")
REFUSED = re.compile(r"pglock: pglock ([\w-]+) needs the (pglock_\w+) role "
                     r"\(permission denied for (table|function|schema) [\w\"]+\)")


@pytest.fixture
def roles(env: Env) -> Iterator[dict[str, str]]:
    """A DSN per kind: a LOGIN role of the test's own, member of pglock's group role, made
    from the printed SQL by the schema's owner."""
    names = {kind: f"{env.schema}_{kind}"[:63] for kind in KINDS}
    for name in names.values():
        env.query(f'CREATE ROLE "{name}" LOGIN')
    try:
        assert env.run("init", "-q").returncode == 0
        printed = env.run("init", "--print-grants", *(
            arg for kind, name in names.items() for arg in (f"--{kind}-role", name)))
        assert (printed.returncode, printed.stderr) == (0, ""), printed
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            conn.execute(printed.stdout.encode())
        yield {kind: f"{env.dsn} user={name}" for kind, name in names.items()}
    finally:
        env.query("DROP SCHEMA IF EXISTS {schema} CASCADE")
        for name in names.values():
            env.query(f'DROP OWNED BY "{name}"')
            env.query(f'DROP ROLE "{name}"')


def refused(env: Env, dsn: str, *args: str) -> tuple[int, str, str]:
    """(exit status, command named, role named) of a command refused for a privilege."""
    result = env.run(args[0], "--dsn", dsn, *args[1:])
    assert result.stderr, (args, result)
    line = one_line(result.stderr)
    match = REFUSED.fullmatch(line)
    assert match, line
    return result.returncode, match[1], match[2]


OPERATOR_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("clear", "--job", "j-lease", "--yes", "--reason", "test"),
    ("prune", "--older-than", "1d", "--yes"),
    ("pause", "--job", "j-lease", "--reason", "test"),
    ("resume", "--job", "j-lease"),
    ("forget", "--job", "j-lease", "--reason", "test"),
    ("forget-host", "nowhere", "--reason", "test"),
)


def test_the_runner_runs_jobs_in_both_modes_and_nothing_else(env: Env,
                                                            roles: dict[str, str]) -> None:
    runner = roles["runner"]
    for mode in ("lease", "advisory"):
        ran = env.run("run", "--job", f"j-{mode}", "--mode", mode, "--dsn", runner, "--",
                      "true")
        assert (ran.returncode, ran.stderr) == (0, ""), ran
        # The loser, too: the hold of the run that just ended.
        lost = env.run("run", "--job", f"j-{mode}", "--mode", mode, "--dsn", runner, "--",
                       "true")
        assert (lost.returncode, lost.stderr) == (75, ""), lost
    assert [r["outcome"] for r in env.runs("j-lease") + env.runs("j-advisory")] == [
        "succeeded", "succeeded"]
    # A nested run of its own job confirms its inherited claim through `holds` (a runner
    # cannot read holder ids) and runs its command under the outer lock.
    nested = env.run("run", "--job", "j-nested", "--dsn", runner, "--", PGLOCK, "run",
                     "--job", "j-nested", "--dsn", runner, "--", "sh", "-c", "exit 7")
    assert (nested.returncode, nested.stderr) == (7, ""), nested
    assert [r["exit_code"] for r in env.runs("j-nested")] == [7]
    # A semaphore's seat (--limit) is taken, renewed and let go through the same functions.
    seated = env.run("run", "--job", "j-seats", "--limit", "2", "--dsn", runner, "--",
                     "sh", "-c", 'echo "$PGLOCK_SEAT"')
    assert (seated.returncode, seated.stdout, seated.stderr) == (0, "1\n", ""), seated
    for args in OPERATOR_COMMANDS:
        assert refused(env, runner, *args) == (1, args[0], "pglock_operator")
    # Its runs, winners and losers, are in the census: acquire wrote it for them.
    assert env.query("SELECT job, count(*) FROM {schema}.attendance GROUP BY job "
                     "ORDER BY job") == [("j-advisory", 1), ("j-lease", 1), ("j-nested", 1),
                                          ("j-seats", 1)]
    reads: tuple[tuple[str, ...], ...] = (("status",), ("history",), ("metrics",),
                                          ("hosts",))
    for args in reads:
        code, command, role = refused(env, runner, *args)
        assert (command, role) == (args[0], "pglock_reader")
        assert code == (125 if args[0] == "metrics" else 1)
    # check answers UNKNOWN (3), and names the role too (docs/security.md says it does).
    assert refused(env, runner, "check") == (3, "check", "pglock_reader")
    # Nothing an operator command did got through.
    assert env.query("SELECT job FROM {schema}.pauses") == []
    assert len(env.query("SELECT 1 FROM {schema}.jobs WHERE forgotten_at IS NULL")) == 4


@pytest.mark.slow
def test_the_reader_reads_and_is_refused_run_and_operating(env: Env,
                                                          roles: dict[str, str]) -> None:
    assert env.run("run", "--job", "j-lease", "--", "true").returncode == 0
    assert env.run("run", "--job", "j-seats", "--limit", "2", "--", "true").returncode == 0
    reader = roles["reader"]
    reads: tuple[tuple[str, ...], ...] = (
        ("status",), ("status", "--json"), ("status", "--job", "j-lease"),
        ("status", "--job", "j-seats"), ("history",),
        ("history", "--job", "j-lease"), ("check",), ("metrics",), ("hosts",),
        ("hosts", "--job", "j-lease"), ("hosts", "--json"))
    for args in reads:
        result = env.run(*args, "--dsn", reader)
        assert (result.returncode, result.stderr) == (0, ""), (args, result)
    assert "j-lease" in env.run("status", "--dsn", reader).stdout
    assert refused(env, reader, "run", "--job", "other", "--", "true") == (
        125, "run", "pglock_runner")
    holder, _ = env.start_holder("j-held")
    try:
        operating: tuple[tuple[str, ...], ...] = (
            ("clear", "--job", "j-held", "--yes", "--reason", "test"), *OPERATOR_COMMANDS[1:])
        for args in operating:
            assert refused(env, reader, *args) == (1, args[0], "pglock_operator")
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=30)


@pytest.mark.slow
def test_the_operator_does_everything(env: Env, roles: dict[str, str]) -> None:
    operator = roles["operator"]
    for mode in ("lease", "advisory"):
        ran = env.run("run", "--job", f"j-{mode}", "--mode", mode, "--dsn", operator, "--",
                      "true")
        assert (ran.returncode, ran.stderr) == (0, ""), ran
    every: tuple[tuple[str, ...], ...] = (
        ("status",), ("history",), ("check",), ("metrics",), *OPERATOR_COMMANDS)
    for args in every:
        result = env.run(*args, "--dsn", operator)
        assert result.returncode in (0, 1), (args, result)
        assert "permission denied" not in result.stderr, (args, result)
    holder, _ = env.start_holder("j-held", "--dsn", roles["runner"], "--ttl", "5s")
    try:
        cleared = env.run("clear", "--dsn", operator, "--job", "j-held", "--yes", "--reason",
                          "test")
        assert (cleared.returncode, cleared.stderr) == (0, ""), cleared
    finally:
        holder.communicate(timeout=30)
    assert env.query("SELECT action FROM {schema}.audit ORDER BY id") == [
        ("pause",), ("resume",), ("forget",), ("clear",)]


def test_clear_terminate_without_pg_signal_backend_names_it(env: Env,
                                                             roles: dict[str, str]) -> None:
    """The operator clears the lock but may not end the runner's session: it is told the
    built-in role it lacks, not the pglock_operator role it has, and exits 1 (not done)."""
    holder, _ = env.start_holder("j-adv", "--mode", "advisory", "--dsn", roles["runner"],
                                 "--ttl", "5s")
    try:
        cleared = env.run("clear", "--dsn", roles["operator"], "--job", "j-adv", "--yes",
                          "--now", "--terminate", "--reason", "test")
        assert cleared.returncode == 1, cleared
        assert "cleared" in cleared.stdout, cleared
        line = one_line(cleared.stderr)
        assert line.startswith("pglock: cleared, but cannot terminate backend "), line
        assert "this role lacks pg_signal_backend" in line, line
        assert "pglock_operator" not in line, line
    finally:
        holder.communicate(timeout=30)
    assert holder.returncode == 125


@pytest.mark.slow
def test_a_runner_cannot_take_over_a_live_lease(env: Env, roles: dict[str, str]) -> None:
    holder, _ = env.start_holder("held", "--dsn", roles["runner"])
    try:
        before = env.query("SELECT holder_id, fencing_token, expires_at FROM {schema}.locks")
        [(holder_id, token, _)] = before
        [(run_id,)] = env.query("SELECT id FROM {schema}.runs WHERE outcome = 'running'")
        with psycopg.connect(roles["runner"], autocommit=True) as conn:
            # The tables: no write, and no holder id to read.
            for statement in (
                    "UPDATE {schema}.locks SET holder_id = 'mine', expires_at = now()",
                    "DELETE FROM {schema}.locks",
                    "UPDATE {schema}.runs SET outcome = 'failed'",
                    "INSERT INTO {schema}.pauses (job, paused_by, reason) VALUES ('', 'x', 'x')",
                    "SELECT holder_id FROM {schema}.locks",
                    "SELECT * FROM {schema}.locks",
                    "SELECT * FROM {schema}.runs",
                    "SELECT {schema}.advisory_key('held')",
                    "SELECT * FROM {schema}.record_start('held', NULL, 'lease', 'h', 1, 'x', "
                    "99, 'true', NULL, NULL, NULL, NULL, 0, 1, NULL, NULL, NULL)",
                    # The census: written by acquire alone, read by readers.
                    "SELECT * FROM {schema}.attendance", "SELECT * FROM {schema}.hosts",
                    "DELETE FROM {schema}.hosts",
                    "SELECT {schema}.attend('h', '9', '3', 'held', NULL, '1m', true, false, "
                    "false)"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(schema.query(statement, env.schema))
            # The functions, with a guessed holder id and the real (public) token.
            guess = lease.Claim(job="held", schema=env.schema, ttl=60,
                                holder_id="0123456789abcdef", fencing_token=token, rerun=True,
                                handover_from=0)
            assert lease.try_acquire(conn, guess, ledger.RunStart("true")) is (
                lease.Attempt.HELD)
            assert guess.held_by is not None and guess.run is None
            assert lease.renew(conn, guess) == (lease.Renewal.LOST, None)
            assert lease.release(conn, guess, close_slot=None) is False
            result = ledger.RunResult(ledger.Outcome.FAILED, 1, 1.0)
            done = ledger.finish(conn, guess, run_id, result)
            assert (done.recorded, done.ours) == (False, False)
            ledger.add_note(conn, guess, run_id, "mine")
            # A nested run confirms its own claim, and only its own.
            assert lease.held_by(conn, env.schema, "held", holder_id, token)
            assert not lease.held_by(conn, env.schema, "held", guess.holder_id, token)
            # Advisory mode: holding some other advisory lock proves nothing.
            conn.execute("SELECT pg_advisory_lock(42)")
            sly = lease.Claim(job="held", schema=env.schema, ttl=60, mode="advisory",
                              holder_id="0123456789abcdef")
            with pytest.raises(Exception, match="pooled"):
                lease.try_acquire(conn, sly)
        after = env.query("SELECT holder_id, fencing_token, expires_at FROM {schema}.locks")
        assert [row[:2] for row in after] == [(holder_id, token)]
        assert env.query("SELECT outcome, error FROM {schema}.runs") == [("running", None)]
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=30)
    assert env.query("SELECT outcome FROM {schema}.runs") == [("killed",)]


def test_the_run_path_is_only_functions_and_public_cannot_call_them(env: Env) -> None:
    assert env.run("init", "-q").returncode == 0
    rows = env.query(
        "SELECT p.proname, p.prosecdef, p.proconfig, "
        "has_function_privilege('public', p.oid, 'EXECUTE') "
        "FROM pg_proc p WHERE p.pronamespace = %s::regnamespace ORDER BY 1", (env.schema,))
    helpers = ("advisory_horizon", "advisory_key", "attend", "evict", "granted",
               "incarnation", "keeps", "next_token", "record_start", "roster", "roster_key",
               "seat_takeable", "session_holds", "sighting", "takeable", "timeline")
    # Two start_run: version 8's signature stays for the pglocks running through an upgrade.
    assert [r[0] for r in rows] == sorted([
        "acquire", "catch_up", "fence", "finish", "holds", "members", "missed", "note",
        "note_windows", "release", "renew", "retake", "start_run", "start_run", "take",
        *helpers])
    for name, definer, config, public in rows:
        assert config == ["search_path=pg_catalog, pg_temp"], name
        assert not public, name
        assert definer == (name not in helpers), name


def test_the_columns_withheld_are_the_ones_docs_security_names(env: Env) -> None:
    """docs/security.md says which columns of locks and seats a runner and a reader do not
    read (generated from roles.WITHHELD_*: docs review L4); the grants and those names are
    every column, so that a column a new version adds is granted or named, never lost."""
    from pglock.operate import roles

    assert env.run("init", "-q").returncode == 0
    for table, granted, withheld in (
            ("locks", roles.LOCK_COLUMNS, roles.WITHHELD_LOCK_COLUMNS),
            ("seats", roles.SEAT_COLUMNS, roles.WITHHELD_SEAT_COLUMNS)):
        columns = {row[0] for row in env.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s", (env.schema, table))}
        named = {column.strip() for column in granted.split(",")}
        assert not named & set(withheld), table
        assert named | set(withheld) == columns, (table, columns - named - set(withheld))
    tables = {row[0] for row in env.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (env.schema,))}
    assert set(roles.READ_TABLES) == tables - {"locks", "seats"}


# The command's side of docs/lease.md's fencing guard, on a connection of the role given
# in argv[1]: the guard for its own claim, and a wrong token; then, with the guard's
# transaction still open, the owner's UPDATE of the row (a takeover, a clear) must wait.
FENCED = """
import os, sys, psycopg
from psycopg import sql
dsn, owner, schema = sys.argv[1:]
job, holder, token = (os.environ[f"PGLOCK_{name}"] for name in ("JOB", "HOLDER_ID",
                                                                 "FENCING_TOKEN"))
guard = sql.SQL("SELECT {}.fence(%s, %s, %s)").format(sql.Identifier(schema))
with psycopg.connect(dsn) as conn:
    wrong = conn.execute(guard, (job, holder, int(token) + 1)).fetchone()[0]
    ours = conn.execute(guard, (job, holder, int(token))).fetchone()[0]
    with psycopg.connect(owner, autocommit=True) as other:
        other.execute("SET lock_timeout = '300ms'")
        try:
            other.execute(sql.SQL("UPDATE {}.locks SET renewed_at = renewed_at WHERE job = %s")
                          .format(sql.Identifier(schema)), (job,))
            waited = False
        except psycopg.errors.LockNotAvailable:
            waited = True
print(wrong, ours, waited)
"""


@pytest.mark.parametrize("kind", ["runner", "reader"])
def test_the_fencing_guard_works_for_the_least_privileged_roles(
        env: Env, roles: dict[str, str], kind: str) -> None:
    """docs/lease.md's guard, as a command whose own connection has only pglock_runner's or
    pglock_reader's privileges (issue 38: its SELECT ... FOR SHARE needed UPDATE on locks:
    `permission denied for table locks`)."""
    ran = env.run("run", "--job", "fenced", "--rerun", "--", sys.executable, "-c", FENCED,
                  roles[kind], env.dsn, env.schema)
    assert (ran.returncode, ran.stderr) == (0, ""), ran
    assert ran.stdout == "False True True\n"


def test_the_advisory_key_in_sql_is_the_documented_one(env: Env) -> None:
    from pglock.db.keys import advisory_key

    assert env.run("init", "-q").returncode == 0
    for job in ("x", "sync-invoices", "a:b", "é", "back\\slash"):
        assert env.query("SELECT {schema}.advisory_key(%s)", (job,)) == [
            (advisory_key(env.schema, job),)]


SECRET = "s3cret-Pw-4711"


@pytest.mark.slow
def test_a_password_never_shows_wherever_the_dsn_comes_from(
        env: Env, roles: dict[str, str]) -> None:
    """The embedded test server trusts its socket: the password is carried, not checked."""
    config = env.tmp / "config.toml"
    for source in ("--dsn", "PGLOCK_DSN", "config file"):
        said = []
        for kind, command in (("runner", ("run", "-v", "--job", "j", "--", "true")),
                              ("runner", ("run", "--job", "j", "--", "true")),
                              ("reader", ("run", "--job", "j", "--", "true")),
                              ("reader", ("status",)), ("reader", ("history", "--job", "j")),
                              ("reader", ("check",)), ("reader", ("metrics",)),
                              ("runner", ("clear", "--job", "j", "--yes")),
                              ("reader", ("doctor", "--json"))):
            dsn = f"{roles[kind]} password={SECRET}"
            extra: dict[str, str] = {}
            args: tuple[str, ...] = command
            if source == "--dsn":
                args = (command[0], "--dsn", dsn, *command[1:])
            elif source == "PGLOCK_DSN":
                extra = {"PGLOCK_DSN": dsn}
            else:
                config.write_text(f"dsn = {dsn!r}\n".replace("'", '"'))
                config.chmod(0o644)
                extra = {"PGLOCK_CONFIG": str(config), "PGLOCK_DSN": ""}
            env_vars = {k: v for k, v in {**env.env, **extra}.items() if v != ""}
            with subprocess.Popen([PGLOCK, *args], env=env_vars, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
                out, err = process.communicate(timeout=60)
            assert SECRET not in out + err, (source, args)
            said.append((args[0], process.returncode, err, out))
        verbose, plain, refused_run = said[0], said[1], said[2]
        # -v calls out a password on the command line; a plain run never does.
        assert ("carries a password" in verbose[2]) == (source == "--dsn"), verbose
        assert plain[1:3] in ((0, ""), (75, "")), plain
        assert "needs the pglock_runner role" in refused_run[2]
        doctor = json.loads(said[-1][3])
        found = {f["check"]: f for f in doctor["checks"]}
        assert found["password"]["status"] == ("ok" if source == "PGLOCK_DSN" else "warn"), (
            source, found["password"])
    assert not any(SECRET in str(row) for row in env.query("SELECT * FROM {schema}.runs"))
    assert not any(SECRET in str(row) for row in env.query("SELECT * FROM {schema}.audit"))
