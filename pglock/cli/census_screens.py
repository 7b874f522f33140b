"""The census's screens and JSON: `pglock hosts` (by host, or one job's hosts) and the lines
`status --job` adds; render.py draws them. Host names are data: escaped wherever shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pglock.cli.render import NONE, Grid, Screen, ago, clip, escaped, header, iso, took, when
from pglock.lock.census import Attendance, Census, Standing
from pglock.reports.hosts import Host, Roll
from pglock.reports.turns import Turns

# On a terminal a host's state carries a glyph, so that it reads without colour.
HOST_LOOK = {"silent": ("! silent", "bold yellow"), "stopping": ("@ stopped some", "yellow"),
             "attending": ("  attending", "")}
STANDING_LOOK = {Standing.SILENT: ("! silent", "bold yellow"),
                 Standing.ONCE: ("  once", "dim"), Standing.ATTENDING: ("  attending", "")}
OUTCOMES = {"ran": "ran", "held": "skipped: held", "paused": "skipped: paused",
            "slot_done": "skipped: slot done", "standby": "standby (not a candidate)"}
# status --job names at most this many of the hosts that fire a job (all silent ones).
NAMED = 10


def host_state(host: Host) -> str:
    """silent (as a whole), stopping (silent for some of its jobs) or attending."""
    if host.silent:
        return "silent"
    return "stopping" if host.silent_jobs else "attending"


def hosts_screen(found: Roll, place: str, schema: str, *, terminal: bool) -> Screen:
    """Every host, silent ones first, then by name; or, with a job, that job's hosts."""
    screen = Screen(header("hosts", place, schema, found.now))
    if found.job is not None:
        return job_hosts_screen(found, screen, terminal=terminal)
    if not found.hosts:
        screen.parts.append("no host has run pglock here yet (the census fills as runs try "
                            "their jobs)")
        return screen
    grid = Grid(("HOST", "STATE", "VERSION", "PYTHON", "LAST SEEN", "JOBS", "SILENT FOR"),
                styled_column=1, optional=("PYTHON", "SILENT FOR", "JOBS"), whole="HOST")
    order = {"silent": 0, "stopping": 1, "attending": 2}
    for host in sorted(found.hosts, key=lambda h: (order[host_state(h)], h.name)):
        state = host_state(host)
        label, style = HOST_LOOK[state]
        grid.add([escaped(host.name), label if terminal else state, version_text(host),
                  escaped(host.python), seen_text(found.now, host.last_seen),
                  str(len(host.jobs)), clip(", ".join(host.silent_jobs)) or NONE], style)
    screen.parts.append(grid)
    screen.parts.append("\n" + tally_line(found))
    screen.parts.extend(skew_lines(found))
    return screen


def job_hosts_screen(found: Roll, screen: Screen, *, terminal: bool) -> Screen:
    """One job's hosts, each with its last attempt and how it came out."""
    assert found.job is not None
    rows = [(host, _of_job(host, found.job)) for host in found.hosts]
    if not rows:
        screen.parts.append(f"no host has attempted job {found.job} since the census began "
                            "(schema version 9)")
        return screen
    grid = Grid(("HOST", "STANDING", "LAST ATTEMPT", "OUTCOME", "SLOT", "TTL", "VERSION"),
                styled_column=1, optional=("TTL", "SLOT", "VERSION"), whole="HOST")
    order = {Standing.SILENT: 0, Standing.ATTENDING: 1, Standing.ONCE: 2}
    for host, row in sorted(rows, key=lambda r: (order[r[1].standing], r[0].name)):
        label, style = STANDING_LOOK[row.standing]
        standing = label if terminal else str(row.standing)
        if row.whole:
            standing += " (every job)"
        grid.add([escaped(host.name), standing, attempt_text(found.now, row),
                  outcome_text(row), when(row.slot), took(row.ttl), version_text(host)], style)
    screen.parts.append(grid)
    census = Census(tuple(row for _, row in rows))
    screen.parts.append("\n" + census_line(found.job, census, found.now))
    screen.parts.extend(skew_lines(found))
    return screen


def attempt_text(now: datetime, row: Attendance) -> str:
    """`12s ago`; for a row lost with a crash or a failover, `none since 03:12:00` (the
    census's restart)."""
    if row.lost:
        return f"none since {when(row.last_attempt)}"
    return ago(seconds(now, row.last_attempt))


def outcome_text(row: Attendance) -> str:
    if row.outcome is None:
        return NONE
    return OUTCOMES.get(row.outcome, escaped(row.outcome))


def seen_text(now: datetime, seen: datetime | None) -> str:
    return "not since the census restarted" if seen is None else ago(seconds(now, seen))


def _of_job(host: Host, job: str) -> Attendance:
    return next(row for row in host.jobs if row.job == job)


def version_text(host: Host) -> str:
    return escaped(host.version) + (" (older)" if host.skewed else "")


def seconds(now: datetime, moment: datetime) -> float:
    return (now - moment).total_seconds()


def tally_line(found: Roll) -> str:
    """`4 hosts: 1 silent, 1 stopped some of their jobs, 2 attending`."""
    states = [host_state(host) for host in found.hosts]
    total = len(states)
    parts = [f"{states.count('silent')} silent" if "silent" in states else "",
             f"{states.count('stopping')} stopped some of their jobs"
             if "stopping" in states else "",
             f"{states.count('attending')} attending" if "attending" in states else ""]
    return f"{total} host{'s' if total != 1 else ''}: " + ", ".join(p for p in parts if p)


