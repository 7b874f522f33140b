"""The fleet-control commands: pause, resume, stop, forget, replay (registered on cli.app)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from pglock.cli.app import (
    ConnectTimeout,
    Dsn,
    Job,
    Quiet,
    Schema,
    Verbose,
    _complete_job,
    _configure_output,
    app,
    connected,
)
from pglock.cli.operator import _say
from pglock.errors import UsageError
from pglock.settings.config import check_job
from pglock.settings.durations import check_moment, check_reason, parse_duration

if TYPE_CHECKING:
    from pglock.operate.control import Paused, Resumed, StopRequest, StopResult, Until

Jobs = Annotated[list[str] | None, typer.Option(
    "--job", "-j", metavar="NAME", show_default=False, autocompletion=_complete_job,
    help="A job (repeat for several).")]
Every = Annotated[bool, typer.Option("--all", help="Every job, including jobs not yet known.")]


def _until(text: str | None) -> Until | None:
    """--until: a duration from now, or a moment (HH:MM today or tomorrow, or ISO 8601)."""
    from pglock.operate.control import Until

    if text is None:
        return None
    try:
        parse_duration(text)
    except UsageError:
        pass
    else:
        # A duration: within its range in durations.DURATIONS, or refused as one.
        return Until(span=parse_duration(text, option="--until"))
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            clock = datetime.strptime(text.strip(), "%H:%M").time()
        except ValueError:
            raise UsageError(f"--until: {text!r} is neither a duration (2h, 30m) nor a time "
                             "(14:30, 2026-11-24T06:00)") from None
        moment = datetime.combine(datetime.now(), clock)
        if moment < datetime.now():
            moment += timedelta(days=1)
    return Until(moment=check_moment(moment, "--until", text))


def _names(jobs: list[str] | None) -> list[str]:
    return [check_job(job) for job in jobs or []]


@app.command()
def pause(
    job: Jobs = None,
    every: Every = False,
    reason: Annotated[str, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row and status.")] = "",
    until: Annotated[str | None, typer.Option(
        metavar="DURATION|TIME", show_default=False,
        help="End the pause by itself after DURATION or at TIME (database time).")] = None,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Pause jobs on every host: their runs skip (exit 75, nothing recorded) until resumed.

    A command already running is left to finish. --all pauses every job, including jobs
    not yet known (a fleet-wide switch), and `resume --all` undoes it.

    Example: pglock pause --job sync-invoices --reason 'invoice DB migration' --until 2h
    """
    _configure_output(verbose, quiet)
    from pglock.operate import admin, control

    check_reason(reason, "--reason is required: say why, for whoever finds the pause")
    names = _names(job)
    ends = _until(until)
    with connected(dsn, schema, connect_timeout, "pause") as (conn, _, name):
        done = control.pause(conn, name, names, every=every, reason=reason, until=ends,
                             by=admin.operator())
    for line in _paused_lines(done):
        _say(line, quiet)
    return 0


def _paused_lines(done: Paused) -> list[str]:
    from pglock.cli.render import when
    from pglock.cli.screens import printable as printable_text

    what = "every job" if done.jobs == [""] else ", ".join(printable_text(j) for j in done.jobs)
    until = f" until {when(done.until, zone=True)}" if done.until else " until resumed"
    lines = [f"paused {what}{until}"]
    for run in done.running:
        lines.append(f"{printable_text(run.job)} is running on {printable_text(run.holder)} "
                     f"since {when(run.since)}; it will finish; later runs are skipped")
    return lines


