"""`pglock jobs`: the jobs file's jobs next to what the database knows of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from pglock.errors import DatabaseError
from pglock.reports import jobs
from pglock.reports.jobs import Job, Snapshot
from pglock.run.jobsfile import ConfiguredJob
from pglock.settings import schedule
from pglock.settings.config import shown
from pglock.settings.durations import format_duration, parse_duration


@dataclass(frozen=True)
class Compared:
    """One job of the file, of the database, or both, and where they disagree."""

    name: str
    configured: ConfiguredJob | None
    known: Job | None
    notes: tuple[str, ...]

    @property
    def drift(self) -> bool:
        """Whether the file and the database disagree (never run counts)."""
        return bool(self.notes)


def _expression(expr: str | None) -> str | None:
    """A cron expression as pglock records it (schedule.parse's form)."""
    return None if expr is None else schedule.normal(expr)


def _shown_schedule(expr: str | None, zone: str | None) -> str:
    if expr is None:
        return "none"
    return f"{expr!r}" + (f" ({zone})" if zone else "")


def notes(configured: ConfiguredJob | None, known: Job | None) -> tuple[str, ...]:
    """What an operator should know about a job: never run, its schedule differs from
    what its hosts last reported, its hosts run it with ttls other than one (the census),
    it runs without being in the file."""
    if configured is None:
        return ("not in the jobs file", *_ttls(None, known))
    if known is None or known.last_run_id is None:
        return ("never run",)
    found: list[str] = []
    wanted, recorded = _expression(configured.schedule), _expression(known.schedule)
    # Without `tz` in the file, each host reads the schedule in its own zone: only the
    # expression can be compared.
    zone_differs = configured.tz is not None and recorded is not None and \
        configured.tz != known.timezone
    if wanted != recorded or zone_differs:
        found.append(f"schedule differs: file {_shown_schedule(wanted, configured.tz)}, "
                     f"hosts ran {_shown_schedule(recorded, known.timezone)}")
    return (*found, *_ttls(configured, known))


def _ttls(configured: ConfiguredJob | None, known: Job | None) -> tuple[str, ...]:
    """The ttls the job's hosts ran it with (the census), against one another and the
    file's: the wait after a promotion is as long as the longest (docs/ha.md, "One ttl
    per job")."""
    if known is None or known.census is None or not known.census.ttls:
        return ()
    ttls = known.census.ttls
    ran = "; ".join(f"{format_duration(ttl)} on {', '.join(map(shown, hosts))}"
                    for ttl, hosts in ttls.items())
    if len(ttls) > 1:
        return (f"hosts run it with different ttls: {ran}",)
    wanted = None if configured is None else configured.values.get("ttl")
    if wanted is not None and parse_duration(str(wanted), option="ttl") not in ttls:
        return (f"ttl differs: file {wanted}, hosts ran {ran}",)
    return ()


def read(conn: psycopg.Connection[Any], schema_name: str) -> Snapshot:
    """What the database knows of every job, with its census (the ttls each job's hosts run
    it with: notes); a role that may not read the census gets the rest."""
    try:
        return jobs.read(conn, schema_name, hosts=True)
    except DatabaseError as error:
        if not isinstance(error.__cause__, psycopg.errors.InsufficientPrivilege):
            raise
    return jobs.read(conn, schema_name)


def compare(configured: Sequence[ConfiguredJob], known: Sequence[Job]) -> list[Compared]:
    """The file's jobs in its order, then the database's others by name."""
    by_name = {job.name: job for job in known}
    listed = [Compared(job.name, job, by_name.get(job.name), notes(job, by_name.get(job.name)))
              for job in configured]
    names = {job.name for job in configured}
    listed += [Compared(job.name, None, job, notes(None, job))
               for job in sorted(known, key=lambda j: j.name) if job.name not in names]
    return listed


def as_json(listed: Sequence[Compared], path: str | None) -> dict[str, Any]:
    """`pglock jobs --json` (docs/jobs-file.md)."""
    return {"config_file": path, "jobs": [{
        "job": item.name,
        "configured": item.configured is not None,
        "schedule": None if item.configured is None else item.configured.schedule,
        "tz": None if item.configured is None else item.configured.tz,
        "known": item.known is not None,
        "state": None if item.known is None else str(item.known.state),
        "reported_schedule": None if item.known is None else item.known.schedule,
        "reported_tz": None if item.known is None else item.known.timezone,
        "notes": list(item.notes)} for item in listed]}
