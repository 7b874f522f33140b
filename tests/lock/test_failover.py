"""A failover on real servers: the primary dies, its synchronous standby is promoted.

pglock is pointed at both nodes with one multi-host DSN. The lock taken on the old
primary was replicated before it was acknowledged, so on the new primary it is the
same row with the same token: the holder carries on, contenders are refused.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Env
from marks import assert_no_overlap, held_command, intervals, marking_command
from replication import Pair

from pglock.db.keys import advisory_key

pytestmark = pytest.mark.slow


def started(env: Env, tmp_path: Path, synchronous: bool) -> Iterator[Pair]:
    """A pair; `env` runs pglock against both nodes, and queries the primary."""
    nodes = Pair(tmp_path / "ha", synchronous=synchronous).start()
    env.dsn = nodes.primary_dsn
    env.env["PGLOCK_DSN"] = nodes.both_dsn
    yield nodes
    nodes.close()


@pytest.fixture
def pair(env: Env, tmp_path: Path) -> Iterator[Pair]:
    """A synchronous pair (started())."""
    yield from started(env, tmp_path, synchronous=True)


def lock_row(env: Env, job: str) -> tuple[Any, ...]:
    [row] = env.query("SELECT holder_id, fencing_token, acquired_at FROM {schema}.locks "
                      "WHERE job = %s", (job,))
    return tuple(row)


def promote(env: Env, pair: Pair, job: str, timeline: Timeline) -> None:
    """Promote the standby, and wait for the holder's first renewal there."""
    pair.promote()
    timeline.mark("standby promoted")
    env.dsn = pair.standby_dsn
    [(promoted_at,)] = env.query("SELECT clock_timestamp()")
    env.wait_for(lambda: env.query("SELECT renewed_at > %s FROM {schema}.locks WHERE job = %s",
                                   (promoted_at, job)) == [(True,)],
                 timeout=60, what="the holder's renewal on the new primary")
    [(renewed_at,)] = env.query("SELECT renewed_at FROM {schema}.locks WHERE job = %s", (job,))
    timeline.events.append((renewed_at, "the holder renewed on the new primary"))


class Timeline:
    """What happened when, with the history rows, for the record (pytest -s shows it)."""

    def __init__(self) -> None:
        self.events: list[tuple[datetime, str]] = []

    def mark(self, what: str) -> None:
        self.events.append((datetime.now(UTC), what))

    def show(self, env: Env, job: str) -> None:
        events = list(self.events)
        for run in env.runs(job):
            events.append((run["started_at"], f"run {run['id']} started, token "
                                              f"{run['fencing_token']}"))
            events.append((run["finished_at"], f"run {run['id']} finished: {run['outcome']}"))
        events.sort()
        for at, what in events:
            print(f"  +{(at - events[0][0]).total_seconds():6.2f}s  {what}")


def test_lease_holder_carries_on_across_a_synchronous_failover(env: Env, pair: Pair) -> None:
    marks, release, ran = env.tmp / "marks", env.tmp / "release", env.tmp / "ran"
    holder = env.popen("run", "--job", "ha", "--ttl", "30s", "--",
                       *held_command(marks, release))
    env.wait_for(lambda: marks.exists(), what="the holder's command")
    before = lock_row(env, "ha")

    timeline = Timeline()
    pair.kill_primary()
    timeline.mark("primary killed (pg_ctl stop -m immediate)")
    # No primary at all: this contender keeps trying to connect, and gets the new one.
    during = env.popen("run", "--job", "ha", "--connect-timeout", "60s", "--", "touch", str(ran))
    timeline.mark("contender started, no primary up")
    promote(env, pair, "ha", timeline)
    assert lock_row(env, "ha") == before
    assert during.communicate(timeout=60) == ("", "")
    assert during.returncode == 75
    timeline.mark("that contender exited 75")
    after = env.run("run", "--job", "ha", "--", "touch", str(ran))
    assert (after.returncode, after.stderr) == (75, "")
    timeline.mark("a contender on the new primary exited 75")
    assert holder.poll() is None

    release.touch()
    assert holder.communicate(timeout=60) == ("", "")
    assert holder.returncode == 0
    [interval] = intervals(marks)
    assert interval.token == before[1]
    [run] = env.runs("ha")
    assert (run["outcome"], run["fencing_token"]) == ("succeeded", before[1])

    # The row keeps the old timeline (only an acquisition stamps one: version 9), so the
    # next run waits out the wait after the promotion, then runs, late.
    following = env.run("run", "--job", "ha", "--rerun", "--ttl", "30s", "--", "true",
                        timeout=90)
    assert (following.returncode, following.stderr) == (0, "")
    # The first token of the new timeline (timeline 2), above every token of the old one.
    assert [r["fencing_token"] for r in env.runs("ha")] == [before[1], (1 << 32) + 1]
    waited_out(env, "ha", 30)
    assert not ran.exists()
    timeline.show(env, "ha")


