"""Delivery: retries in place (--retries, --retry-delay) under one lock, slots retried
across hosts, the dead state, replay, manual runs that keep the schedule."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Env

# Once a year: the slot (last New Year) stays the same for the whole test.
YEARLY = "0 0 1 1 *"


def _attempts(env: Env, job: str) -> list[tuple[int, str, int | None]]:
    return [(r["attempt"], r["outcome"], r["exit_code"]) for r in env.runs(job)]


@pytest.mark.slow
def test_a_failing_command_is_retried_in_place_then_dead(env: Env) -> None:
    marks = env.tmp / "marks"
    command = f'echo "$PGLOCK_ATTEMPT $(date +%s%N)" >> {marks}; exit 3'
    holder = env.popen("run", "--job", "flaky", "--retries", "2", "--retry-delay", "1s",
                       "--ttl", "6s", "--", "sh", "-c", command)
    # A contender during the backoff finds the lock held.
    env.wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) == 1,
                 what="attempt 1")
    contender = env.run("run", "--job", "flaky", "--", "true")
    _stdout, stderr = holder.communicate(timeout=60)
    assert (holder.returncode, stderr) == (3, ""), stderr
    assert contender.returncode == 75, contender
    assert _attempts(env, "flaky") == [(1, "failed", 3), (2, "failed", 3), (3, "failed", 3)]
    stamps = [int(line.split()[1]) for line in marks.read_text().splitlines()]
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["1", "2", "3"]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert gaps[1] > gaps[0], gaps
    # One fencing token: the lock was never let go between attempts.
    assert {r["fencing_token"] for r in env.runs("flaky")} == {1}
    # Unscheduled: dead needs a slot; the job is failed, 3 in a row.
    job = _status(env, "flaky")
    assert (job["state"], job["attempt"], job["attempt_limit"]) == ("failed", 3, 3)


@pytest.mark.slow
def test_an_attempt_whose_start_a_failover_lost_is_not_run_again(env: Env) -> None:
    """An asynchronous failover loses attempt 2's start record (its run row and the slot's
    count of it) while its holder keeps the lock: attempt 3 is still numbered 3, and is the
    slot's last. Counted from the row, it was numbered 2 again and a fourth command ran
    (the soak, seed 3435: docs/soak.md; schema version 8)."""
    marks = env.tmp / "marks"
    command = f'echo "$PGLOCK_ATTEMPT" >> {marks}; sleep 2; exit 3'
    holder = env.popen("run", "--job", "lagged", "--schedule", YEARLY, "--tz", "UTC",
                       "--retries", "2", "--retry-delay", "0", "--ttl", "10s",
                       "--", "sh", "-c", command)
    env.wait_for(lambda: marks.exists() and len(marks.read_text().split()) == 2,
                 what="attempt 2")
    # What the promoted standby lacks, taken away while attempt 2 runs.
    lost = env.query("DELETE FROM {schema}.runs WHERE job = 'lagged' AND attempt = 2 "
                     "AND outcome = 'running' RETURNING id")
    counted = env.query("UPDATE {schema}.slots SET attempts = 1 WHERE job = 'lagged' "
                        "AND attempts = 2 RETURNING attempts")
    assert (len(lost), counted) == (1, [(1,)])
    holder.communicate(timeout=60)
    assert marks.read_text().split() == ["1", "2", "3"]
    assert _attempts(env, "lagged") == [(1, "failed", 3), (3, "failed", 3)]
    assert env.query("SELECT attempts, attempt_limit FROM {schema}.slots "
                     "WHERE job = 'lagged'") == [(3, 3)]


def _status(env: Env, job: str) -> dict[str, object]:
    result = env.run("status", "--job", job, "--json")
    assert result.returncode == 0, result
    document = json.loads(result.stdout)
    return next(j for j in document["jobs"] if j["job"] == job)


def _fail_then_dead(env: Env, job: str, *extra: str) -> None:
    result = env.run("run", "--job", job, "--schedule", YEARLY, "--tz", "UTC",
                     "--retries", "1", "--retry-delay", "0", *extra, "--",
                     "sh", "-c", "echo disk full; exit 4")
    assert result.returncode == 4, result


def test_a_spent_slot_is_dead_in_status_check_and_metrics(env: Env) -> None:
    _fail_then_dead(env, "nightly")
    assert _attempts(env, "nightly") == [(1, "failed", 4), (2, "failed", 4)]
    job = _status(env, "nightly")
    assert job["state"] == "dead"
    assert job["dead"]["attempts"] == 2 and job["dead"]["error"] == "disk full"  # type: ignore[index]
    check = env.run("check", "--job", "nightly")
    assert check.returncode == 2, check
    assert "dead: slot" in check.stdout and "after 2 attempts: disk full" in check.stdout
    metrics = env.run("metrics").stdout
    assert 'pglock_job_dead{job="nightly"} 1' in metrics
    assert 'pglock_job_attempt{job="nightly"} 2' in metrics
    assert 'pglock_job_attempt_limit{job="nightly"} 2' in metrics
    screen = env.run("status")
    assert screen.returncode == 0 and "nightly is dead: slot" in screen.stdout, screen
    assert "failed 2 attempts, last: disk full" in screen.stdout
    # The slot is done: another host's run of it skips.
    again = env.run("run", "--job", "nightly", "--schedule", YEARLY, "--tz", "UTC",
                    "--retries", "1", "--", "true")
    assert again.returncode == 75, again


def test_success_on_attempt_2_ends_the_retries_and_the_slot(env: Env) -> None:
    result = env.run("run", "--job", "second", "--schedule", YEARLY, "--tz", "UTC",
                     "--retries", "3", "--retry-delay", "0", "--",
                     "sh", "-c", 'test "$PGLOCK_ATTEMPT" -ge 2')
    assert (result.returncode, result.stderr) == (0, ""), result
    assert _attempts(env, "second") == [(1, "failed", 1), (2, "succeeded", 0)]
    assert _status(env, "second")["state"] == "idle"
    again = env.run("run", "--job", "second", "--schedule", YEARLY, "--tz", "UTC",
                    "--retries", "3", "--", "true")
    assert again.returncode == 75, again
    assert len(env.runs("second")) == 2


def test_126_and_127_are_not_retried(env: Env) -> None:
    result = env.run("run", "--job", "typo", "--schedule", YEARLY, "--tz", "UTC",
                     "--retries", "3", "--retry-delay", "0", "--", "/nonexistent/command")
    assert result.returncode == 127, result
    assert _attempts(env, "typo") == [(1, "failed", 127)]
    # It will not fix itself: the slot is closed, and dead (retries were asked for).
    assert _status(env, "typo")["state"] == "dead"
    again = env.run("run", "--job", "typo", "--schedule", YEARLY, "--tz", "UTC",
                    "--retries", "3", "--", "true")
    assert again.returncode == 75, again


def test_the_database_refuses_an_attempt_past_the_limit(env: Env) -> None:
    """The CHECK on the slot's row, whatever the acquire statement decided."""
    import psycopg

    from pglock.db import schema
    from pglock.lock import lease, ledger

    slot = datetime(2026, 1, 1, tzinfo=UTC)
    scheduled = ledger.Scheduled(YEARLY, "UTC", slot, slot + timedelta(days=365), 60.0)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        schema.ensure(conn, env.schema)
        claim = lease.Claim(job="capped", schema=env.schema, ttl=60)
        assert lease.try_acquire(conn, claim) is lease.Attempt.WON

        def start() -> ledger.StartedRun:
            # Each attempt ends before the next starts (a start sent again while its run
            # is still running is that run: the next test).
            run = ledger.start(conn, claim, ledger.RunStart(
                command="true", scheduled=scheduled, retries=1))
            ledger.finish(conn, claim, run.id, ledger.RunResult(ledger.Outcome.FAILED, 1, 0.1),
                          keep=True)
            return run

        assert [(r.attempt, r.attempt_limit) for r in (start(), start())] == [(1, 2), (2, 2)]
        with pytest.raises(psycopg.errors.CheckViolation):
            start()
    assert [r["attempt"] for r in env.runs("capped")] == [1, 2]


