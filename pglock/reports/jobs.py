"""One job as every report sees it: its lock, its last runs, its schedule, judged once.

`status`, `check` and `metrics` read the same statement (the `jobs` summary row with its
`locks` row) into the same `Job`, classified by the same rules; they only render it.
The database's clock is "now": the same for every reader, whatever host it runs on.

To add a state or a problem: a member of `State` (worst first) and/or of `Problem` (with
how `check` weighs it), and the rule that finds it in `classify`. Renderers map every
member (screens.STATE_LOOK, check.REASONS); their unit tests fail on a member left out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import UsageError
from pglock.lock import census, ledger
from pglock.lock.census import Census
from pglock.lock.ledger import Outcome

# Outcomes of a finished run ('running' is not one; 'cleared' is an audit row).
FINISHED = tuple(o for o in Outcome if o not in (Outcome.RUNNING, Outcome.CLEARED))
# An operator's `stop` is no failure of the job: the run ended as asked.
FAILURES = tuple(o for o in FINISHED if o not in (Outcome.SUCCEEDED, Outcome.STOPPED))

# One row per job that has a `jobs` or a `locks` row (a lock taken whose run never
# started has only the latter). The clock is read in the same statement, so that no
# jobs at all still give a row. Intervals come as seconds, the form every reader uses.
# `listed` is false only for a job that `classify` is sure to find idle (lock free, no
# open run, last run not a failure, not paused, on time against its schedule): status's
# default view leaves those out unless %(everything)s or the fleet is small, and counts
# them in `unlisted`, so that 10,000 idle jobs cost one count, not 10,000 rows.
JOBS = """
WITH clock AS (SELECT now() AS at),
paused AS (
SELECT p.job, p.paused_at, p.paused_by, p.reason, p.until FROM {schema}.pauses p, clock
WHERE p.until IS NULL OR p.until > clock.at
),
-- A semaphore's seats (--limit) as one lock: its newest seat taken (a running one first),
-- with how many are taken of how many, and whether one's holder vanished (expired, never
-- released). Nothing to read for a fleet without semaphores.
seated AS (
SELECT DISTINCT ON (s.job) s.job, s.mode, s.holder, s.holder_pid, s.fencing_token,
       NULL::integer AS backend_pid, s.acquired_at, s.expires_at, s.ttl, s.released_at,
       s.cleared_at, s.cleared_by,
       count(*) FILTER (WHERE s.expires_at > clock.at AND s.released_at IS NULL)
           OVER seats AS seats_used,
       s.seat_limit,
       bool_or(s.expires_at <= clock.at AND s.released_at IS NULL AND s.cleared_at IS NULL)
           OVER seats AS seat_vanished
FROM {schema}.seats s, clock
WINDOW seats AS (PARTITION BY s.job)
ORDER BY s.job, (s.expires_at > clock.at AND s.released_at IS NULL) DESC, s.acquired_at DESC
),
-- A job's lock row or its seats, whichever was taken last.
held AS (
SELECT l.job, l.mode, l.holder, l.holder_pid, l.fencing_token, l.backend_pid, l.acquired_at,
       l.expires_at, l.ttl, l.released_at, l.cleared_at, l.cleared_by,
       NULL::bigint AS seats_used, NULL::integer AS seat_limit, false AS seat_vanished
FROM {schema}.locks l
WHERE NOT EXISTS (SELECT 1 FROM seated s WHERE s.job = l.job AND s.acquired_at > l.acquired_at)
UNION ALL
SELECT s.* FROM seated s
WHERE NOT EXISTS (SELECT 1 FROM {schema}.locks l
                  WHERE l.job = s.job AND l.acquired_at >= s.acquired_at)
),
every AS (
SELECT coalesce(j.job, l.job) AS name,
       l.mode AS lock_mode, l.holder, l.holder_pid, l.fencing_token, l.backend_pid,
       -- Clamped: a row an older pglock wrote with an absurd --ttl or --min-hold (years
       -- past 9999, which Python cannot hold) must not break every report.
       l.acquired_at, least(l.expires_at, '9999-01-01'::timestamptz) AS expires_at,
       extract(epoch FROM least(l.ttl, interval '7 days'))::float8 AS ttl,
       l.released_at, l.cleared_at, l.cleared_by,
       (j.last_run_id IS NOT NULL
           AND j.last_run_id IS DISTINCT FROM j.last_finished_run_id)
           OR coalesce(l.seat_vanished AND l.seats_used = 0, false) AS run_open,
       j.last_run_id, j.last_started_at, j.last_holder,
       j.last_finished_run_id, j.last_outcome, j.last_exit_code, j.last_finished_at,
       extract(epoch FROM j.last_duration)::float8 AS last_duration, j.last_success_at,
       coalesce(j.outcome_counts, '{{}}') AS outcome_counts,
       coalesce(j.consecutive_failures, 0) AS consecutive_failures,
       j.schedule, j.timezone,
       extract(epoch FROM least(j.grace, interval '366 days'))::float8 AS grace,
       j.last_slot, j.next_slot, j.last_attempt, j.attempt_limit,
       j.dead_slot, j.dead_attempts, j.dead_error,
       j.windows, coalesce(j.skipped_running, 0) AS skipped_running, j.skipped_running_slot,
       coalesce(j.skipped_running_streak, 0) AS skipped_running_streak,
       coalesce(j.catch_up_skipped, 0) AS catch_up_skipped, j.catch_up_skipped_slot,
       coalesce(j.promotion_missed, 0) AS promotion_missed, j.promotion_missed_slot,
       -- Its own pause before a pause of every job.
       CASE WHEN own.job IS NULL THEN every_job.paused_at ELSE own.paused_at END AS paused_at,
       CASE WHEN own.job IS NULL THEN every_job.paused_by ELSE own.paused_by END AS paused_by,
       CASE WHEN own.job IS NULL THEN every_job.reason ELSE own.reason END AS pause_reason,
       CASE WHEN own.job IS NULL THEN every_job.until ELSE own.until END AS paused_until,
       CASE WHEN own.job IS NULL THEN every_job.job = '' END AS paused_everywhere,
       l.seats_used, l.seat_limit,
       -- The open run's note: its holder says there when it passed --expect-duration's MAX
       -- (ledger.SLOW). One lookup by key per running job, none for the others.
       CASE WHEN j.last_run_id IS NOT NULL
                 AND j.last_run_id IS DISTINCT FROM j.last_finished_run_id
            THEN (SELECT r.error FROM {schema}.runs r WHERE r.id = j.last_run_id) END
           AS run_note,
       (l.job IS NOT NULL AND (l.expires_at > clock.at OR l.released_at IS NULL))
       OR (j.last_run_id IS NOT NULL AND j.last_run_id IS DISTINCT FROM j.last_finished_run_id)
       OR (j.last_finished_run_id IS NOT NULL AND j.last_outcome = ANY(%(failures)s::text[]))
       OR own.job IS NOT NULL OR every_job.job IS NOT NULL OR j.dead_slot IS NOT NULL
       -- A job with windows may be in one now; one that skips slots while running is
       -- warned of.
       OR j.windows IS NOT NULL OR coalesce(j.skipped_running_streak, 0) > 0
       OR (j.schedule IS NOT NULL AND j.last_slot IS NOT NULL
           AND NOT coalesce(j.next_slot > clock.at AND j.grace IS NOT NULL, false)) AS listed
FROM clock
JOIN ({schema}.jobs j FULL JOIN held l ON l.job = j.job)
       ON (%(job)s::text IS NULL OR coalesce(j.job, l.job) = %(job)s::text)
      -- A forgotten job is gone from every report until it runs again.
      AND j.forgotten_at IS NULL
-- Pauses in force: one per paused job, '' for `pause --all` (a hash join, not a lookup
-- per job).
LEFT JOIN paused own ON own.job = coalesce(j.job, l.job)
LEFT JOIN paused every_job ON every_job.job = ''
),
shown AS (
SELECT %(everything)s::bool OR (SELECT count(*) FROM every) <= %(list_all_upto)s AS everything
)
SELECT clock.at AS now,
       CASE WHEN shown.everything THEN NULL
            ELSE (SELECT count(*) FROM every WHERE NOT every.listed) END AS unlisted,
       e.*
