"""Test fixtures: a real PostgreSQL (embedded, or PGLOCK_TEST_DSN) and real pglock processes."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pglock.db.embedded import EmbeddedServer

PGLOCK = str(Path(sys.executable).with_name("pglock"))

# A suite started in the background by a shell without job control (`nohup scripts/test &`)
# inherits SIGINT and SIGQUIT ignored, and so would every pglock it starts: one would never
# see the Ctrl-C a test sends it, as a person's terminal would.
for _signum, _handler in ((signal.SIGINT, signal.default_int_handler),
                          (signal.SIGQUIT, signal.SIG_DFL)):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, _handler)
TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                 "max_connections": "400"}

# A developer's environment must not leak into the tests (a trace, a collector included).
for _name in list(os.environ):
    if ((_name.startswith(("PGLOCK_", "PG", "OTEL_")) and _name != "PGLOCK_TEST_DSN")
            or _name in ("TRACEPARENT", "TRACESTATE", "BAGGAGE")):
        del os.environ[_name]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long set runs only when `-m` names it (`-m long`): a plain run, `-m slow` or
    `-m "not slow"` deselects it, and says how many it left out."""
    if "long" in (config.getoption("markexpr") or ""):
        return
    left = [item for item in items if item.get_closest_marker("long")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("long")]


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer | None]:
    """The embedded test server (None when PGLOCK_TEST_DSN names another one)."""
    if os.environ.get("PGLOCK_TEST_DSN"):
        yield None
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("pg"), settings=TEST_SETTINGS)
    server.join()
    yield server
    server.leave()


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of the test's own, to stop and start without disturbing the others."""
    server = EmbeddedServer(tmp_path / "pg", settings=TEST_SETTINGS)
    server.join()
    yield server
    server.start()
    server.leave()


@pytest.fixture(scope="session")
def dsn(pg_server: EmbeddedServer | None) -> str:
    return os.environ.get("PGLOCK_TEST_DSN") or (pg_server.conninfo if pg_server else "")


@dataclass
class Result:
    """A finished pglock process."""

    returncode: int
    stdout: str
    stderr: str


class Env:
    """One test's schema on the test server, and ways to run pglock against it."""

    def __init__(self, dsn: str, schema: str, tmp_path: Path) -> None:
        self.dsn = dsn
        self.schema = schema
        self.tmp = tmp_path
        self.env = {**os.environ, "PGLOCK_DSN": dsn, "PGLOCK_SCHEMA": schema}
        self.started: list[subprocess.Popen[str]] = []

    def popen(self, *args: str, env: dict[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[str]:
        """Start a real pglock process (ended and its pipes closed with the test: close())."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        process = subprocess.Popen([PGLOCK, *args], env={**self.env, **(env or {})}, text=True,
                                   **kwargs)
        self.started.append(process)
        return process

    def close(self) -> None:
        """End what the test left running and close every pipe it left open: a pipe left
        to the garbage collector is a ResourceWarning, which the suite's warnings filter
        turns into the failure of whichever test happens to be running then."""
        for process in self.started:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
                process.communicate(timeout=10)
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
            **kwargs: Any) -> Result:
        """Run pglock to completion."""
        with self.popen(*args, env=env, **kwargs) as process:
            stdout, stderr = process.communicate(timeout=timeout)
        return Result(process.returncode, stdout or "", stderr or "")

    def query(self, text: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[Any]:
        """Rows of a query on the test schema ({schema} is replaced by its quoted name)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.execute(sql.SQL(text).format(schema=sql.Identifier(self.schema)),  # type: ignore[arg-type]
                                  params)
            return cursor.fetchall() if cursor.description else []

    def runs(self, job: str) -> list[dict[str, Any]]:
        """The job's history rows, oldest first (none before pglock created its schema)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
            try:
                cursor.execute(sql.SQL("SELECT * FROM {}.runs WHERE job = %s ORDER BY id").format(
                    sql.Identifier(self.schema)), (job,))
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                return []
            return cursor.fetchall()

    def start_holder(self, job: str, *args: str,
                     seconds: int = 60) -> tuple[subprocess.Popen[str], int]:
        """A pglock running `sleep` for the job, once its command runs; it and the command's pid."""
        pidfile = self.tmp / f"{job}.pid"
        holder = self.popen("run", "--job", job, *args, "--",
                            "sh", "-c", f"echo $$ > {pidfile}; exec sleep {seconds}")
        self.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(),
                      what="the command")
        return holder, int(pidfile.read_text())

    def wait_for(self, predicate: Any, timeout: float = 30, what: str = "condition") -> None:
        """Poll until predicate() is true."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


@pytest.fixture
def env(dsn: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    schema = "t_" + re.sub(r"\W", "_", request.node.name)[:40].lower() + f"_{os.getpid()}"
    environment = Env(dsn, schema, tmp_path)
    yield environment
    environment.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetched(url: str, within: float = 20) -> str:
    """The body of `url` once a server just started answers it."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            assert time.monotonic() < deadline, f"{url} did not answer within {within:g}s"
            time.sleep(0.05)


def one_line(stderr: str) -> str:
    """Assert stderr is exactly one line of pglock's own, without a traceback; return it."""
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {stderr!r}"
    assert lines[0].startswith("pglock: "), lines[0]
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """An in-process CLI call configures logging for a process (boundary.configure_output:
    pglock's logger stops propagating unless -v, or takes nothing with -q); pglock's
    logger is put back after each test with setLevel, which also empties the loggers'
    cache of what is enabled (a level put back by assignment left a cached "WARNING is
    off", and a later test's caplog on the same worker saw no record: test_output, in CI).
    The root logger's handlers are pytest's own, changed by it between a test's phases:
    only its level is put back."""
    root, own = logging.getLogger(), logging.getLogger("pglock")
    saved = (root.level, list(own.handlers), own.level, own.propagate)
    yield
    own.handlers, own.propagate = saved[1], saved[3]
    root.setLevel(saved[0])
    own.setLevel(saved[2])
