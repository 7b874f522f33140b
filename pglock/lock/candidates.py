"""Candidates (--candidates K, docs/fleet.md "Candidates"): who of a job's hosts contends
for a slot. The hosts the census knows for the job (its roster, sql/functions.sql's
roster()) are ranked for each slot by a rendezvous hash of (job, slot, host); the first K
are the slot's candidates, the first of them tries at the slot, the next one a step
later, and so on; the others ask nothing. The ranking is the same on every host that
knows the same roster, spreads the slots over the hosts, and a host that joins or leaves
moves only the slots it ranks first in. The lock still decides: a host that ranks itself
wrongly (an old roster) costs a contender more or a step, never a second run.

A roster holds at most ROSTER_SIZE hosts (or 2K, if more), the job's first by a hash of
(job, host): a host's file stays small and a refresh reads as many rows whatever the
fleet's size. In a fleet larger than that, a job's slots go to its roster's hosts only.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pglock.db import schema
from pglock.db.schema import query

# The most hosts of a job's roster: the slots of a job fired by more hosts than this go to
# its roster's (each job's roster is its own: the jobs of a fleet still spread).
ROSTER_SIZE = 64
# A host that contends only in its turns and has not connected for this long (its
# --candidates-refresh) asks for its job's roster again.
DEFAULT_REFRESH = 600.0
DEFAULT_STEP = 10.0
# A job's roster as a host last learnt it goes stale after this many refreshes: then the
# host contends at every trigger (the safe side) until it learns it again.
STALE_AFTER = 3

# The rosters of some of this host's jobs, each job's attendance recorded as `standby`
# (functions.sql, members()): the one statement of a refresh.
MEMBERS = """
SELECT * FROM {schema}.members(%(version)s, %(host)s, %(pglock)s, %(python)s, %(jobs)s,
                               %(slots)s, %(ttls)s, %(dues)s, %(sizes)s)
"""

# A job's roster as its hosts would learn it now, read with the caller's rights (`pglock
# hosts --next`), and whatever its runs last said of the job's candidates.
ROSTER = """
SELECT {schema}.roster(%(job)s, %(size)s), j.candidates,
       extract(epoch FROM j.candidate_step)::float8
FROM (SELECT 1) AS one LEFT JOIN {schema}.jobs j ON j.job = %(job)s
"""


def roster_size(candidates: int) -> int:
    """How many hosts a job's roster holds for K candidates."""
    return max(ROSTER_SIZE, 2 * candidates)


def turn_of(moment: datetime) -> datetime:
    """The trigger's minute (UTC) of a run without --schedule: what its slot is for the
    ranking. Cron starts every host's trigger at second 0 of its own clock, so each reads
    the same minute whatever their clocks' offsets."""
    moment = moment.astimezone(UTC)
    return moment.replace(second=0, microsecond=0)


def score(job: str, at: datetime, host: str) -> int:
    """The rendezvous score of `host` for the slot `at` of `job` (higher ranks first): the
    first 8 bytes of sha256(job, slot as UTC ISO seconds, host), unsigned."""
    text = "\x1f".join((job, at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), host))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8],
                          "big")


def ranked(job: str, at: datetime, hosts: list[str] | tuple[str, ...]) -> list[str]:
    """The hosts in rank order for the slot `at` (the first ranks 1)."""
    return sorted(set(hosts), key=lambda host: (-score(job, at, host), host))


def rank(job: str, at: datetime, host: str, roster: list[str] | tuple[str, ...],
         candidates: int) -> int | None:
    """This host's rank for the slot (1-based) among the roster and itself; None when the
    roster is full without it (the job's slots go to its roster's hosts)."""
    if host not in roster and len(roster) >= roster_size(candidates):
        return None
    return ranked(job, at, [*roster, host]).index(host) + 1


def attempt_at(at: datetime, rank_: int, step: float) -> datetime:
    """When the candidate of rank `rank_` tries: the slot, plus a step per rank above it."""
    return at + timedelta(seconds=(rank_ - 1) * step)


def members(conn: psycopg.Connection[Any], schema_name: str, host: str,
            asked: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The rosters of the jobs `asked` (each: job, slot, ttl, due, size), this host's
    attendance of each recorded: one statement. The schema is created or upgraded first
    where it is missing or older, as acquire does."""
    from pglock.lock.lease import attendee, versioned

    params = {"version": schema.VERSION, "host": host, **attendee(),
              "jobs": [a["job"] for a in asked], "slots": [a["slot"] for a in asked],
              "ttls": [timedelta(seconds=a["ttl"]) for a in asked],
              "dues": [timedelta(seconds=a["due"]) for a in asked],
              "sizes": [a["size"] for a in asked]}
    rows: list[tuple[Any, ...]] = []

    def send() -> tuple[Any, ...]:
        rows[:] = [tuple(row) for row in
                   conn.execute(query(MEMBERS, schema_name), params).fetchall()]
        # The first column of the first row is the version (one row, the version alone,
        # when it is not this pglock's).
        return rows[0]

    versioned(conn, schema_name, send)
    return {job: list(roster) for _, job, roster in rows if job is not None}


def read_roster(conn: psycopg.Connection[Any], schema_name: str, job: str,
                size: int) -> tuple[list[str], int | None, float | None]:
    """A job's roster now (without recording anything), its K and step as its last run
    recorded them (None: every host contends, or no run yet)."""
    row = conn.execute(query(ROSTER, schema_name), {"job": job, "size": size}).fetchone()
    assert row is not None
    return list(row[0] or ()), row[1], row[2]
