"""The command line: parse, call one core function, print, return an exit code."""

from __future__ import annotations

import logging
import os
import socket
import sys
import traceback
import warnings
from typing import Annotated

import typer

from pglock import __version__
from pglock.durations import parse_duration, parse_size
from pglock.errors import ExitStatus, Interrupted, PglockError

# The variable a shell's completion script sets when it asks pglock for candidates.
COMPLETE_VAR = "_PGLOCK_COMPLETE"

app = typer.Typer(
    name="pglock",
    help="Run a cron job on exactly one host of a fleet, locked in PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Options every command shares, declared once so sibling commands cannot drift.
Dsn = Annotated[str | None, typer.Option(
    "--dsn", envvar="PGLOCK_DSN", show_default=False, metavar="DSN",
    help="PostgreSQL connection string or URI (default: config file, libpq variables, "
         "else the embedded server).")]
Schema = Annotated[str | None, typer.Option(
    "--schema", envvar="PGLOCK_SCHEMA", show_default=False, metavar="NAME",
    help="Schema holding pglock's tables [default: pglock].")]
ConnectTimeout = Annotated[str, typer.Option(
    "--connect-timeout", envvar="PGLOCK_CONNECT_TIMEOUT", metavar="DURATION",
    help="How long to keep trying to connect, across refusals and 'too many clients'.")]


def _complete_job(ctx: typer.Context, incomplete: str) -> list[str]:
    from pglock.completion import job_names

    return job_names(ctx.params.get("dsn"), ctx.params.get("schema"), incomplete)


JOB_HELP = "Job name: one lock, one history."
Job = Annotated[str, typer.Option(
    "--job", "-j", metavar="NAME", help=JOB_HELP, show_default=False,
    autocompletion=_complete_job)]
JobFilter = Annotated[str | None, typer.Option(
    "--job", "-j", metavar="NAME", help="Only this job.", show_default=False,
    autocompletion=_complete_job)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (shapes in docs/operators.md).")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", "-v", envvar="PGLOCK_VERBOSE", help="Say more; show tracebacks.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", envvar="PGLOCK_QUIET", help="Print nothing of pglock's own, not even errors.")]


def _configure_output(verbose: bool, quiet: bool) -> None:
    """pglock's own messages go to stderr as one line; libraries stay silent unless -v."""
    root = logging.getLogger()
    own = logging.getLogger("pglock")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pglock: %(message)s"))
    if verbose:
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        return
    warnings.simplefilter("ignore")
    root.addHandler(logging.NullHandler())
    own.addHandler(handler)
    own.propagate = False
    own.setLevel(logging.CRITICAL + 1 if quiet else logging.WARNING)


def _optional_duration(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option=option)


