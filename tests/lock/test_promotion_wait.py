"""A trigger that fires within the wait after a promotion (docs/ha.md, "After a promotion:
one ttl of waiting"): refused by the wait alone, it waits for the wait's end, whatever
--wait says, and tries once more, so that its slot runs late instead of being lost; a
stop signal ends that wait as any other, and a wait that would end past --deadline
records the slot missed, with its reason. On a synchronous pair of the test's own."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import Env
from replication import Pair

pytestmark = pytest.mark.slow

# A slot that stays the same however long the test takes: the last 1 January, 00:00 UTC.
YEARLY = ["--schedule", "0 0 1 1 *", "--tz", "UTC"]


@pytest.fixture
def promoted(env: Env, tmp_path: Path) -> Iterator[Pair]:
    """A synchronous pair whose standby was just promoted, with the job `s` run once by
    hand before (so its row, replicated, is of the old timeline); `env` on the new
    primary."""
    pair = Pair(tmp_path / "ha", synchronous=True).start()
    env.dsn = pair.primary_dsn
    env.env["PGLOCK_DSN"] = pair.both_dsn
    done = env.run("run", "--job", "s", "--ttl", "10s", "--min-hold", "0s", "--", "true")
    assert (done.returncode, done.stderr) == (0, ""), done
    pair.kill_primary()
    pair.promote()
    env.dsn = pair.standby_dsn
    yield pair
    pair.close()


def first_seen(env: Env) -> datetime:
    [(seen,)] = env.query("SELECT max(first_seen) FROM {schema}.timelines")
    return seen  # type: ignore[no-any-return]


def test_a_trigger_within_the_wait_runs_its_slot_once_when_the_wait_ends(
        env: Env, promoted: Pair) -> None:
    """Two triggers of one slot within the wait, neither with --wait: both wait for its
    end; one runs the slot, late, the other finds it done (75). Before this, both exited
    75 at once and the slot was lost, with nothing recorded."""
    ran = env.tmp / "ran"
    command = ["sh", "-c", f"echo $PGLOCK_FENCING_TOKEN >> {ran}"]
    first = env.popen("run", "--job", "s", "--ttl", "10s", *YEARLY, "--", *command)
    time.sleep(1.0)
    second = env.popen("run", "--job", "s", "--ttl", "10s", *YEARLY, "--", *command)
    outcomes = sorted((p.communicate(timeout=60), p.returncode) for p in (first, second))
    assert outcomes == [(("", ""), 0), (("", ""), 75)], outcomes
    assert ran.read_text().split() == [str((1 << 32) + 1)]
    slot_runs = [r for r in env.runs("s") if r["slot"] is not None]
    assert [(r["outcome"], r["late_reason"]) for r in slot_runs] == [
        ("succeeded", "promotion_wait")]
    assert slot_runs[0]["started_at"] >= first_seen(env) + timedelta(seconds=10)
    history = env.run("history", "--job", "s")
    assert "started late: after the wait that followed a promotion" in history.stdout


def test_a_wait_moved_while_a_trigger_waits_is_waited_out_too(
        env: Env, promoted: Pair) -> None:
    """A later promotion within the wait brings a wait of its own: the trigger, refused
    again when it comes back, waits that one out too and runs the slot (found by the
    soak: a second failover 7 s after the first made every trigger of the slot exit 75,
    as the client tried only once more). The second promotion is stood in for by the
    timeline's first sighting moved to now, which is what it does to the wait."""
    ran = env.tmp / "ran"
    waiting = env.popen("run", "--job", "s", "--ttl", "10s", *YEARLY, "--", "sh", "-c",
                        f"echo $PGLOCK_FENCING_TOKEN >> {ran}")
    env.wait_for(lambda: env.query("SELECT count(*) FROM {schema}.timelines") == [(2,)],
                 what="the trigger's acquire on the new primary")
    time.sleep(2.0)
    [(moved,)] = env.query("UPDATE {schema}.timelines SET first_seen = clock_timestamp() "
                           "WHERE timeline = 2 RETURNING first_seen")
    assert waiting.communicate(timeout=60) == ("", "")
    assert waiting.returncode == 0
    assert ran.read_text().split() == [str((1 << 32) + 1)]
    [run] = [r for r in env.runs("s") if r["slot"] is not None]
    assert (run["outcome"], run["late_reason"]) == ("succeeded", "promotion_wait")
    assert run["started_at"] >= moved + timedelta(seconds=10)


def test_a_stop_signal_ends_the_wait_after_a_promotion(env: Env, promoted: Pair) -> None:
    waiting = env.popen("run", "--job", "s", "--ttl", "10s", *YEARLY, "--", "true")
    env.wait_for(lambda: env.query("SELECT count(*) FROM {schema}.timelines") == [(2,)],
                 what="the trigger's acquire on the new primary")
    time.sleep(0.5)
    stopped = time.monotonic()
    waiting.send_signal(signal.SIGTERM)
    assert waiting.communicate(timeout=30) == ("", "")
    assert waiting.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - stopped < 3
    assert [r for r in env.runs("s") if r["slot"] is not None] == []


def test_a_wait_ending_past_the_deadline_records_the_slot_missed(
        env: Env, promoted: Pair) -> None:
    """The wait (10 s) would end past --deadline (3 s after the trigger): the slot is
    given up, exit 75, and recorded missed with its reason (history, status --json, the
    job's count); a catch-up may still take it."""
    now = datetime.now(UTC)
    if now.second > 45:
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    slot = now.replace(second=0, microsecond=0)
    deadline = int((now - slot).total_seconds()) + 3
    missed = env.run("run", "--job", "s", "--ttl", "10s", "--schedule", "* * * * *", "--tz",
                     "UTC", "--deadline", f"{deadline}s", "--", "true")
    assert (missed.returncode, missed.stderr) == (75, ""), missed
    assert env.query("SELECT slot, attempts, missed_reason FROM {schema}.slots") == [
        (slot, 0, "promotion_wait")]
    assert env.query("SELECT promotion_missed FROM {schema}.jobs WHERE job = 's'") == [(1,)]
    history = env.run("history", "--job", "s")
    assert "missed: the wait after a promotion ended past --deadline: 1 slot" in history.stdout
