"""The census: every run's host, winner or loser, and its attempts of each job, recorded by
the acquire statement (sql/functions.sql, attend; what a run sends: lease.attendee); and
which of a job's hosts went silent (docs/operators.md, "The census"). Not on the run's
path: a run imports none of this.

A host is silent for a job when it attempted the job before (twice at least: one attempt
may be a run by hand) and has not for more than two of the job's slots (with a
schedule), or, unscheduled, for more than twice its usual interval (the median of the
seconds between its last recorded attempts), and for at least two minutes. A host that
contends only in its turns (--candidates) is silent after twice its promise instead (its
refresh plus the job's interval: it attempts few slots, and asks for the job's roster at
its refreshes, which count as attempts: `standby`). A host that
attempted nothing at all for that span is silent as a whole. The rule is `judge`; the
database's clock is `now`, and what a host records is at most one attempt a minute, in
an unlogged table (a crash or a failover empties it: the hosts' `jobs`, logged, keep
whom to expect).
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

import psycopg

from pglock.db import database, schema

# Slots (or usual intervals) without an attempt past which a host is silent for a job.
SILENT_AFTER = 2
# Never silent sooner than this after its last attempt: the census writes a host's row at
# most once a minute, and cron's triggers of one minute come a little apart.
MIN_SILENCE = 120.0
# An unscheduled job whose usual interval went with a crash or a failover (the census's
# attempts are unlogged) is silent after this long without an attempt since.
LOST_SILENCE = 86400.0

# Every host's attendance of each job (or of the one named), with the host's versions and
# when it last attempted any job. A pair the host attends (hosts.jobs) without a row in
# `attendance` lost it with a crash or a failover (the table is unlogged): its last
# attempt is not known, only that none came since the census restarted, which is taken as
# the latest of the server's start, its shared memory's reset after a crash, and the first
# sighting of the newest timeline (a promoted standby). A forgotten host has no rows.
ATTENDANCE = """
WITH restart AS (
    SELECT greatest(pg_postmaster_start_time(),
                    coalesce(pg_stat_get_bgwriter_stat_reset_time(), '-infinity'),
                    coalesce((SELECT max(first_seen) FROM {schema}.timelines), '-infinity'))
           AS at
), pairs AS (
    SELECT a.job, a.host FROM {schema}.attendance a
    WHERE %(job)s::text IS NULL OR a.job = %(job)s::text
    UNION
    SELECT j.job, h.host FROM {schema}.hosts h, unnest(h.jobs) AS j(job)
    WHERE %(job)s::text IS NULL OR j.job = %(job)s::text
), seen AS (
    -- Each of their hosts' last attempt of any job (by the host index for one job's).
    SELECT s.host, max(s.last_attempt) AS at FROM {schema}.attendance s
    WHERE s.host IN (SELECT host FROM pairs) GROUP BY s.host
)
SELECT p.job, p.host, a.first_attempt, coalesce(a.last_attempt, r.at), a.outcome, a.slot,
       extract(epoch FROM least(a.ttl, interval '7 days'))::float8, coalesce(a.gaps, '{{}}'),
       coalesce(cardinality(a.gaps) > 0, false) OR p.job = ANY(h.jobs), a.job IS NULL,
       h.version, h.python, seen.at,
       extract(epoch FROM a.due)::float8, a.passed_at,
       j.candidates, extract(epoch FROM j.candidate_step)::float8
FROM pairs p JOIN {schema}.hosts h ON h.host = p.host
LEFT JOIN {schema}.jobs j ON j.job = p.job
LEFT JOIN {schema}.attendance a ON a.job = p.job AND a.host = p.host
LEFT JOIN seen ON seen.host = p.host
CROSS JOIN restart r
ORDER BY p.job, p.host
"""
# What a job's census is judged by: the database's clock, the job's schedule as its last
# run recorded it (none: unscheduled), its grace and its windows.
JOB = """
SELECT now(), j.schedule, j.timezone,
       extract(epoch FROM least(j.grace, interval '366 days'))::float8, j.windows
