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
    next_slot: Annotated[bool, typer.Option(
        "--next", help="With --job: the next slot's candidates in rank order (a job run with "
                       "--candidates; docs/fleet.md, Candidates).")] = False,
    slot: Annotated[str | None, typer.Option(
        metavar="TIME", show_default=False,
        help="With --job: that slot's candidates (ISO 8601; without a zone: the local "
             "one).")] = None,
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

    With --job and --next (or --slot): the slot's candidates in rank order, each with when
    it tries, for a job run with --candidates (exit 1 if its runs do not use them).

    Example: pglock hosts --job sync-invoices

    Example: pglock hosts --job sync-invoices --next
    """
    _configure_output(verbose, quiet)
    from pglock.cli import census_screens, render
    from pglock.reports import hosts as core

    if next_slot or slot is not None:
        return _turns(job, next_slot, slot, as_json, dsn, schema, connect_timeout)
    with connected(dsn, schema, connect_timeout, "hosts") as (conn, place, name):
        found = core.read(conn, name, job)
    if as_json:
        render.show_json(census_screens.hosts_json(found, place, name))
    else:
        render.show(census_screens.hosts_screen(found, place, name,
                                                terminal=render.on_terminal()))
    return 0


def _turns(job: str | None, next_slot: bool, slot: str | None, as_json: bool,
           dsn: str | None, schema: str | None, connect_timeout: str) -> int:
    """hosts --next / --slot: a slot's candidates."""
    from pglock.cli import census_screens, render
    from pglock.cli.control import _slot
    from pglock.errors import UsageError
    from pglock.reports import turns

    if job is None:
        raise UsageError("--next and --slot need --job NAME")
    if next_slot and slot is not None:
        raise UsageError("--next and --slot: give one")
    moment = _slot(slot)
    with connected(dsn, schema, connect_timeout, "hosts") as (conn, place, name):
        found = turns.read(conn, name, job, moment)
    if as_json:
        render.show_json(census_screens.turns_json(found, place, name))
    else:
        render.show(census_screens.turns_screen(found, place, name))
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
