"""`pglock hosts`: the census by host. Each host with its pglock and Python, when it was
last seen, the jobs it attempts (judged by the job model's census: silent ones named), and
whether its pglock is older than the newest the fleet runs (version skew)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import UnknownJob
from pglock.lock.census import SILENT_AFTER, Attendance, Standing
from pglock.reports import jobs
from pglock.reports.jobs import Snapshot

# Every host the census knows (a forgotten one has no row), and when it last attempted
# any job (None: nothing since the census restarted: attendance is unlogged).
HOSTS = """
SELECT h.host, h.version, h.python, h.first_seen, s.at
FROM {schema}.hosts h
LEFT JOIN (SELECT host, max(last_attempt) AS at FROM {schema}.attendance GROUP BY host) s
       ON s.host = h.host
ORDER BY h.host
"""


@dataclass(frozen=True)
class Host:
    """One host of the census and its attendance of each job (known to the job model)."""

    name: str
    version: str
    python: str
    first_seen: datetime
    # Its last attempt of any job (None: none since the census restarted).
    last_seen: datetime | None
    jobs: tuple[Attendance, ...] = ()
    # Its pglock is older than the newest the census has seen.
    skewed: bool = False

    @property
    def silent_jobs(self) -> list[str]:
        return [found.job for found in self.jobs if found.standing is Standing.SILENT]

    @property
    def silent(self) -> bool:
        """Silent as a whole: it attempted nothing for the span that made a job silent."""
        return any(found.whole for found in self.jobs)


@dataclass(frozen=True)
class Roll:
    """The census at one moment of the database's clock: every host (or a job's)."""

    now: datetime
    hosts: list[Host]
    # The newest pglock version among them (None: no host yet).
    newest: str | None
    # With --job: the job, and its hosts (their rows of that job alone).
    job: str | None = None

    @property
    def versions(self) -> Counter[str]:
        """How many hosts run each pglock version."""
        return Counter(host.version for host in self.hosts)

    @property
    def skewed(self) -> list[Host]:
        return [host for host in self.hosts if host.skewed]

    @property
    def drifting(self) -> dict[str, dict[float, list[str]]]:
        """The jobs whose hosts run them with different ttls: each ttl with its hosts (of
        the hosts attending the job; docs/ha.md, "One ttl per job")."""
        by_job: dict[str, dict[float, list[str]]] = {}
        for host in self.hosts:
            for found in host.jobs:
                if found.standing is Standing.ATTENDING and found.ttl is not None:
                    by_job.setdefault(found.job, {}).setdefault(found.ttl, []).append(
                        host.name)
        return {job: dict(sorted(ttls.items())) for job, ttls in sorted(by_job.items())
                if len(ttls) > 1}


def version_key(version: str) -> tuple[Any, ...]:
    """A pglock version for ordering (PEP 440's common forms): its release numbers, then a
    final release after its pre-releases (0.2.0rc1 < 0.2.0 < 0.2.1); text it cannot read
    orders first."""
    found = re.match(r"v?(\d+(?:\.\d+)*)(.*)$", version.strip())
    if found is None:
        return ((), 0, version)
    release = tuple(int(part) for part in found.group(1).split("."))
    # Trailing zeros do not count: 1.0 is 1.0.0.
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    rest = found.group(2)
    final = not re.match(r"[.-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", rest, re.IGNORECASE)
    return (release, int(final) + int(final and rest.startswith((".post", "-post", "post"))),
            rest)


def rows(conn: psycopg.Connection[Any], schema_name: str) -> list[tuple[Any, ...]]:
    """Every host row of the census (none while the schema is missing)."""
    with database.translated(f"cannot read the hosts of schema {schema_name!r}"):
        if not schema.readable(conn, schema_name):
            return []
        return list(conn.execute(schema.query(HOSTS, schema_name)).fetchall())


def read(conn: psycopg.Connection[Any], schema_name: str, job: str | None = None, *,
         silent_after: int = SILENT_AFTER) -> Roll:
    """Every host with its jobs judged; with `job`, the hosts that attempted it (UnknownJob
    when it never ran here)."""
    snapshot = jobs.read(conn, schema_name, job, hosts=True, silent_after=silent_after)
    if job is not None and not snapshot.jobs:
        raise UnknownJob(snapshot.unknown(job, schema_name))
    return roll(snapshot, rows(conn, schema_name), job)


def roll(snapshot: Snapshot, found: list[tuple[Any, ...]], job: str | None = None) -> Roll:
    """The hosts of `found` (HOSTS rows) with their attendance of the snapshot's jobs;
    with `job`, only the hosts that attempted it."""
    attended: dict[str, list[Attendance]] = {}
    for each in snapshot.jobs:
        for row in each.census.hosts if each.census is not None else ():
            attended.setdefault(row.host, []).append(row)
    newest = max((row[1] for row in found), key=version_key, default=None)
    hosts = [Host(name, version, python, first, last, tuple(attended.get(name, ())),
                  newest is not None and version_key(version) < version_key(newest))
             for name, version, python, first, last in found
             if job is None or name in attended]
    return Roll(snapshot.now, hosts, newest, job)
