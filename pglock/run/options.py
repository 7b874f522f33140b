"""What `pglock run` was asked to do: its options checked, before anything touches the
database (RunOptions), built from the command line's, the variables' and the jobs file's
values (run_options)."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pglock.errors import ExitStatus, UsageError
from pglock.lock.heartbeat import check_ttl
from pglock.run import output
from pglock.run.notify import NotifyOptions
from pglock.settings.config import (
    check_host,
    check_job,
    check_text,
    configured_schema,
    host_name,
    normalized_job,
)
from pglock.settings.durations import (
    CANDIDATES,
    CATCH_UP_LIMIT,
    DURATIONS,
    EXPECTED,
    RETRIES,
    SEATS,
    check_count,
    parse_duration,
    parse_expected,
    parse_size,
)

if TYPE_CHECKING:
    from pglock.settings import schedule as schedule_module

# Without --schedule or --min-hold, a released lock stays held this long after pglock
# started (plus --jitter): the hosts of a fleet, whose clocks differ by up to 10 s, fire
# one cron trigger within that window, and the next minute's trigger comes after it
# (docs/lease.md, "The hold").
DEFAULT_HOLD = 20.0
CATCH_UP = ("none", "latest", "all")
# How many slots back a catch-up looks, unless --catch-up-limit says otherwise.
DEFAULT_CATCH_UP_LIMIT = 24
# Linux's limit on one argument or variable (32 pages), and what pglock's own PGLOCK_*
# variables add to the command's environment, at most.
MAX_ARG_STRLEN = 32 * 4096
ENV_RESERVE = 16 * 1024


@dataclass(frozen=True, eq=False)
class RunOptions:
    """Everything `pglock run` was asked to do."""

    job: str
    command: list[str]
    schema: str = "pglock"
    mode: str = "lease"
    ttl: float = 60.0
    wait: float = 0.0
    jitter: float = 0.0
    # None: DEFAULT_HOLD (0 with --schedule, whose slot runs once anyway).
    min_hold: float | None = None
    rerun: bool = False
    # --limit: a counting semaphore of this many seats (1: the job's lock).
    limit: int = 1
    max_runtime: float | None = None
    kill_after: float = 10.0
    on_lost: str = "kill"
    conflict_exit_code: int = ExitStatus.CONFLICT
    holder: str = field(default_factory=socket.gethostname)
    # This host's name in the census (config.host_name: PGLOCK_HOST, the config file's
    # `host`, the system's); the holder's default too.
    host: str = field(default_factory=socket.gethostname)
    connect_timeout: float = 10.0
    schedule: str | None = None
    tz: str | None = None
    deadline: float | None = None
    grace: float | None = None
    output_tail: int = output.DEFAULT_TAIL
    output_on_failure: bool = False
    # Let processes the command leaves behind (a daemon it started) run on unlocked.
    leave_descendants: bool = False
    notify: NotifyOptions = field(default_factory=NotifyOptions)
    # --retries: attempts after the first when one fails or times out (docs/schedules.md,
    # "Delivery"); --retry-delay: the first wait between two, doubled at each.
    retries: int = 0
    retry_delay: float = 30.0
    # --expect-duration MIN..MAX: a run outside it is noted as such (its outcome stays),
    # one running past MAX is slow (docs/monitoring.md, "Expected durations").
    expect_min: float | None = None
    expect_max: float | None = None
    # --catch-up: what a trigger does with the slots before its own that have no run
    # (none, the newest of them, all of them up to --catch-up-limit); docs/schedules.md.
    catch_up: str = "none"
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    # --window 'CRON DURATION' (repeatable): a trigger inside one skips.
    windows: tuple[str, ...] = ()
    # --trace-skips: a traced trigger that did not run has a span too (run/tracing.py).
    trace_skips: bool = False
    # --candidates K: only the first K hosts of a slot's ranking contend, each a
    # --candidate-step after the one before; the others ask nothing (None: every host
    # contends). Their roster is learnt again after --candidates-refresh (docs/fleet.md).
    candidates: int | None = None
    candidate_step: float = 10.0
    candidates_refresh: float = 600.0

    def __post_init__(self) -> None:
        # Names that look the same are the same job (NFC; docs/decisions.md).
        object.__setattr__(self, "job", normalized_job(self.job))
        # Built once, checked once: before anything touches the database.
        self.validate()

    def validate(self) -> None:
        """Refuse bad input before anything touches the database."""
        check_job(self.job)
        if not self.command:
            raise UsageError("no command given: pglock run --job NAME -- COMMAND [ARG...]")
        self._validate_strings()
        check_argv(self.command)
        self._validate_ranges()
        check_ttl(self.ttl, self.kill_after)
        if self.mode not in ("lease", "advisory"):
            raise UsageError(f"--mode: {self.mode!r} is not one of lease, advisory")
        if self.on_lost not in ("kill", "continue"):
            raise UsageError(f"--on-lost: {self.on_lost!r} is not one of kill, continue")
        if not 0 <= self.conflict_exit_code <= 255:
            raise UsageError("--conflict-exit-code must be between 0 and 255")
        if self.max_runtime is not None and self.max_runtime <= 0:
            raise UsageError("--max-runtime must be more than 0")
        check_text(self.holder, "--holder")
        if not self.holder:
            # As --job '': an empty value is an unset variable, most likely, not a name.
            raise UsageError("--holder: the holder name is empty (leave --holder out for "
                             "the host name)")
        check_host(self.host, "the host name")
        # The host name, the holder's default, is checked as one (up to 255 bytes).
        if len(self.holder) > 200 and self.holder != self.host:
            raise UsageError("--holder must be 1-200 characters")
        if self.min_hold is not None and self.min_hold < 0:
            raise UsageError("--min-hold must not be negative")
        output.check_tail_size(self.output_tail)
        check_count(self.retries, "--retries", RETRIES)
        check_count(self.limit, "--limit", SEATS)
        if self.limit > 1 and self.schedule is not None:
            raise UsageError("--limit cannot be used with --schedule: each slot runs once")
        if self.limit > 1 and self.mode == "advisory":
            raise UsageError("--limit needs --mode lease: a session advisory lock is one "
                             "holder's (docs/lease.md, Semaphores)")
        self.notify.validate()
        self._validate_expected()
        self._validate_catch_up()
        self._validate_schedule()
        self._validate_candidates()

    def _validate_candidates(self) -> None:
        if self.candidates is None:
            for name, value, default in (("--candidate-step", self.candidate_step, 10.0),
                                         ("--candidates-refresh", self.candidates_refresh,
                                          600.0)):
                if value != default:
                    raise UsageError(f"{name} needs --candidates")
            return
        check_count(self.candidates, "--candidates", CANDIDATES)
        if self.limit > self.candidates:
            raise UsageError("--candidates must be at least --limit: a semaphore's seats "
                             "are taken by candidates only")

    def _validate_catch_up(self) -> None:
        check_count(self.catch_up_limit, "--catch-up-limit", CATCH_UP_LIMIT)
        if self.catch_up not in CATCH_UP:
            raise UsageError(f"--catch-up: {self.catch_up!r} is not one of "
                             f"{', '.join(CATCH_UP)}")
        if self.catch_up == "none" and self.catch_up_limit != DEFAULT_CATCH_UP_LIMIT:
            # Without a catch-up it would change nothing, and nothing would say so.
            raise UsageError("--catch-up-limit needs --catch-up latest or all")

    def _validate_expected(self) -> None:
        """--expect-duration's range in order, and --on-slow only with its MAX."""
        if (self.expect_min is not None and self.expect_max is not None
                and self.expect_min > self.expect_max):
            raise UsageError("--expect-duration: MIN is above MAX")
        if self.notify.on_slow is not None and self.expect_max is None:
            raise UsageError("--on-slow needs --expect-duration with a MAX (..MAX)")

    def _validate_strings(self) -> None:
        """No NUL in any text: no program, variable, file name or database takes one."""
        notify = self.notify
        for option, value in (("--holder", self.holder), ("--schedule", self.schedule),
                              ("--tz", self.tz), ("--on-failure", notify.on_failure),
                              ("--on-success", notify.on_success),
                              ("--on-recovery", notify.on_recovery),
                              ("--on-slow", notify.on_slow), ("--ping-url", notify.ping_url),
                              ("--event-log", notify.event_log),
                              *(("--window", window) for window in self.windows)):
            if value is not None and "\0" in value:
                raise UsageError(f"{option}: contains a NUL character")

    def _validate_ranges(self) -> None:
        """The ranges of durations.DURATIONS, for callers that did not parse text."""
        for option, value in (("--ttl", self.ttl), ("--wait", self.wait),
                              ("--jitter", self.jitter), ("--min-hold", self.min_hold),
                              ("--max-runtime", self.max_runtime),
                              ("--kill-after", self.kill_after),
                              ("--connect-timeout", self.connect_timeout),
                              ("--deadline", self.deadline), ("--grace", self.grace),
                              ("--retry-delay", self.retry_delay),
                              ("--candidate-step", self.candidate_step),
                              ("--candidates-refresh", self.candidates_refresh)):
            bounds = DURATIONS[option]
            if value is not None and not (math.isfinite(value) and bounds.admits(value)):
                raise UsageError(f"{option}: {value:g}s is out of range ({bounds.text()})")
        for value in (self.expect_min, self.expect_max):
            if value is not None and not (math.isfinite(value) and EXPECTED.admits(value)):
                raise UsageError(f"--expect-duration: {value:g}s is out of range "
                                 f"(each end {EXPECTED.text()})")

    def zone(self) -> tuple[str | None, str]:
        """The schedule's zone (None: the host's) and where it was set."""
        from pglock.settings import schedule

        zone, source = schedule.zone_setting(self.tz, os.environ)
        return zone, source

    def hold(self, started: float, sent: float) -> float:
        """How long after its acquisition (sent at `sent`) the lock stays held once released.

        The default counts from pglock's start (`started`, before --jitter), the moment
        cron fired this trigger, so it ends when every host's start of it is over.
        """
        if self.min_hold is not None:
            return self.min_hold
        if self.schedule is not None:
            return 0.0
        # With candidates, until the last one's attempt too (each a step after the one
        # before): a short run is still held when it asks.
        turns = 0.0 if self.candidates is None else (self.candidates - 1) * self.candidate_step
        return max(0.0, DEFAULT_HOLD + self.jitter + turns - (sent - started))

    def parsed_windows(self) -> tuple[schedule_module.Window, ...]:
        """The --window options, read in the schedule's zone."""
        if not self.windows:
            return ()
        from pglock.settings import schedule

        zone, source = self.zone()
        return tuple(schedule.parse_window(text, zone, zone_source=source)
                     for text in self.windows)

    def _validate_schedule(self) -> None:
        if self.schedule is None:
            for name, value in (("--tz", self.tz), ("--deadline", self.deadline),
                                ("--grace", self.grace),
                                ("--window", self.windows or None),
                                ("--catch-up", None if self.catch_up == "none"
                                 else self.catch_up)):
                if value is not None:
                    raise UsageError(f"{name} needs --schedule")
            return
        from pglock.settings import schedule

        zone, source = self.zone()
        schedule.parse(self.schedule, zone, zone_source=source)
        self.parsed_windows()
        if self.deadline is not None and self.deadline <= 0:
            raise UsageError("--deadline must be more than 0")