def waited_out(env: Env, job: str, ttl: float) -> None:
    """The job's newest run started a ttl or more after the new timeline was first seen,
    and says it started late for that wait."""
    [(first_seen,)] = env.query("SELECT max(first_seen) FROM {schema}.timelines")
    newest = env.runs(job)[-1]
    assert newest["started_at"] >= first_seen + timedelta(seconds=ttl)
    assert newest["late_reason"] == "promotion_wait"


def test_advisory_holder_takes_its_lock_back_on_the_new_primary(env: Env, pair: Pair) -> None:
    marks, release, ran = env.tmp / "marks", env.tmp / "release", env.tmp / "ran"
    holder = env.popen("run", "--job", "ha", "--mode", "advisory", "--ttl", "30s", "--",
                       *held_command(marks, release))
    env.wait_for(lambda: marks.exists(), what="the holder's command")
    before = lock_row(env, "ha")

    timeline = Timeline()
    pair.kill_primary()
    timeline.mark("primary killed (pg_ctl stop -m immediate)")
    promote(env, pair, "ha", timeline)
    assert lock_row(env, "ha") == before
    # The session lock, which replication does not carry, is held again, by the holder.
    held_by = env.query(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
        (advisory_key(env.schema, "ha"),))
    assert [name for (name,) in held_by] == [f"pglock run ha on {socket.gethostname()}"[:63]]
    contender = env.run("run", "--job", "ha", "--mode", "advisory", "--", "touch", str(ran))
    assert (contender.returncode, contender.stderr) == (75, "")
    timeline.mark("a contender on the new primary exited 75")
    assert holder.poll() is None

    release.touch()
    assert holder.communicate(timeout=60) == ("", "")
    assert holder.returncode == 0
    [run] = env.runs("ha")
    assert (run["outcome"], run["fencing_token"]) == ("succeeded", before[1])
    following = env.run("run", "--job", "ha", "--mode", "advisory", "--rerun", "--ttl",
                        "30s", "--", "true", timeout=90)
    assert (following.returncode, following.stderr) == (0, "")
    # The first token of the new timeline (timeline 2), above every token of the old one.
    assert [r["fencing_token"] for r in env.runs("ha")] == [before[1], (1 << 32) + 1]
    waited_out(env, "ha", 30)
    assert not ran.exists()
    timeline.show(env, "ha")


def _outage(pair: Pair, event: str) -> None:
    """The primary goes and comes back: restarted, crashed and recovered, or replaced by
    its promoted standby."""
    if event == "restart":
        pair.primary.stop()
        pair.primary.start()
    elif event == "crash":
        pair.kill_primary()
        pair.primary.start()
    else:
        pair.kill_primary()
        pair.promote()


def _serving(env: Env, pair: Pair, event: str) -> None:
    if event == "promote":
        env.dsn = pair.standby_dsn


@pytest.mark.parametrize("event", ["restart", "crash", "promote"])
def test_advisory_holder_keeps_its_lock_across_an_outage(env: Env, pair: Pair,
                                                         event: str) -> None:
    """Contenders try all through the outage: the free session lock on the server that
    comes back proves nothing (the row was stamped by another incarnation), so none takes
    the row; the holder takes its lock back and completes."""
    marks, release = env.tmp / "marks", env.tmp / "release"
    holder = env.popen("run", "--job", "ha", "--mode", "advisory", "--ttl", "30s", "--",
                       *held_command(marks, release))
    env.wait_for(lambda: marks.exists(), what="the holder's command")
    before = lock_row(env, "ha")
    codes: list[int] = []
    stop = threading.Event()

    def contend() -> None:
        while not stop.is_set():
            done = env.run("run", "--job", "ha", "--mode", "advisory", "--connect-timeout",
                           "5s", "--", *marking_command(marks, 0.2))
            codes.append(done.returncode)
            time.sleep(0.1)

    contenders = [threading.Thread(target=contend) for _ in range(3)]
    for contender in contenders:
        contender.start()
    _outage(pair, event)
    _serving(env, pair, event)
    env.wait_for(lambda: env.query("SELECT backend_pid IN (SELECT pid FROM pg_stat_activity) "
                                   "FROM {schema}.locks WHERE job = 'ha'") == [(True,)],
                 timeout=60, what="the holder's lock taken back")
    time.sleep(3)  # contenders keep trying against the lock taken back
    stop.set()
    for contender in contenders:
        contender.join()
    assert holder.poll() is None
    release.touch()
    assert holder.communicate(timeout=60) == ("", "")
    assert holder.returncode == 0
    assert 0 not in codes and codes, codes
    assert_no_overlap(intervals(marks))
    assert [(r["outcome"], r["fencing_token"]) for r in env.runs("ha")] == [
        ("succeeded", before[1])]