FROM (SELECT 1) AS one LEFT JOIN {schema}.jobs j ON j.job = %(job)s
"""


class Recorded(NamedTuple):
    """A job's schedule as its runs recorded it (its `jobs` row): the expression (None:
    unscheduled), its zone, its grace (None: the default), its --window list."""

    expr: str | None
    zone: str | None = None
    grace: float | None = None
    windows: tuple[str, ...] = ()


class Standing(enum.StrEnum):
    """Where one host stands with one job."""

    # Attempted it within its span (the last slots, or its usual interval).
    ATTENDING = "attending"
    # Attempted it before, and not for longer than its span.
    SILENT = "silent"
    # Attempted it once, long ago (a run by hand?): not judged.
    ONCE = "once"


@dataclass(frozen=True)
class Attendance:
    """One host's attendance of one job, as the census recorded it (and judged)."""

    job: str
    host: str
    # None: lost with a crash or a failover (below).
    first_attempt: datetime | None
    # The newest attempt recorded (database time; at most one a minute is). When `lost`,
    # the census's restart: no attempt came since.
    last_attempt: datetime
    # ran, held, paused, slot_done (None: lost).
    outcome: str | None
    # The slot it was for (with --schedule).
    slot: datetime | None
    ttl: float | None
    # Seconds between its last recorded attempts, newest last.
    gaps: tuple[int, ...]
    # It attempted the job more than once (one attempt may be a run by hand).
    repeated: bool
    # Its row went with a crash or a failover, and it has not attempted since.
    lost: bool
    version: str
    python: str
    # When the host last attempted any job (None: nothing since the census restarted).
    last_seen: datetime | None
    standing: Standing = Standing.ATTENDING
    # Silent for this job and for every other: it attempted nothing for the span.
    whole: bool = False
    # --candidates: the host contends only in its turns, and is seen again within this
    # (seconds: its --candidates-refresh plus the job's interval); None: at every trigger.
    due: float | None = None
    # --candidates: when a candidate ranked below it ran a slot it had not attempted (it is
    # out of the job's roster until it is seen again).
    passed_at: datetime | None = None
    # The job's candidates (K) and step as its last run recorded them (None: every host
    # contends): the job's, on each of its hosts' rows.
    candidates: int | None = None
    step: float | None = None

    @property
    def usual(self) -> float | None:
        """Its usual interval between attempts (seconds; None: attempted only once)."""
        return float(statistics.median(self.gaps)) if self.gaps else None


@dataclass(frozen=True)
class Census:
    """A job's hosts, each judged, by name."""

    hosts: tuple[Attendance, ...] = ()

    @property
    def attending(self) -> list[Attendance]:
        """The hosts that fire the job: attempted it within its span."""
        return [a for a in self.hosts if a.standing is Standing.ATTENDING]

    @property
    def silent(self) -> list[Attendance]:
        return [a for a in self.hosts if a.standing is Standing.SILENT]

    @property
    def candidates(self) -> tuple[int, float] | None:
        """The job's K and step (--candidates), as its last run recorded them (None: every
        host contends)."""
        for row in self.hosts:
            if row.candidates is not None:
                return row.candidates, row.step or 0.0
        return None

    @property
    def ttls(self) -> dict[float, list[str]]:
        """The ttls the hosts that fire the job ran it with, each with its hosts: more
        than one is drift (docs/ha.md, "One ttl per job": the wait after a promotion is as
        long as the longest)."""
        found: dict[float, list[str]] = {}
        for a in self.attending:
            if a.ttl is not None:
                found.setdefault(a.ttl, []).append(a.host)
        return dict(sorted(found.items()))


def read(conn: psycopg.Connection[Any], schema_name: str,
         job: str | None = None) -> dict[str, list[Attendance]]:
    """Every job's attendance (or the one named's), by job, not judged yet."""
    with database.translated(f"cannot read the census of schema {schema_name!r}"):
        cursor = conn.cursor(binary=True)
        rows = cursor.execute(schema.query(ATTENDANCE, schema_name), {"job": job}).fetchall()
    found: dict[str, list[Attendance]] = {}
    for (name, host, first, last, outcome, slot, ttl, gaps, repeated, lost, version, python,
         seen, due, passed_at, candidates, step) in rows:
        if lost and candidates is not None:
            # A job run with --candidates: its hosts' promises went with the crash or the
            # failover, as an unscheduled job's usual interval does: they get a day.
            due = LOST_SILENCE / SILENT_AFTER
        found.setdefault(name, []).append(Attendance(
            name, host, first, last, outcome, slot, ttl, tuple(gaps), bool(repeated),
            bool(lost), version, python, seen, due=due, passed_at=passed_at,
            candidates=candidates, step=step))
    return found