FROM clock CROSS JOIN shown
LEFT JOIN every e ON shown.everything OR e.listed
ORDER BY e.name
"""
# The columns of a JOBS row, in order: _from_row unpacks them by position (10,000 rows
# as dicts cost more than the query), and read() checks that the statement agrees.
COLUMNS = (
    "now", "unlisted", "name", "lock_mode", "holder", "holder_pid", "fencing_token",
    "backend_pid", "acquired_at", "expires_at", "ttl", "released_at", "cleared_at",
    "cleared_by", "run_open", "last_run_id", "last_started_at", "last_holder",
    "last_finished_run_id", "last_outcome", "last_exit_code", "last_finished_at",
    "last_duration", "last_success_at", "outcome_counts", "consecutive_failures", "schedule",
    "timezone", "grace", "last_slot", "next_slot", "last_attempt", "attempt_limit",
    "dead_slot", "dead_attempts", "dead_error", "windows", "skipped_running",
    "skipped_running_slot", "skipped_running_streak", "catch_up_skipped",
    "catch_up_skipped_slot", "promotion_missed", "promotion_missed_slot", "paused_at",
    "paused_by", "pause_reason", "paused_until", "paused_everywhere", "seats_used",
    "seat_limit", "run_note", "listed")
# When a job asked for by name was forgotten (None: it never ran here).
FORGOTTEN = """
SELECT forgotten_at FROM {schema}.jobs WHERE job = %(job)s AND forgotten_at IS NOT NULL
"""
# The seats of one semaphore job that are taken now, as Lock fields.
SEATS = """
SELECT seat, mode, holder, holder_pid, fencing_token, NULL::integer, acquired_at,
       least(expires_at, '9999-01-01'::timestamptz),
       extract(epoch FROM least(ttl, interval '7 days'))::float8, released_at, cleared_at,
       cleared_by