def test_a_start_sent_again_is_the_one_that_committed_unseen(env: Env) -> None:
    """A further attempt's start record sent again after a cut (the first one committed,
    its answer lost) returns that start, the same run: no run marked abandoned, no attempt
    of the slot spent on nothing, even its last one (the soak's defect 3)."""
    import psycopg

    from pglock.db import schema
    from pglock.lock import lease, ledger

    slot = datetime(2026, 1, 1, tzinfo=UTC)
    scheduled = ledger.Scheduled(YEARLY, "UTC", slot, slot + timedelta(days=365), 60.0)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        schema.ensure(conn, env.schema)
        claim = lease.Claim(job="resent", schema=env.schema, ttl=60, slot=slot)
        start = ledger.RunStart(command="true", scheduled=scheduled, retries=1)
        assert lease.try_acquire(conn, claim, start) is lease.Attempt.WON
        assert claim.run is not None
        ledger.finish(conn, claim, claim.run.id, ledger.RunResult(ledger.Outcome.FAILED, 1, 0.1),
                      keep=True)
        second = start._replace(attempt=2)
        first, again = ledger.start(conn, claim, second), ledger.start(conn, claim, second)
        assert again == first and (first.attempt, first.attempt_limit) == (2, 2)
    assert [(r["attempt"], r["outcome"]) for r in env.runs("resent")] == [
        (1, "failed"), (2, "running")]


