"""A failover on real servers: the primary dies, its synchronous standby is promoted.

pglock is pointed at both nodes with one multi-host DSN. The lock taken on the old
primary was replicated before it was acknowledged, so on the new primary it is the
same row with the same token: the holder carries on, contenders are refused.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Env
from marks import held_command, intervals
from replication import Pair

from pglock.db.keys import advisory_key

pytestmark = pytest.mark.slow


@pytest.fixture
def pair(env: Env, tmp_path: Path) -> Iterator[Pair]:
    """A synchronous pair; `env` runs pglock against both nodes, and queries the primary."""
    nodes = Pair(tmp_path / "ha", synchronous=True).start()
    env.dsn = nodes.primary_dsn
    env.env["PGLOCK_DSN"] = nodes.both_dsn
    yield nodes
    nodes.close()


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

    following = env.run("run", "--job", "ha", "--rerun", "--", "true")
    assert (following.returncode, following.stderr) == (0, "")
    assert [r["fencing_token"] for r in env.runs("ha")] == [before[1], before[1] + 1]
    assert not ran.exists()
    timeline.show(env, "ha")


def test_advisory_holder_takes_its_lock_back_on_the_new_primary(env: Env, pair: Pair) -> None:
    marks, release, ran = env.tmp / "marks", env.tmp / "release", env.tmp / "ran"
    holder = env.popen("run", "--job", "ha", "--mode", "advisory", "--ttl", "60s", "--",
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
    following = env.run("run", "--job", "ha", "--mode", "advisory", "--rerun", "--", "true")
    assert (following.returncode, following.stderr) == (0, "")
    assert [r["fencing_token"] for r in env.runs("ha")] == [before[1], before[1] + 1]
    assert not ran.exists()
    timeline.show(env, "ha")
