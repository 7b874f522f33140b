"""Operators in control of the fleet: pause and resume jobs, stop a running command,
replay a dead slot.

A pause is a row every host's acquire reads in its own statement: paused hosts skip
as if the lock were held, and nothing is recorded. The empty job name, which no job
can have, pauses every job, known or not. `stop` marks the holder's lock row; the
holder sees it at its next renewal (or advisory check), stops its command and releases
the lock normally. Every action writes an audit row: who, from which host, why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import NothingDone, UnknownJob, UsageError

# Every job, for the pause and audit rows of --all.
ALL = ""

UNKNOWN = """
SELECT j FROM unnest(%(jobs)s::text[]) AS j
WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE job = j)
  AND NOT EXISTS (SELECT 1 FROM {schema}.locks WHERE job = j)
"""

UNTIL = """
SELECT CASE WHEN %(for)s::interval IS NOT NULL THEN clock_timestamp() + %(for)s::interval
            ELSE %(until)s::timestamptz END,
       clock_timestamp()
"""

PAUSE = """
WITH paused AS (
    INSERT INTO {schema}.pauses AS p (job, paused_at, paused_by, reason, until)
    SELECT j, clock_timestamp(), %(by)s, %(reason)s, %(until)s
    FROM unnest(%(jobs)s::text[]) AS j
    ON CONFLICT (job) DO UPDATE SET paused_at = excluded.paused_at,
        paused_by = excluded.paused_by, reason = excluded.reason, until = excluded.until
    RETURNING p.job, p.paused_at, p.until
), audit AS (
    INSERT INTO {schema}.audit (job, action, by, reason, detail)
    SELECT nullif(job, ''), 'pause', %(by)s, %(reason)s,
           CASE WHEN until IS NOT NULL THEN 'until ' || until::text END
    FROM paused
)
SELECT p.job, p.until, l.holder, l.holder_pid, l.acquired_at
FROM paused p
LEFT JOIN {schema}.locks l
       ON (l.job = p.job OR p.job = '') AND l.released_at IS NULL AND l.cleared_at IS NULL
      AND l.expires_at > clock_timestamp()
ORDER BY p.job, l.job
"""

RESUME = """
WITH resumed AS (
    DELETE FROM {schema}.pauses WHERE job = ANY(%(jobs)s::text[])
    RETURNING job, until IS NULL OR until > clock_timestamp() AS active
), audit AS (
    INSERT INTO {schema}.audit (job, action, by, reason)
    SELECT nullif(job, ''), 'resume', %(by)s, %(reason)s FROM resumed WHERE active
)
SELECT r.job, r.active,
       (SELECT paused_at FROM {schema}.pauses
        WHERE job = '' AND (until IS NULL OR until > clock_timestamp())) AS all_paused_at
FROM resumed r
"""

STILL_ALL = """
SELECT paused_at FROM {schema}.pauses
WHERE job = '' AND (until IS NULL OR until > clock_timestamp())
"""

# The jobs paused one by one, which `resume --all` leaves paused (each has its own reason).
STILL_ONE = """
SELECT job FROM {schema}.pauses
WHERE job <> '' AND (until IS NULL OR until > clock_timestamp())
ORDER BY job
"""

STOP = """
WITH asked AS (
    UPDATE {schema}.locks l
    SET stop_requested_at = coalesce(l.stop_requested_at, clock_timestamp()),
        stop_requested_by = %(by)s, stop_reason = %(reason)s
    WHERE l.job = %(job)s AND l.released_at IS NULL AND l.cleared_at IS NULL
      AND l.expires_at > clock_timestamp()
    RETURNING l.holder, l.holder_pid, l.fencing_token, l.mode,
              extract(epoch FROM l.ttl)::float8 AS ttl, l.acquired_at, l.stop_requested_at
), audit AS (
    INSERT INTO {schema}.audit (job, action, by, reason, detail)
    SELECT %(job)s, 'stop', %(by)s, %(reason)s,
           'holder ' || holder || ':' || holder_pid || ' token ' || fencing_token
    FROM asked
)
SELECT * FROM asked
"""

# Who holds the seats of a semaphore job (`run --limit`), which stop leaves to clear.
SEATED = """
SELECT string_agg(holder || ':' || holder_pid, ', ' ORDER BY seat) FROM {schema}.seats
WHERE job = %(job)s AND released_at IS NULL AND cleared_at IS NULL
  AND expires_at > clock_timestamp()
