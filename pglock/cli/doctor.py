"""`pglock doctor` (registered on cli.app): check the setup, one line per check."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pglock.cli import render
from pglock.cli.app import (
    ConnectTimeout,
    Dsn,
    Json,
    Quiet,
    Schema,
    Verbose,
    _configure_output,
    app,
    say,
)
from pglock.errors import ConfigError, UsageError
from pglock.settings.durations import parse_duration


@app.command()
def doctor(
    as_json: Json = False,
    purpose: Annotated[str | None, typer.Option(
        "--purpose", metavar="runner|reader|operator", show_default=False,
        help="What this host's role is for; each check is judged by it (default: the widest "
             "the role can do). A runner or reader needs no pg_signal_backend.")] = None,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Check the database pglock would use: one line per check, OK, WARN or FAIL with what to do.

    Checks: the database configured (the embedded one is this host only), that it is
    reachable and the primary, its version, the schema and this role's privileges,
    the census (the hosts' pglock versions, skew and silent hosts),
    pg_signal_backend, role timeouts, synchronous_commit, connection headroom, the
    platform (a managed service: RDS, Aurora, Cloud SQL, Azure, Neon, Supabase, ...) and
    whether the jobs' ttls ride out its failovers, a transaction-pooling proxy (named when
    the DSN says which), replication (a synchronous standby?), this host's clock against
    the server's. Changes nothing. Exit 0 all OK, 1 a WARN, 2 a FAIL. Each check
    is judged by the host's purpose: what a runner or reader does not need (pg_signal_backend,
    the operator's privileges, the standbys' state) is no WARN there, so configuration
    management can require exit 0.

    Example: pglock doctor --dsn "host=db1,db2 dbname=ops user=pglock"

    Example: pglock doctor --purpose runner -q || echo "pglock is not set up here"
    """
    _configure_output(verbose, quiet)
    from pglock.db import database
    from pglock.operate import doctor as core
    from pglock.settings import config

    timeout = parse_duration(connect_timeout, option="--connect-timeout")
    if purpose is not None and purpose not in {str(p) for p in core.Purpose}:
        raise UsageError(f"--purpose: {purpose!r} is not one of runner, reader, operator")
    judged = None if purpose is None else core.Purpose(purpose)
    name = config.configured_schema(schema)
    try:
        target = config.resolve_target(dsn)
        if target.embedded:
            # Looked at, never started: doctor changes nothing.
            running = database.running_embedded()
            diagnosis = (core.embedded_not_running(target) if running is None
                         else core.diagnose(target, name, running, timeout=timeout,
                                            purpose=judged))
        else:
            with database.opened(target) as conninfo:
                diagnosis = core.diagnose(target, name, conninfo, timeout=timeout,
                                          purpose=judged)
    except ConfigError as error:
        diagnosis = core.Diagnosis("", [core.Finding(
            "database", core.Level.FAIL, str(error), "fix the DSN or the config file")])
    if as_json:
        say(json.dumps({
            "status": diagnosis.level.name.lower(), "database": diagnosis.place,
            "checks": [{"check": f.check, "status": f.level.name.lower(), "detail": f.detail,
                        "advice": f.advice or None} for f in diagnosis.findings]}, indent=2))
    elif not quiet:
        for finding in diagnosis.findings:
            advice = f" -> {finding.advice}" if finding.advice else ""
            say(render.folded(f"{finding.level.name:<4}  {finding.check:<11}  "
                              f"{finding.detail}{advice}", indent=19))
    return int(diagnosis.level)
