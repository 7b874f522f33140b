"""The monitoring commands, `check` and `metrics`: read every job once, print it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pglock.cli.app import (
    CheckJson,
    ConnectTimeout,
    Dsn,
    JobFilter,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    app,
    connected,
    say,
)
from pglock.errors import PglockError
from pglock.settings.durations import parse_duration

if TYPE_CHECKING:
    from pglock.reports.jobs import Snapshot


def _threshold(name: str, what: str) -> Any:
    return typer.Option(f"--{name}", envvar=f"PGLOCK_{name.upper().replace('-', '_')}",
                        metavar="N", help=what)


def _snapshot(dsn: str | None, schema: str | None, connect_timeout: str, job: str | None,
              command: str, silent_after: int) -> Snapshot:
    from pglock.reports import jobs
    from pglock.settings import config

    if job is not None:
        config.check_job(job)
    with connected(dsn, schema, connect_timeout, command) as (conn, _, name):
        return jobs.read(conn, name, job, hosts=True, silent_after=silent_after)


@app.command()
def check(
    job: JobFilter = None,
    failures_warning: Annotated[int, _threshold(
        "failures-warning", "WARNING at this many failed runs in a row")] = 1,
    failures_critical: Annotated[int, _threshold(
        "failures-critical", "CRITICAL at this many failed runs in a row")] = 1,
    missed_warning: Annotated[int, _threshold(
        "missed-warning", "WARNING at this many missed slots")] = 1,
    missed_critical: Annotated[int, _threshold(
        "missed-critical", "CRITICAL at this many missed slots")] = 2,
    paused_warning: Annotated[str, typer.Option(
        "--paused-warning", envvar="PGLOCK_PAUSED_WARNING", metavar="DURATION",
        help="WARNING for a pause older than this (a forgotten pause).")] = "1d",
    slow_warning: Annotated[str, typer.Option(
        "--slow-warning", envvar="PGLOCK_SLOW_WARNING", metavar="DURATION",
        help="WARNING for a run this long past its --expect-duration MAX (0: as soon as it "
             "passes it).")] = "0",
    slow_critical: Annotated[str | None, typer.Option(
        "--slow-critical", envvar="PGLOCK_SLOW_CRITICAL", metavar="DURATION",
        show_default=False,
        help="CRITICAL for a run this long past its --expect-duration MAX [default: "
             "never].")] = None,
    skipped_warning: Annotated[int, _threshold(
        "skipped-warning", "WARNING at this many slots in a row skipped while a run of an "
        "earlier slot was still going")] = 1,
    silent_after: Annotated[int, _threshold(
        "silent-after", "WARNING for a host that attempted a job before and has not for more "
        "than N of its slots (unscheduled: N times its usual interval; at least 2m)")] = 2,
    hosts: Annotated[str | None, typer.Option(
        "--hosts", envvar="PGLOCK_HOSTS", metavar="min=N", show_default=False,
        help="WARNING for a job that fewer than N hosts fire (attempted within their "
             "span); with --job, for that job.")] = None,
    json_output: CheckJson = False,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Judge the jobs for a monitoring system: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.

    CRITICAL: a lock expired while its run is still marked running. Failed runs in a row
    and missed slots of a schedule are WARNING or CRITICAL by the thresholds. A paused job
    is neither failed nor overdue; its pause is WARNING once older than --paused-warning. A run
    past its --expect-duration MAX is WARNING (or CRITICAL by --slow-critical). A host that
    stopped attempting a job (the census: pglock hosts) is WARNING, naming host and job.
    Whatever goes wrong (bad options, no database, a schema it cannot read) is UNKNOWN,
    exit 3.

    Example: pglock check --job nightly-backup --missed-critical 3

    Example: pglock check --job sync-invoices --hosts min=2
    """
    _configure_output(verbose, quiet)
    from pglock.reports import check as checks

    try:
        thresholds = checks.Thresholds(
            failures_warning, failures_critical, missed_warning, missed_critical,
            parse_duration(paused_warning, option="--paused-warning"),
            parse_duration(slow_warning, option="--slow-warning"),
            None if slow_critical is None
            else parse_duration(slow_critical, option="--slow-critical"),
            skipped_warning, silent_after, checks.parse_hosts(hosts))
        thresholds.validate()
        report = checks.evaluate(_snapshot(dsn, schema, connect_timeout, job, "check",
                                           silent_after), thresholds, job)
    except PglockError as caught:
        from pglock.cli.boundary import privilege_named

        # Not an error exit: a plugin answers UNKNOWN on stdout, the reason on stderr too;
        # a refused privilege names the role that has it, as every command's does.
        error = privilege_named(caught, ["check"])
        logging.getLogger("pglock").error("%s", error)
        report = checks.unknown(str(error))
    say(checks.render_json(report) if json_output else checks.render_text(report))
    return int(report.status)


@app.command()
def metrics(
    job: JobFilter = None,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Print every job's state in the Prometheus text format.

    A database it cannot reach, or a schema it cannot read, prints nothing on stdout and
    exits 125: the `&& mv` below then leaves the last file in place (alert on its age).

    For node_exporter's textfile collector, write to a temporary file in its
    --collector.textfile.directory (Debian's: /var/lib/prometheus/node-exporter) and
    rename it (docs/monitoring.md).

    Example: pglock metrics > /var/lib/prometheus/node-exporter/pglock.prom.tmp &&
    mv /var/lib/prometheus/node-exporter/pglock.prom.tmp
    /var/lib/prometheus/node-exporter/pglock.prom
    """
    _configure_output(verbose, quiet)
    from pglock.cli.render import write_pieces
    from pglock.reports import hosts, jobs
    from pglock.reports import metrics as exposition
    from pglock.settings import config

    if job is not None:
        config.check_job(job)
    with connected(dsn, schema, connect_timeout, "metrics") as (conn, _, name):
        snapshot = jobs.read(conn, name, job, hosts=True)
        census = hosts.roll(snapshot, hosts.rows(conn, name), job)
        found = exposition.Exposition(
            snapshot, exposition.read_durations(conn, name, job),
            [(h.name, h.version, h.python, h.first_seen, h.last_seen) for h in census.hosts])
    write_pieces(exposition.chunks(found))
    return 0
