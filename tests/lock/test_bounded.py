"""The acquire's statement cut off under it: sent again on a new connection within
--connect-timeout, rather than ending the run with exit 125 (issue 22)."""

from __future__ import annotations

import psycopg
import pytest
from conftest import Env
from psycopg import sql

pytestmark = pytest.mark.slow


def _waiting_backend(env: Env, holder: str) -> int | None:
    rows = env.query("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                     "AND wait_event_type = 'Lock'", (f"pglock run cut on {holder}",))
    return rows[0][0] if rows else None


@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_an_acquire_cut_off_is_sent_again_on_a_new_connection(env: Env, mode: str) -> None:
    """The acquire waits on the job's row (a transaction of the test holds it), its backend
    is terminated (what a failover or a restart does to it), and the run, connected again,
    takes the lock once the row is free: exit 0, its run recorded, nothing said. (--rerun:
    the first run's lock is still in its hold.)"""
    assert env.run("run", "--job", "cut", "--mode", mode, "--", "true").returncode == 0
    holder = f"cut-{mode}"
    with psycopg.connect(env.dsn) as blocker:
        blocker.execute(sql.SQL("SELECT 1 FROM {}.locks WHERE job = 'cut' FOR UPDATE").format(
            sql.Identifier(env.schema)))
        process = env.popen("run", "--job", "cut", "--mode", mode, "--holder", holder,
                            "--connect-timeout", "60s", "--rerun", "--", "true")
        try:
            env.wait_for(lambda: _waiting_backend(env, holder) is not None or
                         process.poll() is not None, what="the acquire waiting on the row")
            assert process.poll() is None, process.communicate()
            first = _waiting_backend(env, holder)
            env.query("SELECT pg_terminate_backend(%s)", (first,))
            # Connected again, and waiting on the row again, on a new backend.
            env.wait_for(lambda: _waiting_backend(env, holder) not in (None, first) or
                         process.poll() is not None, what="the acquire sent again")
            assert process.poll() is None, process.communicate()
        finally:
            blocker.rollback()
        try:
            assert process.communicate(timeout=60) == ("", "")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 0
    assert [r["outcome"] for r in env.runs("cut")] == ["succeeded", "succeeded"]


def test_sigterm_cancels_an_acquire_waiting_on_the_row(env: Env) -> None:
    """SIGTERM while the acquire statement waits (on the job's row, which a transaction of
    the test holds): the statement is cancelled, pglock exits 143 at once (its bound, 120 s,
    is far off) saying nothing, its backend goes, and nothing was taken or recorded."""
    assert env.run("run", "--job", "cut", "--", "true").returncode == 0
    holder = "cut-stopped"
    with psycopg.connect(env.dsn) as blocker:
        blocker.execute(sql.SQL("SELECT 1 FROM {}.locks WHERE job = 'cut' FOR UPDATE").format(
            sql.Identifier(env.schema)))
        process = env.popen("run", "--job", "cut", "--holder", holder, "--rerun",
                            "--connect-timeout", "120s", "--", "true")
        try:
            env.wait_for(lambda: _waiting_backend(env, holder) is not None or
                         process.poll() is not None, what="the acquire waiting on the row")
            assert process.poll() is None, process.communicate()
            process.terminate()
            assert process.communicate(timeout=60) == ("", "")
            assert process.returncode == 143
            env.wait_for(lambda: not env.query(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s",
                (f"pglock run cut on {holder}",)), what="the run's backend to go")
        finally:
            blocker.rollback()
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [r["outcome"] for r in env.runs("cut")] == ["succeeded"]
    assert env.query("SELECT fencing_token FROM {schema}.locks WHERE job = 'cut'") == [(1,)]