"""

# Whether the holder has seen the request (a renewal after it), and how its run ended;
# whether it let the lock go (released, taken by another, or expired), which is when the
# stop is done: a holder in its retry delay has a finished run and still holds the lock.
STOPPING = """
SELECT l.fencing_token = %(token)s AND l.renewed_at > l.stop_requested_at AS seen,
       (SELECT r.outcome FROM {schema}.runs r
        WHERE r.job = %(job)s AND r.fencing_token = %(token)s AND r.outcome <> 'cleared'
        ORDER BY r.id DESC LIMIT 1) AS outcome,
       (SELECT r.exit_code FROM {schema}.runs r
        WHERE r.job = %(job)s AND r.fencing_token = %(token)s AND r.outcome <> 'cleared'
        ORDER BY r.id DESC LIMIT 1) AS exit_code,
       clock_timestamp() > l.stop_requested_at + l.ttl AS overdue,
       l.fencing_token <> %(token)s OR l.released_at IS NOT NULL
           OR l.expires_at <= clock_timestamp() AS let_go
FROM {schema}.locks l WHERE l.job = %(job)s
"""


FORGET = """
WITH running AS (
    SELECT l.holder, l.holder_pid FROM {schema}.locks l
    WHERE l.job = %(job)s AND l.released_at IS NULL AND l.expires_at > clock_timestamp()
    UNION ALL
    SELECT s.holder, s.holder_pid FROM {schema}.seats s
    WHERE s.job = %(job)s AND s.released_at IS NULL AND s.cleared_at IS NULL
      AND s.expires_at > clock_timestamp()
), forgotten AS (
    -- Its schedule goes with it: a manual run (no --schedule) that brings it back keeps
    -- whatever schedule is recorded, which a job taken out of cron must not keep.
    UPDATE {schema}.jobs j SET forgotten_at = clock_timestamp(), schedule = NULL,
        timezone = NULL, last_slot = NULL, next_slot = NULL
    WHERE j.job = %(job)s AND j.forgotten_at IS NULL AND NOT EXISTS (SELECT 1 FROM running)
    RETURNING j.job
), unpaused AS (
    -- Its pause ends with it: a forgotten job is in no status, so a pause kept would
    -- make a run that brings it back skip with nothing saying why (docs/operators.md).
    DELETE FROM {schema}.pauses p WHERE p.job = %(job)s AND EXISTS (SELECT 1 FROM forgotten)
    RETURNING p.job, p.until IS NULL OR p.until > clock_timestamp() AS active
), unattended AS (
    -- Its census goes too: a run that brings it back starts it afresh, and no host of it
    -- is silent meanwhile.
    DELETE FROM {schema}.attendance a WHERE a.job = %(job)s
      AND EXISTS (SELECT 1 FROM forgotten)
), unlisted AS (
    UPDATE {schema}.hosts h SET jobs = array_remove(h.jobs, %(job)s)
    WHERE %(job)s = ANY(h.jobs) AND EXISTS (SELECT 1 FROM forgotten)
), audit AS (
    INSERT INTO {schema}.audit (job, action, by, reason, detail)
    SELECT job, 'forget', %(by)s, %(reason)s, NULL FROM forgotten
    UNION ALL
    SELECT job, 'resume', %(by)s, %(reason)s, 'with forget' FROM unpaused WHERE active
)
SELECT EXISTS (SELECT 1 FROM forgotten),
       (SELECT string_agg(holder || ':' || holder_pid, ', ') FROM running),
       EXISTS (SELECT 1 FROM {schema}.jobs WHERE job = %(job)s AND forgotten_at IS NULL),
       EXISTS (SELECT 1 FROM unpaused WHERE active)