def skew_lines(found: Roll) -> list[str]:
    """The pglock versions the hosts run, and which run an older one than the newest."""
    if len(found.versions) < 2:
        return []
    versions = ", ".join(f"{escaped(version)} on {count}"
                         for version, count in sorted(found.versions.items(),
                                                      key=lambda v: -v[1]))
    older = ", ".join(escaped(host.name) for host in found.skewed)
    return [f"version skew: pglock {versions}; older than {escaped(found.newest or '')}: "
            f"{clip(older)}"]


def census_line(job: str, census: Census, now: datetime) -> str:
    """What status --job says of the job's hosts: how many fire it, and the silent ones."""
    attending = census.attending
    count = "1 host fires it" if len(attending) == 1 else f"{len(attending)} hosts fire it"
    names = ", ".join(escaped(a.host) for a in attending[:NAMED])
    if len(attending) > NAMED:
        names += f" and {len(attending) - NAMED} more"
    line = f"hosts of {escaped(job)}: {count}" + (f" ({names})" if names else "")
    silent = census.silent
    if silent:
        line += "; silent: " + ", ".join(
            f"{escaped(a.host)} (last attempt {attempt_text(now, a)}"
            f"{', every job' if a.whole else ''})" for a in silent)
    elif census.hosts:
        line += "; none silent"
    if census.candidates is not None:
        k, step = census.candidates
        line += f"\ncandidates: {k} per slot, {took(step)} apart (pglock hosts --job " \
                f"{escaped(job)} --next)"
    return line


def host_json(host: Host, now: datetime) -> dict[str, Any]:
    return {"host": host.name, "state": host_state(host), "version": host.version,
            "python": host.python, "skewed": host.skewed,
            "first_seen": iso(host.first_seen), "last_seen": iso(host.last_seen),
            "silent": host.silent, "silent_jobs": host.silent_jobs,
            "jobs": [attendance_json(row) for row in host.jobs]}


def attendance_json(row: Attendance) -> dict[str, Any]:
    return {"job": row.job, "host": row.host, "standing": str(row.standing),
            "whole": row.whole, "first_attempt": iso(row.first_attempt),
            "last_attempt": None if row.lost else iso(row.last_attempt),
            "none_since": iso(row.last_attempt) if row.lost else None,
            "outcome": row.outcome, "slot": iso(row.slot), "ttl": row.ttl,
            "usual_interval": row.usual, "repeated": row.repeated,
            "due": row.due, "passed_turn_at": iso(row.passed_at)}


def hosts_json(found: Roll, place: str, schema: str) -> dict[str, Any]:
    document: dict[str, Any] = {"database": place, "schema": schema, "now": iso(found.now),
                                "newest_version": found.newest,
                                "versions": dict(found.versions)}
    if found.job is None:
        document["hosts"] = [host_json(host, found.now) for host in found.hosts]
        return document
    document["job"] = found.job
    document["hosts"] = [{**attendance_json(_of_job(host, found.job)),
                          "version": host.version, "python": host.python,
                          "skewed": host.skewed, "last_seen": iso(host.last_seen)}
                         for host in found.hosts]
    return document


def census_json(census: Census | None) -> dict[str, Any] | None:
    """The job's hosts in status --json (None: not read)."""
    if census is None:
        return None
    candidates = census.candidates
    return {"attending": [a.host for a in census.attending],
            "silent": [{"host": a.host, "last_attempt": None if a.lost
                        else iso(a.last_attempt), "whole": a.whole} for a in census.silent],
            "candidates": None if candidates is None else {"k": candidates[0],
                                                           "step": candidates[1]}}


def turns_screen(found: Turns, place: str, schema: str) -> Screen:
    """A slot's candidates in rank order, then how many of the job's hosts ask nothing."""
    screen = Screen(header("hosts", place, schema, found.now))
    screen.parts.append(f"candidates of {escaped(found.job)} for the slot "
                        f"{when(found.slot, zone=True)}: {found.candidates} per slot, "
                        f"{took(found.step)} apart\n")
    if not found.ranked:
        screen.parts.append("no host in its roster (the census has seen none of its hosts "
                            "lately): the first trigger of each host contends")
        return screen
    grid = Grid(("RANK", "HOST", "TRIES AT"), whole="HOST")
    for rank, host in enumerate(found.ranked[:found.candidates], start=1):
        grid.add([str(rank), escaped(host), when(found.tries_at(rank))])
    screen.parts.append(grid)
    rest = len(found.ranked) - found.candidates
    if rest > 0:
        screen.parts.append(f"\n{rest} more host{'s' if rest != 1 else ''} of its roster "
                            f"ask{'' if rest != 1 else 's'} nothing for this slot")
    return screen


def turns_json(found: Turns, place: str, schema: str) -> dict[str, Any]:
    return {"database": place, "schema": schema, "now": iso(found.now), "job": found.job,
            "slot": iso(found.slot), "candidates": found.candidates, "step": found.step,
            "ranked": [{"rank": rank, "host": host, "candidate": rank <= found.candidates,
                        "tries_at": iso(found.tries_at(rank))}
                       for rank, host in enumerate(found.ranked, start=1)]}
