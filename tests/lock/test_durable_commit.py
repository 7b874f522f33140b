"""Every pglock write commits with synchronous_commit = on, whatever the role's default.

The server names a synchronous standby that never connects, and the role's default is
`off`: a commit that honours `on` waits for that standby forever, seen in
pg_stat_activity as wait_event SyncRep; a plain write on the same session does not wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import PGLOCK, TEST_SETTINGS

from pglock.db import schema
from pglock.db.embedded import EmbeddedServer
from pglock.lock import advisory, lease, ledger
from pglock.operate import admin

SCHEMA = "durable"


@pytest.fixture
def unreachable_standby(tmp_path: Path) -> Iterator[str]:
    """A server whose commits at synchronous_commit >= on never return; role default off."""
    server = EmbeddedServer(tmp_path / "pg",
                            settings={**TEST_SETTINGS, "synchronous_commit": "on"})
    dsn = server.join()
    # These very statements would wait too, but for their session's own setting. Not on the
    # server's command line: a test lifts the wait with ALTER SYSTEM.
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("ALTER ROLE postgres SET synchronous_commit = 'off'")
    for _ in range(200):  # the reload reaches new sessions a moment later
        with psycopg.connect(dsn, autocommit=True) as conn:
            if conn.execute("SHOW synchronous_standby_names").fetchone() == ("nobody",):
                break
        time.sleep(0.05)
    yield dsn
    server.leave()


class Session:
    """A connection whose writes run in a thread, watched from a second connection."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
        self.watcher = psycopg.connect(dsn, autocommit=True,
                                       options="-c synchronous_commit=off")
        self.pid = self.conn.info.backend_pid

    def waited(self, action: Any) -> bool:
        """Whether `action()` (one write) waited for the synchronous standby.

        A wait for it never ends by itself: seen, it is cancelled (the server then
        commits locally and warns), and the write returns.
        """
        failures: list[BaseException] = []

        def write() -> None:
            try:
                action()
            except BaseException as error:
                failures.append(error)

        thread = threading.Thread(target=write)
        thread.start()
        waiting = False
        for _ in range(600):
            row = self.watcher.execute("SELECT wait_event = 'SyncRep' FROM pg_stat_activity "
                                       "WHERE pid = %s", (self.pid,)).fetchone()
            waiting = bool(row and row[0])
            if waiting or not thread.is_alive():
                break
            time.sleep(0.05)
        if waiting:
            self.watcher.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
        thread.join(timeout=30)
        assert not thread.is_alive(), "the write neither finished nor waited for the standby"
        assert not failures, failures
        return waiting

    def close(self) -> None:
        self.conn.close()
        self.watcher.close()


def test_every_write_waits_for_the_synchronous_standby(unreachable_standby: str) -> None:
    session = Session(unreachable_standby)
    conn = session.conn
    assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    schema.ensure(conn, SCHEMA)
    # The control: the role's default really is in effect for a plain write.
    assert not session.waited(lambda: conn.execute(
        schema.query("INSERT INTO {schema}.meta VALUES ('control', 'x')", SCHEMA)))

    claim = lease.Claim(job="durable", schema=SCHEMA, ttl=60)
    assert session.waited(lambda: lease.try_acquire(conn, claim, ledger.RunStart("true")))
    assert claim.fencing_token == 1 and claim.run is not None
    assert session.waited(lambda: lease.renew(conn, claim))
    started: list[ledger.StartedRun] = []
    assert session.waited(lambda: started.append(ledger.start(
        conn, claim, ledger.RunStart("true", attempt=2))))
    result = ledger.RunResult(outcome=ledger.Outcome.SUCCEEDED, exit_code=0, duration=1.0)
    assert session.waited(lambda: ledger.finish(conn, claim, started[0].id, result, keep=True))
    assert session.waited(lambda: ledger.finish(conn, claim, claim.run.id, result))
    assert session.waited(lambda: lease.release(conn, claim))

    advisory_claim = lease.Claim(job="durable-advisory", schema=SCHEMA, ttl=60, mode="advisory")
    assert advisory.take(conn, advisory_claim)
    assert session.waited(lambda: lease.try_acquire(conn, advisory_claim))
    assert session.waited(lambda: lease.renew(conn, advisory_claim))

    assert session.waited(lambda: conn.execute(schema.query(admin.CLEAR, SCHEMA), {
        "job": "durable-advisory", "fencing_token": advisory_claim.fencing_token, "now": True,
        "by": "test", "note": "test", "reason": None}))
    assert session.waited(lambda: admin.prune(conn, SCHEMA, older_than=-3600))
    # Prune wrote: the audit row went, the job's latest run stays.
    assert conn.execute(schema.query("SELECT outcome FROM {schema}.runs", SCHEMA)
                        ).fetchall() == [("succeeded",)]
    session.close()