"""


# The slot to replay: the one named, else the job's dead slot, else its newest slot.
# Locked, so that two replays (or a replay and a start) do not cross.
REPLAY_TARGET = """
SELECT s.slot, s.attempts, s.attempt_limit, s.retries, s.succeeded_run_id,
       s.closed_at IS NOT NULL AS closed,
       (SELECT r.holder || ':' || r.holder_pid FROM {schema}.runs r
        JOIN {schema}.locks l ON l.job = r.job
        WHERE r.job = s.job AND r.slot = s.slot AND r.outcome = 'running'
          AND l.released_at IS NULL AND l.expires_at > clock_timestamp()
        ORDER BY r.id DESC LIMIT 1) AS running_on
FROM {schema}.slots s
WHERE s.job = %(job)s
  AND s.slot = coalesce(%(slot)s::timestamptz,
                        (SELECT dead_slot FROM {schema}.jobs WHERE job = %(job)s),
                        (SELECT max(slot) FROM {schema}.slots WHERE job = %(job)s))
FOR UPDATE OF s
"""

# Another 1 + retries attempts from the ones it had; no longer dead; an audit row.
REPLAY = """
WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), reopened AS (
    UPDATE {schema}.slots SET attempt_limit = attempts + 1 + retries, closed_at = NULL,
                              replays = replays + 1
    FROM durable
    WHERE job = %(job)s AND slot = %(slot)s
    RETURNING attempts, attempt_limit
), revived AS (
    UPDATE {schema}.jobs SET dead_slot = NULL, dead_attempts = NULL, dead_error = NULL
    WHERE job = %(job)s AND dead_slot = %(slot)s
)
INSERT INTO {schema}.audit (job, action, by, reason, detail)
SELECT %(job)s, 'replay', %(by)s, %(reason)s,
       'slot ' || %(slot)s::timestamptz::text || ': attempts ' || (attempts + 1) || ' to '
       || attempt_limit
