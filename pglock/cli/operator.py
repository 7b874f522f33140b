"""The operator's commands: status, history, clear, prune (registered on cli.app).

Each one parses, calls the core, hands the result to screens/render, returns an exit code.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pglock.cli.app import (
    ConnectTimeout,
    Dsn,
    Job,
    JobFilter,
    Json,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    app,
    connected,
    say,
)
from pglock.errors import NothingDone, UsageError
from pglock.settings.config import check_job
from pglock.settings.durations import check_reason, parse_duration

Yes = Annotated[bool, typer.Option(
    "--yes", "-y", help="Do not ask; needed when not on a terminal.")]


def _confirm(yes: bool, situation: str, action: str) -> None:
    """Ask on a terminal; anywhere else, without --yes, it is not confirmed (exit 1, as a
    "no" on a terminal: the exit table says so). A closed standard input (`<&-`) is no
    terminal either: Python then has no sys.stdin at all."""
    if yes:
        return
    if sys.stdin is None or sys.stdin.closed or not sys.stdin.isatty():
        raise NothingDone(f"{situation}; refusing to {action} without --yes (not on a terminal)")
    typer.echo(situation, err=True)
    if not typer.confirm(f"{action[0].upper()}{action[1:]}?", err=True):
        raise NothingDone("not confirmed; nothing changed")


def _say(text: str, quiet: bool) -> None:
    if not quiet:
        say(text)


@app.command()
def status(
    job: JobFilter = None,
    every_job: Annotated[bool, typer.Option(
        "--all", "-a", help="List every job; by default a fleet of more than 50 jobs lists "
        "those running, held, paused or in trouble, and counts the idle rest.")] = False,
    as_json: Json = False,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="Redraw every --interval, in place, until Ctrl-C.")] = False,
    interval: Annotated[str, typer.Option(
        metavar="DURATION", help="Pause between redraws of --watch.")] = "2s",
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Show each job: state, holder and mode, running for, expiry, next due, last run, last success.

    States, worst first: dead, stale, failed, overdue (a slot of its schedule passed its
    grace with no run), cleared, slow, running, paused, window, held, idle (docs/operators.md
    says what each means). With more than 50 jobs, the idle
    ones are counted, not listed (--all lists them; --json always has every job). With
    --job: that job, its schedule and its recent runs (exit 1 if it never ran here).

    Example: pglock status --job sync-invoices
    """
    _configure_output(verbose, quiet)
    from pglock.cli import render, screens
    from pglock.reports import status as core

    every = parse_duration(interval, option="--interval")
    if as_json and watch:
        raise UsageError("--json and --watch do not go together")
    with connected(dsn, schema, connect_timeout, "status") as (conn, place, name):
        if as_json:
            # Always every job; written as it is encoded.
            render.stream_json(*screens.status_json_parts(core.read(conn, name, job), place,
                                                          name))
            return 0
        terminal = render.on_terminal()

        def build() -> render.Screen:
            return screens.status_screen(core.read(conn, name, job, everything=every_job),
                                         place, name, terminal=terminal)

        if watch:
            return render.watch(build, every)
        render.show(build())
        return 0


@app.command()
def history(
    job: JobFilter = None,
    since: Annotated[str | None, typer.Option(
        metavar="DURATION", show_default=False, help="Only runs started this recently.")] = None,
    outcome: Annotated[str | None, typer.Option(
        metavar="OUTCOME", show_default=False,
        help="Only runs that ended so (succeeded, failed, ...).")] = None,
    host: Annotated[str | None, typer.Option(
        metavar="HOST", show_default=False,
        help="Only runs of this holder (host name or --holder).")] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="At most this many runs.")] = 50,
    output: Annotated[bool, typer.Option(
        "--output", help="Show each run's kept output (the tail of what it printed) under it.")
    ] = False,
    as_json: Json = False,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """List runs, newest first; with --job, its figures and a duration bar per run.

    With --output, each run's kept output is shown under it (in JSON: "output").

    Example: pglock history --job sync-invoices --since 1d --output
    """
    _configure_output(verbose, quiet)
    from pglock.cli import render, screens
    from pglock.reports.history import Filters, read

    filters = Filters(
        job=None if job is None else check_job(job), outcome=outcome, host=host, limit=limit,
        since=None if since is None else parse_duration(since, option="--since"))
    filters.validate()
    with connected(dsn, schema, connect_timeout, "history") as (conn, place, name):
        found = read(conn, name, filters, outputs=output)
    if as_json:
        render.show_json(screens.history_json(found, place, name))
    else:
        render.show(screens.history_screen(found, place, name))
    return 0


@app.command()
def clear(
    job: Job,
    reason: Annotated[str | None, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row.")] = None,
    yes: Yes = False,
    now: Annotated[bool, typer.Option(
        "--now", help="Free the lock for others at once, not one ttl later.")] = False,
    terminate: Annotated[bool, typer.Option(
        "--terminate", help="Also end an advisory holder's database session.")] = False,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Take a job's lock from its holder: its next renewal fails and it stops its command.

    Others may take the lock one ttl later (time for the holder to stop), or at once
    with --now. An audit row records who, when, why and whom.

    Example: pglock clear --job sync-invoices --reason 'stuck on a dead NFS mount'
    """
    _configure_output(verbose, quiet)
    check_reason(reason, None)
    from pglock.cli import screens
    from pglock.operate import admin
    from pglock.reports import status as core

    with connected(dsn, schema, connect_timeout, "clear") as (conn, _, name):
        admin.existing(conn, name)
        shown = core.one(conn, name, check_job(job))
        # An overdue job may still be held: its lock's own state decides.
        nothing = screens.nothing_to_clear(job, shown, now=now)
        if nothing is not None and terminate and shown is not None:
            # Its lock expired, but a stopped advisory holder's session may live on.
            ended = admin.end_session(conn, name, shown, reason=reason, by=admin.operator())
            nothing = ended or nothing
        if nothing is not None:
            _say(nothing, quiet)
            return 0
        assert shown is not None
        _confirm(yes, screens.holder_line(shown), "clear it")
        done = admin.clear(conn, name, shown, reason=reason, now=now, by=admin.operator())
        if done is None:
            raise NothingDone(screens.CHANGED_HANDS.format(job=job))
        _say(screens.cleared_line(done), quiet)
        if terminate:
            _say(admin.terminate(conn, done.lock), quiet)
    return 0


@app.command()
def prune(
    older_than: Annotated[str, typer.Option(
        "--older-than", metavar="DURATION", show_default=False,
        help="Delete runs that finished longer ago than this.")],
    yes: Yes = False,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Delete finished history older than DURATION, in batches; print how many.

    Runs still marked running and each job's latest run are kept.

    Example: pglock prune --older-than 90d --yes
    """
    _configure_output(verbose, quiet)
    from pglock.cli.render import when
    from pglock.operate import admin
    from pglock.settings.durations import format_duration

    seconds = parse_duration(older_than, option="--older-than")
    with connected(dsn, schema, connect_timeout, "prune") as (conn, place, name):
        _confirm(yes, f"this deletes the runs that finished more than "
                      f"{format_duration(seconds)} ago from {place} (schema {name})",
                 "delete them")
        deleted, cutoff = admin.prune(conn, name, seconds)
    runs = "1 run that" if deleted == 1 else f"{deleted} runs that"
    _say(f"deleted {runs} finished before {when(cutoff, zone=True)}", quiet)
    return 0