def _pglock_run(dsn: str, job: str, *args: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": SCHEMA}
    return subprocess.Popen([PGLOCK, "run", "--job", job, *args], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _waiting(conn: psycopg.Connection[Any], job: str, process: subprocess.Popen[str]) -> None:
    """Until the run's backend waits for the standby (the run must still be going)."""
    row = None
    for _ in range(600):
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                           "AND application_name LIKE %s", (f"pglock run {job}%",)).fetchone()
        if row == (1,) or process.poll() is not None:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    assert row == (1,)


def _backends(conn: psycopg.Connection[Any], job: str) -> int:
    """The run's backends left on the server, once the ones going have gone."""
    row = None
    for _ in range(200):
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name "
                           "LIKE %s", (f"pglock run {job}%",)).fetchone()
        if row == (0,):
            break
        time.sleep(0.05)
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_a_run_waits_until_the_standby_confirms(unreachable_standby: str) -> None:
    """End to end: `pglock run` is held at its acquisition until the wait is lifted, within
    its bound (--connect-timeout)."""
    process = _pglock_run(unreachable_standby, "held", "--connect-timeout", "120s", "--",
                          "true")
    try:
        with psycopg.connect(unreachable_standby, autocommit=True) as conn:
            _waiting(conn, "held", process)
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            conn.execute("SELECT pg_reload_conf()")
        assert process.communicate(timeout=60) == ("", "")
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
def test_a_run_the_standby_never_confirms_ends_at_its_bound(unreachable_standby: str) -> None:
    """The acquire's commit waits for a standby that is not connected: cancelled at
    --connect-timeout, exit 125 and one line, no backend left; what it committed on the
    primary alone blocks the job (held by a holder nobody is) until its ttl, and never
    lets two run."""
    process = _pglock_run(unreachable_standby, "never", "--connect-timeout", "2s",
                          "--ttl", "300s", "--", "echo", "ran")
    try:
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 125, err
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "not confirmed by a synchronous standby within 2s" in err
    with psycopg.connect(unreachable_standby, autocommit=True) as conn:
        assert _backends(conn, "never") == 0
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # the reload reaches new sessions a moment later
    # Committed on the primary alone, and not acted on: the lock stays with a holder id
    # no process uses, until its expiry.
    again = _pglock_run(unreachable_standby, "never", "--", "echo", "ran")
    assert again.communicate(timeout=60) == ("", "")
    assert again.returncode == 75


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_run_waiting_for_the_standby(unreachable_standby: str,
                                                          signum: int) -> None:
    """Signals are not blocked across the wait: the statement is cancelled, the run exits
    128+N (its bound, 120 s, is far off), and its backend goes."""
    job = f"stopped-{signum}"
    process = _pglock_run(unreachable_standby, job, "--connect-timeout", "120s", "--",
                          "echo", "ran")
    try:
        with psycopg.connect(unreachable_standby, autocommit=True) as conn:
            _waiting(conn, job, process)
            process.send_signal(signum)
            out, err = process.communicate(timeout=60)
            assert process.returncode == 128 + signum, err
            assert out == ""
            assert _backends(conn, job) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _standby_names(conn: psycopg.Connection[Any], names: str) -> None:
    conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)  # the reload reaches the sessions a moment later


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_a_holder_whose_writes_block_stops_and_leaves_no_backend(unreachable_standby: str,
                                                                 mode: str,
                                                                 tmp_path: Path) -> None:
    """The standby goes while the command runs: the renewals wait for it, are cancelled at
    their bound, and the holder stops its command at its local deadline (exit 125, one
    line); its renewal and end-record backends do not stay waiting on the server."""
    job, started = f"holder-{mode}", tmp_path / "started"
    with psycopg.connect(unreachable_standby, autocommit=True) as conn:
        _standby_names(conn, "")
        process = _pglock_run(unreachable_standby, job, "--mode", mode, "--ttl", "6s",
                              "--connect-timeout", "2s", "--", "sh", "-c",
                              f"touch {started}; exec sleep 120")
        try:
            for _ in range(600):
                if started.exists() or process.poll() is not None:
                    break
                time.sleep(0.05)
            assert process.poll() is None, process.communicate()
            _standby_names(conn, "nobody")
            out, err = process.communicate(timeout=90)
            assert process.returncode == 125, err
            assert out == ""
            assert len(err.splitlines()) == 1, err
            assert "lock lost" in err
            assert _backends(conn, job) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
