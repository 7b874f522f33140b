"""The fewest round trips, counted by the server (every statement logged): a lease-mode
winner sends 2 statements after connecting (acquire with its start record, finish with
its release), a loser 1; in advisory mode a loser against a running holder 1."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import PGLOCK, TEST_SETTINGS

from pglock.db.embedded import EmbeddedServer

pytestmark = pytest.mark.slow

HOST = "counted"


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of the test's own that logs every statement with its application_name."""
    server = EmbeddedServer(tmp_path / "pg", settings={
        **TEST_SETTINGS, "log_statement": "all", "log_line_prefix": "%a|"})
    server.join()
    yield server
    server.leave()


def statements(server: EmbeddedServer, job: str, *args: str, expected: int = 0,
               host: str = HOST) -> int:
    """How many statements `pglock run --job JOB ARGS -- true` sent (on `host`, its census
    name; its holder is HOST, which names its statements in the log)."""
    offset = server.log_path.stat().st_size
    env = {"PGLOCK_DSN": server.conninfo, "PGLOCK_SCHEMA": "counted", "PGLOCK_HOLDER": HOST,
           "PGLOCK_HOST": host}
    done = subprocess.run([PGLOCK, "run", "--job", job, *args, "--", "true"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (expected, ""), done
    application = re.escape(f"pglock run {job} on {HOST}")
    pattern = re.compile(rf"^{application}\|\S* ?LOG:  (statement|execute [^:]*): ",
                         re.MULTILINE)
    # The server's logger is a process of its own: wait until the last statement is in.
    for _ in range(50):
        found = len(pattern.findall(server.log_path.read_bytes()[offset:].decode(
            errors="replace")))
        if found >= (1 if expected else 2):
            time.sleep(0.2)
            return len(pattern.findall(server.log_path.read_bytes()[offset:].decode(
                errors="replace")))
        time.sleep(0.1)
    raise AssertionError(f"no statement of {job!r} in the server's log")


def test_a_winner_sends_two_statements_and_a_loser_one(logged: EmbeddedServer) -> None:
    # The first run creates the schema: once per database, not counted.
    statements(logged, "warm")
    assert statements(logged, "x", "--min-hold", "60") == 2
    assert statements(logged, "x", expected=75, host="counted-loser") == 1
    # The census rode in that one statement: the loser is in it (issue 44).
    with psycopg.connect(logged.conninfo, autocommit=True) as conn:
        assert conn.execute("SELECT host, outcome FROM counted.attendance WHERE job = 'x' "
                            "ORDER BY host").fetchall() == [
            ("counted", "ran"), ("counted-loser", "held")]
    # Scheduled: the slot check rides in the same statements.
    assert statements(logged, "s", "--schedule", "0 0 1 1 *", "--tz", "UTC") == 2
    assert statements(logged, "s", "--schedule", "0 0 1 1 *", "--tz", "UTC",
                      expected=75) == 1


def test_an_advisory_loser_against_a_running_holder_sends_one(
        logged: EmbeddedServer, tmp_path: Path) -> None:
    statements(logged, "warm")
    env = {"PGLOCK_DSN": logged.conninfo, "PGLOCK_SCHEMA": "counted"}
    started = tmp_path / "started"
    holder = subprocess.Popen([PGLOCK, "run", "--job", "a", "--mode", "advisory", "--", "sh",
                               "-c", f"touch {started}; exec sleep 60"], env=env)
    try:
        for _ in range(300):
            if started.exists():
                break
            time.sleep(0.1)
        assert statements(logged, "a", "--mode", "advisory", expected=75) == 1
    finally:
        holder.terminate()
        holder.wait(timeout=30)