@app.command()
def resume(
    job: Jobs = None,
    every: Every = False,
    reason: Annotated[str | None, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row.")] = None,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Resume paused jobs (--all: undo `pause --all`; jobs paused one by one stay paused).

    Example: pglock resume --job sync-invoices
    """
    _configure_output(verbose, quiet)
    from pglock.operate import admin, control

    check_reason(reason, None)
    names = _names(job)
    with connected(dsn, schema, connect_timeout, "resume") as (conn, _, name):
        done = control.resume(conn, name, names, every=every, reason=reason,
                              by=admin.operator())
    for line in _resumed_lines(done):
        _say(line, quiet)
    return 0


def _resumed_lines(done: Resumed) -> list[str]:
    from pglock.cli.render import when
    from pglock.cli.screens import printable as printable_text

    def named(jobs: list[str]) -> str:
        return ", ".join("every job" if j == "" else printable_text(j) for j in jobs)

    lines = []
    if done.resumed:
        lines.append(f"resumed {named(done.resumed)}")
    if done.not_paused:
        lines.append(f"{named(done.not_paused)}: not paused; nothing to resume")
    if done.all_paused_since is not None:
        lines.append(f"every job is still paused (pause --all since "
                     f"{when(done.all_paused_since)}): pglock resume --all")
    if done.still_paused:
        lines.append(f"still paused one by one: {named(done.still_paused)} "
                     "(pglock resume --job NAME)")
    return lines


@app.command()
def stop(
    job: Job,
    reason: Annotated[str, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row and the run.")] = "",
    wait: Annotated[bool, typer.Option(
        "--wait", help="Wait until the run has ended and print how it ended.")] = False,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Ask the holder of a running job to stop its command cleanly.

    The holder sees the request at its next renewal (lease mode: every ttl/3), sends its
    command SIGTERM (SIGKILL after its --kill-after), records the run `stopped`, releases
    the lock at once and exits 143. Exit 1 when nothing runs. For a wedged holder that no
    longer renews, use `pglock clear`.

    Example: pglock stop --job sync-invoices --reason 'runaway, see INC-42' --wait
    """
    _configure_output(verbose, quiet)
    from pglock.operate import admin, control

    check_reason(reason, "--reason is required: say why, for the audit row")
    name_of_job = check_job(job)
    with connected(dsn, schema, connect_timeout, "stop") as (conn, _, name):
        request = control.stop(conn, name, name_of_job, reason=reason, by=admin.operator())
        _say(_asked_line(request, wait), quiet)
        if not wait:
            return 0
        result = control.wait_stopped(conn, name, request)
    return _stopped(request, result, quiet)


def _asked_line(request: StopRequest, wait: bool) -> str:
    from pglock.cli.screens import printable as printable_text
    from pglock.settings.durations import format_duration

    within = format_duration(request.ttl / 3) if request.mode == "lease" else "a few seconds"
    then = "; waiting for it to end" if wait else ""
    return (f"asked {printable_text(request.holder)}:{request.holder_pid} to stop job "
            f"{printable_text(request.job)} (it sees the request within {within}){then}")


def _stopped(request: StopRequest, result: StopResult, quiet: bool) -> int:
    from pglock.errors import ExitStatus

    if not result.reacted:
        import logging

        logging.getLogger("pglock").error(
            "the holder did not react within its ttl (wedged, or cut off from the database): "
            "pglock clear --job %s", request.job)
        return int(ExitStatus.FAILURE)
    code = "" if result.exit_code is None else f" (exit {result.exit_code})"
    _say(f"job {request.job} ended: {result.outcome}{code}", quiet)
    return 0


@app.command()
def forget(
    job: Job,
    reason: Annotated[str, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row.")] = "",
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Retire a job removed from the crontab: gone from status, check and metrics.

    Its history stays until pruned; a new run of it brings it back. Refused while it
    runs (exit 1).

    Example: pglock forget --job old-report --reason 'replaced by new-report'
    """
    _configure_output(verbose, quiet)
    from pglock.operate import admin, control

    check_reason(reason, "--reason is required: say why, for the audit row")
    name_of_job = check_job(job)
    with connected(dsn, schema, connect_timeout, "forget") as (conn, _, name):
        unpaused = control.forget(conn, name, name_of_job, reason=reason, by=admin.operator())
    ended = "; its pause ended with it" if unpaused else ""
    _say(f"forgot job {name_of_job}{ended}; its history stays until pruned", quiet)
    return 0


def _slot(text: str | None) -> datetime | None:
    """--slot: an ISO 8601 time (without a zone: the local one)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--slot: {text!r} is not a time (2026-11-24T03:00, "
                         "2026-11-24 03:00+01:00)") from None
    return check_moment(moment, "--slot", text)


@app.command()
def replay(
    job: Job,
    slot: Annotated[str | None, typer.Option(
        metavar="TIME", show_default=False,
        help="The slot (ISO 8601, as history shows it) [default: the dead slot, else the "
             "newest].")] = None,
    reason: Annotated[str, typer.Option(
        metavar="TEXT", show_default=False, help="Why, for the audit row.")] = "",
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Re-open a dead (or failed) slot for another 1 + --retries attempts.

    The next `pglock run --schedule` of the slot, on any host, makes them (within its
    --deadline). Refused (exit 1) when the slot is running, already succeeded, or still
    has attempts left.

    Example: pglock replay --job nightly --reason 'disk freed on db-2, see INC-7'
    """
    _configure_output(verbose, quiet)
    from pglock.operate import admin, control

    check_reason(reason, "--reason is required: say why, for the audit row")
    name_of_job = check_job(job)
    moment = _slot(slot)
    with connected(dsn, schema, connect_timeout, "replay") as (conn, _, name):
        done = control.replay(conn, name, name_of_job, slot=moment, reason=reason,
                              by=admin.operator())
    from pglock.cli.render import when

    attempts = (f"attempt {done.first_attempt}" if done.first_attempt == done.last_attempt
                else f"attempts {done.first_attempt} to {done.last_attempt}")
    _say(f"re-opened slot {when(done.slot, zone=True)} of job {name_of_job}: its next run "
         f"makes {attempts}", quiet)
    return 0
