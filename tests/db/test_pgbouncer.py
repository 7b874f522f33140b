"""Through PgBouncer in transaction pooling: lease mode works, advisory mode refuses (the
fixtures start one in either pooling mode; doctor's tests use both)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from conftest import Env, free_port, one_line
from marks import assert_no_overlap, held_command, intervals, race

from pglock.db.embedded import SERVER_USER, EmbeddedServer

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
pytestmark = [
    pytest.mark.skipif(PGBOUNCER is None,
                       reason="pgbouncer is not installed (.ci/run installs it from Debian)"),
    # A PgBouncer of its own per test, contenders through it: the slow layer.
    pytest.mark.slow,
]

CONFIG = """
[databases]
* = host={socket_dir} port=5432 user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = {mode}
max_client_conn = 500
default_pool_size = 10
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


@contextlib.contextmanager
def pgbouncer(pg_server: EmbeddedServer | None, tmp_path_factory: pytest.TempPathFactory,
              mode: str) -> Iterator[str]:
    """A PgBouncer in `mode` pooling in front of the test server; its DSN."""
    if pg_server is None:
        pytest.skip("PgBouncer tests need the embedded test server (PGLOCK_TEST_DSN is set)")
    assert PGBOUNCER is not None
    directory = tmp_path_factory.mktemp("pgbouncer")
    socket_dir = pg_server.conninfo.split("host=")[1].split()[0]
    port = free_port()
    (directory / "users.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(
        CONFIG.format(socket_dir=socket_dir, port=port, dir=directory, mode=mode))
    command = [PGBOUNCER, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; the server's own user may reach its socket.
        account = pwd.getpwnam(SERVER_USER)
        os.chown(directory, account.pw_uid, account.pw_gid)
        for child in directory.iterdir():
            os.chown(child, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", SERVER_USER]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dsn = f"host=127.0.0.1 port={port} dbname=postgres user=postgres"
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                psycopg.connect(dsn, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError((directory / "pgbouncer.log").read_text()) from None
                time.sleep(0.1)
        yield dsn
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def bouncer(pg_server: EmbeddedServer | None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[str]:
    """A PgBouncer in transaction pooling in front of the test server; its DSN."""
    with pgbouncer(pg_server, tmp_path_factory, "transaction") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def session_bouncer(pg_server: EmbeddedServer | None, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[str]:
    """A PgBouncer in session pooling in front of the test server; its DSN."""
    with pgbouncer(pg_server, tmp_path_factory, "session") as dsn:
        yield dsn


def test_lease_mode_excludes_through_transaction_pooling(env: Env, bouncer: str) -> None:
    env.env["PGLOCK_DSN"] = bouncer
    marks, release = env.tmp / "marks", env.tmp / "release"
    for round_number in range(3):
        # Each round is a new trigger, deliberately run inside the last one's hold.
        processes = [env.popen("run", "--job", "pooled", "--ttl", "5s", "--rerun", "--",
                               *held_command(marks, release)) for _ in range(20)]
        results = race(processes, release)
        assert results == [(0, "", "")] + [(75, "", "")] * 19, round_number
    found = intervals(marks)
    assert len(found) == 3
    assert_no_overlap(found)
    assert [r["outcome"] for r in env.runs("pooled")] == ["succeeded"] * 3


def test_long_lease_renews_through_the_pooler(env: Env, bouncer: str) -> None:
    env.env["PGLOCK_DSN"] = bouncer
    result = env.run("run", "--job", "renewing", "--ttl", "5s", "--", "sleep", "8")
    assert (result.returncode, result.stderr) == (0, "")
    [(token, renewed)] = env.query(
        "SELECT fencing_token, renewed_at > acquired_at FROM {schema}.locks WHERE job = 'renewing'")
    assert (token, renewed) == (1, True)


def test_advisory_mode_refuses_to_run_behind_transaction_pooling(env: Env, bouncer: str) -> None:
    env.env["PGLOCK_DSN"] = bouncer
    ran = env.tmp / "ran"
    result = env.run("run", "--job", "unsafe", "--mode", "advisory", "--", "touch", str(ran))
    assert result.returncode == 125
    assert "pooled" in one_line(result.stderr)
    assert not ran.exists()
    assert env.runs("unsafe") == []