FROM reopened
RETURNING detail
"""


@dataclass(frozen=True)
class Until:
    """When a pause ends by itself: a span from now (database time), or a moment."""

    span: float | None = None
    moment: datetime | None = None


@dataclass(frozen=True)
class Running:
    """A holder whose command a pause leaves to finish."""

    job: str
    holder: str
    holder_pid: int
    since: datetime


@dataclass(frozen=True)
class Paused:
    """What `pause` did."""

    jobs: list[str]
    until: datetime | None
    running: list[Running]


@dataclass(frozen=True)
class Resumed:
    """What `resume` did: the jobs it resumed, those that were not paused, whether every
    job is still paused by `pause --all`, and (after --all) the jobs paused one by one."""

    resumed: list[str]
    not_paused: list[str]
    all_paused_since: datetime | None
    still_paused: list[str]


@dataclass(frozen=True)
class StopRequest:
    """The holder `stop` asked to stop."""

    job: str
    holder: str
    holder_pid: int
    fencing_token: int
    mode: str
    ttl: float
    acquired_at: datetime
    requested_at: datetime


@dataclass(frozen=True)
class StopResult:
    """How the stopped run ended, or that its holder did not react."""

    outcome: str | None
    exit_code: int | None
    reacted: bool


def _targets(jobs: list[str], every: bool) -> list[str]:
    if every and jobs:
        raise UsageError("--job and --all do not go together")
    if not every and not jobs:
        raise UsageError("name the jobs (--job NAME, repeatable) or --all")
    return [ALL] if every else list(dict.fromkeys(jobs))


def _check_known(conn: psycopg.Connection[Any], schema_name: str, jobs: list[str]) -> None:
    if jobs == [ALL]:
        return
    unknown = [row[0] for row in conn.execute(schema.query(UNKNOWN, schema_name),
                                              {"jobs": jobs}).fetchall()]
    if unknown:
        raise UnknownJob(f"no job named {unknown[0]!r} has run here (schema {schema_name!r}); "
                         "--all pauses every job, known or not")


def pause(conn: psycopg.Connection[Any], schema_name: str, jobs: list[str], *, every: bool,
          reason: str, until: Until | None, by: str) -> Paused:
    """Pause the jobs (or every job); the holders whose running commands will finish."""
    targets = _targets(jobs, every)
    with database.translated("cannot pause"):
        schema.existing(conn, schema_name)
        _check_known(conn, schema_name, targets)
        ends = None
        if until is not None:
            span = None if until.span is None else timedelta(seconds=until.span)
            row = conn.execute(UNTIL, {"for": span, "until": until.moment}).fetchone()
            assert row is not None
            ends, now = row
            if ends <= now:
                raise UsageError(f"--until: {ends:%Y-%m-%d %H:%M:%S%z} is in the past "
                                 "(database time)")
        with conn.transaction():
            rows = conn.execute(schema.query(PAUSE, schema_name), {
                "jobs": targets, "by": by, "reason": reason, "until": ends}).fetchall()
    running = [Running(job, holder, pid, since) for job, _, holder, pid, since in rows
               if holder is not None]
    return Paused(targets, ends, running)


def resume(conn: psycopg.Connection[Any], schema_name: str, jobs: list[str], *, every: bool,
           reason: str | None, by: str) -> Resumed:
    """Resume the jobs (or, with --all, undo `pause --all`)."""
    targets = _targets(jobs, every)
    with database.translated("cannot resume"):
        schema.existing(conn, schema_name)
        with conn.transaction():
            rows = conn.execute(schema.query(RESUME, schema_name),
                                {"jobs": targets, "by": by, "reason": reason}).fetchall()
            still = conn.execute(schema.query(STILL_ALL, schema_name)).fetchone()
            one_by_one = ([row[0] for row in conn.execute(
                schema.query(STILL_ONE, schema_name)).fetchall()] if every else [])
    resumed = [job for job, active, _ in rows if active]
    return Resumed(resumed, [job for job in targets if job not in resumed],
                   None if still is None else still[0], one_by_one)


def stop(conn: psycopg.Connection[Any], schema_name: str, job: str, *, reason: str,
         by: str) -> StopRequest:
    """Ask the job's holder to stop its command; NothingDone when nothing runs."""
    with database.translated(f"cannot stop job {job!r}"):
        schema.existing(conn, schema_name)
        with conn.transaction():
            row = conn.execute(schema.query(STOP, schema_name),
                               {"job": job, "by": by, "reason": reason}).fetchone()
        if row is None:
            seated = conn.execute(schema.query(SEATED, schema_name), {"job": job}).fetchone()
            if seated is not None and seated[0] is not None:
                # Stopping one seat of N is not what an operator asking to stop a job means;
                # clear takes them all (docs/lease.md, "Semaphores").
                raise NothingDone(
                    f"job {job!r} runs as a semaphore (--limit) on {seated[0]}; pglock stop "
                    f"acts on a single lock: pglock clear --job {job} takes every seat")
    if row is None:
        raise NothingDone(f"job {job!r} is not running; nothing to stop")
    return StopRequest(job, *row)