FROM {schema}.seats WHERE job = %(job)s AND expires_at > now() ORDER BY seat
"""
# Up to this many jobs, status lists them all: a small fleet reads at a glance.
LIST_ALL_UPTO = 50


class State(enum.StrEnum):
    """What a job is doing, worst first (the order `status` lists them in); what each
    means: STATE_MEANINGS."""

    DEAD = "dead"
    STALE = "stale"
    FAILED = "failed"
    OVERDUE = "overdue"
    CLEARED = "cleared"
    # Known from its holder's note, not judged by the reader's clock.
    SLOW = "slow"
    RUNNING = "running"
    PAUSED = "paused"
    WINDOW = "window"
    HELD = "held"
    IDLE = "idle"


# What each state means to an operator, in State's order: the one source of the state
# table in docs/operators.md and of every list of states in the docs and man pages
# (scripts/doc_figures.py, `gen:state-table`, `gen:states`; a test holds `status --help`
# to the same list).
STATE_MEANINGS: dict[State, str] = {
    State.DEAD: "a slot of its schedule spent its attempts (`--retries`) without success: "
                "nobody runs it again unless an operator replays it (`pglock replay`) or a "
                "later slot succeeds",
    State.STALE: "its lock expired while its last run is still marked running: the holder "
                 "vanished (crash, SIGKILL, host gone) or is cut off from the database. The "
                 "next run of the job marks that run `abandoned`; `status` itself changes "
                 "nothing, since a holder that is merely cut off may still be running its "
                 "command",
    State.FAILED: "nobody holds the lock and the last finished run did not succeed "
                  "(`failed`, `timed_out`, `lock_lost`, `killed`, `abandoned`)",
    State.OVERDUE: "a slot of its schedule passed more than its grace ago with no run started "
                   "for it (see [schedules.md](schedules.md#overdue)): cron stopped starting "
                   "it, every host skipped it, or a run that outlasts its interval is still "
                   "holding the lock (then `HOLDER` shows it, and `clear` still works). "
                   "`NEXT DUE` says how many slots were missed",
    State.CLEARED: "`pglock clear` took the lock; others may take it when the lock-delay "
                   "ends (`EXPIRES IN` shows `free in ...`)",
    State.SLOW: "running past its `--expect-duration`'s MAX: nothing stops it "
                "(`--max-runtime` does), but someone may want to look",
    State.RUNNING: "a holder has the lock and its lease has not expired",
    State.PAUSED: "an operator paused it (`pglock pause`): every host skips it; a run that "
                  "was going when it was paused shows as `running` until it ends",
    State.WINDOW: "inside one of its maintenance windows (`--window`): every trigger skips, "
                  "and its slots are neither overdue nor missed",
    State.HELD: "the command ended, but `--min-hold` keeps the lock taken until its expiry "
                "(`EXPIRES IN` shows `held until HH:MM:SS (min-hold)`), so that a host whose "
                "clock lags cannot rerun the same trigger; other hosts get 75 meanwhile",
    State.IDLE: "nobody holds the lock; the last run (if any) succeeded",
}


class Weight(enum.Enum):
    """How `check` weighs a problem."""

    # Always CRITICAL.
    CRITICAL = "critical"
    # WARNING or CRITICAL by --failures-warning/--failures-critical (failed runs in a row).
    FAILURES = "failures"
    # WARNING or CRITICAL by --missed-warning/--missed-critical (missed slots).
    MISSED = "missed"
    # UNKNOWN: this host cannot judge it.
    UNKNOWN = "unknown"
    # WARNING once older than --paused-warning, else OK.
    PAUSED = "paused"
    # WARNING or CRITICAL by --slow-warning/--slow-critical (time past the expected MAX).
    SLOW = "slow"
    # WARNING once --skipped-warning slots in a row were skipped while runs went on.
    SKIPPED = "skipped"
    # WARNING: a host stopped attempting the job (the census; --silent-after).
    SILENT = "silent"
    # WARNING: the hosts that fire the job run it with different ttls (the census).
    DRIFT = "drift"


class Problem(enum.StrEnum):
    """What can be wrong with a job, most severe first; `weight` says how check weighs it
    and `counted` whether check's summary and perfdata count it."""

    weight: Weight
    counted: bool

    def __new__(cls, value: str, weight: Weight, counted: bool) -> Problem:
        member = str.__new__(cls, value)
        member._value_ = value
        member.weight = weight
        member.counted = counted
        return member

    DEAD = ("dead", Weight.CRITICAL, True)
    STALE = ("stale", Weight.CRITICAL, True)
    FAILED = ("failed", Weight.FAILURES, True)
    OVERDUE = ("overdue", Weight.MISSED, True)
    # Its run has gone on past its --expect-duration's MAX.
    SLOW = ("slow", Weight.SLOW, True)
    # Its recorded schedule cannot be read here (a zone this host does not know).
    UNREADABLE = ("unreadable", Weight.UNKNOWN, False)
    # Paused: not a problem by itself (failed and overdue are not judged meanwhile), but
    # check warns when the pause is older than --paused-warning (a forgotten pause).
    PAUSED = ("paused", Weight.PAUSED, True)
    # Slots skipped because a run of an earlier slot still held the lock (runs outlast
    # their interval); counted in a row until a run ends having skipped none.
    SKIPPED_RUNNING = ("skipped_running", Weight.SKIPPED, True)
    # A host that attempted the job before has stopped (the census: lock/census.py);
    # judged only when the census was read.
    SILENT_HOST = ("silent_host", Weight.SILENT, True)
    # The hosts that fire the job run it with different ttls (the census): the wait after
    # a promotion is as long as the longest, and a ttl first used in the replication lag
    # before an asynchronous failover is not waited out (docs/ha.md, "One ttl per job").
    TTL_DRIFT = ("ttl_drift", Weight.DRIFT, False)


