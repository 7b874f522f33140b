"""`pglock run`'s command line without typer, the entry point of every cron run.

typer's import and the building of its parser cost more than the rest of a short run
that loses. So `pglock run` is parsed here, from a table that scripts/gen-docs generates
from the typer declaration (run_flags.py; tests/test_docs.py fails on drift), and
started by the same `start()` the typer command calls. Anything this parser is not sure
of (help, an unknown or abbreviated option, a missing or odd value, a value from the
environment it would have to interpret, a shell's completion request) goes to typer
(cli.main), so that every message stays typer's own, word for word.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from pglock import boundary, run_flags
from pglock.durations import parse_duration, parse_size

if TYPE_CHECKING:
    from pglock.run import RunOptions

_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
# Booleans from the environment as click reads them, the unambiguous spellings only.
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}
# Read from the environment, these apply only with --schedule; a crontab may set them for
# all its lines, scheduled or not. Given as options without --schedule, they are refused.
SCHEDULE_ONLY = ("tz", "deadline", "grace")


def main(argv: list[str] | None = None) -> int:
    """The `pglock` program: `run` parsed here when this parser is sure of it, anything
    else through typer (cli.main)."""
    args = sys.argv[1:] if argv is None else argv
    parsed = None
    if args[:1] == ["run"] and not os.environ.get("_PGLOCK_COMPLETE"):
        parsed = parse(args[1:], os.environ)
    if parsed is None:
        from pglock import cli

        return cli.main(argv)
    values, from_environment = parsed
    given = _options(args[1:])
    defaulted = set(run_flags.DEFAULTS) - from_environment - set(given[0] if given else ())
    boundary.reset()
    code = boundary.guarded(lambda: start(values, from_environment, defaulted), args, False)
    if argv is not None:
        return code
    sys.exit(code)


def parse(args: list[str], environ: Mapping[str, str],
          ) -> tuple[dict[str, Any], set[str]] | None:
    """run's parameters from its arguments (after `run`) and the environment, as typer
    would make them, and the names of those that came from the environment; None for
    anything typer should see (it then says what is wrong, or prints the help)."""
    given = _options(args)
    if given is None:
        return None
    values, command = given
    from_environment = set()
    for param, variable in run_flags.ENVIRONMENT.items():
        # click takes an empty variable for an unset one.
        if param in values or not environ.get(variable):
            continue
        converted = _converted(environ[variable], run_flags.KINDS[param])
        if converted is None:
            return None
        values[param] = converted
        from_environment.add(param)
    for param, default in run_flags.DEFAULTS.items():
        values.setdefault(param, default)
    values[run_flags.ARGUMENT] = command or None
    for param in run_flags.CALLBACKS:
        callback = _CALLBACKS.get(param)
        if callback is None:
            return None  # a callback this parser does not know: typer's to run
        try:
            values[param] = callback(values[param])
        except Exception:
            return None  # typer says what is wrong, in its words
    return values, from_environment


def _options(args: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The options given and the command (what follows them), or None if unsure."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return values, args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            # Options end at the first argument (allow_interspersed_args is off).
            return values, args[i:]
        name, equals, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = run_flags.FLAGS.get(name)
        if spec is None or undecodable(arg):
            return None
        param, kind = spec
        if isinstance(kind, bool):
            if equals:
                return None
            values[param] = kind
            i += 1
            continue
        if equals:
            value = attached
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            i += 1
            value = args[i]
        else:
            return None
        converted = None if undecodable(value) else _converted(value, kind)
        if converted is None:
            return None
        values[param] = converted
        i += 1
    return values, []


def _converted(text: str, kind: str | bool) -> Any:
    """A value as click converts it for `kind`, or None when unsure."""
    if kind == "text":
        return text
    if kind == "int":
        return int(text) if _INTEGER.fullmatch(text) else None
    if isinstance(kind, bool):
        return _BOOLEANS.get(text.strip().lower())
    return None


def undecodable(text: str) -> bool:
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in text)


def _job(job: str) -> str:
    from pglock.config import check_job

    return check_job(job)


_CALLBACKS = {"job": _job}


# Every parameter of cli.run that start() passes on.
STARTED_FROM = frozenset((
    "command", "job", "mode", "ttl", "wait", "jitter", "min_hold", "rerun", "max_runtime",
    "kill_after", "on_lost", "conflict_exit_code", "holder", "schedule", "tz", "deadline",
    "grace", "output_tail", "output_on_failure", "leave_descendants", "on_failure",
    "on_success", "on_recovery", "hook_timeout", "ping_url", "event_log", "dsn", "schema",
    "connect_timeout", "verbose", "quiet", "retries", "retry_delay", "limit"))


def start(values: dict[str, Any], from_environment: Collection[str],
          defaulted: Collection[str] = ()) -> int:
    """Run with run's parameters (typer's or this parser's): validated before the
    database, or the embedded server this joins, is touched. `defaulted` names the
    parameters neither the command line nor the environment gave: the job's table in the
    jobs file fills those (docs/jobs-file.md)."""
    boundary.configure_output(values["verbose"], values["quiet"])
    if unused := set(values) - STARTED_FROM:
        # An option added to cli.run but not passed on here would be dropped silently.
        raise AssertionError(f"runline.start does not pass on {sorted(unused)}")
    from pglock import config, database
    from pglock.run import execute

    v = resolved(values, from_environment, defaulted)
    boundary.configure_output(v["verbose"], v["quiet"])
    options = run_options(v)
    with database.opened(config.resolve_target(v["dsn"])) as conninfo:
        return execute(options, conninfo)


def resolved(values: Mapping[str, Any], from_environment: Collection[str],
             defaulted: Collection[str]) -> dict[str, Any]:
    """run's parameters in their order of precedence: the command line, PGLOCK_*
    variables, the job's table in the jobs file (its command when none follows the
    options), the defaults."""
    from pglock import config

    v = dict(values)
    # Without a config file there is no table: a host that has none imports nothing more.
    if v["job"] and config.read_config_file()[0] is not None:
        from pglock import jobsfile

        job = jobsfile.configured(v["job"])
        if job is None and not v["command"]:
            jobsfile.refuse_without_command(v["job"])
        for param, value in ({} if job is None else job.values).items():
            if param == "command":
                if not v["command"]:
                    v["command"] = list(value)
            elif param in defaulted:
                v[param] = value
    if v["schedule"] is None:
        for name in SCHEDULE_ONLY:
            if name in from_environment:
                v[name] = None
    return v


def run_options(v: Mapping[str, Any]) -> RunOptions:
    """run's parameters checked and converted, as RunOptions (UsageError: the bad one)."""
    from pglock import config
    from pglock.notify import NotifyOptions
    from pglock.run import RunOptions

    return RunOptions(
        job=v["job"], command=v["command"] or [], schema=config.configured_schema(v["schema"]),
        mode=v["mode"],
        ttl=parse_duration(v["ttl"], option="--ttl"),
        wait=parse_duration(v["wait"], option="--wait"),
        jitter=parse_duration(v["jitter"], option="--jitter"),
        min_hold=_optional_duration(v["min_hold"], "--min-hold"), rerun=v["rerun"],
        limit=v["limit"],
        max_runtime=_optional_duration(v["max_runtime"], "--max-runtime"),
        kill_after=parse_duration(v["kill_after"], option="--kill-after"),
        on_lost=v["on_lost"], conflict_exit_code=v["conflict_exit_code"],
        holder=v["holder"] or socket.gethostname(),
        connect_timeout=parse_duration(v["connect_timeout"], option="--connect-timeout"),
        schedule=v["schedule"], tz=v["tz"],
        deadline=_optional_duration(v["deadline"], "--deadline"),
        grace=_optional_duration(v["grace"], "--grace"),
        output_tail=parse_size(v["output_tail"], option="--output-tail"),
        output_on_failure=v["output_on_failure"], leave_descendants=v["leave_descendants"],
        retries=v["retries"], retry_delay=parse_duration(v["retry_delay"], option="--retry-delay"),
        notify=NotifyOptions(
            on_failure=v["on_failure"], on_success=v["on_success"],
            on_recovery=v["on_recovery"],
            hook_timeout=parse_duration(v["hook_timeout"], option="--hook-timeout"),
            ping_url=v["ping_url"], event_log=v["event_log"]))


def _optional_duration(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option=option)
