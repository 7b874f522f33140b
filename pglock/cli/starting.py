"""The body of `pglock run`, shared by its two parsers (typer's `run` in app.py, and
runline.py's): the values resolved against the jobs file, checked, and run."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from pglock.cli import boundary

# Read from the environment, these apply only with --schedule; a crontab may set them for
# all its lines, scheduled or not. Given as options without --schedule, they are refused.
SCHEDULE_ONLY = ("tz", "deadline", "grace", "catch_up", "catch_up_limit", "window")


# Every parameter of cli.run that start() passes on.
STARTED_FROM = frozenset((
    "command", "job", "mode", "ttl", "wait", "jitter", "min_hold", "rerun", "max_runtime",
    "kill_after", "on_lost", "conflict_exit_code", "holder", "schedule", "tz", "deadline",
    "grace", "output_tail", "output_on_failure", "leave_descendants", "on_failure",
    "on_success", "on_recovery", "hook_timeout", "ping_url", "event_log", "dsn", "schema",
    "connect_timeout", "verbose", "quiet", "retries", "retry_delay", "limit",
    "expect_duration", "on_slow", "catch_up", "catch_up_limit", "window", "trace_skips",
    "candidates", "candidate_step", "candidates_refresh"))
# Read from the environment, these apply only with --candidates.
CANDIDATES_ONLY = ("candidate_step", "candidates_refresh")


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
    if "job" in defaulted:
        from pglock.errors import UsageError

        # Not "the job name is empty": the operator gave none, and should hear which option.
        raise UsageError("--job is missing: pglock run --job NAME [-- COMMAND [ARG...]]")
    from pglock.db import database
    from pglock.lock import clock
    from pglock.run.options import run_options
    from pglock.run.slot import execute, plan_slot, stand_by
    from pglock.settings import config

    started = clock.now()
    if "window" in from_environment and not values["window"]:
        # PGLOCK_WINDOW of blanks and separators alone: unset, as an empty one is to click
        # (the jobs file's windows apply).
        from_environment, defaulted = set(from_environment) - {"window"}, {*defaulted, "window"}
    v = resolved(values, from_environment, defaulted)
    boundary.configure_output(v["verbose"], v["quiet"])
    options = run_options(v)
    target = config.resolve_target(v["dsn"])
    candidacy = None
    # A nested run of a job runs under its outer run's lock, and a --rerun is an
    # operator's deliberate act: neither waits for a turn.
    if (options.candidates is not None and not options.rerun
            and not os.environ.get("PGLOCK_HOLDER_ID")):
        from pglock.run.candidacy import Candidacy

        candidacy = Candidacy.of(options, target, plan_slot(options), started)
        if not candidacy.candidate and not candidacy.due:
            # Not among the slot's candidates: nothing is asked of the database.
            return stand_by(options, candidacy)
    with database.opened(target) as conninfo:
        return execute(options, conninfo, candidacy)


def resolved(values: Mapping[str, Any], from_environment: Collection[str],
             defaulted: Collection[str]) -> dict[str, Any]:
    """run's parameters in their order of precedence: the command line, PGLOCK_*
    variables, the job's table in the jobs file (its command when none follows the
    options), the defaults."""
    from pglock.settings import config

    v = dict(values)
    # Without a config file there is no table: a host that has none imports nothing more.
    if v["job"] and config.read_config_file()[0] is not None:
        from pglock.run import jobsfile

        job = jobsfile.configured(v["job"])
        if job is None and not v["command"]:
            jobsfile.refuse_without_command(v["job"])
        for param, value in ({} if job is None else job.values).items():
            if param == "command":
                if not v["command"]:
                    v["command"] = list(value)
            elif param in defaulted:
                v[param] = value
    from pglock.run import flags

    # A crontab's variables of options that need another one apply where it is given.
    unused = ((SCHEDULE_ONLY if v["schedule"] is None else ())
              + (CANDIDATES_ONLY if v["candidates"] is None else ()))
    for name in set(unused) & set(from_environment):
        v[name] = flags.DEFAULTS[name]
    if "catch_up_limit" in from_environment and v["catch_up"] == "none":
        # A crontab's PGLOCK_CATCH_UP_LIMIT is for its lines that catch up.
        v["catch_up_limit"] = flags.DEFAULTS["catch_up_limit"]
    return v