@dataclass(frozen=True)
class Lock:
    """The job's `locks` row: its holder, or its last one."""

    mode: str
    holder: str
    holder_pid: int
    fencing_token: int
    backend_pid: int | None
    acquired_at: datetime
    expires_at: datetime
    ttl: float
    released_at: datetime | None
    cleared_at: datetime | None
    cleared_by: str | None


@dataclass(frozen=True)
class Seat:
    """One seat of a semaphore job (--limit) and its holder, or its last one."""

    seat: int
    lock: Lock


@dataclass(frozen=True)
class Seats:
    """A semaphore job's seats: how many are taken (running), of how many (its --limit);
    `holders` is filled for one job read alone (status --job)."""

    used: int
    limit: int
    holders: tuple[Seat, ...] = ()


@dataclass(frozen=True)
class LastRun:
    """The job's newest finished run."""

    id: int
    outcome: str
    exit_code: int | None
    finished_at: datetime | None
    duration: float | None


@dataclass(frozen=True)
class Dead:
    """The slot that spent its attempts without success."""

    slot: datetime
    attempts: int
    # The last attempt's last line of output (else its error, else its exit code).
    error: str | None


@dataclass(frozen=True)
class Pause:
    """Why every host skips the job: who paused it, when, why, until when."""

    paused_at: datetime
    paused_by: str
    reason: str
    until: datetime | None
    # Paused by `pause --all`, not by a pause of its own.
    everywhere: bool