def test_on_failure_fires_once_for_the_slot(env: Env) -> None:
    fired = env.tmp / "fired"
    events = env.tmp / "events"
    result = env.run("run", "--job", "hooked", "--retries", "2", "--retry-delay", "0",
                     "--on-failure", f'echo "$PGLOCK_OUTCOME $PGLOCK_ATTEMPT" >> {fired}',
                     "--event-log", str(events), "--", "false")
    assert result.returncode == 1, result
    assert fired.read_text().splitlines() == ["failed 3"]
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert kinds.count("retry") == 2 and kinds.count("finished") == 3
    assert kinds.count("hook") == 1


def test_a_manual_run_keeps_the_schedule_and_overdue_detection(env: Env) -> None:
    scheduled = env.run("run", "--job", "report", "--schedule", YEARLY, "--tz", "UTC",
                        "--", "true")
    assert scheduled.returncode == 0, scheduled
    # Two years pass without a scheduled run: the job is overdue.
    env.query("UPDATE {schema}.jobs SET last_slot = last_slot - interval '2 years', "
              "next_slot = next_slot - interval '2 years'")
    assert _status(env, "report")["state"] == "overdue"
    manual = env.run("run", "--job", "report", "--", "true")
    assert manual.returncode == 0, manual
    job = _status(env, "report")
    assert job["state"] == "overdue"
    assert job["schedule"]["expression"] == YEARLY  # type: ignore[index]
    assert [(r["slot"] is None, r["manual"]) for r in env.runs("report")] == [
        (False, False), (True, True)]
    history = env.run("history", "--job", "report")
    assert history.returncode == 0, history
    assert "manual" in history.stdout