def check_argv(argv: list[str]) -> None:
    """Refuse a command the OS cannot execute whatever it is: a NUL in an argument, an
    argument longer than Linux takes (MAX_ARG_STRLEN), or an argument list that with the
    environment passes ARG_MAX (E2BIG at the fork, after the lock was taken)."""
    total = 0
    for number, argument in enumerate(argv):
        if "\0" in argument:
            which = "the program" if number == 0 else f"argument {number}"
            raise UsageError(f"command: {which} contains a NUL character, which no program "
                             "can be given")
        size = len(os.fsencode(argument)) + 1
        if size > MAX_ARG_STRLEN:
            which = "the program" if number == 0 else f"argument {number}"
            raise UsageError(f"command: {which} is {size - 1} bytes long; the system takes at "
                             f"most {MAX_ARG_STRLEN - 1}")
        total += size + 8
    environment = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 10
                      for k, v in os.environ.items())
    limit = _arg_max()
    if total + environment + ENV_RESERVE > limit:
        raise UsageError(f"command: the arguments ({total} bytes) and the environment "
                         f"({environment} bytes) are more than the system takes ({limit} "
                         "bytes, ARG_MAX)")


def _arg_max() -> int:
    try:
        found = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        found = -1
    return found if found > 0 else 128 * 1024