@dataclass(frozen=True)
class Due:
    """Where a scheduled job stands against its schedule."""

    # The first slot with no run yet: in the past while pending (within grace) or overdue.
    due_at: datetime
    # When cron next starts it.
    next_fire: datetime
    # Slots past their grace with no run (counted up to schedule.MISSED_LIMIT).
    missed: int
    grace: float


@dataclass(frozen=True)
class Skipped:
    """Slots of a scheduled job that no run took, and why: the trigger found the run of an
    earlier slot still going (`running`; `streak` of them in a row), a catch-up gave
    them up (older than its limit or deadline), or the wait after a promotion ended past
    the trigger's --deadline (`promotion`)."""

    running: int = 0
    running_slot: datetime | None = None
    streak: int = 0
    catch_up: int = 0
    catch_up_slot: datetime | None = None
    promotion: int = 0
    promotion_slot: datetime | None = None


@dataclass(frozen=True)
class Job:
    """One job at one moment of the database's clock, classified."""

    name: str
    now: datetime
    lock: Lock | None
    # Its last run is still marked running.
    run_open: bool
    last_run_id: int | None
    last_started_at: datetime | None
    last_holder: str | None
    last_run: LastRun | None
    last_success_at: datetime | None
    counts: dict[str, int]
    consecutive_failures: int
    schedule: str | None
    timezone: str | None
    last_slot: datetime | None
    # None unless scheduled (and its schedule readable here).
    due: Due | None
    # Why its recorded schedule cannot be read here (a zone this host does not know).
    schedule_note: str | None
    # What its lock and last run say, before its schedule is looked at (never OVERDUE):
    # what `clear` goes by.
    lock_state: State
    # What status shows: the worse of the lock's and the schedule's.
    state: State
    problems: tuple[Problem, ...]
    # Set while an operator's pause is in force.
    pause: Pause | None = None
    # Set while a dead slot waits for a later success or a replay.
    dead: Dead | None = None
    # The newest run's attempt at its slot, and how many the slot may have.
    attempt: int | None = None
    attempt_limit: int | None = None
    # A semaphore job (--limit): its seats; its `lock` is then its newest seat taken.
    seats: Seats | None = None
    # The --expect-duration MAX (seconds) its running run passed, as its holder noted it.
    slow_after: float | None = None

    @property
    def slow_for(self) -> float | None:
        """Seconds its running run has gone on past its expected MAX (None: not slow)."""
        since = self.seconds_since(self.last_started_at)
        if Problem.SLOW not in self.problems or self.slow_after is None or since is None:
            return None
        return max(0.0, since - self.slow_after)

    @property
    def running_since(self) -> datetime | None:
        """When its running run started (None: none is marked running)."""
        return self.last_started_at if self.run_open else None
    # While inside one of its --window: when that window ends.
    window_until: datetime | None = None
    skipped: Skipped = Skipped()
    # Its --window list, as its runs recorded it.
    windows: tuple[str, ...] = ()
    # Its hosts, judged (None: the census was not read).
    census: Census | None = None

    @property
    def paused_for(self) -> float | None:
        """Seconds since it was paused (None: not paused)."""
        return None if self.pause is None else self.seconds_since(self.pause.paused_at)

    @property
    def held(self) -> bool:
        """Whether its lock is taken now (by a run, a clear's lock-delay, or --min-hold)."""
        return self.lock is not None and self.lock.expires_at > self.now

    @property
    def holding(self) -> Lock | None:
        """The lock row when it means something now: held, stale, or in its lock-delay."""
        return self.lock if self.held or self.lock_state is State.STALE else None

    @property
    def held_until(self) -> datetime | None:
        """When --min-hold lets the lock go, while it keeps a finished run's lock taken."""
        lock = self.lock
        if lock is None or lock.released_at is None or not self.held:
            return None
        return lock.expires_at

    @property
    def overdue(self) -> bool:
        return self.due is not None and self.due.missed > 0

    @property
    def failures(self) -> int:
        """Finished runs since the last success (at least 1 when the last one failed)."""
        return max(1, self.consecutive_failures) if Problem.FAILED in self.problems else 0

    @property
    def next_due_in(self) -> float | None:
        """Seconds until cron next starts it (scheduled jobs)."""
        return None if self.due is None else (self.due.next_fire - self.now).total_seconds()

    @property
    def running_for(self) -> float | None:
        """Seconds since the holder took the lock, while its run is still marked running."""
        lock = self.holding
        return self.seconds_since(lock.acquired_at) if lock and self.run_open else None

    def seconds_since(self, moment: datetime | None) -> float | None:
        return None if moment is None else (self.now - moment).total_seconds()


