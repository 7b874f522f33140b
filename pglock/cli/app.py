"""The command line: parse, call one core function, print, return an exit code."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer
from typer._click import core as click_core
from typer._click import types as click

from pglock.cli import boundary
from pglock.errors import ExitStatus, OutputFailed
from pglock.settings.durations import parse_duration
from pglock.settings.text import WINDOW_SEPARATOR

if TYPE_CHECKING:
    from typing import Any

    import psycopg


class _Windows(click.ParamType):
    """--window's text; PGLOCK_WINDOW separates several with ';' (a window itself holds
    spaces, click's default separator for a repeatable option's variable)."""

    name = "text"
    envvar_list_splitter = WINDOW_SEPARATOR

    def split_envvar_value(self, rv: str) -> list[str]:
        # A trailing or doubled ';', or blanks alone, add no window (an empty variable is
        # unset to click already).
        return [item for item in rv.split(self.envvar_list_splitter) if item.strip()]

    def convert(self, value: object, param: click_core.Parameter | None,
                ctx: click_core.Context | None) -> str:
        return str(value).strip()


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
# run's own: there it bounds each statement too (pglock/db/bounded.py, docs/ha.md).
RunConnectTimeout = Annotated[str, typer.Option(
    "--connect-timeout", envvar="PGLOCK_CONNECT_TIMEOUT", metavar="DURATION",
    help="How long to keep trying to connect, across refusals and 'too many clients'; "
         "and how long each statement may wait (a commit waiting for a synchronous "
         "standby included) before it is cancelled (exit 125).")]


def _complete_job(ctx: typer.Context, incomplete: str) -> list[str]:
    from pglock.cli.completion import job_names

    return job_names(ctx.params.get("dsn"), ctx.params.get("schema"), incomplete)


def normalized_job(ctx: typer.Context, param: typer.CallbackParam,
                   job: str | None) -> str | None:
    """Every job name that enters, checked at parse time (before any database is touched)
    and in the form pglock compares (NFC; docs/decisions.md)."""
    from typer._click.core import ParameterSource

    from pglock.settings.config import check_job

    if job == "" and param.name and ctx.get_parameter_source(param.name) is (
            ParameterSource.DEFAULT):
        return job  # run without --job: starting.start says --job is missing
    return None if job is None else check_job(job)


JOB_HELP = "Job name: one lock, one history."
Job = Annotated[str, typer.Option(
    "--job", "-j", metavar="NAME", help=JOB_HELP, show_default=False,
    autocompletion=_complete_job, callback=normalized_job)]
JobFilter = Annotated[str | None, typer.Option(
    "--job", "-j", metavar="NAME", help="Only this job.", show_default=False,
    autocompletion=_complete_job, callback=normalized_job)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (shapes in docs/operators.md).")]
# check's and jobs' JSON are described with the rest of those commands.
CheckJson = Annotated[bool, typer.Option(
    "--json", help="Print JSON (shapes in docs/monitoring.md).")]
JobsJson = Annotated[bool, typer.Option(
    "--json", help="Print JSON (shapes in docs/jobs-file.md).")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", "-v", envvar="PGLOCK_VERBOSE", help="Say more; show tracebacks.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", envvar="PGLOCK_QUIET", help="Print nothing of pglock's own, not even errors.")]


# The error boundary and the output's set-up are shared with run's own parser (runline.py).
_configure_output = boundary.configure_output
say = boundary.say


@contextlib.contextmanager
def connected(dsn: str | None, schema: str | None, connect_timeout: str,
              command: str) -> Iterator[tuple[psycopg.Connection[Any], str, str]]:
    """How every command but `run` opens the database: (connection, the database's name
    for humans, schema name); a database error inside becomes one line."""
    from pglock.db import database
    from pglock.settings import config

    name = config.configured_schema(schema)
    timeout = parse_duration(connect_timeout, option="--connect-timeout")
    target = config.resolve_target(dsn)
    with database.session(target, application_name=f"pglock {command}", timeout=timeout) as (
            conn, place), database.translated(f"{command} failed"):
        yield conn, place, name


def _sourced(ctx: typer.Context, source: str) -> set[str]:
    """The parameters whose value came from `source` (ENVIRONMENT, DEFAULT)."""
    from typer._click.core import ParameterSource

    wanted = ParameterSource[source]
    return {name for name in ctx.params if ctx.get_parameter_source(name) is wanted}



# -h works for `run` too: it is built alone, without the app's context settings.
@app.command(context_settings={"allow_interspersed_args": False,
                               "help_option_names": ["-h", "--help"]})
def run(
    ctx: typer.Context,
    command: Annotated[list[str] | None, typer.Argument(
        metavar="-- COMMAND [ARG]...", show_default=False,
        help="The command to run, executed directly (no shell) [default: the command of "
             "the job's [jobs.NAME] table in the config file].")] = None,
    job: Job = "",
    mode: Annotated[str, typer.Option(envvar="PGLOCK_MODE", metavar="lease|advisory",
        help="Expiring row lock, or PostgreSQL session advisory lock (not through a "
             "transaction-pooling PgBouncer).")] = "lease",
    ttl: Annotated[str, typer.Option(envvar="PGLOCK_TTL", metavar="DURATION",
        help="Lease length (at least 5s); renewed every ttl/3 while the command runs.")] = "60s",
    wait: Annotated[str, typer.Option(envvar="PGLOCK_WAIT", metavar="DURATION",
        help="Wait up to this long for the lock instead of skipping at once.")] = "0",
    jitter: Annotated[str, typer.Option(envvar="PGLOCK_JITTER", metavar="DURATION",
        help="Sleep a random 0..DURATION before trying (spreads a fleet's load).")] = "0",
    min_hold: Annotated[str | None, typer.Option(envvar="PGLOCK_MIN_HOLD", metavar="DURATION",
        show_default=False,
        help="Keep the lock at least this long after the start, so a host whose clock "
             "lags cannot rerun the same trigger [default: 20s + --jitter after pglock "
             "started; 0 with --schedule].")] = None,
    limit: Annotated[int, typer.Option(envvar="PGLOCK_LIMIT", metavar="N",
        help="A counting semaphore: up to N hosts run the job at once, each on a seat "
             "with its own fencing token (lease mode, no --schedule; docs/lease.md, "
             "Semaphores).")] = 1,
    rerun: Annotated[bool, typer.Option("--rerun",
        help="A deliberate rerun: take the lock even inside the hold of a run that "
             "has ended (never while a command runs).")] = False,
    max_runtime: Annotated[str | None, typer.Option(envvar="PGLOCK_MAX_RUNTIME",
        metavar="DURATION", show_default=False,
        help="Stop the command after this long (SIGTERM, then SIGKILL); exit 124.")] = None,
    expect_duration: Annotated[str | None, typer.Option(envvar="PGLOCK_EXPECT_DURATION",
        metavar="MIN..MAX", show_default=False,
        help="How long a run should take (either side optional: 30s..5m, 1m.., ..2h): a run "
             "outside it is noted in history (its outcome stays); one running past MAX is "
             "slow in status, check and metrics. Nothing is stopped.")] = None,
    kill_after: Annotated[str, typer.Option(envvar="PGLOCK_KILL_AFTER", metavar="DURATION",
        help="Grace between SIGTERM and SIGKILL.")] = "10s",
    on_lost: Annotated[str, typer.Option(envvar="PGLOCK_ON_LOST", metavar="kill|continue",
        help="What to do when the lock is lost while the command runs.")] = "kill",
    conflict_exit_code: Annotated[int, typer.Option(envvar="PGLOCK_CONFLICT_EXIT_CODE",
        metavar="N", help="Exit code when the lock is held elsewhere, the slot already ran, "
                          "or past --deadline.")] = int(ExitStatus.CONFLICT),
    holder: Annotated[str | None, typer.Option(envvar="PGLOCK_HOLDER", show_default=False,
        metavar="NAME",
        help="Identity recorded and shown [default: the host name: PGLOCK_HOST, else host "
             "in the config file, else the system's].")] = None,
    schedule: Annotated[str | None, typer.Option(envvar="PGLOCK_SCHEDULE", metavar="CRON",
        show_default=False,
        help="The job's crontab expression: each slot runs once, overdue slots show in "
             "status and check.")] = None,
    tz: Annotated[str | None, typer.Option(envvar="PGLOCK_TZ", metavar="ZONE",
        show_default=False, help="Time zone the schedule is read in [default: CRON_TZ, "
                                 "else TZ, else the host's].")] = None,
    deadline: Annotated[str | None, typer.Option(envvar="PGLOCK_DEADLINE", metavar="DURATION",
        show_default=False,
        help="With --schedule: do not run when starting more than this after the slot.")] = None,
    grace: Annotated[str | None, typer.Option(envvar="PGLOCK_GRACE", metavar="DURATION",
        show_default=False,
        help="With --schedule: how late a slot may start before the job counts as overdue "
             "[default: 10% of the interval, at least 1m].")] = None,
    catch_up: Annotated[str, typer.Option(envvar="PGLOCK_CATCH_UP", metavar="none|latest|all",
        help="With --schedule: the slots before this one that have no run (every host was "
             "down, or a run outlasted them): run none of them, the newest, or all "
             "(oldest first, each its own run), then this slot (docs/schedules.md, "
             "Catch-up).")] = "none",
    catch_up_limit: Annotated[int, typer.Option(envvar="PGLOCK_CATCH_UP_LIMIT", metavar="N",
        help="With --catch-up: look back at most N slots (1 to 1000); older ones are "
             "recorded as skipped by catch-up.")] = 24,
    window: Annotated[list[str] | None, typer.Option("--window", metavar="'CRON DURATION'",
        envvar="PGLOCK_WINDOW", click_type=_Windows(), show_default=False,
        help="With --schedule: a maintenance window, such as '0 2 * * 6 4h' (repeatable; "
             "PGLOCK_WINDOW holds one or several separated by ';'): a trigger inside one "
             "skips (exit 75), and its slots are neither overdue nor caught up.")] = None,
    output_tail: Annotated[str, typer.Option(envvar="PGLOCK_OUTPUT_TAIL", metavar="SIZE",
        help="Keep the last SIZE bytes of the command's output in its history row "
             "(not on a terminal; 0: keep none).")] = "4KiB",
    output_on_failure: Annotated[bool, typer.Option(envvar="PGLOCK_OUTPUT_ON_FAILURE",
        help="Hold the command's output back; print it only if the command fails "
             "(as chronic).")] = False,
    leave_descendants: Annotated[bool, typer.Option(envvar="PGLOCK_LEAVE_DESCENDANTS",
        help="Let processes the command leaves running (a daemon it started) go on unlocked; "
             "by default the lock is held until they exit, and they are stopped with the "
             "command.")] = False,
    retries: Annotated[int, typer.Option(envvar="PGLOCK_RETRIES", metavar="N",
        help="Retry a failed or timed-out command up to N times, holding the lock between "
             "attempts; with --schedule, a slot whose host died is retried by the next host "
             "(docs/schedules.md, Delivery).")] = 0,
    retry_delay: Annotated[str, typer.Option(envvar="PGLOCK_RETRY_DELAY", metavar="DURATION",
        help="The wait before the first retry, doubled before each next (at most 1h, or "
             "DURATION if longer; ±20% jitter).")] = "30s",
    on_failure: Annotated[str | None, typer.Option(envvar="PGLOCK_ON_FAILURE", metavar="CMD",
        show_default=False,
        help="Shell command run (sh -c) on this host after a run that did not succeed (with "
             "--retries: once, after the last attempt); "
             "PGLOCK_OUTCOME, PGLOCK_EXIT_CODE, PGLOCK_DURATION in its environment, the "
             "output tail on its stdin.")] = None,
    on_success: Annotated[str | None, typer.Option(envvar="PGLOCK_ON_SUCCESS", metavar="CMD",
        show_default=False, help="Shell command run after a run that succeeded.")] = None,
    on_recovery: Annotated[str | None, typer.Option(envvar="PGLOCK_ON_RECOVERY", metavar="CMD",
        show_default=False,
        help="Shell command run after the first success that follows a failed, timed-out, "
             "lost, killed or abandoned run.")] = None,
    on_slow: Annotated[str | None, typer.Option(envvar="PGLOCK_ON_SLOW", metavar="CMD",
        show_default=False,
        help="Shell command run once, while the command still runs, when it passes "
             "--expect-duration's MAX (PGLOCK_RUNNING_FOR, PGLOCK_EXPECTED_MAX in its "
             "environment).")] = None,
    hook_timeout: Annotated[str, typer.Option(envvar="PGLOCK_HOOK_TIMEOUT", metavar="DURATION",
        help="Kill a hook (its whole process group) after this long.")] = "30s",
    ping_url: Annotated[str | None, typer.Option(envvar="PGLOCK_PING_URL", metavar="URL",
        show_default=False,
        help="healthchecks.io-style pings from the host that runs: URL/start, then URL or "
             "URL/<exit code> with the output tail.")] = None,
    event_log: Annotated[str | None, typer.Option(envvar="PGLOCK_EVENT_LOG",
        metavar="PATH|syslog", show_default=False,
        help="Append one JSON line per event (skipped, acquired, started, finished, ...) to "
             "PATH, or send it to syslog (syslog:/path/to/socket for another socket).")] = None,
    trace_skips: Annotated[bool, typer.Option(envvar="PGLOCK_TRACE_SKIPS",
        help="When the run is traced (TRACEPARENT or OTEL_EXPORTER_OTLP_ENDPOINT set: "
             "docs/monitoring.md, Tracing): a span for a trigger that did not run too "
             "(held elsewhere, slot done, paused...); by default only a run that ran has "
             "one.")] = False,
    candidates: Annotated[int | None, typer.Option(envvar="PGLOCK_CANDIDATES", metavar="K",
        show_default=False,
        help="Only the first K hosts of each slot's ranking (a hash of job, slot and host "
             "over the hosts the census knows for the job) contend, each a --candidate-step "
             "after the one before; the others exit 75 at once without connecting "
             "(1 to 1000; docs/fleet.md, Candidates) [default: every host].")] = None,
    candidate_step: Annotated[str, typer.Option(envvar="PGLOCK_CANDIDATE_STEP",
        metavar="DURATION",
        help="With --candidates: how long after the slot each candidate tries, per rank "
             "above it.")] = "10s",
    candidates_refresh: Annotated[str, typer.Option(envvar="PGLOCK_CANDIDATES_REFRESH",
        metavar="DURATION",
        help="With --candidates: learn the job's hosts again (one statement) at the first "
             "trigger this long after this host last connected for the job.")] = "10m",
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: RunConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Run COMMAND if this host gets the job's lock; skip silently (exit 75) if not.

    A [jobs.NAME] table in the config file gives the job's command and options; the
    command line, then PGLOCK_* variables, come before it (docs/jobs-file.md).

    Example: pglock run --job sync-invoices -- /opt/app/bin/sync-invoices
    """
    from pglock.cli import starting

    values = {name: value for name, value in locals().items() if name not in ("ctx", "starting")}
    return starting.start(values, _sourced(ctx, "ENVIRONMENT"), _sourced(ctx, "DEFAULT"))


