"""`pglock status`: every job as jobs.py reads it, and one job's recent runs.

It never reads the history to list the jobs (10,000 jobs cost 10,000 summary rows,
whatever the history holds), and it changes nothing: a run whose holder seems gone
is shown as stale, not marked abandoned, since its holder may merely be cut off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from pglock.db import database
from pglock.errors import UnknownJob
from pglock.reports import history, jobs
from pglock.reports.jobs import Job

RECENT_RUNS = 10


@dataclass(frozen=True)
class Status:
    """Every job (or the one asked for, with its recent runs)."""

    now: datetime
    jobs: list[Job]
    runs: list[history.RunRow]
    # The job asked for (--job), if any.
    job: str | None = None
    # With --job: the operators' recent actions on it (and on every job).
    actions: list[history.Action] = field(default_factory=list)
    # Idle jobs left out of `jobs` (the default view of a large fleet).
    unlisted: int = 0
    # The schema has no pglock tables yet (or --schema names another).
    schema_missing: bool = False


def read(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None, *,
         everything: bool = True) -> Status:
    """All jobs' status, or one job's with its recent runs (UnknownJob if never seen);
    everything=False leaves out the idle jobs of a large fleet (counted in `unlisted`)."""
    # One job's status names its hosts (the census); every job's leaves them out.
    snapshot = jobs.read(conn, schema_name, job, everything=everything or job is not None,
                         hosts=job is not None)
    if job is not None and not snapshot.jobs:
        raise UnknownJob(snapshot.unknown(job, schema_name))
    runs: list[history.RunRow] = []
    actions: list[history.Action] = []
    if job is not None:
        with database.translated("cannot read the status"):
            filters = history.Filters(job=job, limit=RECENT_RUNS)
            runs = history.recent(conn, schema_name, filters)
            actions = history.actions(conn, schema_name, filters)
    return Status(snapshot.now, snapshot.jobs, runs, job, actions, snapshot.unlisted,
                  snapshot.schema_missing)


def one(conn: psycopg.Connection[Any], schema_name: str, job: str) -> Job | None:
    """The job, or None when it was never seen."""
    found = jobs.read(conn, schema_name, job).jobs
    return found[0] if found else None
