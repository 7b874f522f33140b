"""`pglock hosts --job NAME --next` (or `--slot TIME`): a slot's candidates in rank order,
as the job's hosts rank it (docs/fleet.md, "Candidates"). The roster is the database's
now (what a host learns at its next refresh); the ranking is lock/candidates.py's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import ExitStatus, PglockError, UnknownJob
from pglock.lock import candidates as ranking

# The job's recorded schedule, and the database's clock.
JOB = """
SELECT now(), j.schedule, j.timezone
FROM (SELECT 1) AS one LEFT JOIN {schema}.jobs j ON j.job = %(job)s
"""


class NotGated(PglockError):
    """The job's runs do not use --candidates: every host contends for its slots."""

    exit_status = ExitStatus.FAILURE


@dataclass(frozen=True)
class Turns:
    """A slot of a job and its hosts in rank order."""

    job: str
    now: datetime
    slot: datetime
    candidates: int
    step: float
    # The roster in rank order for the slot.
    ranked: list[str]

    def tries_at(self, rank: int) -> datetime:
        """When the candidate of this rank tries (its trigger at the slot)."""
        return ranking.attempt_at(self.slot, rank, self.step)


def read(conn: psycopg.Connection[Any], schema_name: str, job: str,
         slot: datetime | None = None) -> Turns:
    """The job's next slot (or the slot at or before `slot`) and its ranking; UnknownJob
    for a job that never ran here, NotGated for one whose runs do not use --candidates."""
    with database.translated(f"cannot read the candidates of job {job!r}"):
        if not schema.readable(conn, schema_name):
            raise UnknownJob(f"job {job!r} has never run here (no schema {schema_name!r})")
        row = conn.execute(schema.query(JOB, schema_name), {"job": job}).fetchone()
        assert row is not None
        now, expr, zone = row
        roster, k, step = ranking.read_roster(conn, schema_name, job,
                                              ranking.ROSTER_SIZE)
        if k is None:
            if expr is None and not roster:
                raise UnknownJob(f"job {job!r} has never run here")
            raise NotGated(f"job {job!r}: its last run did not use --candidates: every host "
                           "contends for its slots")
        if ranking.roster_size(k) > ranking.ROSTER_SIZE:
            roster, _, _ = ranking.read_roster(conn, schema_name, job, ranking.roster_size(k))
    at = _slot(expr, zone, now, slot)
    return Turns(job, now, at, k, step or 0.0, ranking.ranked(job, at, roster))


def _slot(expr: str | None, zone: str | None, now: datetime,
          slot: datetime | None) -> datetime:
    """The slot ranked: with a schedule (as the job's runs recorded it), the next after
    now, or the one at or before `slot`; without, the minute (of now's next, or of
    `slot`), as a literal crontab line's trigger ranks it."""
    if expr is None:
        if slot is not None:
            return ranking.turn_of(slot)
        return ranking.turn_of(now) + timedelta(minutes=1)
    from pglock.settings import schedule

    name = None if zone == "localtime" else zone
    plan = schedule.parse(expr, name, zone_source="the job's recorded zone")
    if slot is not None:
        return schedule.slot_info(plan, slot).slot
    return schedule.slot_info(plan, now).next