def test_replay_reopens_a_dead_slot_and_refuses_a_succeeded_one(env: Env) -> None:
    _fail_then_dead(env, "nightly")
    assert _status(env, "nightly")["state"] == "dead"
    refused = env.run("replay", "--job", "nightly")
    assert refused.returncode == 2 and "--reason" in refused.stderr, refused
    replayed = env.run("replay", "--job", "nightly", "--reason", "disk freed")
    assert (replayed.returncode, replayed.stderr) == (0, ""), replayed
    assert "attempts 3 to 4" in replayed.stdout
    assert _status(env, "nightly")["state"] == "failed"
    ran = env.run("run", "--job", "nightly", "--schedule", YEARLY, "--tz", "UTC",
                  "--retries", "1", "--retry-delay", "0", "--",
                  "sh", "-c", 'test "$PGLOCK_ATTEMPT" -ge 4')
    assert ran.returncode == 0, ran
    assert _attempts(env, "nightly") == [(1, "failed", 4), (2, "failed", 4), (3, "failed", 1),
                                         (4, "succeeded", 0)]
    assert _status(env, "nightly")["state"] == "idle"
    audit = env.query("SELECT action, reason, detail FROM {schema}.audit")
    assert audit == [("replay", "disk freed", audit[0][2])]
    assert "attempts 3 to 4" in audit[0][2]
    again = env.run("replay", "--job", "nightly", "--reason", "again")
    assert again.returncode == 1, again
    assert again.stderr.count("\n") == 1 and "already succeeded" in again.stderr, again
    history = env.run("history", "--job", "nightly")
    assert "replay nightly" in history.stdout, history.stdout
    # Attempts are listed under their slot: the slot on the newest, the others below.
    assert "#4/4" in history.stdout and "    #1/4" in history.stdout, history.stdout


@pytest.mark.slow
def test_replay_is_refused_while_the_slot_runs(env: Env) -> None:
    holder, _ = env.start_holder("busy", "--schedule", YEARLY, "--tz", "UTC", "--retries", "1")
    try:
        refused = env.run("replay", "--job", "busy", "--reason", "why not")
        assert refused.returncode == 1, refused
        assert refused.stderr.count("\n") == 1 and "is running on" in refused.stderr, refused
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=30)
    assert env.query("SELECT count(*) FROM {schema}.audit") == [(0,)]


@pytest.mark.slow
def test_a_slot_whose_holder_died_is_retried_by_another_host(env: Env) -> None:
    common = ("--schedule", YEARLY, "--tz", "UTC", "--retries", "1", "--ttl", "6s")
    holder, _ = env.start_holder("recover", *common, "--holder", "host-a")
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=10)
    killed_at = env.query("SELECT clock_timestamp()")[0][0]
    # Host B's cron fires again and again: skipped while the dead holder's lease lasts.
    skipped = 0
    while True:
        second = env.run("run", "--job", "recover", *common, "--holder", "host-b", "--",
                         "sh", "-c", 'test "$PGLOCK_ATTEMPT" = 2')
        if second.returncode != 75:
            break
        skipped += 1
        time.sleep(0.5)
    assert (second.returncode, second.stderr) == (0, ""), second
    assert skipped > 0
    third = env.run("run", "--job", "recover", *common, "--holder", "host-c", "--", "true")
    assert third.returncode == 75, third
    rows = env.runs("recover")
    assert [(r["attempt"], r["holder"], r["outcome"]) for r in rows] == [
        (1, "host-a", "abandoned"), (2, "host-b", "succeeded")]
    assert rows[0]["slot"] == rows[1]["slot"]
    print(f"\nrecovered slot {rows[0]['slot'].isoformat()}: attempt 1 started "
          f"{rows[0]['started_at'].isoformat()} on host-a, killed at {killed_at.isoformat()}, "
          f"attempt 2 started on host-b at +"
          f"{(rows[1]['started_at'] - killed_at).total_seconds():.2f}s "
          f"(ttl 6s, {skipped} skipped invocations)")


