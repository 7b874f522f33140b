"""The monitoring commands, `check` and `metrics`: read every job's health once, print it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pglock.cli import (
    ConnectTimeout,
    Dsn,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    _fail,
    app,
    normalized_job,
)
from pglock.durations import parse_duration
from pglock.errors import PglockError

if TYPE_CHECKING:
    from pglock.monitor import Snapshot

JobFilter = Annotated[str | None, typer.Option(
    "--job", "-j", show_default=False, help="Only this job.", callback=normalized_job)]


def _threshold(name: str, what: str) -> Any:
    return typer.Option(f"--{name}", envvar=f"PGLOCK_{name.upper().replace('-', '_')}",
                        metavar="N", help=what)


def _snapshot(dsn: str | None, schema: str | None, connect_timeout: str, job: str | None,
              command: str) -> Snapshot:
    from pglock import config, database, monitor

    name = config.configured_schema(schema)
    if job is not None:
        config.check_job(job)
    timeout = parse_duration(connect_timeout, option="--connect-timeout")
    with database.opened(config.resolve_target(dsn)) as conninfo, database.connect(
            conninfo, application_name=f"pglock {command}", timeout=timeout) as conn, \
            database.translated(f"cannot read the jobs of schema {name!r}"):
        return monitor.read_health(conn, name, job)


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
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Judge the jobs for a monitoring system: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.

    CRITICAL: a lock expired while its run is still marked running. Failed runs in a row
    and missed slots of a schedule are WARNING or CRITICAL by the thresholds.

    Example: pglock check --job nightly-backup --missed-critical 3
    """
    _configure_output(verbose, quiet)
    from pglock import check as checks

    try:
        thresholds = checks.Thresholds(failures_warning, failures_critical, missed_warning,
                                       missed_critical)
        thresholds.validate()
        report = checks.evaluate(_snapshot(dsn, schema, connect_timeout, job, "check"),
                                 thresholds, job)
    except PglockError as error:
        logging.getLogger("pglock").error("%s", error)
        report = checks.unknown(str(error))
    print(checks.render_json(report) if json_output else checks.render_text(report))
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

    For node_exporter's textfile collector, write to a temporary file and rename it.

    Example: pglock metrics > /var/lib/node_exporter/pglock.prom.tmp &&
    mv /var/lib/node_exporter/pglock.prom.tmp /var/lib/node_exporter/pglock.prom
    """
    _configure_output(verbose, quiet)
    from pglock import metrics as exposition

    try:
        snapshot = _snapshot(dsn, schema, connect_timeout, job, "metrics")
    except PglockError as error:
        return _fail(error)
    print(exposition.render(snapshot), end="")
    return 0
