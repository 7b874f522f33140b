"""Jobs as jobs.py builds them, without a database: for the renderers' unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pglock.reports import jobs

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def lock(*, expires_in: float = 30.0, released: bool = False, cleared: bool = False,
         holder: str = "web-1") -> jobs.Lock:
    return jobs.Lock(
        mode="lease", holder=holder, holder_pid=4242, fencing_token=7, backend_pid=None,
        acquired_at=NOW - timedelta(seconds=90), expires_at=NOW + timedelta(seconds=expires_in),
        ttl=60.0, released_at=NOW - timedelta(seconds=5) if released else None,
        cleared_at=NOW - timedelta(seconds=1) if cleared else None,
        cleared_by="ops@admin" if cleared else None)


def last(outcome: str = "succeeded", exit_code: int | None = 0) -> jobs.LastRun:
    return jobs.LastRun(id=41, outcome=outcome, exit_code=exit_code,
                        finished_at=NOW - timedelta(minutes=2), duration=3.5)


def dead(attempts: int = 3, error: str | None = "disk full") -> jobs.Dead:
    return jobs.Dead(slot=NOW - timedelta(hours=9), attempts=attempts, error=error)


def due(missed: int = 0) -> jobs.Due:
    return jobs.Due(due_at=NOW - timedelta(minutes=10 if missed else -5),
                    next_fire=NOW + timedelta(minutes=5), missed=missed, grace=60.0)


def job(name: str = "sync", *, lock: jobs.Lock | None = None, run_open: bool = False,
        last_run: jobs.LastRun | None = None, due: jobs.Due | None = None,
        note: str | None = None, failures: int = 0, dead: jobs.Dead | None = None,
        slow_after: float | None = None, **fields: Any) -> jobs.Job:
    lock_state, state, problems = jobs.classify(NOW, lock, run_open, last_run, due, note,
                                                dead=dead is not None,
                                                slow=slow_after is not None,
                                                paused=fields.get("pause") is not None)
    values: dict[str, Any] = {
        "name": name, "now": NOW, "lock": lock, "run_open": run_open, "last_run_id": 42,
        "last_started_at": NOW - timedelta(minutes=3), "last_holder": "web-1",
        "last_run": last_run, "last_success_at": None, "counts": {},
        "consecutive_failures": failures,
        "schedule": "*/5 * * * *" if due or note else None, "timezone": "UTC",
        "last_slot": None, "due": due, "schedule_note": note, "lock_state": lock_state,
        "state": state, "problems": problems, "dead": dead,
        "slow_after": slow_after}
    values.update(fields)
    return jobs.Job(**values)
