"""Telling people how a slot went: hooks, healthchecks.io-style pings, the event log, the
run's span (a trace's, run/tracing.py).

`pglock run` calls a Notifier at fixed points: skipped (with the reason), acquired,
started, finished (each attempt's recorded end), and after_run, once per slot with its
final result, which runs the hooks and sends the final ping. Only the host that ran
the command gets past `skipped`, so only it runs hooks or pings.

With --retries, the slot's attempts loop (Slot.attempts) calls `finished` after every
attempt, `retrying` between attempts (a `retry` event, an event of the span), and calls
`after_run` once, with the last attempt's result: `--on-failure` fires once per slot, when
the slot is dead. The spans are sent at `close`, once the lock is let go.

Nothing here changes pglock's exit code or prints on its own: a hook or a ping that
failed is said with -v and returned as a note for the run's history row.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from pglock.errors import UsageError
from pglock.lock import clock
from pglock.lock.ledger import Outcome, RunResult, StartedRun
from pglock.run.told import Told
from pglock.settings.durations import DURATIONS

if TYPE_CHECKING:
    from pglock.run.events import EventLog
    from pglock.run.pings import Pinger
    from pglock.run.tracing import Trace

log = logging.getLogger(__name__)

DEFAULT_HOOK_TIMEOUT = 30.0

# A success after one of these is a recovery.
NOT_SUCCEEDED = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOCK_LOST,
                           Outcome.KILLED, Outcome.ABANDONED})


class NotifyOptions(NamedTuple):
    """The run options that tell people: hooks, ping URL, event log."""

    on_failure: str | None = None
    on_success: str | None = None
    on_recovery: str | None = None
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT
    ping_url: str | None = None
    event_log: str | None = None
    # Run once per run, while it runs, when it passes --expect-duration's MAX.
    on_slow: str | None = None

    def validate(self) -> None:
        for name, hook in (("--on-failure", self.on_failure), ("--on-success", self.on_success),
                           ("--on-recovery", self.on_recovery), ("--on-slow", self.on_slow)):
            if hook is not None and not hook.strip():
                raise UsageError(f"{name}: the hook command is empty")
        bounds = DURATIONS["--hook-timeout"]
        if not (math.isfinite(self.hook_timeout) and bounds.admits(self.hook_timeout)):
            raise UsageError(f"--hook-timeout: {self.hook_timeout:g}s is out of range "
                             f"({bounds.text()})")
        if self.ping_url is not None:
            from pglock.run.pings import check_url

            check_url(self.ping_url)
        if self.event_log is not None:
            from pglock.run.events import check_target

            check_target(self.event_log)


class Notifier:
    """One run's hooks, pings and events."""

    def __init__(self, options: NotifyOptions, *, job: str, holder: str,
                 trace: Trace | None = None) -> None:
        self.options = options
        self.job = job
        self.trace = trace
        # What is not configured is not imported: a plain run pays for neither.
        self.events: EventLog | None = None
        self.pinger: Pinger | None = None
        if options.event_log is not None:
            from pglock.run.events import EventLog

            self.events = EventLog(options.event_log, job=job, holder=holder)
        if options.ping_url is not None:
            from pglock.run.pings import Pinger

            self.pinger = Pinger(options.ping_url)

    def emit(self, event: str, *, warning: bool = False, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, warning=warning, **fields)

    def skipped(self, reason: str, held_by: Callable[[], str | None] | None = None,
                **fields: Any) -> None:
        """Not run: `held`, `running` (held by a run of an older slot), `slot_ran`,
        `paused`, `past_deadline`, `window`, `not_candidate` (--candidates: not among the
        slot's first K, nothing asked). `held_by` is asked (a statement) only when events
        are logged."""
        if self.trace is not None and self.trace.skipped(reason):
            fields.update(self.trace.ids())
        if self.events is None:
            return
        holder = None
        if held_by is not None:
            try:
                holder = held_by()
            except Exception as error:  # the skip stands whatever the lookup came to
                log.info("the holder of the lock could not be read: %s", error)
        self.emit("skipped", reason=reason, held_by=holder, **fields)

    def slot(self, slot: datetime) -> None:
        """A catch-up moved on to another slot: the events that follow name it, and it is
        a span of its own."""
        if self.trace is not None:
            self.trace.begin(slot)
        if self.events is not None:
            self.events.context["slot"] = slot
            self._traced()

    def ranked(self, rank: int | None, candidates: int) -> None:
        """--candidates: the events from here on carry this host's rank in the slot (None:
        it had no roster to rank itself over) and K."""
        if self.events is not None:
            self.events.context.update(candidate_rank=rank, candidates=candidates)

    def acquired(self, fencing_token: int | None, slot: datetime | None = None) -> None:
        if self.trace is not None:
            self.trace.acquired(fencing_token, slot)
        if self.events is not None:
            self.events.context.update(fencing_token=fencing_token, slot=slot)
            self._traced()
        self.emit("acquired")

    def _traced(self) -> None:
        """The events from here on carry the run's trace and span ids."""
        if self.events is not None and self.trace is not None:
            self.events.context.update(self.trace.ids())

    def started(self, run_id: int, command: str, pid: int | None = None) -> None:
        """The command was forked: the `started` event, the start ping in the background."""
        if self.trace is not None and pid is not None:
            self.trace.forked(pid)
        if self.events is not None:
            self.events.context["run_id"] = run_id
        self.emit("started", command=command)
        if self.pinger is not None:
            self.pinger.start(self.emit)

    def finished(self, result: RunResult, recorded: bool, run: StartedRun | None = None,
                 ) -> None:
        """One attempt's end, once it is recorded (or given up on); `expected`: `shorter`
        or `longer` than --expect-duration, when it was (RunResult.expected)."""
        if self.trace is not None and run is not None:
            self.trace.attempted(run, result)
        if result.outcome is Outcome.LOCK_LOST:
            self.emit("lock_lost", warning=True, error=result.error)
        self.emit("finished", warning=result.outcome is not Outcome.SUCCEEDED,
                  outcome=str(result.outcome), exit_code=result.exit_code,
                  signal=result.signal, duration=round(result.duration, 3),
                  error=result.error, recorded=recorded,
                  expected=result.expected)

    def retrying(self, run: StartedRun, result: RunResult, delay: float) -> None:
        """Another attempt follows this one after `delay`."""
        if self.trace is not None:
            self.trace.retrying(run, result, delay)
        self.emit("retry", warning=True, attempt=run.attempt, attempts=run.attempt_limit,
                  outcome=str(result.outcome), exit_code=result.exit_code,
                  delay=round(delay, 3))

    def slow(self, running_for: float, limit: float, env: dict[str, str]) -> None:
        """The running attempt passed --expect-duration's MAX: the `slow` event, then
        --on-slow (once per run; it is not stopped: --max-runtime does that)."""
        self.emit("slow", warning=True, running_for=round(running_for, 3),
                  expected_max=limit)
        if self.options.on_slow is None:
            return
        hook_env = {**env, "PGLOCK_RUNNING_FOR": f"{running_for:.3f}",
                    "PGLOCK_EXPECTED_MAX": f"{limit:g}"}
        told = self._hook("on-slow", self.options.on_slow, hook_env, b"")
        if not told.ok:
            log.info("job %r: %s", self.job, told.note())

    def after_run(self, result: RunResult, previous_outcome: str | None,
                  env: dict[str, str]) -> str | None:
        """The slot's final result: its span ends, then the hooks and the final ping; a
        note of what failed."""
        if self.trace is not None:
            self.trace.ended()
        tail = result.output_tail or b""
        final = None
        if self.pinger is not None:
            final = threading.Thread(target=self.pinger.finish, args=(self.emit, result, tail),
                                     name="pglock-ping", daemon=True)
            final.start()
        hook_env = {**env, "PGLOCK_OUTCOME": str(result.outcome),
                    "PGLOCK_EXIT_CODE": "" if result.exit_code is None else str(result.exit_code),
                    "PGLOCK_DURATION": f"{result.duration:.3f}",
                    "PGLOCK_PREVIOUS_OUTCOME": previous_outcome or "",
                    "PGLOCK_ERROR": result.error or ""}
        told = [self._hook(name, command, hook_env, tail)
                for name, command in self._hooks(result, previous_outcome)]
        if final is not None and self.pinger is not None:
            from pglock.run.pings import PING_BUDGET

            final.join(PING_BUDGET + 1.0)
            told += list(self.pinger.told)
        failed = [t for t in told if not t.ok]
        for t in failed:
            log.info("job %r: %s", self.job, t.note())
        return "; ".join(t.note() for t in failed) or None

    def _hooks(self, result: RunResult,
               previous_outcome: str | None) -> list[tuple[str, str]]:
        options = self.options
        if result.outcome is Outcome.STOPPED:
            # An operator's stop is no failure of the job (docs/operators.md): no hook.
            return []
        if result.outcome is not Outcome.SUCCEEDED:
            chosen = [("on-failure", options.on_failure)]
        else:
            recovered = previous_outcome in NOT_SUCCEEDED
            chosen = [("on-success", options.on_success),
                      ("on-recovery", options.on_recovery if recovered else None)]
        return [(name, command) for name, command in chosen if command is not None]

    def _hook(self, name: str, command: str, env: dict[str, str], tail: bytes) -> Told:
        from pglock.run.hooks import run_hook

        began = clock.now()
        told, exit_code = run_hook(name, command, {**env, "PGLOCK_HOOK": name}, tail,
                                   self.options.hook_timeout)
        self.emit("hook", warning=not told.ok, hook=name, ok=told.ok, exit_code=exit_code,
                  duration=round(clock.now() - began, 3),
                  detail=None if told.ok else told.detail)
        return told

    def close(self) -> None:
        """The event log closed, then the spans sent: Slot.close calls this once the lock
        is let go, so that no collector keeps it."""
        if self.events is not None:
            self.events.close()
        if self.trace is not None and (spans := self.trace.sending()):
            from pglock.run import otlp

            trace = self.trace
            otlp.export(otlp.Batch(spans, trace.flags, trace.context.tracestate), os.environ)