@pytest.mark.slow
def test_twenty_hosts_never_make_more_than_1_plus_n_attempts(env: Env) -> None:
    retries = 2

    def host(n: int) -> subprocess.Popen[str]:
        return env.popen("run", "--job", "herd", "--schedule", YEARLY, "--tz", "UTC",
                         "--retries", str(retries), "--retry-delay", "0", "--wait", "20s",
                         "--holder", f"host-{n}", "--", "sh", "-c", "sleep 0.2; exit 9")

    codes: list[int] = []
    for _wave in range(2):
        hosts = [host(n) for n in range(20)]
        for process in hosts:
            process.communicate(timeout=120)
            codes.append(process.returncode)
    rows = env.runs("herd")
    attempts = [(r["attempt"], r["outcome"]) for r in rows]
    print(f"\n40 invocations (2 waves of 20 hosts), --retries {retries}: {len(rows)} attempts "
          f"{attempts}, exit codes {sorted(set(codes))} ({codes.count(9)} ran, "
          f"{codes.count(75)} skipped)")
    assert attempts == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert sorted(set(codes)) == [9, 75] and codes.count(9) == 1
    assert env.query("SELECT attempts, attempt_limit FROM {schema}.slots") == [(3, 3)]


@pytest.mark.slow
def test_twenty_hosts_whose_attempts_die_never_exceed_1_plus_n(env: Env) -> None:
    """Each attempt's pglock is killed by its own command: every attempt is left to the
    other hosts, which race for it after the ttl."""
    import threading

    retries, ends = 2, time.monotonic() + 22
    codes: list[int] = []

    def host(n: int) -> None:
        while time.monotonic() < ends:
            codes.append(env.run(
                "run", "--job", "dying", "--schedule", YEARLY, "--tz", "UTC",
                "--retries", str(retries), "--ttl", "5s", "--holder", f"host-{n}", "--",
                "sh", "-c", "kill -KILL $PPID; sleep 1").returncode)
            time.sleep(1.0)

    threads = [threading.Thread(target=host, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = env.runs("dying")
    print(f"\n20 hosts for 22s ({len(codes)} invocations), --retries {retries}, every attempt "
          f"killed: {len(rows)} attempts "
          f"{[(r['attempt'], r['holder'], r['outcome']) for r in rows]}")
    assert [r["attempt"] for r in rows] == [1, 2, 3]
    assert len({r["holder"] for r in rows}) >= 1
    assert env.query("SELECT attempts, attempt_limit FROM {schema}.slots") == [(3, 3)]


@pytest.mark.slow
def test_a_signal_during_the_backoff_ends_the_retries(env: Env) -> None:
    holder = env.popen("run", "--job", "waiting", "--retries", "3", "--retry-delay", "1m",
                       "--", "false")
    env.wait_for(lambda: [r["outcome"] for r in env.runs("waiting")] == ["failed"],
                 what="attempt 1")
    holder.send_signal(signal.SIGTERM)
    _, stderr = holder.communicate(timeout=30)
    assert (holder.returncode, stderr) == (128 + signal.SIGTERM, ""), stderr
    assert _attempts(env, "waiting") == [(1, "failed", 1)]
    assert env.query("SELECT released_at IS NOT NULL FROM {schema}.locks") == [(True,)]


@pytest.mark.slow
def test_an_operator_stop_during_the_backoff_closes_the_slot(env: Env) -> None:
    common = ("--schedule", YEARLY, "--tz", "UTC", "--retries", "3")
    holder = env.popen("run", "--job", "halted", *common, "--retry-delay", "1m",
                       "--ttl", "6s", "--", "false")
    env.wait_for(lambda: [r["outcome"] for r in env.runs("halted")] == ["failed"],
                 what="attempt 1")
    stop = env.run("stop", "--job", "halted", "--reason", "enough")
    assert stop.returncode == 0, stop
    _, stderr = holder.communicate(timeout=30)
    # As a stop of a running command: the next attempt recorded stopped, exit 143 (N13).
    assert (holder.returncode, stderr) == (143, ""), stderr
    assert _attempts(env, "halted") == [(1, "failed", 1), (2, "stopped", None)]
    # Closed, not dead: the operator meant it.
    shown = _status(env, "halted")
    assert shown["state"] not in ("failed", "dead") and shown.get("dead") is None, shown
    again = env.run("run", "--job", "halted", *common, "--", "true")
    assert again.returncode == 75, again
