"""The census's commands: hosts, forget-host (registered on cli.app)."""

from __future__ import annotations

from typing import Annotated

import typer

from pglock.cli.app import (
    ConnectTimeout,
    Dsn,
    JobFilter,
    Json,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    app,
    connected,
)
from pglock.cli.operator import _say
from pglock.settings.durations import check_reason


@app.command()
def hosts(
    job: JobFilter = None,
    as_json: Json = False,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Show the census: each host that runs pglock, its version, when it was last seen, its jobs.

    Every `pglock run`, winner or loser, records its host (PGLOCK_HOST, `host` in the
    config file, else the system's host name). A host is silent for a job when it attempted
    it before and has not for more than two of its slots (unscheduled: twice its usual
    interval; at least 2m); silent as a whole when it attempted nothing for that long.
    A host on an older pglock than the newest seen is marked (older). With --job: that
    job's hosts, each with its last attempt and how it came out (exit 1 if it never ran
    here).

    Example: pglock hosts --job sync-invoices
    """
    _configure_output(verbose, quiet)
    from pglock.cli import census_screens, render
    from pglock.reports import hosts as core

    with connected(dsn, schema, connect_timeout, "hosts") as (conn, place, name):
        found = core.read(conn, name, job)
    if as_json:
        render.show_json(census_screens.hosts_json(found, place, name))
    else:
        render.show(census_screens.hosts_screen(found, place, name,
                                                terminal=render.on_terminal()))
    return 0


@app.command("forget-host")
def forget_host(
    host: Annotated[str, typer.Argument(
        metavar="NAME", show_default=False, help="The host, as pglock hosts names it.")],
    reason: Annotated[str, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row.")] = "",
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Retire a decommissioned host from the census: it is no longer silent anywhere.

    Its rows go (an audit row says who, when and why); if it runs pglock again, it comes
    back. Exit 1 for a host the census does not know.

    Example: pglock forget-host web-7 --reason 'decommissioned, INC-88'
    """
    _configure_output(verbose, quiet)
    from pglock.cli.render import escaped
    from pglock.operate import admin
    from pglock.operate import hosts as core
    from pglock.settings.config import check_host

    check_reason(reason, "--reason is required: say why, for the audit row")
    name = check_host(host, "forget-host")
    with connected(dsn, schema, connect_timeout, "forget-host") as (conn, _, schema_name):
        done = core.forget(conn, schema_name, name, reason=reason, by=admin.operator())
    jobs = "1 job" if done.jobs == 1 else f"{done.jobs} jobs"
    _say(f"forgot host {escaped(name)} (its attendance of {jobs}); audit row {done.audit_id}",
         quiet)
    return 0
