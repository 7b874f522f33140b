"""What the dashboard (`pglock serve`) reads beyond the job model: success rates, runs in
a window of time, outcomes by day, the audit log, one run's output, the next fire times.

Nothing here judges a job (jobs.py does); these are counts and rows over the history,
each bounded so that 10,000 jobs and 10 million runs cost what one page can afford:
rates only for the jobs shown, a timeline's lanes and bars capped, the audit log paged.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import UsageError
from pglock.reports import history
from pglock.reports.jobs import FAILURES

# Finished runs and successes per job over the last day and week: for the jobs shown only
# (runs_job_started serves each job's range).
RATES = """
SELECT job,
       count(*) FILTER (WHERE started_at >= now() - interval '1 day' AND outcome <> 'running'),
       count(*) FILTER (WHERE started_at >= now() - interval '1 day' AND outcome = 'succeeded'),
       count(*) FILTER (WHERE outcome <> 'running'),
       count(*) FILTER (WHERE outcome = 'succeeded')
FROM {schema}.runs
WHERE job = ANY(%(jobs)s::text[]) AND started_at >= now() - interval '7 days'
  AND outcome <> 'cleared'
GROUP BY job
"""
# A timeline's lanes: the jobs asked for, else those with the most failures then runs in
# the window.
LANES = """
SELECT job FROM {schema}.runs
WHERE started_at >= %(since)s AND started_at < %(until)s AND outcome <> 'cleared'
GROUP BY job
ORDER BY count(*) FILTER (WHERE outcome = ANY(%(failures)s::text[])) DESC, count(*) DESC, job
LIMIT %(lanes)s
"""
# The runs of the lanes that overlap the window (a run that started up to `reach` before
# it, or that is still running), oldest first, at most `limit`.
WINDOW = """
SELECT id, job, started_at, finished_at, holder, outcome, exit_code,
       extract(epoch FROM duration)::float8, slot, attempt
FROM {schema}.runs
WHERE job = ANY(%(jobs)s::text[]) AND outcome <> 'cleared'
  AND started_at < %(until)s
  AND (started_at >= %(since)s - %(reach)s OR outcome = 'running')
  AND coalesce(finished_at, 'infinity') > %(since)s
ORDER BY started_at DESC
LIMIT %(limit)s
"""
# Runs by day (in UTC) and outcome, for one job or the fleet; slots that went dead
# (their attempts spent without a success) by the day of the slot.
DAYS = """
SELECT (started_at AT TIME ZONE 'UTC')::date AS day, outcome, count(*)
FROM {schema}.runs
WHERE started_at >= %(since)s AND outcome NOT IN ('cleared', 'running')
  AND (%(job)s::text IS NULL OR job = %(job)s)
GROUP BY 1, 2
"""
DEAD_DAYS = """
SELECT (slot AT TIME ZONE 'UTC')::date, count(*)
FROM {schema}.slots
WHERE slot >= %(since)s AND (%(job)s::text IS NULL OR job = %(job)s)
  AND succeeded_run_id IS NULL AND attempt_limit > 1 AND attempts >= attempt_limit