@dataclass(frozen=True)
class Snapshot:
    """Every job (or the one asked for) at one moment of the database's clock."""

    now: datetime
    jobs: list[Job]
    # Idle jobs left out of `jobs` (read with everything=False on a large fleet).
    unlisted: int = 0
    # The job asked for, not found because `pglock forget` forgot it: when.
    forgotten: datetime | None = None
    # The schema has no pglock tables (none created yet, or a typo'd --schema).
    schema_missing: bool = False

    def unknown(self, job: str, schema_name: str | None = None) -> str:
        """Why the job asked for is not in the snapshot, in one line."""
        where = "" if schema_name is None else f" (schema {schema_name!r})"
        if self.forgotten is None:
            return f"no job named {job!r} has run" + ("" if not where else f" here{where}")
        return (f"job {job!r} was forgotten (pglock forget) at "
                f"{self.forgotten.astimezone():%Y-%m-%d %H:%M:%S %Z} and has not run since{where}")


def read(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None, *,
         everything: bool = True, hosts: bool = False,
         silent_after: int = census.SILENT_AFTER) -> Snapshot:
    """Every job, or the one named: none while pglock never ran here (no schema yet);
    a schema that `run` would refuse (newer, no version row, a table missing) fails.
    everything=False leaves out the jobs sure to be idle when there are more than
    LIST_ALL_UPTO jobs, and counts them in `unlisted`. hosts=True reads the census too:
    each job's hosts, judged after `silent_after` slots (Problem.SILENT_HOST)."""
    snapshot = _read(conn, schema_name, job, everything=everything)
    if not hosts or not snapshot.jobs:
        return snapshot
    found = census.read(conn, schema_name, job)
    return replace(snapshot, jobs=[attended(j, found.get(j.name, []), silent_after)
                                   for j in snapshot.jobs])


def attended(job: Job, rows: list[census.Attendance],
             after: int = census.SILENT_AFTER) -> Job:
    """The job with its hosts judged by the census's rule at the job's `now`."""
    recorded = census.Recorded(job.schedule, job.timezone,
                               job.due.grace if job.due is not None else None, job.windows)
    cutoff = census.since(recorded, job.now, after)
    found = census.judged(rows, job.now, cutoff, after)
    problems: tuple[Problem, ...] = tuple(p for p in job.problems if p not in (
        Problem.SILENT_HOST, Problem.TTL_DRIFT))
    if found.silent:
        problems = (*problems, Problem.SILENT_HOST)
    if len(found.ttls) > 1:
        problems = (*problems, Problem.TTL_DRIFT)
    return replace(job, census=found, problems=problems)


def _read(conn: psycopg.Connection[Any], schema_name: str, job: str | None, *,
          everything: bool) -> Snapshot:
    with database.translated(f"cannot read the jobs of schema {schema_name!r}"):
        if not schema.readable(conn, schema_name):
            row = conn.execute("SELECT now()").fetchone()
            assert row is not None
            return Snapshot(row[0], [], schema_missing=True)
        # Binary rows: with 10,000 jobs, parsing timestamps from text is most of the cost.
        cursor = conn.cursor(binary=True)
        rows = cursor.execute(schema.query(JOBS, schema_name), {
            "job": job, "everything": everything, "list_all_upto": LIST_ALL_UPTO,
            "failures": [str(o) for o in FAILURES]}).fetchall()
        assert cursor.description is not None
        if tuple(c.name for c in cursor.description) != COLUMNS:
            raise AssertionError("jobs.JOBS and jobs.COLUMNS disagree")
        now, unlisted = rows[0][0], rows[0][1]
        found = [_from_row(now, row) for row in rows if row[2] is not None]
        if job is not None and not found:
            row = conn.execute(schema.query(FORGOTTEN, schema_name), {"job": job}).fetchone()
            if row is not None:
                return Snapshot(now, [], forgotten=row[0])
        if job is not None and found and found[0].seats is not None:
            found[0] = replace(found[0], seats=replace(
                found[0].seats, holders=seat_holders(conn, schema_name, job)))
    if unlisted is None:
        return Snapshot(now, found)
    # The query keeps what might not be idle; what classify finds idle after all (a slot
    # pending within its grace) joins the count.
    listed = [j for j in found if j.state is not State.IDLE]
    return Snapshot(now, listed, unlisted + len(found) - len(listed))


