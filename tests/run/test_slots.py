"""Scheduled runs with real processes: one run per slot, --deadline, PGLOCK_SLOT, bad input."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Env, one_line

# A slot long past and stable: 00:00 on 1 January of this year, in UTC.
NEW_YEAR = "0 0 1 1 *"


def new_year_slot() -> datetime:
    return datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)


def test_two_hosts_racing_one_slot_run_it_once_and_a_late_third_skips(env: Env) -> None:
    marks = env.tmp / "marks"
    hosts = [env.popen("run", "--job", "yearly", "--schedule", NEW_YEAR, "--tz", "UTC",
                       "--holder", f"host-{i}", "--", "sh", "-c", f"echo $PGLOCK_HOLDER >> {marks}")
             for i in range(2)]
    outputs = [host.communicate(timeout=60) for host in hosts]
    assert sorted(host.returncode for host in hosts) == [0, 75]
    assert outputs == [("", ""), ("", "")]
    # The lock is free again, but the slot has had its run.
    late = env.run("run", "--job", "yearly", "--schedule", NEW_YEAR, "--tz", "UTC",
                   "--holder", "host-2", "--", "sh", "-c", f"echo late >> {marks}")
    assert (late.returncode, late.stdout, late.stderr) == (75, "", "")
    assert len(marks.read_text().splitlines()) == 1
    [run] = env.runs("yearly")
    assert run["slot"] == new_year_slot() and run["outcome"] == "succeeded"
    slot = new_year_slot()
    assert env.query("SELECT schedule, timezone, last_slot, next_slot, grace "
                     "FROM {schema}.jobs")[0] == (
        NEW_YEAR, "UTC", slot, slot.replace(year=slot.year + 1),
        (slot - slot.replace(year=slot.year - 1)) / 10)


def test_a_host_past_the_deadline_skips(env: Env) -> None:
    late = env.run("run", "--job", "punctual", "--schedule", NEW_YEAR, "--tz", "UTC",
                   "--deadline", "1h", "--", "sh", "-c", "echo ran")
    assert (late.returncode, late.stdout, late.stderr) == (75, "", "")
    assert env.runs("punctual") == []
    on_time = env.run("run", "--job", "punctual", "--schedule", "* * * * *",
                      "--deadline", "2m", "--", "true")
    assert on_time.returncode == 0


def test_the_command_gets_its_slot(env: Env) -> None:
    out = env.tmp / "slot"
    before = datetime.now(UTC)
    result = env.run("run", "--job", "minutely", "--schedule", "* * * * *", "--tz",
                     "Asia/Kolkata", "--", "sh", "-c", f'printf %s "$PGLOCK_SLOT" > {out}')
    after = datetime.now(UTC)
    assert result.returncode == 0, result.stderr
    slot = datetime.fromisoformat(out.read_text())
    assert slot.utcoffset() == timedelta(hours=5, minutes=30)
    assert (slot.second, slot.microsecond) == (0, 0)
    # The minute floor of the start, whichever minute the start fell in.
    assert before.replace(second=0, microsecond=0) <= slot <= after
    assert env.runs("minutely")[0]["slot"] == slot


# All of them are pinned in-process (tests/unit/test_cli.py); these go through the binary.
@pytest.mark.parametrize(("args", "words"), [
    (["--schedule", "61 * * * *"], "--schedule: '61 * * * *' is not a cron expression cron"),
    (["--schedule", "* * * * *", "--tz", "Mars/Olympus"], "--tz: 'Mars/Olympus' is not a known"),
    (["--tz", "UTC"], "--tz needs --schedule"),
])
def test_bad_schedule_zone_and_size_are_usage_errors(env: Env, args: list[str],
                                                     words: str) -> None:
    result = env.run("run", "--job", "bad", *args, "--", "true")
    assert result.returncode == 2
    assert words in one_line(result.stderr)
    assert result.stdout == ""


def imported(env: Env, *args: str) -> set[str]:
    """Top-level modules a `pglock run` imported (python -X importtime)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "pglock", "run",
                             "--job", "imports", "--rerun", *args, "--", "true"],
                            env=env.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in result.stderr.splitlines() if line.startswith("import time:")}


def test_croniter_is_imported_only_with_a_schedule(env: Env) -> None:
    plain = imported(env)
    assert "psycopg" in plain
    assert not {"croniter", "rich", "dateutil"} & plain
    scheduled = imported(env, "--schedule", "* * * * *")
    assert "croniter" in scheduled and "rich" not in scheduled


def test_croniter_is_imported_only_once_a_schedule_is_parsed() -> None:
    code = ("import sys, pglock.settings.schedule as s; assert 'croniter' not in sys.modules; "
            "s.parse('* * * * *', 'UTC'); assert 'croniter' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_slot_that_ran_between_acquire_and_start_releases_the_lock(env: Env) -> None:
    """The unique (job, slot) index is the backstop behind the acquire's own check."""
    from pglock.db.database import Reconnecting
    from pglock.lock import lease
    from pglock.run.notify import Notifier, NotifyOptions
    from pglock.run.options import RunOptions
    from pglock.run.slot import Slot, plan_slot
    from pglock.run.supervise import SignalGate

    options = RunOptions(job="squeezed", command=["true"], schema=env.schema,
                         schedule=NEW_YEAR, tz="UTC")
    scheduled, _ = plan_slot(options)
    assert scheduled is not None
    session = Reconnecting(env.dsn, application_name="test", timeout=10)
    claim = lease.Claim(job="squeezed", schema=env.schema, ttl=60, slot=scheduled.slot)
    slot = Slot(options, session, claim, SignalGate(), Notifier(NotifyOptions(), job="squeezed",
                                                                holder="test"), scheduled)
    try:
        # The lock alone, then the start in a statement of its own (as for a retry).
        assert slot.acquire()
        # Another host's run of the slot succeeded after our acquire (as from a lost lease).
        env.query("INSERT INTO {schema}.slots (job, slot, attempts, attempt_limit, "
                  "succeeded_run_id) VALUES ('squeezed', %s, 1, 1, 0)", (scheduled.slot,))
        assert slot.start() is None
    finally:
        session.close()
    assert env.query("SELECT expires_at <= clock_timestamp(), released_at IS NOT NULL "
                     "FROM {schema}.locks")[0] == (True, True)
    assert env.runs("squeezed") == []
