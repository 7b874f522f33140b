"""The jobs file's commands: `crontab` (its cron lines) and `jobs` (it next to the
database). Registered on cli.app; docs/jobs-file.md."""

from __future__ import annotations

from typing import Annotated

import typer

from pglock.cli import ConnectTimeout, Dsn, Json, Quiet, Schema, Verbose, _configure_output, app
from pglock.config import shown
from pglock.errors import UsageError


@app.command()
def crontab(
    user: Annotated[str | None, typer.Option(
        "--user", "-u", metavar="USER", show_default=False,
        help="Write an /etc/cron.d file's lines, which run as USER.")] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Print the cron lines of the jobs file: one per [jobs.NAME] table with a schedule.

    Each line runs `pglock run --job NAME` with PGLOCK_CONFIG naming the file, so cron
    and pglock read the one schedule. Install it with `pglock crontab | crontab -` (it
    replaces the user's crontab), or `pglock crontab --user app > /etc/cron.d/pglock`.

    Example: pglock crontab --user app > /etc/cron.d/pglock
    """
    _configure_output(verbose, quiet)
    from pglock import crontab as core
    from pglock import jobsfile, render

    path, jobs = jobsfile.every_job()
    if path is None or not jobs:
        where = "no config file found" if path is None else f"config file {shown(str(path))}"
        raise UsageError(f"no jobs configured ({where}): add [jobs.NAME] tables with a "
                         "command and a schedule (docs/jobs-file.md)")
    render.write(core.fragment(path, jobs, core.program(), user))
    return 0


@app.command()
def jobs(
    as_json: Json = False,
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
    from pglock import configured, jobsfile, render
    from pglock import jobs as model
    from pglock.cli import connected

    path, wanted = jobsfile.every_job()
    shown_path = None if path is None else shown(str(path))
    with connected(dsn, schema, connect_timeout, "jobs") as (conn, place, name):
        snapshot = model.read(conn, name)
    listed = configured.compare(wanted, snapshot.jobs)
    if as_json:
        render.show_json(configured.as_json(listed, shown_path))
    else:
        render.show(configured.screen(listed, shown_path, place, name, snapshot.now))
    return 0
