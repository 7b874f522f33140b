"""Schedules, round two, with real processes (issue 27): catch-up of missed slots, maintenance
windows, slots skipped while a run is still going. Days-long gaps are made with faketime
(each pglock starts at the fake moment and its clock runs on from there); the database's
clock, leases and ttls stay real."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import PGLOCK, Env

# libfaketime preloaded directly: the `faketime` wrapper's sem_open fails now and then
# when twenty start at once.
LIBFAKETIME = next((str(p) for p in Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1")),
                   None)
pytestmark = pytest.mark.skipif(LIBFAKETIME is None,
                                reason="libfaketime (Debian package faketime) is not installed")

HOURLY = ("--schedule", "0 * * * *", "--tz", "UTC")


def at(env: Env, moment: str, *args: str, tz: str = "UTC") -> subprocess.Popen[str]:
    """pglock started at a fake moment of the host's clock (TZ: how `moment` is read)."""
    assert LIBFAKETIME is not None
    environment = {**env.env, "TZ": tz, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                   "LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"@{moment}",
                   "FAKETIME_NO_CACHE": "1"}
    return subprocess.Popen([PGLOCK, *args], env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def done(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def marking(marks: Path) -> list[str]:
    return ["--", "sh", "-c", f'echo "$PGLOCK_SLOT $PGLOCK_ATTEMPT" >> {marks}']


def test_three_missed_hourly_slots_are_caught_up_in_order_once_under_a_20_host_race(
        env: Env) -> None:
    marks = env.tmp / "marks"
    first = at(env, "2026-11-02 09:05:00", "run", "--job", "billing", *HOURLY,
               "--catch-up", "all", *marking(marks))
    assert done(first) == (0, "", "")
    # Every host was down for 10:00, 11:00 and 12:00; at 13:05 twenty of them race.
    hosts = [at(env, "2026-11-02 13:05:00", "run", "--job", "billing", *HOURLY,
                "--catch-up", "all", "--holder", f"host-{i}", *marking(marks))
             for i in range(20)]
    ended = [done(host) for host in hosts]
    assert sorted(code for code, _, _ in ended) == [0] + [75] * 19, ended
    assert all((out, err) == ("", "") for _, out, err in ended)
    assert marks.read_text().splitlines() == [
        "2026-11-02T09:00:00+00:00 1", "2026-11-02T10:00:00+00:00 1",
        "2026-11-02T11:00:00+00:00 1", "2026-11-02T12:00:00+00:00 1",
        "2026-11-02T13:00:00+00:00 1"]
    runs = env.runs("billing")
    assert [(r["slot"].hour, r["attempt"], r["outcome"]) for r in runs] == [
        (9, 1, "succeeded"), (10, 1, "succeeded"), (11, 1, "succeeded"),
        (12, 1, "succeeded"), (13, 1, "succeeded")]
    # One holder ran the catch-up and its own slot, under one fencing token.
    assert len({(r["holder"], r["fencing_token"]) for r in runs[1:]}) == 1
    assert env.query("SELECT slot, caught_up FROM {schema}.slots ORDER BY slot") == [
        (datetime(2026, 11, 2, h, tzinfo=UTC), True if h in (10, 11, 12) else None)
        for h in (9, 10, 11, 12, 13)]
    # The losers found the catch-up's own slot opened: nothing skipped while running.
    assert env.query("SELECT coalesce(skipped_running, 0), last_slot FROM {schema}.jobs") == [
        (0, datetime(2026, 11, 2, 13, tzinfo=UTC))]
    history = env.run("history", "--job", "billing")
    assert history.returncode == 0
    assert history.stdout.count("caught up") == 3


def test_the_limit_gives_up_older_slots_and_latest_runs_only_the_newest(env: Env) -> None:
    marks = env.tmp / "marks"
    for job, mode, limit in (("limited", "all", "2"), ("newest", "latest", "24")):
        assert done(at(env, "2026-11-02 09:05:00", "run", "--job", job, *HOURLY,
                       "--catch-up", mode, "--catch-up-limit", limit,
                       *marking(marks))) == (0, "", "")
        assert done(at(env, "2026-11-02 13:05:00", "run", "--job", job, *HOURLY,
                       "--catch-up", mode, "--catch-up-limit", limit,
                       *marking(marks))) == (0, "", "")
    assert [r["slot"].hour for r in env.runs("limited")] == [9, 11, 12, 13]
    assert [r["slot"].hour for r in env.runs("newest")] == [9, 12, 13]
    assert env.query("SELECT job, catch_up_skipped, catch_up_skipped_slot FROM {schema}.jobs "
                     "ORDER BY job") == [
        ("limited", 1, datetime(2026, 11, 2, 10, tzinfo=UTC)),
        ("newest", 2, datetime(2026, 11, 2, 11, tzinfo=UTC))]
    # Without --catch-up (the default), today's behaviour: only the own slot.
    assert done(at(env, "2026-11-02 09:05:00", "run", "--job", "plain", *HOURLY,
                   "--", "true"))[0] == 0
    assert done(at(env, "2026-11-02 13:05:00", "run", "--job", "plain", *HOURLY,
                   "--", "true"))[0] == 0
    assert [r["slot"].hour for r in env.runs("plain")] == [9, 13]


@pytest.mark.parametrize(("tz", "window", "inside", "outside"), [
    # 23:00 for 2h: across midnight.
    ("UTC", "0 23 * * * 2h", "2026-11-03 00:30:00", "2026-11-03 01:10:00"),
    # Berlin falls back at 03:00 CEST on 25 October 2026: from 01:00 CEST, 3 hours of
    # elapsed time end at 03:00 CET (wall clock 01:00 -> 03:00, an hour repeated).
    ("Europe/Berlin", "0 1 * * * 3h", "2026-10-25 02:40:00", "2026-10-25 03:10:00"),
])
def test_a_trigger_inside_a_window_skips_with_75_and_after_it_runs(
        env: Env, tz: str, window: str, inside: str, outside: str) -> None:
    events = env.tmp / "events"
    args = ("run", "--job", "windowed", "--schedule", "*/10 * * * *", "--tz", tz,
            "--window", window, "--event-log", str(events), "--", "true")
    assert done(at(env, inside, *args, tz=tz)) == (75, "", "")
    assert env.runs("windowed") == []
    assert done(at(env, outside, *args, tz=tz)) == (0, "", "")
    assert len(env.runs("windowed")) == 1
    first = json.loads(events.read_text().splitlines()[0])
    assert (first["event"], first["reason"]) == ("skipped", "window")
    assert env.query("SELECT windows FROM {schema}.jobs") == [([" ".join(window.split())],)]


def test_status_shows_a_job_in_its_window_and_check_stays_quiet(env: Env) -> None:
    now = datetime.now(UTC)
    # A window from an hour before now, for two hours; the run was three hours earlier.
    start = (now.hour - 1) % 24
    ran = now.replace(hour=(now.hour - 3) % 24, minute=0, second=5)
    if ran > now:
        ran = ran.replace(day=ran.day - 1)
    assert done(at(env, ran.strftime("%Y-%m-%d %H:%M:%S"), "run", "--job", "maint",
                   "--schedule", f"0 {ran.hour} * * *", "--tz", "UTC", "--window",
                   f"0 {start} * * * 2h", "--", "true")) == (0, "", "")
    status = env.run("status", "--job", "maint")
    assert status.returncode == 0
    assert f"in window until {(start + 2) % 24:02d}:00" in status.stdout
    check = env.run("check", "--job", "maint")
    assert check.returncode == 0, check.stdout


def test_a_window_added_while_inside_it_is_known_from_its_first_trigger(env: Env) -> None:
    """Issue 38: skips inside a window never reached the database, so a window added
    during an incident paged (`overdue: 1 slot missed`) until a run after it recorded it."""
    now = datetime.now(UTC)
    earlier = now - timedelta(hours=1)
    minutely = ("run", "--job", "added", "--schedule", "* * * * *", "--tz", "UTC")
    assert done(at(env, earlier.strftime("%Y-%m-%d %H:%M:%S"), *minutely, "--",
                   "true")) == (0, "", "")
    # Its slots since are missed: the job is overdue, as it should be without a window.
    assert env.run("check", "--job", "added").returncode != 0
    start = (now.hour - 1) % 24
    skipped = env.run(*minutely, "--window", f"0 {start} * * * 2h", "--", "true")
    assert (skipped.returncode, skipped.stderr) == (75, "")
    assert len(env.runs("added")) == 1
    check = env.run("check", "--job", "added")
    assert check.returncode == 0, check.stdout
    status = env.run("status", "--job", "added")
    assert f"in window until {(start + 2) % 24:02d}:00" in status.stdout, status.stdout


def test_a_trigger_in_a_window_skips_when_the_database_is_unreachable(env: Env) -> None:
    """Recording the window is one bounded try: the trigger skips all the same."""
    now = datetime.now(UTC)
    dead = "host=127.0.0.1 port=9 dbname=x user=x"
    skipped = env.run("run", "--dsn", dead, "--job", "unreachable", "--schedule",
                      "* * * * *", "--tz", "UTC", "--window",
                      f"0 {(now.hour - 1) % 24} * * * 2h", "--", "true")
    assert (skipped.returncode, skipped.stdout, skipped.stderr) == (75, "", "")


def test_a_long_run_that_skips_two_slots_is_seen_everywhere(env: Env) -> None:
    events = env.tmp / "events"
    marks = env.tmp / "marks"
    minutely = ("--schedule", "* * * * *", "--tz", "UTC", "--event-log", str(events))
    long_run = at(env, "2026-11-02 10:00:30", "run", "--job", "long", *minutely,
                  "--", "sh", "-c",
                  f"touch {marks}; while [ ! -e {marks}.go ]; do sleep 0.1; done")
    env.wait_for(marks.exists, what="the long run")
    # Cron fires the next two minutes on three hosts each while it runs.
    for minute in ("10:01:00", "10:02:00"):
        hosts = [at(env, f"2026-11-02 {minute}", "run", "--job", "long", *minutely,
                    "--holder", f"host-{i}", "--", "true") for i in range(3)]
        assert [done(host)[0] for host in hosts] == [75] * 3
    (env.tmp / "marks.go").touch()
    assert done(long_run) == (0, "", "")
    assert env.query("SELECT skipped_running, skipped_running_slot, skipped_running_streak "
                     "FROM {schema}.jobs") == [(2, datetime(2026, 11, 2, 10, 2, tzinfo=UTC), 2)]
    assert len(env.runs("long")) == 1
    skipped = [json.loads(line) for line in events.read_text().splitlines()
               if json.loads(line)["event"] == "skipped"]
    assert [(e["reason"], e["slot"]) for e in skipped] == (
        [("running", "2026-11-02T10:01:00+00:00")] * 3
        + [("running", "2026-11-02T10:02:00+00:00")] * 3)
    status = env.run("status", "--job", "long")
    assert "skipped while a run was still going: 2 slots, latest" in status.stdout
    history = env.run("history", "--job", "long")
    assert "skipped while a run was still going: 2 slots" in history.stdout
    metrics = env.run("metrics")
    assert 'pglock_job_slots_skipped_running_total{job="long"} 2' in metrics.stdout
    # (Its fake slots are weeks old: overdue is not what this looks at.)
    check = env.run("check", "--job", "long", "--missed-warning", "1001",
                    "--missed-critical", "1001")
    assert check.returncode == 1, check.stdout
    assert "2 slots in a row skipped while a run of an earlier slot was still going" \
        in check.stdout


@pytest.mark.parametrize("catch_up", [("--catch-up", "all"), ()])
def test_a_host_clock_hours_fast_runs_no_slot_the_database_has_not_reached(
        env: Env, catch_up: tuple[str, ...]) -> None:
    """Sweep N-L12, and issue 46: a fast host's own slot, and the slots between the last run
    and it, are in the database's future; run, each would run hours before its time, and
    its own trigger would then skip. Nothing is taken or recorded: one line, exit 125, and
    the slot's own trigger runs it in its time."""
    marks = env.tmp / "marks"
    now = datetime.now(UTC)
    assert done(at(env, f"{now:%Y-%m-%d %H:%M:%S}", "run", "--job", "fast", *HOURLY,
                   *catch_up, *marking(marks)))[0] == 0
    fast = datetime.fromtimestamp(now.timestamp() + 5 * 3600, UTC)
    code, out, err = done(at(env, f"{fast:%Y-%m-%d %H:%M:%S}", "run", "--job", "fast",
                             *HOURLY, *catch_up, *marking(marks)))
    slot = fast.replace(minute=0, second=0, microsecond=0)
    assert (code, out) == (125, ""), err
    assert re.fullmatch(rf"pglock: job 'fast': slot {re.escape(slot.isoformat())} not run: "
                        r"it is (4h\d+m\d+s|4h\d+m|5h) ahead of the database's clock \(this "
                        r"host's clock runs at least \1 fast; is NTP running\?\)\n", err), err
    assert len(marks.read_text().splitlines()) == 1
    assert len(env.runs("fast")) == 1
    assert env.query("SELECT count(*) FROM {schema}.slots WHERE slot > now()")[0][0] == 0
    # Nor was the lock taken: the next trigger on a right clock runs at once.
    assert env.query("SELECT fencing_token FROM {schema}.locks")[0][0] == 1


def test_a_host_clock_a_little_fast_runs_its_slot(env: Env) -> None:
    """Within a minute of the database's clock (what NTP keeps, and more), a slot runs."""
    marks = env.tmp / "marks"
    ahead = datetime.fromtimestamp(datetime.now(UTC).timestamp() + 40, UTC)
    every_minute = ("--schedule", "* * * * *", "--tz", "UTC")
    code, _, err = done(at(env, f"{ahead:%Y-%m-%d %H:%M:%S}", "run", "--job", "near",
                           *every_minute, *marking(marks)))
    assert (code, err) == (0, "")
    assert len(env.runs("near")) == 1


@pytest.mark.parametrize(("zone", "first", "then", "slots"), [
    ("America/New_York", "2026-11-02 09:05:00", "2026-11-02 13:05:00",
     ["2026-11-02T03:30:00-05:00", "2026-11-02T04:30:00-05:00", "2026-11-02T05:30:00-05:00",
      "2026-11-02T06:30:00-05:00", "2026-11-02T07:30:00-05:00"]),
    # Across the spring change: 02:30 is skipped, the offsets differ.
    ("Europe/Berlin", "2026-03-28 23:35:00", "2026-03-29 02:35:00",
     ["2026-03-29T00:30:00+01:00", "2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00+02:00",
      "2026-03-29T04:30:00+02:00"]),
])
def test_a_caught_up_slot_is_given_in_the_schedules_zone_as_the_own_slot_is(
        env: Env, zone: str, first: str, then: str, slots: list[str]) -> None:
    """PGLOCK_SLOT, the idempotency key, has one form: the schedule's zone (it was UTC on
    a caught-up run; sweep D4)."""
    marks = env.tmp / "marks"
    args = ("run", "--job", "zoned", "--schedule", "30 * * * *", "--tz", zone,
            "--catch-up", "all", *marking(marks))
    assert done(at(env, first, *args)) == (0, "", "")
    assert done(at(env, then, *args)) == (0, "", "")
    assert marks.read_text().splitlines() == [f"{slot} 1" for slot in slots]


def test_a_slot_missed_in_the_wait_after_a_promotion_is_caught_up(env: Env) -> None:
    """A slot given up because the wait after a promotion would have ended past --deadline
    is recorded missed, with its reason (schema version 9, `missed()`); that record does not
    count as an attempt, so a later trigger's --catch-up runs the slot."""
    marks = env.tmp / "marks"
    first = at(env, "2026-11-02 09:05:00", "run", "--job", "billing", *HOURLY,
               "--catch-up", "all", *marking(marks))
    assert done(first) == (0, "", "")
    env.query("SELECT {schema}.missed('billing', '2026-11-02 10:00+00', 'promotion_wait', 0)")
    assert env.query("SELECT promotion_missed FROM {schema}.jobs") == [(1,)]
    later = at(env, "2026-11-02 11:05:00", "run", "--job", "billing", *HOURLY,
               "--catch-up", "all", *marking(marks))
    assert done(later) == (0, "", "")
    assert marks.read_text().splitlines() == [
        "2026-11-02T09:00:00+00:00 1", "2026-11-02T10:00:00+00:00 1",
        "2026-11-02T11:00:00+00:00 1"]
    assert env.query("SELECT slot, caught_up, missed_reason FROM {schema}.slots "
                     "ORDER BY slot") == [
        (datetime(2026, 11, 2, 9, tzinfo=UTC), None, None),
        (datetime(2026, 11, 2, 10, tzinfo=UTC), True, "promotion_wait"),
        (datetime(2026, 11, 2, 11, tzinfo=UTC), None, None)]
    history = env.run("history", "--job", "billing")
    assert "missed: the wait after a promotion ended past --deadline: 1 slot" in history.stdout
    assert history.stdout.count("caught up") == 1