def of_job(conn: psycopg.Connection[Any], schema_name: str, job: str,
           after: int = SILENT_AFTER) -> Census:
    """One job's census, judged now by its schedule as recorded: what a run may ask
    (issue 47: the hosts attending a job, neither silent nor forgotten)."""
    with database.translated(f"cannot read the census of job {job!r}"):
        row = conn.execute(schema.query(JOB, schema_name), {"job": job}).fetchone()
    assert row is not None
    now, expr, zone, grace, windows = row
    rows = read(conn, schema_name, job).get(job, [])
    recorded = Recorded(expr, zone, grace, tuple(windows or ()))
    return judged(rows, now, since(recorded, now, after), after)


def judged(rows: list[Attendance], now: datetime, cutoff: datetime | None,
           after: int = SILENT_AFTER) -> Census:
    """A job's attendance judged at `now` (`cutoff`: since(...) for a scheduled job)."""
    return Census(tuple(judge(row, now, cutoff, after) for row in rows))


def judge(row: Attendance, now: datetime, cutoff: datetime | None,
          after: int = SILENT_AFTER) -> Attendance:
    """The rule: `cutoff` is the oldest of the job's last `after` slots whose grace has
    passed (since()), None for an unscheduled job (then its usual interval decides)."""
    quiet = (now - row.last_attempt).total_seconds()
    if row.due is not None:
        # A host that contends only in its turns (--candidates) attempts few of the job's
        # slots; it is seen at its refreshes, within its promise.
        boundary = now - timedelta(seconds=max(after * row.due, MIN_SILENCE))
        cutoff = None
    elif cutoff is not None:
        boundary = cutoff
    else:
        usual = row.usual
        if usual is None:
            # Its usual interval went with a crash or a failover: a day, not to call silent
            # a host that attempts once an hour.
            limit = LOST_SILENCE if row.lost else MIN_SILENCE
        else:
            limit = max(after * usual, MIN_SILENCE)
        boundary = now - timedelta(seconds=limit)
    attempted = row.slot if cutoff is not None and row.slot is not None else row.last_attempt
    if attempted >= boundary or quiet <= MIN_SILENCE:
        return replace(row, standing=Standing.ATTENDING, whole=False)
    if not row.repeated:
        return replace(row, standing=Standing.ONCE, whole=False)
    return replace(row, standing=Standing.SILENT,
                   whole=row.last_seen is None or row.last_seen < boundary)


def since(recorded: Recorded, now: datetime, after: int = SILENT_AFTER) -> datetime | None:
    """The oldest of a scheduled job's last `after` slots whose grace has passed (a host
    that attempted none of them, nor a later one, has not for more than `after` slots);
    None unscheduled, or when its schedule cannot be read here (then a host's usual
    interval judges it)."""
    if recorded.expr is None:
        return None
    return _since(recorded, now, after)


# Jobs of one read share the clock, and many share a schedule.
@lru_cache(maxsize=1024)
def _since(recorded: Recorded, now: datetime, after: int) -> datetime | None:
    from pglock.errors import UsageError
    from pglock.settings import schedule

    assert recorded.expr is not None
    zone = None if recorded.zone == "localtime" else recorded.zone
    try:
        plan = schedule.parse(recorded.expr, zone, zone_source="the job's recorded zone")
        windows = tuple(schedule.parse_window(text, zone, zone_source="the job's recorded zone")
                        for text in recorded.windows)
    except UsageError:
        return None
    grace = recorded.grace
    if grace is None:
        grace = schedule.slot_info(plan, now).default_grace
    slots = schedule.recent(plan, now - timedelta(seconds=grace), after, windows)
    return slots[-1] if len(slots) == after else None