def wait_stopped(conn: psycopg.Connection[Any], schema_name: str, request: StopRequest,
                 poll: float = 0.25) -> StopResult:
    """Wait until the holder has ended its run and let the lock go (a holder in a retry
    delay ended its last attempt before the request: it records the next `stopped`), or
    failed to react within its ttl."""
    params = {"job": request.job, "token": request.fencing_token}
    seen = False
    with database.translated(f"cannot follow the stop of job {request.job!r}"):
        while True:
            row = conn.execute(schema.query(STOPPING, schema_name), params).fetchone()
            if row is None:
                return StopResult(None, None, seen)
            seen = seen or bool(row[0])
            outcome, exit_code, overdue, let_go = row[1], row[2], row[3], row[4]
            if let_go and outcome is not None and outcome != "running":
                return StopResult(outcome, exit_code, True)
            if overdue and (not seen or let_go):
                # Never saw the request, or let the lock expire with its run unended.
                return StopResult(None, None, False)
            time.sleep(poll)


def forget(conn: psycopg.Connection[Any], schema_name: str, job: str, *, reason: str,
           by: str) -> bool:
    """Retire a job: gone from status, check and metrics (its census with it), its own
    pause ended (audited as a resume); refused while it runs. Whether a pause ended with
    it."""
    with database.translated(f"cannot forget job {job!r}"):
        schema.existing(conn, schema_name)
        with conn.transaction():
            row = conn.execute(schema.query(FORGET, schema_name),
                               {"job": job, "by": by, "reason": reason}).fetchone()
    assert row is not None
    done, running, known, unpaused = row
    if running is not None:
        raise NothingDone(f"job {job!r} is running on {running}; let it finish (or "
                          "pglock stop it) before forgetting it")
    if not done and not known:
        raise UnknownJob(f"no job named {job!r} is known here (schema {schema_name!r})")
    return bool(unpaused)


@dataclass(frozen=True)
class Replayed:
    """What `replay` re-opened: the slot, and the attempts the next runs will make."""

    job: str
    slot: datetime
    first_attempt: int
    last_attempt: int


def replay(conn: psycopg.Connection[Any], schema_name: str, job: str, *,
           slot: datetime | None, reason: str, by: str) -> Replayed:
    """Re-open a dead (or failed) slot for another 1 + retries attempts, which the next
    `pglock run` of the slot makes (on any host, within its --deadline); NothingDone when
    the slot is running, succeeded, or still has attempts left."""
    with database.translated(f"cannot replay job {job!r}"):
        schema.existing(conn, schema_name)
        with conn.transaction():
            row = conn.execute(schema.query(REPLAY_TARGET, schema_name),
                               {"job": job, "slot": slot}).fetchone()
            if row is None:
                _no_slot(conn, schema_name, job, slot)
            assert row is not None
            found, attempts, limit, retries, succeeded, closed, running_on = row
            shown = found.isoformat()
            if running_on is not None:
                raise NothingDone(f"slot {shown} of job {job!r} is running on {running_on}; "
                                  "nothing to replay")
            if succeeded is not None:
                raise NothingDone(f"slot {shown} of job {job!r} already succeeded (run "
                                  f"{succeeded}); nothing to replay")
            if attempts < limit and not closed:
                raise NothingDone(f"slot {shown} of job {job!r} still has attempts left "
                                  f"({attempts} of {limit} made): its next run takes one")
            conn.execute(schema.query(REPLAY, schema_name),
                         {"job": job, "slot": found, "by": by, "reason": reason})
    return Replayed(job, found, attempts + 1, attempts + 1 + retries)


def _no_slot(conn: psycopg.Connection[Any], schema_name: str, job: str,
             slot: datetime | None) -> None:
    unknown = conn.execute(schema.query(UNKNOWN, schema_name), {"jobs": [job]}).fetchall()
    if unknown:
        raise UnknownJob(f"no job named {job!r} has run here (schema {schema_name!r})")
    if slot is not None:
        raise NothingDone(f"job {job!r} has no slot {slot.isoformat()}: see pglock history "
                          f"--job {job}")
    raise NothingDone(f"job {job!r} has no slot to replay (only runs with --schedule have "
                      "slots)")