GROUP BY 1
"""
# Runs of a job per day that were attempts at distinct slots (for the missed slots).
SLOTS_RUN = """
SELECT (slot AT TIME ZONE 'UTC')::date, count(DISTINCT slot)
FROM {schema}.runs
WHERE job = %(job)s AND slot >= %(since)s AND outcome <> 'cleared'
GROUP BY 1
"""
AUDIT = """
SELECT id, at, coalesce(job, '') AS job, action, by, reason, detail, host
FROM {schema}.audit
WHERE (%(job)s::text IS NULL OR job = %(job)s OR (job IS NULL AND host IS NULL))
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC LIMIT %(limit)s
"""
# A job's first run: no slot before it counts as missed.
FIRST_RUN = "SELECT min(started_at) FROM {schema}.runs WHERE job = %(job)s"
OUTPUT = "SELECT job, output_tail FROM {schema}.runs WHERE id = %(id)s"

# Bounds of what one page draws.
MOST_LANES = 60
MOST_BARS = 5000
# A run that started this long before a timeline's window is looked for in it.
REACH = timedelta(days=1)


@dataclass(frozen=True)
class Rate:
    """Finished runs and successes of a job over the last day and the last week."""

    day_runs: int
    day_succeeded: int
    week_runs: int
    week_succeeded: int

    @property
    def day(self) -> float | None:
        return self.day_succeeded / self.day_runs if self.day_runs else None

    @property
    def week(self) -> float | None:
        return self.week_succeeded / self.week_runs if self.week_runs else None


@dataclass(frozen=True)
class Bar:
    """One run on a timeline."""

    id: int
    job: str
    started_at: datetime
    finished_at: datetime | None
    holder: str
    outcome: str
    exit_code: int | None
    duration: float | None
    slot: datetime | None
    attempt: int | None


@dataclass(frozen=True)
class Timeline:
    """Runs of the lanes (jobs) over [since, until), newest first; `clipped` when more
    than MOST_BARS ran."""

    since: datetime
    until: datetime
    now: datetime
    lanes: list[str]
    bars: list[Bar]
    clipped: bool


@dataclass(frozen=True)
class Day:
    """One day (UTC) of a calendar: runs by outcome, dead slots, missed slots."""

    day: datetime
    outcomes: dict[str, int]
    dead: int = 0
    missed: int = 0

    @property
    def look(self) -> str:
        """What colours its cell: the worst of what happened that day."""
        if self.dead:
            return "dead"
        if any(self.outcomes.get(o, 0) for o in FAILURES):
            return "failed"
        if self.missed:
            return "missed"
        return "succeeded" if self.outcomes else "none"


def _now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def rates(conn: psycopg.Connection[Any], schema_name: str, jobs: list[str]) -> dict[str, Rate]:
    """Success over 24 h and 7 d of each job named (none of the others)."""
    if not jobs:
        return {}
    with database.translated("cannot read the success rates"):
        rows = conn.execute(schema.query(RATES, schema_name), {"jobs": jobs}).fetchall()
    return {job: Rate(*counts) for job, *counts in rows}


def timeline(conn: psycopg.Connection[Any], schema_name: str, span: float, *,
             jobs: list[str] | None = None, until: datetime | None = None) -> Timeline:
    """The runs of the last `span` seconds (before `until`, default now), one lane per job
    asked for, else per job that ran (failing ones first), at most MOST_LANES."""
    with database.translated("cannot read the timeline"):
        now = _now(conn)
        end = until or now
        since = end - timedelta(seconds=span)
        if not schema.readable(conn, schema_name):
            return Timeline(since, end, now, [], [], False)
        params = {"since": since, "until": end, "lanes": MOST_LANES,
                  "failures": [str(o) for o in FAILURES]}
        lanes = list(dict.fromkeys(jobs or []))[:MOST_LANES] or [
            row[0] for row in conn.execute(schema.query(LANES, schema_name), params)]
        rows = conn.execute(schema.query(WINDOW, schema_name), {
            **params, "jobs": lanes, "reach": REACH, "limit": MOST_BARS + 1}).fetchall()
    return Timeline(since, end, now, sorted(lanes), [Bar(*row) for row in rows[:MOST_BARS]],
                    len(rows) > MOST_BARS)


def calendar(conn: psycopg.Connection[Any], schema_name: str, days: int, *,
             job: str | None = None, plan: Any = None) -> list[Day]:
    """The last `days` days (UTC, oldest first) of the job or of the fleet; with a job's
    schedule (`plan`), the slots that had no run count as missed."""
    with database.translated("cannot read the calendar"):
        now = _now(conn)
        first = (now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
                 - timedelta(days=days - 1))
        dates = [(first + timedelta(days=i)).date() for i in range(days)]
        found: dict[Any, dict[str, int]] = {d: {} for d in dates}
        dead: dict[Any, int] = {}
        ran: dict[Any, int] = {}
        since = now
        if schema.readable(conn, schema_name):
            params = {"since": first, "job": job}
            for day, outcome, count in conn.execute(schema.query(DAYS, schema_name), params):
                found.setdefault(day, {})[outcome] = count
            dead = dict(conn.execute(schema.query(DEAD_DAYS, schema_name), params).fetchall())
            if plan is not None:
                ran = dict(conn.execute(schema.query(SLOTS_RUN, schema_name),
                                        params).fetchall())
                row = conn.execute(schema.query(FIRST_RUN, schema_name), params).fetchone()
                since = max(first, row[0]) if row and row[0] else now
    expected = _fires_by_day(plan, since, now) if plan is not None else {}
    return [Day(datetime.combine(d, datetime.min.time(), UTC), found.get(d, {}),
                dead.get(d, 0), max(0, expected.get(d, 0) - ran.get(d, 0)))
            for d in dates]


def _fires_by_day(plan: Any, first: datetime, now: datetime) -> dict[Any, int]:
    """Fire times of the schedule from `first` (the window's start, or the job's first run)
    until a grace before now, by day (UTC).

    Counted a day at a time, not a fire time at a time (a minutely job fires 527,040
    times a year): on a day the schedule fires, it fires at the minutes of its minute and
    hour fields, so one lookup finds the next such day and arithmetic counts its fire
    times in each UTC day it spans. Around a change of UTC offset (DST), two hours each
    side are stepped through fire time by fire time, as cron fires then (a repeated hour,
    a skipped one). At most a lookup per day of the window, and 240 per DST change.
    """
    from pglock.settings import schedule

    tz = plan.tz
    # The fields as `run` reads them (croniter's own reading takes `1-1` for `*`).
    minutes, hours = schedule.field_values(plan)[:2]
    in_day = sorted(60 * h + m for h in hours for m in minutes)
    end = now - timedelta(minutes=10)
    until = end + timedelta(microseconds=1)  # `end` itself included
    counts: dict[Any, int] = {}

    def stepped(found: datetime, before: datetime) -> None:
        """Each fire time from `found` on, before `before`."""
        while found < before and found <= end:
            day = found.astimezone(UTC).date()
            counts[day] = counts.get(day, 0) + 1
            found = schedule.next_after(plan, found)

    def counted(base: datetime, low: datetime, high: datetime) -> None:
        """The fire times base + m minutes (m of the day's) within [low, high)."""
        if high <= low:
            return
        first_m = bisect_left(in_day, (low - base) / _MINUTE)
        last_m = bisect_left(in_day, (high - base) / _MINUTE)
        midnight = datetime.combine(base.date() + timedelta(days=1), datetime.min.time(), UTC)
        split = max(first_m, min(last_m, bisect_left(in_day, (midnight - base) / _MINUTE)))
        for day, number in ((base.date(), split - first_m), (midnight.date(), last_m - split)):
            if number:
                counts[day] = counts.get(day, 0) + number

    moment = first - timedelta(microseconds=1)
    while (found := schedule.next_after(plan, moment)) <= end:
        wall = datetime.combine(found.astimezone(tz).date(), datetime.min.time())
        start = wall.replace(tzinfo=tz).astimezone(UTC)
        after = (wall + timedelta(days=1)).replace(tzinfo=tz).astimezone(UTC)
        before, later = start.astimezone(tz).utcoffset(), after.astimezone(tz).utcoffset()
        assert before is not None and later is not None
        if start.astimezone(tz).replace(tzinfo=None) != wall:
            stepped(found, after)  # midnight itself skipped by the change: step the day
        elif before == later:
            counted(start, found, min(after, until))
        else:
            change = schedule.offset_change(tz, start, after, _MINUTE)
            near, far = max(start, change - _NEAR), min(after, change + _NEAR)
            counted(start, found, min(near, until))
            stepped(found if found >= near else
                    schedule.next_after(plan, near - timedelta(microseconds=1)), far)
            counted(wall.replace(tzinfo=UTC) - later, max(found, far), min(after, until))
        moment = after - timedelta(microseconds=1)
    return counts


_MINUTE = timedelta(minutes=1)
# Stepped through fire time by fire time each side of a change of UTC offset.
_NEAR = timedelta(hours=2)


def next_fires(plan: Any, now: datetime, count: int = 5) -> list[datetime]:
    """The next `count` fire times of a parsed schedule (plan_of)."""
    if plan is None:
        return []
    from pglock.settings import schedule

    fires, moment = [], now
    for _ in range(count):
        moment = schedule.next_after(plan, moment)
        fires.append(moment)
    return fires


def plan_of(expr: str | None, zone: str | None) -> Any:
    """A job's recorded schedule, parsed (None: unscheduled or unreadable here)."""
    if expr is None:
        return None
    from pglock.settings import schedule

    try:
        return schedule.parse(expr, None if zone == "localtime" else zone)
    except UsageError:
        return None


def audit(conn: psycopg.Connection[Any], schema_name: str, *, job: str | None = None,
          before: int | None = None, limit: int = 100) -> list[history.Action]:
    """Operator actions, newest first (on the job and on every job, if one is named),
    those older than audit row `before` when paging."""
    with database.translated("cannot read the audit log"):
        if not schema.readable(conn, schema_name):
            return []
        rows = conn.execute(schema.query(AUDIT, schema_name),
                            {"job": job, "before": before, "limit": limit}).fetchall()
    return [history.Action(*row) for row in rows]


def output(conn: psycopg.Connection[Any], schema_name: str,
           run_id: int) -> tuple[str, bytes | None] | None:
    """One run's job and kept output tail (None: no such run)."""
    with database.translated("cannot read the run's output"):
        if not schema.readable(conn, schema_name):
            return None
        row = conn.execute(schema.query(OUTPUT, schema_name), {"id": run_id}).fetchone()
    return None if row is None else (row[0], None if row[1] is None else bytes(row[1]))

