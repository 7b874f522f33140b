"""The jobs file's commands: `crontab` (its cron lines), `systemd` (its timer and service units)
and `jobs` (it next to the database). Registered on cli.app; docs/jobs-file.md."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from pglock.cli.app import (
    ConnectTimeout,
    Dsn,
    JobsJson,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    app,
)
from pglock.errors import UsageError
from pglock.settings.config import shown

if TYPE_CHECKING:
    from pathlib import Path

    from pglock.cli.render import Screen
    from pglock.reports.configured import Compared
    from pglock.reports.jobs import Job
    from pglock.run.jobsfile import ConfiguredJob


def _jobs_file() -> tuple[Path, list[ConfiguredJob]]:
    """The jobs file and its jobs, for crontab and systemd; UsageError when it has none."""
    from pglock.run import jobsfile

    path, jobs = jobsfile.every_job()
    if path is None or not jobs:
        where = "no config file found" if path is None else f"config file {shown(str(path))}"
        raise UsageError(f"no jobs configured ({where}): add [jobs.NAME] tables with a "
                         "command and a schedule (docs/jobs-file.md)")
    return path, jobs


@app.command()
def crontab(
    user: Annotated[str | None, typer.Option(
        "--user", "-u", metavar="USER", show_default=False,
        help="Write an /etc/cron.d file's lines, which run as USER.")] = None,
    tz_by: Annotated[str | None, typer.Option(
        "--tz-by", metavar="cron|pglock", show_default=False,
        help="How jobs with tz fire in their zone: cron (a CRON_TZ line: cronie; Debian's "
             "and Ubuntu's cron ignore it) or pglock (started every minute, pglock runs each "
             "slot once; any cron). Required when a job has tz.")] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Print the cron lines of the jobs file: one per [jobs.NAME] table with a schedule.

    Each line runs `pglock run --job NAME` with PGLOCK_CONFIG naming the file, so cron
    and pglock read the one schedule. Install it with `pglock crontab | crontab -` (it
    replaces the user's crontab), or `pglock crontab --user app > /etc/cron.d/pglock`.

    Example: pglock crontab --user app --tz-by pglock > /etc/cron.d/pglock
    """
    _configure_output(verbose, quiet)
    from pglock.cli import render
    from pglock.operate import crontab as core

    path, jobs = _jobs_file()
    render.write(core.fragment(path, jobs, core.program(), user, tz_by))
    return 0


@app.command()
def systemd(
    directory: Annotated[str | None, typer.Option(
        "--dir", metavar="DIR", show_default=False,
        help="Write the units into DIR (/etc/systemd/system), each whole or not at all, never "
             "over a file pglock did not write. Default: print them, each after a header.")
    ] = None,
    prune: Annotated[bool, typer.Option(
        "--prune", help="With --dir: remove the units pglock wrote for this jobs file's jobs "
                        "that are no longer in it.")] = False,
    user: Annotated[str | None, typer.Option(
        "--user", "-u", metavar="USER", show_default=False,
        help="The services run as USER (User=); without it, as root.")] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Write the jobs file's timer and service units for systemd.

    The timer's OnCalendar= fires at exactly the job's slots in its zone, or the job is
    refused in one line (a time a daylight saving change skips or repeats that cron and
    a timer read apart); the service runs `pglock run --job NAME` with PGLOCK_CONFIG
    naming the file, the skip code a success. Then: systemctl daemon-reload and
    systemctl enable --now pglock-NAME.timer.

    Example: pglock systemd --user app --dir /etc/systemd/system --prune
    """
    _configure_output(verbose, quiet)
    from datetime import UTC
    from pathlib import Path

    from pglock.cli import render
    from pglock.operate import crontab as cron
    from pglock.operate import systemd as core

    if prune and directory is None:
        raise UsageError("--prune: needs --dir (it removes units from that directory)")
    if directory is not None and not directory.strip():
        # Path("") is the current directory: the units would land wherever pglock was run.
        raise UsageError("--dir: an empty path; name the directory (/etc/systemd/system)")
    path, jobs = _jobs_file()
    units = core.units(path, jobs, cron.program(), datetime.now(UTC), user)
    if directory is None:
        render.write(core.printed(units))
    else:
        core.install(Path(directory), units, path, prune)
    return 0


@app.command()
def jobs(
    as_json: JobsJson = False,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Show the jobs file's jobs next to what the database knows of them.

    Notes say what to look at: a configured job that never ran, one whose schedule
    differs from the one its hosts last reported, a job in the database that is not in
    the file.

    Example: pglock jobs
    """
    _configure_output(verbose, quiet)
    from pglock.cli import render
    from pglock.cli.app import connected
    from pglock.reports import configured
    from pglock.run import jobsfile

    path, wanted = jobsfile.every_job()
    shown_path = None if path is None else shown(str(path))
    with connected(dsn, schema, connect_timeout, "jobs") as (conn, place, name):
        snapshot = configured.read(conn, name)
    listed = configured.compare(wanted, snapshot.jobs)
    if as_json:
        render.show_json(configured.as_json(listed, shown_path))
    else:
        render.show(jobs_screen(listed, shown_path, place, name, snapshot.now))
    return 0


def _state(known: Job | None) -> str:
    return "-" if known is None else str(known.state)


def _last_run(known: Job | None) -> str:
    from pglock.cli.render import NONE, when

    if known is None or known.last_run is None:
        return NONE
    return f"{known.last_run.outcome} {when(known.last_run.finished_at)}"


def jobs_screen(listed: Sequence[Compared], path: str | None, place: str, schema: str,
                now: datetime) -> Screen:
    """The plain or terminal screen of `pglock jobs`."""
    from pglock.cli.render import NONE, Grid, Screen, clip, escaped, header

    grid = Grid(["JOB", "SCHEDULE", "STATE", "LAST RUN", "NOTE"], styled_column=4,
                optional=["LAST RUN"], whole="JOB")
    for item in listed:
        job = item.configured
        schedule = NONE if job is None or job.schedule is None else job.schedule + (
            f" ({job.tz})" if job.tz else "")
        grid.add([escaped(item.name), schedule, _state(item.known), _last_run(item.known),
                  clip("; ".join(item.notes))], "yellow" if item.drift else "")
    source = f"jobs file {path}" if path else "no jobs file"
    drifting = sum(item.drift for item in listed)
    return Screen(header("jobs", place, schema, now), [
        f"{source}: {sum(i.configured is not None for i in listed)} configured, "
        f"{drifting} to look at", "", grid])
