"""A command is never started past the lock's deadline (docs/lease.md, "Never outside the
lock"): whatever held pglock up between its acquire and its fork, a late command is not
forked, its attempt is recorded lock_lost, and the host that took the job over runs
untouched."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import psycopg
import pytest
from conftest import Env, one_line
from marks import intervals, marking_command
from psycopg import sql


def waiting_on_a_lock(env: Env, holder: str) -> bool:
    """Whether the backend of `holder`'s run waits on a row lock (its acquire statement)."""
    rows = env.query("SELECT 1 FROM pg_stat_activity WHERE application_name LIKE %s "
                     "AND wait_event_type = 'Lock'", (f"pglock run % on {holder}",))
    return bool(rows)


@pytest.mark.slow
def test_a_command_held_up_past_the_deadline_is_not_started(env: Env) -> None:
    """Host A sends its acquire, and is frozen (SIGSTOP) while the statement waits; the
    acquire commits, A stays frozen past its ttl, host B takes the expired lock and runs;
    A, thawed, learns it won long ago: it must not start its command."""
    marks = env.tmp / "marks"
    # The job's lock row exists (a first run), so the test can hold it.
    assert env.run("run", "--job", "j", "--min-hold", "0", "--", "true").returncode == 0
    blocker = psycopg.connect(env.dsn)  # a transaction of its own, held open
    try:
        blocker.execute(sql.SQL("SELECT 1 FROM {}.locks WHERE job = 'j' FOR UPDATE").format(
            sql.Identifier(env.schema)))
        a = env.popen("run", "--job", "j", "--ttl", "6s", "--holder", "A", "--",
                      *marking_command(marks, 3))
        env.wait_for(lambda: waiting_on_a_lock(env, "A"), what="A's acquire to wait")
        os.kill(a.pid, signal.SIGSTOP)
        blocker.commit()  # A's acquire now runs on the server: A wins, but sleeps through it
    finally:
        blocker.close()
    try:
        env.wait_for(lambda: any(r["holder"] == "A" for r in env.runs("j")),
                     what="A's acquire to commit")
        time.sleep(7)  # past A's ttl (6 s)
        b = env.popen("run", "--job", "j", "--ttl", "6s", "--holder", "B", "--",
                      *marking_command(marks, 4))
        env.wait_for(lambda: marks.exists() and "enter" in marks.read_text(),
                     what="B's command")
    finally:
        os.kill(a.pid, signal.SIGCONT)
    _, a_err = a.communicate(timeout=60)
    _, b_err = b.communicate(timeout=60)
    assert a.returncode == 125, a_err
    assert "not started: the lock's deadline to start the command passed" in one_line(a_err)
    assert b.returncode == 0, b_err
    # One command ran, B's: A's never entered.
    assert len(intervals(marks)) == 1
    runs = {r["holder"]: r for r in env.runs("j") if r["holder"] in ("A", "B")}
    assert runs["B"]["outcome"] == "succeeded"
    assert runs["A"]["outcome"] in ("lock_lost", "abandoned")
    assert runs["A"]["exit_code"] is None


def full_syslog_socket(path: Path) -> socket.socket:
    """A syslog socket whose receiver reads nothing, its queue filled up."""
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.connect(str(path))
    sender.setblocking(False)
    try:
        while True:
            sender.send(b"x" * 1024)
    except BlockingIOError:
        pass
    finally:
        sender.close()
    return receiver


def test_a_stuck_event_log_holds_up_nothing(env: Env) -> None:
    """The reproduction of the defect: a syslog receiver that stopped reading held the
    holder between acquire and fork for good. Each event now waits at most EVENT_WAIT;
    the rest are dropped, said once; the command starts at once, under its lock."""
    marks = env.tmp / "marks"
    receiver = full_syslog_socket(env.tmp / "log.sock")
    try:
        # Before, this run never ended: the first event's send waited for good.
        done = env.run("run", "--job", "j", "--ttl", "6s",
                       "--event-log", f"syslog:{env.tmp / 'log.sock'}", "--",
                       *marking_command(marks, 0.1), timeout=30)
    finally:
        receiver.close()
    assert done.returncode == 0, done.stderr
    assert "takes no events" in one_line(done.stderr)
    assert len(intervals(marks)) == 1
    assert [r["outcome"] for r in env.runs("j")] == ["succeeded"]


def test_a_command_inside_its_start_deadline_is_forked(tmp_path: Path) -> None:
    """The other side of the check before the fork (tests/unit/run/test_late_start.py
    refuses; a unit test forks nothing): with its deadline still ahead, the command runs."""
    from pglock.lock import clock
    from pglock.run.child import Child, Deadlines

    mark = tmp_path / "ran"
    child = Child.spawn(["touch", str(mark)], dict(os.environ),
                        deadlines=Deadlines(clock.now() + 0.5))
    assert child.wait() == 0
    child.stand_down()
    assert mark.exists()