def seat_holders(conn: psycopg.Connection[Any], schema_name: str, job: str,
                 ) -> tuple[Seat, ...]:
    """The seats of a semaphore job taken now (running, in their hold, or cleared and in
    their lock-delay), by seat."""
    rows = conn.execute(schema.query(SEATS, schema_name), {"job": job}).fetchall()
    return tuple(Seat(seat, Lock(*lock)) for seat, *lock in rows)


def _from_row(now: datetime, row: tuple[Any, ...]) -> Job:
    """A JOBS row (with a job; its columns as COLUMNS names them) as its Job."""
    (_, _, name, lock_mode, holder, holder_pid, fencing_token, backend_pid, acquired_at,
     expires_at, ttl, released_at, cleared_at, cleared_by, run_open, last_run_id,
     last_started_at, last_holder, last_finished_run_id, last_outcome, last_exit_code,
     last_finished_at, last_duration, last_success_at, outcome_counts, consecutive_failures,
     schedule_expr, timezone, grace, last_slot, next_slot, last_attempt, attempt_limit,
     dead_slot, dead_attempts, dead_error, windows, skipped_running, skipped_running_slot,
     skipped_running_streak, catch_up_skipped, catch_up_skipped_slot, promotion_missed,
     promotion_missed_slot, paused_at, paused_by,
     pause_reason, paused_until, paused_everywhere, seats_used, seat_limit, run_note, _) = row
    lock = None
    if lock_mode is not None:
        lock = Lock(lock_mode, holder, holder_pid, fencing_token, backend_pid, acquired_at,
                    expires_at, ttl, released_at, cleared_at, cleared_by)
    last_run = None
    if last_finished_run_id is not None:
        last_run = LastRun(last_finished_run_id, last_outcome, last_exit_code,
                           last_finished_at, last_duration)
    windows = tuple(windows or ())
    due, note = standing(schedule_expr, timezone, grace, last_slot, next_slot, now, windows)
    window_until = in_window(windows, timezone, now) if windows else None
    skipped = Skipped(int(skipped_running), skipped_running_slot, int(skipped_running_streak),
                      int(catch_up_skipped), catch_up_skipped_slot, int(promotion_missed),
                      promotion_missed_slot)
    run_open = bool(run_open)
    pause = None
    if paused_at is not None:
        pause = Pause(paused_at, paused_by, pause_reason, paused_until, bool(paused_everywhere))
    dead = None
    if dead_slot is not None:
        dead = Dead(dead_slot, dead_attempts or 0, dead_error)
    slow_after = ledger.slow_limit(run_note) if run_open else None
    lock_state, state, problems = classify(now, lock, run_open, last_run, due, note,
                                           paused=pause is not None, dead=dead is not None,
                                           slow=slow_after is not None)
    if window_until is not None and state in (State.IDLE, State.HELD):
        state = State.WINDOW
    if skipped.streak > 0 and pause is None:
        problems = (*problems, Problem.SKIPPED_RUNNING)
    counts = {str(outcome): int(n) for outcome, n in outcome_counts.items() if n}
    return Job(
        name=name, now=now, lock=lock, run_open=run_open, last_run_id=last_run_id,
        last_started_at=last_started_at, last_holder=last_holder,
        last_run=last_run, last_success_at=last_success_at, counts=counts,
        consecutive_failures=consecutive_failures, schedule=schedule_expr,
        timezone=timezone, last_slot=last_slot, due=due, schedule_note=note,
        lock_state=lock_state, state=state, problems=problems, pause=pause, dead=dead,
        attempt=last_attempt, attempt_limit=attempt_limit,
        seats=None if seat_limit is None else Seats(int(seats_used), seat_limit),
        slow_after=slow_after, window_until=window_until, skipped=skipped, windows=windows)