@app.command()
def init(
    print_sql: Annotated[bool, typer.Option(
        "--print-sql", help="Print the DDL for a DBA instead of applying it.")] = False,
    print_upgrade: Annotated[bool, typer.Option(
        "--print-upgrade", help="Print the SQL that creates the schema or upgrades it to "
        "this version, as one transaction for a DBA to apply; read-only, runs nothing (only "
        "an SQL comment when the schema is this version).")] = False,
    print_grants: Annotated[bool, typer.Option(
        "--print-grants", help="Print the SQL that creates the group roles pglock_runner, "
        "pglock_reader and pglock_operator and grants them what they need on the schema "
        "(docs/security.md); run it as the schema's owner with CREATEROLE (or a superuser), "
        "again after an upgrade. The roles are cluster-wide: every database of the cluster "
        "shares them.")] = False,
    runner_role: Annotated[list[str] | None, typer.Option(
        "--runner-role", metavar="NAME",
        help="With --print-grants: make login role NAME a pglock_runner (repeatable).")] = None,
    reader_role: Annotated[list[str] | None, typer.Option(
        "--reader-role", metavar="NAME",
        help="With --print-grants: make login role NAME a pglock_reader (repeatable).")] = None,
    operator_role: Annotated[list[str] | None, typer.Option(
        "--operator-role", metavar="NAME",
        help="With --print-grants: make login role NAME a pglock_operator (repeatable).")
    ] = None,
    dsn: Dsn = None,
    schema: Schema = None,
    connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> int:
    """Create pglock's schema now (it is otherwise created on first use).

    Example: pglock init --print-sql | psql -d app

    Example: pglock init --print-grants --runner-role web1 | psql -d app

    Example: pglock init --print-upgrade > upgrade.sql && psql -d app -f upgrade.sql
    """
    _configure_output(verbose, quiet)
    from pglock.db import schema as schema_module
    from pglock.errors import UsageError
    from pglock.settings import config

    members = {"pglock_runner": runner_role or [], "pglock_reader": reader_role or [],
               "pglock_operator": operator_role or []}
    if any(members.values()) and not print_grants:
        raise UsageError("--runner-role, --reader-role and --operator-role need --print-grants")
    if print_sql + print_grants + print_upgrade > 1:
        raise UsageError("--print-sql, --print-grants and --print-upgrade: one at a time")
    if print_sql:
        say(schema_module.ddl(config.configured_schema(schema)).as_string(None))
        return 0
    if print_grants:
        from pglock.operate import roles

        for group, names in members.items():
            for name in names:
                if not name or len(name.encode()) > 63 or "\x00" in name:
                    raise UsageError(f"role name {name!r}: 1-63 bytes")
                if (why := roles.not_a_member(name)) is not None:
                    option = f"--{group.removeprefix('pglock_')}-role"
                    raise UsageError(f"{option}: {name!r} is {why}; name the login role that "
                                     "is to be a member")
        say(roles.grants(config.configured_schema(schema), members).as_string(None))
        return 0
    if print_upgrade:
        with connected(dsn, schema, connect_timeout, "init") as (conn, _, name):
            script = schema_module.upgrade_script(conn, name)
        say(script if script is not None else
            f"-- schema {name!r} is version {schema_module.VERSION} already: nothing to apply")
        return 0
    with connected(dsn, schema, connect_timeout, "init") as (conn, place, name):
        schema_module.ensure(conn, name)
    if not quiet:
        say(f"schema {name!r} is ready (version {schema_module.VERSION}) on {place}")
    return 0


def _version(value: bool) -> None:
    if value:
        from pglock.settings.build import version_line

        say(version_line())
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
    # `serve` lives in the wing above this one (pglock/serve/, docs/development.md): it
    # registers here by name, as the others do, and imports its web stack only when run.
    for module in ("pglock.cli.operator", "pglock.cli.control", "pglock.cli.census",
                   "pglock.cli.monitor", "pglock.cli.jobs", "pglock.cli.doctor",
                   "pglock.serve.command"):
        importlib.import_module(module)
    return app


def _parser(args: list[str]) -> tuple[typer.core.TyperCommand | typer.core.TyperGroup,
                                      list[str], str]:
    """The command that parses `args`: the one named alone, as building every command's
    parser costs more than most commands' work (`run`'s is found without importing the
    others); the whole tree for `pglock --help`, an unknown name, or a shell's completion."""
    if args and not args[0].startswith("-") and not os.environ.get(COMPLETE_VAR):
        commands = app.registered_commands if args[0] == "run" else \
            full_app().registered_commands
        info = next((c for c in commands if _name(c) == args[0]), None)
        if info is not None:
            own = copy.copy(info)
            # The group's settings (-h for help) that a subcommand would inherit from it.
            own.context_settings = {**(app.info.context_settings or {}),
                                    **(info.context_settings or {})}
            command = typer.main.get_command_from_info(
                own, pretty_exceptions_short=True, rich_markup_mode=None)
            return command, args[1:], f"pglock {args[0]}"  # type: ignore[return-value]
    return typer.main.get_command(full_app()), args, "pglock"  # type: ignore[return-value]


def _name(info: typer.models.CommandInfo) -> str:
    """The name a registered command is called by."""
    assert info.callback is not None
    return info.name or typer.main.get_command_name(info.callback.__name__)


def usage() -> str:
    """What bare `pglock` says: every command, in `pglock --help`'s order."""
    names = ", ".join(_name(info) for info in full_app().registered_commands)
    return f"usage: pglock COMMAND [OPTIONS] ({names}); see 'pglock --help'"


def _undecodable_argument(command: typer.core.TyperCommand | typer.core.TyperGroup,
                          args: list[str]) -> str | None:
    """The first of pglock's own arguments that is not UTF-8, shown with \\xNN escapes.

    The command `run` executes is not looked at: a file name is bytes, and exec takes them.
    """
    from pglock.settings.config import shown, undecodable

    if command.name != "run":
        own = args
    else:
        valued = {name for param in command.params if isinstance(param, typer.core.TyperOption)
                  and not param.is_flag for name in param.opts}
        own, i = [], 0
        while i < len(args) and args[i] != "--" and args[i].startswith("-"):
            takes_next = args[i] in valued
            own.extend(args[i:i + 1 + takes_next])
            i += 1 + takes_next
    return next((f"'{shown(arg)}'" for arg in own if undecodable(arg)), None)


def _repeated_option(command: typer.core.TyperCommand | typer.core.TyperGroup,
                  args: list[str]) -> str | None:
    """The refusal of an option given twice that takes one value (a second --job on a
    command that takes one job, a second --expect-duration): click would keep the last and
    act on it, silently ignoring the first (pause and resume take several jobs)."""
    options = [param for param in command.params if isinstance(param, typer.core.TyperOption)
               and not param.is_flag]
    by_name = {name: param for param in options for name in param.opts}
    counted: dict[str, int] = {}
    i = 0
    while i < len(args) and args[i] != "--" and args[i].startswith("-"):
        name, equals, _ = args[i].partition("=")
        if args[i].startswith("-j") and not name.startswith("--"):
            name, equals = "--job", "=" if len(args[i]) > 2 else ""
        param = by_name.get(name)
        if param is not None and not param.multiple and param.name is not None:
            counted[param.name] = counted.get(param.name, 0) + 1
        i += 1 + (param is not None and not equals)
    for param in options:
        given = counted.get(param.name or "", 0)
        if given < 2:
            continue
        option = max(param.opts, key=len)
        if option == "--job":
            return f"--job: given {given} times; pglock {command.name} takes one job"
        return f"{option}: given {given} times; it takes one value"
    return None


def _unicode_number(command: typer.core.TyperCommand | typer.core.TyperGroup,
                    args: list[str]) -> str | None:
    """The refusal of a whole number written in other digits than 0-9 (Arabic-Indic,
    superscript, fullwidth): click's int() takes every script's digits, which no one
    means (`--retries`, PGLOCK_LIMIT). Anything int() refuses is click's to say."""
    options = [param for param in command.params if isinstance(param, typer.core.TyperOption)]
    by_name = {name: param for param in options for name in param.opts}
    given: set[str] = set()
    i = 0
    while i < len(args) and args[i] != "--" and args[i].startswith("-"):
        name, equals, value = args[i].partition("=")
        param = by_name.get(name)
        takes = param is not None and not param.is_flag and not equals
        if takes and i + 1 < len(args):
            value = args[i + 1]
        if param is not None and isinstance(param.type, click.IntParamType):
            given.add(param.name or "")
            if _foreign_digits(value):
                return f"Invalid value for '{max(param.opts, key=len)}': {value!r} is not a " \
                       "valid int (digits 0-9)."
        i += 1 + takes
    for param in options:
        variable = param.envvar if isinstance(param.envvar, str) else None
        value = os.environ.get(variable, "") if variable else ""
        if isinstance(param.type, click.IntParamType) and param.name not in given \
                and _foreign_digits(value):
            return f"Invalid value for '{max(param.opts, key=len)}' (env var: " \
                   f"'{variable}'): {value!r} is not a valid int (digits 0-9)."
    return None


def _foreign_digits(value: str) -> bool:
    """Whether int() reads `value` though it is not written in the digits 0-9."""
    try:
        int(value)
    except ValueError:
        return False
    return not value.strip().lstrip("+-").replace("_", "").isascii()


def main(argv: list[str] | None = None) -> int:
    """Entry point and the one error boundary: one line on stderr for bad input and for
    pglock's own failures, never a traceback (but with -v), and the documented exit code."""
    if os.environ.get(COMPLETE_VAR):
        # add_completion=False keeps --install-completion out of every --help; the classes
        # that answer a shell's tab key are registered only when a shell asks.
        from typer._completion_classes import completion_init

        completion_init()
    args = sys.argv[1:] if argv is None else argv
    if sys.stdout is None:
        # Started with standard output closed (`>&-`): Python leaves it None, and the first
        # write would be an AttributeError after the command's work was done.
        sys.stdout = boundary.ClosedOutput()
    if not args and not os.environ.get(COMPLETE_VAR):
        print(usage(), file=sys.stderr)
        code: int = ExitStatus.USAGE
    else:
        code = _invoke(args)
    if argv is not None:
        return code
    sys.exit(code)


def _invoke(args: list[str]) -> int:
    """Run the command `args` name; its exit code, whatever it raised."""
    checking = args[:1] == ["check"]
    return _plugin_code(_outcome(args, checking), checking)


def _outcome(args: list[str], checking: bool) -> int:
    from typer import _click

    boundary.reset()
    command, rest, prog_name = _parser(args)
    if (bad := _undecodable_argument(command, rest)) is not None:
        return _usage_error(f"the argument {bad} is not valid UTF-8", args, None)
    if (repeated := _repeated_option(command, rest)) is not None:
        return _usage_error(repeated, args, None)
    if (number := _unicode_number(command, rest)) is not None:
        return _usage_error(number, args, f"pglock {command.name}")

    def invoked() -> int:
        try:
            return int(command.main(args=rest, prog_name=prog_name, standalone_mode=False)
                       or 0)
        except SystemExit:
            # A closed pipe under click's own writing (--help): it wraps the streams and
            # exits 1; pglock's answer to a closed pipe is the quiet 141.
            if isinstance(sys.stdout, _click.utils.PacifyFlushWrapper):
                import errno

                raise OutputFailed(OSError(errno.EPIPE, os.strerror(errno.EPIPE))) from None
            raise
        except OSError as error:
            # click's own writing (--help) to a full disk: as pglock's own writing says it.
            if _written_by_click(error):
                raise OutputFailed(error) from None
            raise

    try:
        return boundary.guarded(invoked, args, checking,
                                passing=(_click.exceptions.ClickException, typer.Abort))
    except _click.exceptions.UsageError as error:
        _named_as_given(error)
        # Click raises some (an option without its value) without a context: the command
        # is then the first argument, when it names one.
        where = error.ctx.command_path if error.ctx else (
            f"pglock {args[0]}" if args and args[0] in _command_names() else "pglock")
        return _usage_error(error.format_message(), args, where)
    except _click.exceptions.ClickException as error:
        return _usage_error(error.format_message(), args, None)
    except typer.Abort:
        return ExitStatus.SIGNALLED + 2


def _written_by_click(error: OSError) -> bool:
    """Whether `error` was raised by click's echo (the help it prints), not by a command."""
    from typer._click import utils

    trace = error.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_code is utils.echo.__code__:
            return True
        trace = trace.tb_next
    return False


def _named_as_given(error: Exception) -> None:
    """A bad value names the option it was given as: typer adds "(env var: 'PGLOCK_X')"
    to every hint, which misleads when the value came from the command line."""
    from typer import _click
    from typer._click.core import ParameterSource

    if not isinstance(error, _click.exceptions.BadParameter) or error.param_hint is not None:
        return
    param, ctx = error.param, error.ctx
    if param is None or ctx is None or param.name is None:
        return
    if ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
        error.param_hint = param.opts


def _plugin_code(code: int, checking: bool) -> int:
    """`check` answers a monitoring system: whatever happened, 0-3 (3 is UNKNOWN)."""
    return 3 if checking and not 0 <= code <= 3 else code


def _command_names() -> set[str]:
    return {name for info in full_app().registered_commands
            if (name := info.name or (info.callback.__name__ if info.callback else None))}


def _usage_error(message: str, args: list[str], where: str | None) -> int:
    """A command line click refused: one line, unless -q; `check` still answers UNKNOWN on
    stdout (in JSON with --json), as a monitoring system reads a plugin's bad arguments."""
    if not boundary.quiet(args):
        hint = f" (see '{where} --help')" if where else ""
        print(f"pglock: {message}{hint}", file=sys.stderr)
    if args[:1] != ["check"]:
        return ExitStatus.USAGE
    from pglock.reports import check

    report = check.unknown(message)
    boundary.answer(check.render_json(report) if "--json" in args else check.render_text(report))
    return int(report.status)
