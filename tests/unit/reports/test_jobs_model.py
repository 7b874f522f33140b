"""The one classification of a job: its state, its lock state, its problems."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pglock.cli import screens
from pglock.lock import ledger
from pglock.lock.ledger import Outcome
from pglock.reports import check, jobs
from pglock.reports.jobs import Problem, State

from ..jobfactory import NOW, dead, due, job, last, lock

P = Problem


@pytest.mark.parametrize(("what", "built", "lock_state", "state", "problems"), [
    ("never locked, never ran", job(), State.IDLE, State.IDLE, ()),
    ("held, running", job(lock=lock(), run_open=True), State.RUNNING, State.RUNNING, ()),
    ("held between acquire and start", job(lock=lock()), State.RUNNING, State.RUNNING, ()),
    ("cleared, in its lock-delay", job(lock=lock(cleared=True), run_open=True),
     State.CLEARED, State.CLEARED, ()),
    ("released, kept by --min-hold", job(lock=lock(released=True), last_run=last()),
     State.HELD, State.HELD, ()),
    ("released and expired", job(lock=lock(released=True, expires_in=-1), last_run=last()),
     State.IDLE, State.IDLE, ()),
    ("expired with its run open", job(lock=lock(expires_in=-5), run_open=True),
     State.STALE, State.STALE, (P.STALE,)),
    ("stale after a failure", job(lock=lock(expires_in=-5), run_open=True,
                                  last_run=last("failed", 3)),
     State.STALE, State.STALE, (P.STALE, P.FAILED)),
    ("last run failed", job(lock=lock(expires_in=-5, released=True),
                            last_run=last("failed", 3)),
     State.FAILED, State.FAILED, (P.FAILED,)),
    ("last run abandoned", job(last_run=last("abandoned", None)),
     State.FAILED, State.FAILED, (P.FAILED,)),
    ("running again after a failure", job(lock=lock(), run_open=True,
                                          last_run=last("timed_out", 124)),
     State.RUNNING, State.RUNNING, (P.FAILED,)),
    ("failed, kept by --min-hold", job(lock=lock(released=True), last_run=last("failed", 1)),
     State.FAILED, State.FAILED, (P.FAILED,)),
    ("overdue", job(last_run=last(), due=due(2)), State.IDLE, State.OVERDUE, (P.OVERDUE,)),
    ("overdue while its run outlasts the interval", job(lock=lock(), run_open=True,
                                                        due=due(1)),
     State.RUNNING, State.OVERDUE, (P.OVERDUE,)),
    ("overdue and failed", job(last_run=last("failed", 1), due=due(1)),
     State.FAILED, State.FAILED, (P.FAILED, P.OVERDUE)),
    ("pending, within its grace", job(last_run=last(), due=due(0)),
     State.IDLE, State.IDLE, ()),
    ("schedule unreadable here", job(last_run=last(), note="unknown zone"),
     State.IDLE, State.IDLE, (P.UNREADABLE,)),
    ("a slot spent its attempts", job(last_run=last("failed", 4), dead=dead()),
     State.DEAD, State.DEAD, (P.DEAD, P.FAILED)),
    ("dead and overdue: dead shows", job(last_run=last("failed", 4), dead=dead(), due=due(2)),
     State.DEAD, State.DEAD, (P.DEAD, P.FAILED, P.OVERDUE)),
    ("dead, a later slot running", job(lock=lock(), run_open=True, last_run=last("failed", 4),
                                       dead=dead()),
     State.RUNNING, State.RUNNING, (P.DEAD, P.FAILED)),
    ("dead, then a manual run succeeded before the summary said so",
     job(last_run=last(), dead=dead()), State.DEAD, State.DEAD, (P.DEAD,)),
])
def test_classification(what: str, built: jobs.Job, lock_state: State, state: State,
                        problems: tuple[Problem, ...]) -> None:
    assert (built.lock_state, built.state, built.problems) == (lock_state, state, problems), what


def test_a_lock_kept_by_min_hold_is_held_with_its_end() -> None:
    kept = job(lock=lock(released=True, expires_in=600), last_run=last())
    assert kept.held and kept.holding is kept.lock
    assert kept.held_until == NOW + timedelta(seconds=600)
    assert kept.running_for is None
    running = job(lock=lock(), run_open=True)
    assert running.held_until is None and running.running_for == 90.0
    assert job(lock=lock(released=True, expires_in=-1)).holding is None


def test_states_are_listed_worst_first_and_each_has_a_look() -> None:
    assert list(State)[:4] == [State.DEAD, State.STALE, State.FAILED, State.OVERDUE]
    assert list(State)[-1] is State.IDLE
    assert set(screens.STATE_LOOK) == set(State)


def test_each_problem_has_a_weight_and_a_reason() -> None:
    assert set(check.REASONS) == set(Problem)
    assert all(isinstance(problem.weight, jobs.Weight) for problem in Problem)
    assert sorted(p for p in Problem if p.counted) == [P.DEAD, P.FAILED, P.OVERDUE, P.PAUSED,
                                                        P.SILENT_HOST, P.SKIPPED_RUNNING,
                                                        P.SLOW, P.STALE]
    assert P.DEAD.weight is jobs.Weight.CRITICAL


def test_outcomes_come_from_history_in_order() -> None:
    assert jobs.FINISHED == ("succeeded", "failed", "timed_out", "lock_lost", "killed",
                             "abandoned", "stopped")
    # An operator's stop is not a failure of the job.
    assert Outcome.STOPPED not in jobs.FAILURES
    assert Outcome.SUCCEEDED not in jobs.FAILURES and set(jobs.FAILURES) < set(jobs.FINISHED)


def test_the_row_factory_builds_a_job_from_named_columns() -> None:
    row: dict[str, Any] = {
        "now": NOW, "name": "sync", "lock_mode": "lease", "holder": "web-1",
        "holder_pid": 1, "fencing_token": 3, "backend_pid": None,
        "acquired_at": NOW - timedelta(seconds=10), "expires_at": NOW + timedelta(seconds=50),
        "ttl": 60.0, "released_at": None, "cleared_at": None, "cleared_by": None,
        "run_open": True, "last_run_id": 9, "last_started_at": NOW, "last_holder": "web-1",
        "last_finished_run_id": 8, "last_outcome": "failed", "last_exit_code": 2,
        "last_finished_at": NOW, "last_duration": 1.5, "last_success_at": None,
        "outcome_counts": {"failed": 1, "succeeded": 0}, "consecutive_failures": 1,
        "schedule": None, "timezone": None, "grace": None, "last_slot": None,
        "next_slot": None, "paused_at": None, "paused_by": None, "pause_reason": None,
        "paused_until": None, "paused_everywhere": None, "last_attempt": 2,
        "attempt_limit": 3, "dead_slot": None, "dead_attempts": None, "dead_error": None,
        "unlisted": None, "listed": True, "seats_used": None, "seat_limit": None,
        "run_note": None, "windows": None, "skipped_running": 0, "skipped_running_slot": None,
        "skipped_running_streak": 0, "catch_up_skipped": 0, "catch_up_skipped_slot": None,
        "promotion_missed": 0, "promotion_missed_slot": None}
    assert set(row) == set(jobs.COLUMNS)
    built = jobs._from_row(NOW, tuple(row[name] for name in jobs.COLUMNS))
    assert (built.name, built.state, built.problems) == ("sync", State.RUNNING, (P.FAILED,))
    assert built.lock is not None and built.lock.fencing_token == 3
    assert built.last_run == jobs.LastRun(8, "failed", 2, NOW, 1.5)
    assert built.counts == {"failed": 1}
    assert built.seats is None
    assert screens.seated(built, "running") == "running"
    # A semaphore job (--limit 3) with two seats taken: its lock is its newest seat.
    row.update(seats_used=2, seat_limit=3)
    built = jobs._from_row(NOW, tuple(row[name] for name in jobs.COLUMNS))
    assert built.seats == jobs.Seats(2, 3)
    assert screens.seated(built, str(built.state)) == "running 2/3"
    assert screens.status_cells(built, "running 2/3")[:3] == ["sync", "running 2/3", "web-1:1 +1"]


def test_a_dead_slot_comes_from_its_columns_and_a_pause_hides_it() -> None:
    slot = NOW - timedelta(hours=9)
    lock_state, state, problems = jobs.classify(NOW, None, False, last("failed", 4), None,
                                                dead=True, paused=True)
    assert (lock_state, state, problems) == (State.IDLE, State.PAUSED, (P.PAUSED,))
    built = job(last_run=last("failed", 4), dead=jobs.Dead(slot, 3, "disk full"))
    assert check.REASONS[P.DEAD](built, NOW) == (
        f"dead: slot {slot.isoformat()} failed after 3 attempts: disk full "
        "(pglock replay --job sync --reason ...)")


def test_a_running_run_its_holder_noted_slow_is_slow_until_its_holder_vanishes() -> None:
    note = ledger.slow_note(120)
    held, gone = lock(), lock(expires_in=-1)
    assert jobs.classify(NOW, held, True, None, None, slow=True) == (
        State.RUNNING, State.SLOW, (P.SLOW,))
    # Stale wins: nobody is there to be slow.
    assert jobs.classify(NOW, gone, True, None, None, slow=True) == (
        State.STALE, State.STALE, (P.STALE,))
    # Overdue outranks slow (a run that outlasts its interval), slow stays a problem.
    assert jobs.classify(NOW, held, True, None, due(1), slow=True)[1:] == (
        State.OVERDUE, (P.OVERDUE, P.SLOW))
    built = job(lock=held, run_open=True, slow_after=ledger.slow_limit(note))
    assert built.slow_after == 120.0
    # Started 3 minutes ago (the factory's last_started_at): a minute past its 2m.
    assert built.slow_for == 60.0 and built.running_since == NOW - timedelta(minutes=3)
    assert job(lock=held, run_open=True).slow_for is None


def test_an_unknown_recorded_zone_names_the_job_not_an_option() -> None:
    """Issue 38: the message named --tz, which the reader of `check` never gave."""
    from datetime import UTC, datetime

    from pglock.reports import jobs as model

    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    due, note = model._counted("* * * * *", "Mars/Olympus", None,
                               datetime(2026, 11, 26, 11, 0, tzinfo=UTC), None, now)
    assert due is None
    assert note == ("its schedule cannot be read here: the job's recorded zone: "
                    "'Mars/Olympus' is not a known time zone (examples: UTC, Europe/Berlin, "
                    "America/New_York)")