def classify(now: datetime, lock: Lock | None, run_open: bool, last_run: LastRun | None,
             due: Due | None, note: str | None = None, *, paused: bool = False,
             dead: bool = False, slow: bool = False) -> tuple[State, State, tuple[Problem, ...]]:
    """The job's lock state, its state, and its problems: the one place that judges a job.
    `slow`: the holder of its open run noted it past --expect-duration's MAX."""
    held = lock is not None and lock.expires_at > now
    # Slow only while its holder still holds it: a vanished holder's run is stale.
    slow = slow and run_open and held
    # A paused job is neither dead, failed nor overdue: nobody is meant to run it.
    dead = dead and not paused
    failed = not paused and last_run is not None and last_run.outcome in FAILURES
    problems = tuple(problem for problem, found in (
        (Problem.DEAD, dead),
        (Problem.STALE, run_open and not held),
        (Problem.FAILED, failed),
        (Problem.OVERDUE, not paused and due is not None and due.missed > 0),
        (Problem.SLOW, slow),
        (Problem.UNREADABLE, note is not None),
        (Problem.PAUSED, paused)) if found)
    if lock is not None and held and lock.released_at is None:
        lock_state = State.CLEARED if lock.cleared_at is not None else State.RUNNING
    elif Problem.STALE in problems:
        lock_state = State.STALE
    elif dead:
        lock_state = State.DEAD
    elif failed:
        lock_state = State.FAILED
    else:
        lock_state = State.HELD if held else State.IDLE
    # Overdue ranks below dead, stale and failed, above the rest.
    overdue = Problem.OVERDUE in problems and lock_state not in (
        State.DEAD, State.STALE, State.FAILED)
    if paused and lock_state not in (State.STALE, State.CLEARED, State.RUNNING):
        return lock_state, State.PAUSED, problems
    if overdue:
        return lock_state, State.OVERDUE, problems
    # `clear` goes by the lock state (running); status shows the run as slow.
    return lock_state, State.SLOW if slow and lock_state is State.RUNNING else lock_state, \
        problems


def standing(expr: str | None, zone: str | None, grace: float | None,
             last_slot: datetime | None, next_slot: datetime | None,
             now: datetime, windows: tuple[str, ...] = ()) -> tuple[Due | None, str | None]:
    """A job's standing against its schedule, from its `jobs` row's schedule columns:
    (Due, None), (None, why its schedule cannot be read), or (None, None) unscheduled."""
    if expr is None or last_slot is None:
        return None, None
    if next_slot is not None and next_slot > now and grace is not None:
        # On time: no cron arithmetic, not even croniter's import, for the common case.
        return Due(next_slot, next_slot, 0, grace), None
    return _counted(expr, zone, grace, last_slot, next_slot, now, windows)


# What an unknown zone's message names as its source: the zone came from the job's row,
# recorded by its last run, not from an option of this command.
RECORDED_ZONE = "the job's recorded zone"


# Jobs of one read share the clock, and many share a schedule and the slots they
# missed: after a fleet-wide outage, 10,000 overdue jobs cost a few distinct countings.
@lru_cache(maxsize=1024)
def _counted(expr: str, zone: str | None, grace: float | None, last_slot: datetime,
             next_slot: datetime | None, now: datetime,
             windows: tuple[str, ...] = ()) -> tuple[Due | None, str | None]:
    from pglock.settings import schedule

    try:
        # A run host whose zone had no name stored "localtime": read it as ours.
        plan = schedule.parse(expr, None if zone == "localtime" else zone,
                              zone_source=RECORDED_ZONE)
        parsed = _windows(windows, zone)
    except UsageError as error:
        return None, f"its schedule cannot be read here: {error}"
    if grace is None:
        grace = schedule.slot_info(plan, last_slot).default_grace
    due_at = next_slot or schedule.next_after(plan, last_slot)
    found = schedule.due(plan, due_at, now, grace, parsed)
    return Due(found.due_at, found.next_fire, found.missed, grace), None


@lru_cache(maxsize=1024)
def _windows(windows: tuple[str, ...], zone: str | None) -> tuple[Any, ...]:
    """A job's recorded --window, read in its schedule's zone (UsageError: unreadable here)."""
    if not windows:
        return ()
    from pglock.settings import schedule

    zone = None if zone == "localtime" else zone
    return tuple(schedule.parse_window(text, zone, zone_source=RECORDED_ZONE)
                 for text in windows)


def in_window(windows: tuple[str, ...], zone: str | None, now: datetime) -> datetime | None:
    """When the maintenance window the job is in now ends (None: in none, or its windows
    cannot be read here)."""
    from pglock.settings import schedule

    try:
        parsed = _windows(windows, zone)
    except UsageError:
        return None
    return schedule.window_end(parsed, now)