def _fail(error: PglockError) -> int:
    log = logging.getLogger("pglock")
    if log.isEnabledFor(logging.DEBUG):
        traceback.print_exception(error)
    log.error("%s", error)
    return int(error.exit_status)


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str] | None, typer.Argument(
        metavar="-- COMMAND [ARG]...", show_default=False,
        help="The command to run, executed directly (no shell).")] = None,
    job: Job = "",
    mode: Annotated[str, typer.Option(envvar="PGLOCK_MODE", metavar="lease|advisory",
        help="Expiring row lock, or PostgreSQL session advisory lock (not through a "
             "transaction-pooling PgBouncer).")] = "lease",
    ttl: Annotated[str, typer.Option(envvar="PGLOCK_TTL", metavar="DURATION",
        help="Lease length; renewed every ttl/3 while the command runs.")] = "60s",
    wait: Annotated[str, typer.Option(envvar="PGLOCK_WAIT", metavar="DURATION",
        help="Wait up to this long for the lock instead of skipping at once.")] = "0",
    jitter: Annotated[str, typer.Option(envvar="PGLOCK_JITTER", metavar="DURATION",
        help="Sleep a random 0..DURATION before trying (spreads a fleet's load).")] = "0",
    min_hold: Annotated[str, typer.Option(envvar="PGLOCK_MIN_HOLD", metavar="DURATION",
        help="Keep the lock at least this long after the start, so a host whose clock "
             "lags cannot rerun the same trigger.")] = "0",
    max_runtime: Annotated[str | None, typer.Option(envvar="PGLOCK_MAX_RUNTIME",
        metavar="DURATION", show_default=False,
        help="Stop the command after this long (SIGTERM, then SIGKILL); exit 124.")] = None,
    kill_after: Annotated[str, typer.Option(envvar="PGLOCK_KILL_AFTER", metavar="DURATION",
        help="Grace between SIGTERM and SIGKILL.")] = "10s",
    on_lost: Annotated[str, typer.Option(envvar="PGLOCK_ON_LOST", metavar="kill|continue",
        help="What to do when the lock is lost while the command runs.")] = "kill",
    conflict_exit_code: Annotated[int, typer.Option(envvar="PGLOCK_CONFLICT_EXIT_CODE",
        metavar="N", help="Exit code when the lock is held elsewhere, the slot already ran, "
                          "or past --deadline.")] = int(ExitStatus.CONFLICT),
    holder: Annotated[str | None, typer.Option(envvar="PGLOCK_HOLDER", show_default=False,
        metavar="NAME",
        help="Identity recorded and shown [default: host name].")] = None,
    schedule: Annotated[str | None, typer.Option(metavar="CRON", show_default=False,
        help="The job's crontab expression: each slot runs once, overdue slots show in "
             "status and check.")] = None,
    tz: Annotated[str | None, typer.Option(envvar="PGLOCK_TZ", metavar="ZONE",
        show_default=False, help="Time zone the schedule is read in [default: local].")] = None,
    deadline: Annotated[str | None, typer.Option(envvar="PGLOCK_DEADLINE", metavar="DURATION",
        show_default=False,
        help="With --schedule: do not run when starting more than this after the slot.")] = None,
    grace: Annotated[str | None, typer.Option(envvar="PGLOCK_GRACE", metavar="DURATION",
        show_default=False,
        help="With --schedule: how late a slot may start before the job counts as overdue "
             "[default: 10% of the interval, at least 1m].")] = None,
    output_tail: Annotated[str, typer.Option(envvar="PGLOCK_OUTPUT_TAIL", metavar="SIZE",
        help="Keep the last SIZE bytes of the command's output in its history row "
             "(not on a terminal; 0: keep none).")] = "4KiB",
    output_on_failure: Annotated[bool, typer.Option(envvar="PGLOCK_OUTPUT_ON_FAILURE",
        help="Hold the command's output back; print it only if the command fails "
             "(as chronic).")] = False,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Run COMMAND if this host gets the job's lock; skip silently (exit 75) if not.

    Example: pglock run --job sync-invoices -- /opt/app/bin/sync-invoices
    """
    _configure_output(verbose, quiet)
    from pglock import config, database
    from pglock.run import RunOptions, execute

    try:
        options = RunOptions(
            job=job, command=command or [], schema=config.configured_schema(schema), mode=mode,
            ttl=parse_duration(ttl, option="--ttl"),
            wait=parse_duration(wait, option="--wait"),
            jitter=parse_duration(jitter, option="--jitter"),
            min_hold=parse_duration(min_hold, option="--min-hold"),
            max_runtime=_optional_duration(max_runtime, "--max-runtime"),
            kill_after=parse_duration(kill_after, option="--kill-after"),
            on_lost=on_lost, conflict_exit_code=conflict_exit_code,
            holder=holder or socket.gethostname(),
            connect_timeout=parse_duration(connect_timeout, option="--connect-timeout"),
            schedule=schedule, tz=tz,
            deadline=_optional_duration(deadline, "--deadline"),
            grace=_optional_duration(grace, "--grace"),
            output_tail=parse_size(output_tail, option="--output-tail"),
            output_on_failure=output_on_failure)
        options.validate()
        with database.opened(config.resolve_target(dsn)) as conninfo:
            return execute(options, conninfo)
    except Interrupted as interrupted:
        return 128 + interrupted.signum
    except PglockError as error:
        return _fail(error)


@app.command()
def init(
    print_sql: Annotated[bool, typer.Option(
        "--print-sql", help="Print the DDL for a DBA instead of applying it.")] = False,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Create pglock's schema now (it is otherwise created on first use).

    Example: pglock init --print-sql | psql -d app
    """
    _configure_output(verbose, quiet)
    from pglock import config, database
    from pglock import schema as schema_module

    try:
        name = config.configured_schema(schema)
        if print_sql:
            print(schema_module.ddl(name).as_string(None))
            return 0
        timeout = parse_duration(connect_timeout, option="--connect-timeout")
        with database.session(config.resolve_target(dsn), application_name="pglock init",
                              timeout=timeout) as (conn, place):
            schema_module.ensure(conn, name)
        if not quiet:
            print(f"schema {name!r} is ready (version {schema_module.VERSION}) on {place}")
        return 0
    except PglockError as error:
        return _fail(error)