@pytest.mark.parametrize("event", ["restart", "crash", "promote"])
def test_a_dead_advisory_holders_lock_is_taken_after_its_ttl(env: Env, pair: Pair,
                                                             event: str) -> None:
    holder, _ = env.start_holder("dead", "--mode", "advisory", "--ttl", "10s")
    holder.kill()
    holder.communicate()
    _outage(pair, event)
    _serving(env, pair, event)
    [(expires_at,)] = env.query("SELECT expires_at FROM {schema}.locks WHERE job = 'dead'")
    back = time.monotonic()
    # The holder's ttl, as the hosts of a job share one: after a promotion the wait is the
    # larger of the row's and the contender's (docs/ha.md).
    while env.run("run", "--job", "dead", "--mode", "advisory", "--ttl", "10s",
                  "--connect-timeout", "10s", "--", "true").returncode != 0:
        assert time.monotonic() - back < 30, "no takeover"
        time.sleep(0.1)
    first, second = env.runs("dead")
    assert (first["outcome"], second["outcome"]) == ("abandoned", "succeeded")
    # Waited out as a lease, by the server's clock; after a promotion, also a ttl after
    # the new timeline was first seen.
    assert second["started_at"] >= expires_at
    if event == "promote":
        [(first_seen,)] = env.query("SELECT first_seen FROM {schema}.timelines "
                                    "WHERE timeline = 2")
        assert second["started_at"] >= first_seen + timedelta(seconds=10)


# Marks its entry, and its exit when pglock stops it (SIGTERM to its process group): the
# old holder of an asynchronous failover runs until its lock is found lost.
STOPPED_BY_PGLOCK = ('echo "enter $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; '
                     'trap \'echo "leave $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; '
                     'exit 143\' TERM; while :; do sleep 0.05; done')


@pytest.fixture
def async_pair(env: Env, tmp_path: Path) -> Iterator[Pair]:
    """An asynchronous pair (started())."""
    yield from started(env, tmp_path, synchronous=False)


@pytest.mark.parametrize("mode", ["lease", "advisory"])
@pytest.mark.parametrize("before", ["no row", "a released row"])
def test_a_lost_acquisition_is_waited_out_after_an_asynchronous_failover(
        env: Env, async_pair: Pair, mode: str, before: str) -> None:
    """The standby stops receiving WAL before the acquisition, so the promoted one never
    saw it: the old holder stops at its next renewal there, and a contender on the new
    primary runs only once a ttl has passed since the new timeline was first seen, with a
    token above every token of the old timeline; the marks show no overlap."""
    marks = env.tmp / "marks"
    if before == "a released row":
        earlier = env.run("run", "--job", "ha", "--mode", mode, "--ttl", "10s",
                          "--min-hold", "0s", "--", "true")
        assert (earlier.returncode, earlier.stderr) == (0, ""), earlier
    else:
        assert env.run("init", "-q").returncode == 0
    async_pair.replayed()
    async_pair.cut_standby()
    old = env.popen("run", "--job", "ha", "--mode", mode, "--ttl", "10s", "--",
                    "sh", "-c", STOPPED_BY_PGLOCK.format(marks=marks))
    env.wait_for(lambda: marks.exists(), what="the old holder's command")
    [(old_token,)] = env.query("SELECT fencing_token FROM {schema}.locks WHERE job = 'ha'")
    async_pair.kill_primary()
    async_pair.promote()
    env.dsn = async_pair.standby_dsn
    new = env.run("run", "--job", "ha", "--mode", mode, "--ttl", "10s", "--wait", "60s",
                  "--", *marking_command(marks, 0.2), timeout=90)
    assert (new.returncode, new.stderr) == (0, ""), new
    _, old_err = old.communicate(timeout=60)
    assert old.returncode != 0 and "lock" in old_err, old_err
    first, second = intervals(marks)
    assert_no_overlap([first, second])
    # Tokens rise across the promotion: the new timeline's are in higher bits.
    assert (first.token, second.token) == (old_token, (1 << 32) + 1)
    [(first_seen, ttl_after)] = env.query(
        "SELECT first_seen, first_seen + interval '10 s' FROM {schema}.timelines "
        "WHERE timeline = 2")
    [run] = [r for r in env.runs("ha") if r["fencing_token"] == second.token]
    assert run["started_at"] >= ttl_after, (run["started_at"], first_seen)