def run_options(v: Mapping[str, Any]) -> RunOptions:
    """run's parameters checked and converted, as RunOptions (UsageError: the bad one)."""
    host = host_name()
    return RunOptions(
        job=v["job"], command=v["command"] or [], schema=configured_schema(v["schema"]),
        mode=v["mode"],
        ttl=parse_duration(v["ttl"], option="--ttl"),
        wait=parse_duration(v["wait"], option="--wait"),
        jitter=parse_duration(v["jitter"], option="--jitter"),
        min_hold=_optional_duration(v["min_hold"], "--min-hold"), rerun=v["rerun"],
        limit=v["limit"],
        max_runtime=_optional_duration(v["max_runtime"], "--max-runtime"),
        kill_after=parse_duration(v["kill_after"], option="--kill-after"),
        on_lost=v["on_lost"], conflict_exit_code=v["conflict_exit_code"],
        holder=host if v["holder"] is None else v["holder"], host=host,
        connect_timeout=parse_duration(v["connect_timeout"], option="--connect-timeout"),
        schedule=v["schedule"], tz=v["tz"],
        deadline=_optional_duration(v["deadline"], "--deadline"),
        grace=_optional_duration(v["grace"], "--grace"),
        output_tail=parse_size(v["output_tail"], option="--output-tail"),
        output_on_failure=v["output_on_failure"], leave_descendants=v["leave_descendants"],
        retries=v["retries"], retry_delay=parse_duration(v["retry_delay"], option="--retry-delay"),
        **_expected(v["expect_duration"]),
        catch_up=v["catch_up"], catch_up_limit=v["catch_up_limit"],
        windows=tuple(v["window"] or ()), trace_skips=v["trace_skips"],
        candidates=v["candidates"],
        candidate_step=parse_duration(v["candidate_step"], option="--candidate-step"),
        candidates_refresh=parse_duration(v["candidates_refresh"],
                                          option="--candidates-refresh"),
        notify=NotifyOptions(
            on_failure=v["on_failure"], on_success=v["on_success"],
            on_recovery=v["on_recovery"], on_slow=v["on_slow"],
            hook_timeout=parse_duration(v["hook_timeout"], option="--hook-timeout"),
            ping_url=v["ping_url"], event_log=v["event_log"]))


def _expected(text: str | None) -> dict[str, float | None]:
    low, high = (None, None) if text is None else parse_expected(text)
    return {"expect_min": low, "expect_max": high}


def _optional_duration(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option=option)
