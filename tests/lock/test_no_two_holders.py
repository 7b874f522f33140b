"""No two holders across an asynchronous promotion, on real servers (docs/ha.md, issue 42):
a primary and an asynchronous standby, the fault staged deterministically (a relay that
loses a statement's reply or cuts a holder off, the standby's WAL receiver stopped, the
primary killed, the standby promoted), and the commands' ticks proving no overlap
(tests/promotions.py). The kept lock (case 2, and 4's clocks) is in test_kept_lock.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta

import pytest
from conftest import Env
from promotions import (
    assert_apart,
    ended,
    first_seen,
    only_primary,
    pair,
    promoted,
    spans,
    started_at,
    through,
    ticking,
)
from relay import Relay
from replication import Pair

pytestmark = pytest.mark.slow

__all__ = ["pair"]  # the fixture, used by name


# ------------------------------------------------------------------------ case 1

def test_a_resent_advisory_acquire_waits_like_anyone_after_a_promotion(
        env: Env, pair: Pair) -> None:
    """host1's advisory acquire commits and replicates, its reply is lost and its session
    ends; host0 takes the job over at host1's stops_by (the session lock proves host1
    gone) and runs; the standby, which has host1's row but not host0's takeover, is
    promoted; host1's acquire, sent again within --connect-timeout, reaches it and finds
    its own row. Before version 9 it took that row at once, its expiry not yet reached,
    and ran beside host0 (6.0 s of two commands at once, as a new user met it). Now a row
    of an older timeline goes back to nobody before the wait after the promotion: host1
    waits it out, then runs."""
    marks = env.tmp / "ticks"
    assert env.run("init", "-q").returncode == 0
    relay = Relay(pair.primary_socket)
    relay.mute_after(b"acquire(")
    host1 = env.popen("run", "--job", "j", "--mode", "advisory", "--ttl", "15s",
                      "--connect-timeout", "60s", "--holder", "host1", "--dsn", through(relay),
                      "--", *ticking(marks, 4))
    host0: subprocess.Popen[str] | None = None
    try:
        env.wait_for(relay.muted.is_set, what="host1's acquire")
        env.wait_for(lambda: env.query("SELECT holder FROM {schema}.locks") == [("host1",)],
                     what="host1's row, committed")
        pair.replayed()
        pair.cut_standby()
        relay.cut(reset=True)
        host0 = env.popen("run", "--job", "j", "--mode", "advisory", "--ttl", "15s",
                          "--wait", "30s", "--holder", "host0", "--dsn", only_primary(pair),
                          "--", *ticking(marks))
        env.wait_for(lambda: marks.exists(), timeout=40, what="host0's command")
        promoted(env, pair)
        relay.target = pair.standby_socket
        relay.restore()
        code1, err1 = ended(host1)
        code0, err0 = ended(host0)
    finally:
        relay.close()
        for process in (host1, host0):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert (code1, err1) == (0, ""), err1
    assert code0 == 125 and "lock" in err0, err0
    found = spans(marks)
    assert_apart(found)
    # host1 ran after the wait: a ttl after the new timeline was first seen, a new token.
    assert [s.token for s in found] == [2, (1 << 32) + 1]
    assert started_at(env, "j", (1 << 32) + 1) >= first_seen(env) + timedelta(seconds=15)
    [late] = env.query("SELECT late_reason FROM {schema}.runs WHERE fencing_token = %s",
                       ((1 << 32) + 1,))
    assert late == ("promotion_wait",)


# ------------------------------------------------------------------------ case 3

@pytest.mark.parametrize("row", ["a row", "no row"])
def test_a_longer_ttl_whose_acquisition_was_lost_is_waited_out(
        env: Env, pair: Pair, row: str) -> None:
    """Two hosts of one job with different ttls (20 s and 5 s, as a crontab's PGLOCK_TTL
    beside a jobs file's would give). The long one's acquisition is lost in the
    promotion; the short one, on the new primary, waits the longest ttl the old timeline
    granted (for the job's row, or the schema's with no row), not its own: before version 9
    it waited 5 s and ran while the lost holder still did."""
    marks = env.tmp / "ticks"
    job = "t"
    if row == "a row":
        for ttl in ("20s", "5s"):
            done = env.run("run", "--job", job, "--ttl", ttl, "--min-hold", "0s", "--", "true")
            assert (done.returncode, done.stderr) == (0, ""), done
    else:
        # Another job granted 20 s on this timeline; this one never ran.
        done = env.run("run", "--job", "other", "--ttl", "20s", "--", "true")
        assert (done.returncode, done.stderr) == (0, ""), done
        done = env.run("run", "--job", "third", "--ttl", "5s", "--", "true")
        assert (done.returncode, done.stderr) == (0, ""), done
    pair.replayed()
    pair.cut_standby()
    lost = env.popen("run", "--job", job, "--ttl", "20s", "--holder", "long",
                     "--dsn", only_primary(pair), "--", *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the long holder's command")
        promoted(env, pair)
        # --wait, as a contender on the new primary that keeps trying: it used to run as
        # soon as its own 5 s had passed since the first sighting.
        short = env.run("run", "--job", job, "--ttl", "5s", "--wait", "60s", "--holder",
                        "short", "--", *ticking(marks, 2), timeout=120)
        code, err = ended(lost)
    finally:
        if lost.poll() is None:
            lost.kill()
            lost.communicate()
    assert (short.returncode, short.stderr) == (0, ""), short
    assert code == 125, err
    found = spans(marks)
    assert_apart(found)
    assert found[-1].token == (1 << 32) + 1
    assert started_at(env, job, (1 << 32) + 1) >= first_seen(env) + timedelta(seconds=20)


# ------------------------------------------------------------------------ D1

def test_a_stopped_advisory_holder_is_taken_over_once_it_has_stopped_its_command(
        env: Env) -> None:
    """An advisory holder whose pglock is stopped (Ctrl-Z, kill -STOP) keeps its session,
    and its session lock, for as long as it stays stopped: every contender used to skip,
    fleet-wide. Its watchdog stops the command by the row's stops_by; past it, a contender
    ends the stopped holder's session and takes the job over. Thawed, the holder finds its
    lock lost (exit 125)."""
    marks = env.tmp / "ticks"
    holder = env.popen("run", "--job", "d", "--mode", "advisory", "--ttl", "6s", "--",
                       *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the holder's command")
        os.kill(holder.pid, signal.SIGSTOP)
        contender = env.run("run", "--job", "d", "--mode", "advisory", "--ttl", "6s",
                            "--wait", "20s", "--", *ticking(marks, 1), timeout=60)
        assert (contender.returncode, contender.stderr) == (0, ""), contender
        os.kill(holder.pid, signal.SIGCONT)
        code, err = ended(holder)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.communicate()
    assert code == 125 and "lock" in err, err
    found = spans(marks)
    assert_apart(found)
    assert [s.token for s in found] == [1, 2]


def test_clear_terminate_ends_a_stopped_advisory_holders_session(env: Env) -> None:
    """`clear --terminate` of a job whose advisory holder is stopped past its lock's
    expiry: its session, which still holds the session lock, is ended (it used to say
    nobody held the job and leave the session), with an audit row; the next run takes the
    job at once."""
    marks = env.tmp / "ticks"
    holder = env.popen("run", "--job", "e", "--mode", "advisory", "--ttl", "6s", "--",
                       *ticking(marks))
    try:
        env.wait_for(lambda: marks.exists(), what="the holder's command")
        os.kill(holder.pid, signal.SIGSTOP)
        env.wait_for(lambda: env.query("SELECT expires_at < clock_timestamp() "
                                       "FROM {schema}.locks") == [(True,)],
                     timeout=20, what="the stopped holder's lock to expire")
        cleared = env.run("clear", "--job", "e", "--terminate", "--yes", "--reason", "ctrl-z")
        assert cleared.returncode == 0, cleared
        assert "session" in cleared.stdout and "terminated" in cleared.stdout, cleared.stdout
        assert env.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]
        [(action, reason)] = env.query("SELECT action, reason FROM {schema}.audit")
        assert (action, reason) == ("clear", "ctrl-z")
        started = time.monotonic()
        after = env.run("run", "--job", "e", "--mode", "advisory", "--ttl", "6s", "--",
                        *ticking(marks, 1))
        assert (after.returncode, after.stderr) == (0, ""), after
        assert time.monotonic() - started < 5
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    assert_apart(spans(marks))