def _version(value: bool) -> None:
    if value:
        print(f"pglock {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Run a cron job on exactly one host of a fleet, locked in PostgreSQL."""


def full_app() -> typer.Typer:
    """`app` with every command: the operator and monitoring ones register on import,
    which `pglock run`, the command every cron line starts, need not pay for."""
    import importlib

    # In this order, the order of `pglock --help`: the on-call commands before monitoring.
    for module in ("pglock.cli_operator", "pglock.cli_control", "pglock.cli_monitor"):
        importlib.import_module(module)
    return app


def _parser(args: list[str]) -> tuple[typer.core.TyperCommand | typer.core.TyperGroup,
                                      list[str], str]:
    """The command that parses `args`: for `run`, its own alone, as every cron run pays
    for building the others (a shell's completion request always gets the whole tree)."""
    if args[:1] == ["run"] and not os.environ.get(COMPLETE_VAR):
        info = next(c for c in app.registered_commands if c.callback is run)
        command = typer.main.get_command_from_info(
            info, pretty_exceptions_short=True, rich_markup_mode=None)
        return command, args[1:], "pglock run"  # type: ignore[return-value]
    return typer.main.get_command(full_app()), args, "pglock"  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr for bad input, never a traceback."""
    from typer import _click

    if os.environ.get(COMPLETE_VAR):
        # add_completion=False keeps --install-completion out of every --help; the classes
        # that answer a shell's tab key are registered only when a shell asks.
        from typer._completion_classes import completion_init

        completion_init()
    args = sys.argv[1:] if argv is None else argv
    command, args, prog_name = _parser(args)
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except _click.exceptions.UsageError as error:
        where = error.ctx.command_path if error.ctx else "pglock"
        print(f"pglock: {error.format_message()} (see '{where} --help')", file=sys.stderr)
        code = ExitStatus.USAGE
        if error.ctx is not None and error.ctx.command.name == "check":
            # A monitoring system reads a plugin's bad arguments as UNKNOWN, from stdout.
            print(f"PGLOCK UNKNOWN - {error.format_message()}")
            code = 3
    except _click.exceptions.ClickException as error:
        print(f"pglock: {error.format_message()}", file=sys.stderr)
        code = ExitStatus.USAGE
    except typer.Abort:
        code = 128 + 2
    except Exception as error:
        # A bug of ours: still one line (cron mails it), the traceback only with -v.
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exception(error)
        print(f"pglock: internal error: {error!r} (-v shows the traceback)", file=sys.stderr)
        code = ExitStatus.INTERNAL
    if argv is not None:
        return int(code or 0)
    sys.exit(code or 0)

