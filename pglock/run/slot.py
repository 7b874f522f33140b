"""`pglock run`: one trigger of a job on this host (a slot). Its lock is taken once, its
attempts run under it (renewed through the backoff between them), and its end is told
once (hooks, the final ping). The lease itself: lock/lease.py."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

import psycopg

from pglock.db import database
from pglock.db.database import Reconnecting
from pglock.errors import ExitStatus, Interrupted, PglockError
from pglock.lock import clock, lease, ledger
from pglock.lock.heartbeat import LATE, Heartbeat, in_time, watchdogs_turn
from pglock.lock.ledger import Outcome, RunResult
from pglock.run import output
from pglock.run.notify import Notifier
from pglock.run.options import RunOptions
from pglock.run.supervise import SignalGate, Supervision
from pglock.settings.config import shown

# A host that loses the race imports nothing of the way out: the command, its keepers
# and the record of its end are imported by the steps that use them.
if TYPE_CHECKING:
    from pglock.errors import PglockError as NotStarted
    from pglock.run.candidacy import Candidacy
    from pglock.run.child import Child
    from pglock.run.expected import SlowWatch
    from pglock.run.record import Then
    from pglock.run.reentrant import Inherited
    from pglock.run.tracing import Trace
    from pglock.run.watchdog import Watchdog

log = logging.getLogger(__name__)

# How long a trigger skipped inside a --window spends on recording the windows: its one
# connection attempt (libpq's shortest connect_timeout) and its one statement each.
WINDOW_NOTE_TIMEOUT = 2.0
# The most a trigger refused by the wait after a promotion adds to the wait's end, at
# random: the hosts of a fleet come back spread over it, not in one storm.
PROMOTION_JITTER = 5.0
# What turns tracing on (run/tracing.py, imported only then): a trace to join, or a
# collector to send the span to (tracing.ENDPOINTS).
TRACED_BY = ("TRACEPARENT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def execute(options: RunOptions, conninfo: str, candidacy: Candidacy | None = None) -> int:
    """Run the command under the job's lock; pglock's exit code. With `candidacy`
    (--candidates), this trigger's turn decides whether and when it contends."""
    if os.environ.get("PGLOCK_HOLDER_ID"):
        from pglock.run import reentrant

        nested = reentrant.inherited(options.job, os.environ)
        if nested is not None:
            return _reentrant(options, conninfo, nested)
    if candidacy is not None:
        started, scheduled, start_by = (candidacy.started, candidacy.scheduled,
                                        candidacy.start_by)
    else:
        started = clock.now()
        scheduled, start_by = plan_slot(options)
    gate = SignalGate()
    gate.install()
    if candidacy is not None:
        if not candidacy.candidate:
            # No candidate by a roster due for a refresh: learn it, and decide again.
            candidacy.refresh(conninfo)
            if not candidacy.candidate:
                return stand_by(options, candidacy)
        candidacy.wait(gate)
    if options.jitter > 0:
        time.sleep(random.uniform(0, options.jitter))
    slot = Slot.open(options, conninfo, scheduled, gate, candidacy)
    try:
        if scheduled is not None and options.windows and slot.in_window():
            return options.conflict_exit_code
        return slot.run(started, start_by)
    finally:
        slot.close()


def stand_by(options: RunOptions, candidacy: Candidacy) -> int:
    """Not among the slot's candidates: exit 75 (--conflict-exit-code), silently; an event
    when an event log or a trace says what was skipped."""
    log.debug("job %r: skipped: rank %s of the slot %s, not among its %d candidates",
              options.job, candidacy.rank, candidacy.at.isoformat(), options.candidates)
    notifier = Notifier(options.notify, job=options.job, holder=options.holder,
                        trace=_trace(options, None if candidacy.scheduled is None
                                     else candidacy.at))
    try:
        notifier.skipped("not_candidate", candidate_rank=candidacy.rank,
                         candidates=options.candidates,
                         slot=None if candidacy.scheduled is None else candidacy.at)
    finally:
        notifier.close()
    return options.conflict_exit_code


def plan_slot(options: RunOptions) -> tuple[ledger.Scheduled | None, float]:
    """The slot of this start, and the stopwatch time past which it may no longer start."""
    if options.schedule is None:
        return None, float("inf")
    from pglock.settings import schedule

    # Cron started us by this host's clock, so the slot is read on it (the same for every
    # host whose clock is within the interval); the deadline then runs on the stopwatch.
    wall, started = datetime.now(UTC), clock.now()
    zone, source = options.zone()
    plan = schedule.parse(options.schedule, zone, zone_source=source)
    info = schedule.slot_info(plan, wall)
    grace = info.default_grace if options.grace is None else options.grace
    scheduled = ledger.Scheduled(plan.expr, plan.zone, info.slot, info.next, grace)
    if options.deadline is None:
        return scheduled, float("inf")
    return scheduled, started + options.deadline - (wall - info.slot).total_seconds()


class Attempted(NamedTuple):
    """One attempt, ended and recorded."""

    run: ledger.StartedRun
    result: RunResult
    code: int
    finished: ledger.Finished | None
    # When the lock was kept for the next attempt: the stopwatch time its renewal was sent.
    kept_at: float | None
    # Why the command was not started (CannotStart, LateStart): raised once the slot's end
    # is told.
    not_started: NotStarted | None = None


@dataclass(eq=False)
class Slot:
    """One trigger of a job on this host: what its attempts share, and its steps."""

    options: RunOptions
    session: Reconnecting
    claim: lease.Claim
    gate: SignalGate
    notifier: Notifier
    scheduled: ledger.Scheduled | None = None
    # The stopwatch time the lock was last confirmed (the winning acquire or a renewal
    # was sent): the heartbeat's local deadline counts from it.
    sent: float = 0.0
    # The job's last outcome before this slot's first attempt: what a recovery is from.
    before: str | None = None
    # Each attempt's watch for --expect-duration's MAX: its --on-slow may still run.
    watches: list[SlowWatch] = field(default_factory=list)
    # A catch-up has more slots to run after this one: the lock is kept between them.
    more: bool = False
    # When the lock was last kept at a slot's end for the next one (None: it was not).
    kept_at: float | None = None
    # --candidates: this trigger's turn, and when its acquire was sent (the roster it
    # answered is learnt as of then).
    candidacy: Candidacy | None = None
    asked_at: float | None = None

    @classmethod
    def open(cls, options: RunOptions, conninfo: str, scheduled: ledger.Scheduled | None,
             gate: SignalGate, candidacy: Candidacy | None = None) -> Slot:
        """The slot's session (not connected yet), claim and notifier."""
        # tcp_user_timeout on the holder's session: a check must fail fast on a vanished
        # server.
        user_timeout = None
        if options.mode == "advisory":
            from pglock.lock.advisory import CHECK_INTERVAL

            user_timeout = 2 * CHECK_INTERVAL
        session = Reconnecting(
            conninfo, application_name=f"pglock run {options.job} on {options.holder}",
            timeout=options.connect_timeout, user_timeout=user_timeout)
        claim = lease.Claim(job=options.job, schema=options.schema, ttl=options.ttl,
                            mode=options.mode, holder=options.holder,
                            slot=None if scheduled is None else scheduled.slot,
                            rerun=options.rerun, limit=options.limit, host=options.host)
        if scheduled is not None:
            claim.windows = [w.text for w in options.parsed_windows()] or None
            claim.backlog = _backlog(options, scheduled)
        notifier = Notifier(options.notify, job=options.job, holder=options.holder,
                            trace=_trace(options, claim.slot))
        if candidacy is not None:
            claim.turn = candidacy.turn()
            notifier.ranked(claim.turn.rank, claim.turn.candidates)
        return cls(options, session, claim, gate, notifier, scheduled, candidacy=candidacy)

    def close(self) -> None:
        # An --on-slow hook still running ends (or is killed at --hook-timeout) first.
        for watch in self.watches:
            watch.join(self.options.notify.hook_timeout + self.options.connect_timeout + 1.0)
        self.learn_roster()
        self.session.close()
        self.notifier.close()

    def learn_roster(self) -> None:
        """--candidates: keep the job's roster the acquire answered; an advisory loser, to
        which the session lock's refusal answered nothing, asks for it when it is due (a
        statement more, once per --candidates-refresh)."""
        candidacy = self.candidacy
        if candidacy is None or self.asked_at is None:
            return
        if self.claim.roster is not None:
            candidacy.keep(self.claim.roster, self.asked_at)
            return
        if not candidacy.due or not self.session.usable():
            return
        try:
            candidacy.refreshed(self.session.get())
        except (psycopg.Error, PglockError) as error:
            log.info("job %r: the roster could not be refreshed (%s)", self.claim.job,
                     database.first_line(error))

    def run(self, started: float, start_by: float) -> int:
        """Take the lock (recording the first attempt's start), then the attempts."""
        first = self._run_start()
        # From here to the fork, a stop signal cancels the statement in flight and is
        # acted on when it has answered (SignalGate.deferred_signal).
        self.gate.deferring = True
        try:
            won = self.acquire(start_by, first)
            self.gate.checkpoint()
            if not won:
                return self.options.conflict_exit_code
            self.claim.hold = self.options.hold(started, self.sent)
            if self.claim.run is None and self.claim.missed:
                return self.catch_up()
            return self.attempts()
        except Exception as error:
            failure = self.failed_before_start(error)
            if failure is error:
                raise
            raise failure from (None if isinstance(failure, Interrupted) else error)

    def failed_before_start(self, error: Exception) -> Exception:
        """What a failure between the acquire and the fork ends pglock with: a stop
        signal that came meanwhile (the run recorded killed); the error itself when no
        run was recorded as started or it is already an interruption; else, a run the
        acquire recorded as started and nothing took over (a bug or the OS), recorded
        failed with the lock released."""
        if self.gate.deferred_signal is not None:
            self.stopped_before_start()
            return Interrupted(self.gate.deferred_signal)
        if isinstance(error, Interrupted) or self.claim.run is None:
            return error
        return self.not_started(error)

    def stopped_before_start(self) -> None:
        """A stop signal came before the command was forked: a run recorded as started is
        recorded killed (nothing ran) and the lock released with no hold; a lock held
        without one is released. Nobody need wait for us."""
        run, self.claim.run = self.claim.run, None
        self.claim.hold = 0.0
        signum = self.gate.deferred_signal
        if run is not None:
            self.finish(run, RunResult(
                Outcome.KILLED, None, 0.0, signal=signum,
                error=f"not started: pglock was stopped by signal {signum} before the "
                      "command started"), then="hurry")
        elif self.claim.fencing_token is not None:
            with contextlib.suppress(psycopg.Error, PglockError):
                lease.release(self.session.get(), self.claim)

    def not_started(self, error: Exception) -> PglockError:
        """The first attempt's start record ended as failed, nothing having been forked."""
        run, self.claim.run = self.claim.run, None
        assert run is not None
        self.claim.hold = 0.0
        reason = f"{type(error).__name__}: {error}"
        self.finish(run, RunResult(Outcome.FAILED, None, 0.0,
                                   error=f"not started: pglock failed before the fork "
                                         f"({reason})"), then="release")
        return PglockError(f"job {self.claim.job!r}: the command was not started: pglock "
                           f"failed before the fork ({shown(reason)}); the run is recorded "
                           "failed and the lock released")

    def acquire(self, start_by: float = float("inf"), start: ledger.RunStart | None = None,
                ) -> bool:
        """Try (or wait) for the lock; whether it was won (`sent`: when the winning request
        was sent). With `start`, the winning statement records the run as started too
        (claim.run). Each statement is bounded (--connect-timeout) and a stop signal
        cancels it (the gate defers it: run())."""
        if clock.now() > start_by:
            log.debug("job %r: skipped: started past --deadline", self.claim.job)
            self.notifier.skipped("past_deadline")
            return False
        deadline = min(clock.now() + self.options.wait, start_by)
        attempt = 0
        # The roster an acquire answers is learnt as of then (the first try's, at worst).
        self.asked_at = time.time()
        with database.translated(f"cannot take the lock of job {self.claim.job!r}"):
            conn = self.session.get()
            # A connection cut under the statement (a failover, a restart, a terminated
            # backend) is retried on a new one for up to --connect-timeout after the cut.
            cut_until: float | None = None
            while True:
                sent = clock.now()
                # The last try of this trigger: a loss to a run of an older slot counts.
                self.claim.final = sent >= deadline
                try:
                    outcome = self._try_acquire(conn, start)
                except psycopg.OperationalError as error:
                    if cut_until is None:
                        cut_until = clock.now() + self.options.connect_timeout
                    if not _cut(conn, error) or clock.now() >= cut_until:
                        raise
                    log.debug("job %r: the connection was cut during the acquire (%s): "
                              "trying again on a new one", self.claim.job,
                              database.first_line(error))
                    conn = self._reconnect()
                    continue
                # Answered: a later cut (a second promotion, after a wait) has its own
                # --connect-timeout.
                cut_until = None
                if outcome is lease.Attempt.WON:
                    self.notifier.acquired(self.claim.fencing_token, self.claim.slot)
                    self.sent = sent
                    return True
                if outcome is lease.Attempt.HELD and self.claim.promotion_wait is not None:
                    # Refused by the wait after a promotion alone: wait for its end, whatever
                    # --wait says, and try once more (the run then says it started late).
                    # Refused again, it is a later promotion's own wait (the first one's end
                    # has passed, jitter included): that one is waited out too.
                    until = self._promotion_wait_until()
                    if until > start_by:
                        self._missed(conn, until)
                        return False
                    self.claim.late = "promotion_wait"
                    while clock.now() < until:
                        self.gate.pause(until - clock.now())
                    deadline = max(deadline, clock.now())
                    continue
                remaining = deadline - clock.now()
                if outcome is not lease.Attempt.HELD or remaining <= 0:
                    self._skipped(conn, outcome)
                    return False
                if self.claim.mode == "advisory":
                    # A held session lock short-cuts the acquire statement, which notes it.
                    lease.note_waiting(conn, self.claim)
                attempt += 1
                # Cut short by a stop signal, which is then raised.
                self.gate.pause(min(remaining,
                                    random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2**attempt)))

    def _promotion_wait_until(self) -> float:
        """When to try again after a refusal by the wait after a promotion: its end as the
        server said (at most the longest ttl the old timeline granted for the job away),
        plus a jitter, so that the hosts of a fleet do not all come back at once."""
        assert self.claim.promotion_wait is not None
        left = self.claim.promotion_wait
        log.debug("job %r: refused by the wait after a promotion, %.1fs left: waiting for "
                  "its end", self.claim.job, left)
        return clock.now() + left + random.uniform(0, PROMOTION_JITTER)

    def _missed(self, conn: psycopg.Connection[object], until: float) -> None:
        """The wait after a promotion ends past --deadline: the slot is given up, recorded
        missed with that reason (history, check and the dashboard count it; --catch-up may
        take it later)."""
        claim = self.claim
        log.debug("job %r: skipped: the wait after a promotion ends past --deadline",
                  claim.job)
        if claim.slot is not None:
            try:
                lease.missed(conn, claim, "promotion_wait", self.options.retries)
            except (psycopg.Error, PglockError) as error:
                log.info("job %r: the missed slot could not be recorded (%s)", claim.job,
                         database.first_line(error))
        self.notifier.skipped("promotion_wait", until=until)

    def _try_acquire(self, conn: psycopg.Connection[object], start: ledger.RunStart | None,
                     ) -> lease.Attempt:
        if self.claim.mode == "advisory":
            from pglock.lock import advisory

            return advisory.try_acquire(self.session, conn, self.claim, start)
        return lease.try_acquire(conn, self.claim, start)

    def _skipped(self, conn: psycopg.Connection[object], outcome: lease.Attempt) -> None:
        claim = self.claim
        if outcome is lease.Attempt.HELD and claim.was_running:
            # The previous run (of an older slot) is still going: this slot is skipped.
            log.debug("job %r: skipped: the run of an earlier slot is still going", claim.job)
            self.notifier.skipped("running", held_by=lambda: claim.held_by, slot=claim.slot)
            return
        log.debug("job %r: skipped: %s", self.claim.job, outcome.value)
        self.notifier.skipped(outcome.name.lower(), held_by=(
            None if outcome is not lease.Attempt.HELD
            else lambda: claim.held_by or lease.holder_of(conn, claim)))

    def in_window(self) -> bool:
        """Whether this trigger falls in one of the job's --window: then it skips (event
        `skipped`, reason `window`), after one bounded try to record the windows."""
        from pglock.settings import schedule

        until = schedule.window_end(self.options.parsed_windows(), datetime.now(UTC))
        if until is None:
            return False
        log.debug("job %r: skipped: in a maintenance window until %s", self.claim.job,
                  until.isoformat())
        self._note_windows()
        self.notifier.skipped("window", until=until)
        return True

    def _note_windows(self) -> None:
        """Tell the database the job's windows, so that a window added while inside it is
        no overdue in status and check from its first trigger (issue 38). One connection
        attempt and one statement, each bounded: the database may be down for the very
        maintenance; a failure is said with -v only, and the trigger skips all the same."""
        try:
            with self.session.connect(WINDOW_NOTE_TIMEOUT, once=True) as conn:
                lease.note_windows(conn, self.claim)
        except (psycopg.Error, PglockError) as error:
            log.info("job %r: the window could not be recorded (%s); status may call its "
                     "slots overdue until a run records it", self.claim.job,
                     database.first_line(error))

    def catch_up(self) -> int:
        """--catch-up: the missed slots (all, or the newest), oldest first under this lock,
        then the trigger's own. pglock's exit code: the own slot's, unless it succeeded
        and a caught-up one did not (then the first such one's): cron mails either."""
        from pglock.run import catchup

        own = self.scheduled
        assert own is not None
        planned = catchup.plan(self.options, self.claim, own.schedule)
        with database.translated(f"cannot record the catch-up of job {self.claim.job!r}"):
            # No slot of it is ahead of the database's clock: the acquire refused the
            # trigger's own slot if it was (lease.SlotAhead), and these come before it.
            conn = self.session.get()
            if not lease.catch_up(conn, self.claim, planned.run,
                                  self.options.retries, planned.given_up):
                log.warning("job %r: the lock was lost before the catch-up started",
                            self.claim.job)
                return int(ExitStatus.INTERNAL)
        failed = 0
        self.kept_at = self.sent
        for when in planned.run:
            self.more = True
            self._aim(when, catchup.next_slot(self.options, own.schedule, when))
            code = self.attempts()
            if code not in (0, self.options.conflict_exit_code) and not failed:
                failed = code
            if self.kept_at is None:
                # Lost, stopped or interrupted: the rest, and the own slot, are left to
                # another trigger.
                return failed or code
            self.sent = self.kept_at
        self.more = False
        self._aim(own.slot, own.next_slot)
        code = self.attempts()
        return code if code != 0 else failed

    def _aim(self, when: datetime, following: datetime) -> None:
        """The next run is for the slot `when`: its start record, environment and events."""
        assert self.scheduled is not None
        # In the schedule's zone, as the trigger's own slot is (a caught-up one comes from
        # the database, in UTC): PGLOCK_SLOT is an idempotency key, of one form.
        when = when.astimezone(self.scheduled.slot.tzinfo)
        self.scheduled = self.scheduled._replace(slot=when, next_slot=following)
        self.claim.slot = when
        self.notifier.slot(when)

    def attempts(self) -> int:
        """The slot's attempts under one lock, renewed through the backoff between them,
        until one succeeds, the attempts are spent, or one ends in a way no retry fixes;
        then the slot's end is told once. pglock's exit code: the last attempt's."""
        last: Attempted | None = None
        number = 1
        while True:
            done = self.attempt(number)
            # A stop signal while the end was recorded: no further attempt, no hooks.
            self.gate.checkpoint()
            if done is None:
                if last is None:
                    self.notifier.skipped("slot_ran")
                    return self.options.conflict_exit_code
                break
            if last is None and done.finished is not None and done.finished.newest:
                self.before = done.finished.previous_outcome
            last = done
            if done.not_started is not None:
                self.after(done)
                raise done.not_started
            if done.kept_at is None or not _retrying(done.result, done.run):
                break
            from pglock.run import retry

            wait = retry.delay(self.options.retry_delay, done.run.attempt)
            self.notifier.retrying(done.run, done.result, wait)
            why, reason = self.back_off(wait, done.kept_at)
            if why is not None:
                self.kept_at = None
                return self.interrupted(done, why, reason)
            number = done.run.attempt + 1
        self.kept_at = last.kept_at
        self.after(last)
        return last.code

    def attempt(self, number: int) -> Attempted | None:
        """Start, supervise and record one attempt; None: the slot was done before it
        started. The lock is kept (renewed) when another attempt may follow, else released."""
        from pglock.run.child import CannotStart, Child

        capture = None
        if output.should_capture(self.options.output_tail, self.options.output_on_failure):
            capture = output.Capture(self.options.output_tail, self.options.output_on_failure)
        started = self.start(capture, number)
        if capture is not None and (started is None or not isinstance(started[1], Child)):
            capture.abandon()
        if started is None:
            return None
        run, child = started
        if isinstance(child, Child):
            return self.supervised(run, child, capture)
        # Not started: a command that cannot be executed failed; one the lock's deadline
        # overtook lost its lock before it ran (docs/lease.md, "Never outside the lock").
        # No retry (the next attempt would fail alike), and no hold: the lock does not
        # outlive a run that never started.
        if isinstance(child, CannotStart):
            self.claim.hold = 0.0
            internal = child.exit_status is ExitStatus.INTERNAL
            result = RunResult(Outcome.FAILED, None if internal else int(child.exit_status),
                               0.0, error=str(child))
        else:
            result = RunResult(Outcome.LOCK_LOST, None, 0.0, error=f"lock lost: {child}")
        ended, _ = self.finish(run, result, then="release")
        return ended._replace(not_started=child)

    def start(self, capture: output.Capture | None = None, attempt: int = 1,
              ) -> tuple[ledger.StartedRun, Child | NotStarted] | None:
        """Record the run as started, then fork the command (or say why it could not start:
        it cannot be executed, or the lock's local deadline came first; keeping.horizon).

        None: the slot is done (another host's run of it got in between our acquire and our
        start, or its attempts are spent). `attempt` numbers an unscheduled run's attempts;
        a scheduled one gets its slot's next.
        """
        # A stop signal from the start record to the fork is deferred (never blocked
        # across the statement): a run recorded as started and stopped before its fork is
        # recorded killed (run()). Signals are blocked across the fork alone, so that none
        # lands between it and the command being there to forward them to.
        from pglock.lock.heartbeat import start_deadline, watched
        from pglock.run import keeping
        from pglock.run.child import CannotStart, Child, Deadlines, LateStart
        from pglock.run.environment import command_environment

        self.gate.deferring = True
        run = self.claim.run
        self.claim.run = None
        lost: str | None = None
        if run is None:
            run = self._record_start(attempt)
            if run is None:
                return None
            lost = self._confirm()
        with self.gate.blocked():
            if self.gate.deferred_signal is not None:
                self.claim.run = run
                raise Interrupted(self.gate.deferred_signal)
            if lost is not None:
                return run, LateStart(f"not started: {lost} before the command could be "
                                      "forked")
            try:
                horizon = keeping.horizon(self.claim)
                deadlines = Deadlines(start_deadline(self.sent, horizon))
                if self.options.on_lost == "kill":
                    # The heartbeat's first deadline, on the same anchor (keepers()).
                    watch_until, grace = watched(self.sent, horizon, self.options.kill_after)
                    deadlines = Deadlines(deadlines.start_by, watch_until, grace)
                self.gate.child = Child.spawn(
                    self.options.command,
                    command_environment(self.options, self.claim, run.id, run.attempt,
                                        self.notifier.trace),
                    None if capture is None else capture.child_fds(),
                    reap=not self.options.leave_descendants, deadlines=deadlines)
            except (CannotStart, LateStart) as error:
                return run, error
            except Exception as error:  # the OS, or a bug of ours: nothing was forked
                return run, CannotStart(
                    f"not started: pglock failed before the fork ({type(error).__name__}: "
                    f"{shown(str(error))})", ExitStatus.INTERNAL)
            return run, self.gate.child

    def _record_start(self, attempt: int) -> ledger.StartedRun | None:
        """A further attempt's start record; None: the slot is done (the lock is released).
        A statement cut off under it is sent again on a new connection for up to
        --connect-timeout after the cut, as the acquire is (in advisory mode once the
        session lock is taken back): the start that committed unseen is then the one
        returned (start_run), not a second one."""
        start = self._run_start(attempt)
        with database.translated(f"cannot record the start of job {self.claim.job!r}"):
            conn = self.session.get()
            cut_until: float | None = None
            while True:
                try:
                    return ledger.start(conn, self.claim, start)
                except (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation):
                    if not self.more:
                        # (A catch-up keeps the lock for its next slot.)
                        lease.release(conn, self.claim)
                    log.debug("job %r: skipped: this slot is done", self.claim.job)
                    return None
                except psycopg.OperationalError as error:
                    if cut_until is None:
                        cut_until = clock.now() + self.options.connect_timeout
                    if not _cut(conn, error) or clock.now() >= cut_until:
                        self._release_unstarted(conn)
                        raise
                    log.debug("job %r: the connection was cut while recording the start of "
                              "attempt %d (%s): sending it again on a new one", self.claim.job,
                              attempt, database.first_line(error))
                    conn = self._reconnected(cut_until)
                except psycopg.Error:
                    self._release_unstarted(conn)
                    raise

    def _run_start(self, attempt: int = 1) -> ledger.RunStart:
        """What an attempt's start record says (a traced run's: its trace and span ids)."""
        trace = self.notifier.trace
        return ledger.RunStart(command=shown(self.options.command[0]),
                               scheduled=self.scheduled, retries=self.options.retries,
                               attempt=attempt,
                               trace_id=None if trace is None else trace.trace_id,
                               span_id=None if trace is None else trace.span.span_id)

    def _confirm(self) -> str | None:
        """The lock confirmed again before a further attempt's fork, when its last
        confirmation is older than a renewal's interval (the start record held up by a
        cut, a lock wait or a starved host): the heartbeat and the watchdog then count
        from now. Else a start that came back past the heartbeat's local deadline, but
        before the start deadline, forks a command only to stop it at once (the soak,
        seed 3434). A renewal that fails leaves the last confirmation as it was; one that
        finds the lock another's (cleared, taken over meanwhile) says why, and the
        command is not forked."""
        from pglock.run import keeping

        renewer = keeping.renewer(self.session, self.claim)
        if clock.now() < self.sent + renewer.interval:
            return None
        sent = clock.now()
        with contextlib.suppress(psycopg.Error, PglockError):
            # Lease mode on the run's session, not on a connection of the renewer's own.
            renewal, _ = (renewer.renew() if self.claim.mode == "advisory"
                          else lease.renew(self.session.get(), self.claim))
            if renewal is lease.Renewal.LOST:
                return renewer.lost_reason()
            if self._late(clock.now()):
                return LATE
            self.sent = sent
        return None

    def _late(self, answered: float) -> bool:
        """Whether a confirmation answered at `answered` must not be acted on: it came past
        the local deadline of the lock's last confirmation (`sent`) and the server no
        longer writes the timeline the lock was taken on (a promotion came between, which
        may have lost another host's takeover: heartbeat.in_time)."""
        from pglock.run import keeping

        horizon = keeping.horizon(self.claim)
        if in_time(answered, self.sent, horizon, self.options.kill_after):
            return False
        try:
            return not lease.taken_on_this_timeline(self.session.get(), self.claim)
        except (psycopg.Error, PglockError):
            return True

    def _release_unstarted(self, conn: psycopg.Connection[object]) -> None:
        # Nothing ran: others need not wait out our lease.
        with contextlib.suppress(psycopg.Error):
            lease.release(conn, self.claim)

    def _reconnect(self) -> psycopg.Connection[object]:
        """A new connection after a cut, opened after a short pause (a stop signal cuts
        it short) so that the hosts a failover cut off do not all come back at once."""
        self.session.close()
        self.gate.pause(random.uniform(0.1, 0.5))
        return self.session.get()

    def _reconnected(self, cut_until: float) -> psycopg.Connection[object]:
        """A new connection for a statement sent again after a cut. In advisory mode the
        session lock went with the old session: it is taken back first (and the row
        renewed, so the lock is confirmed from then on: `sent`), waiting while a
        contender's session holds it for the moment; a row no longer ours is a lost lock."""
        while True:
            conn = self._reconnect()
            if self.claim.mode != "advisory":
                return conn
            from pglock.lock import advisory

            sent = clock.now()
            try:
                _, renewed, _, _ = advisory.retake(conn, self.claim)
            except advisory.Contended:
                if clock.now() >= cut_until:
                    raise PglockError(
                        f"job {self.claim.job!r}: lock lost: a contender held the advisory "
                        "lock while we were cut off") from None
                continue
            except psycopg.OperationalError as error:
                # Cut again (a restart after a restart): within the same bound.
                if not _cut(conn, error) or clock.now() >= cut_until:
                    raise
                continue
            if not renewed:
                raise PglockError(f"job {self.claim.job!r}: lock lost: another host took "
                                  "the lock while we were cut off")
            if self._late(clock.now()):
                raise PglockError(f"job {self.claim.job!r}: lock lost: {LATE}")
            self.sent = sent
            return conn

    def supervised(self, run: ledger.StartedRun, child: Child,
                   capture: output.Capture | None) -> Attempted:
        """The command kept under the lock to its end, and the attempt recorded."""
        from pglock.run import keeping

        heartbeat, watchdog = self.keepers(child)
        if self.options.expect_max is not None:
            self.watch_slow(heartbeat, run)
        # What start-up built lives as long as pglock: the collector leaves it alone
        # from now on (runline.main held the collector off until here).
        gc.freeze()
        gc.enable()
        # After the watchdog's fork: the start ping has a thread of its own.
        self.notifier.started(run.id, self.options.command[0], child.pid)
        supervision = Supervision(child, heartbeat, self.gate,
                                  max_runtime=self.options.max_runtime,
                                  kill_after=self.options.kill_after,
                                  on_lost=self.options.on_lost)
        if watchdog is not None:
            margin, terminated = heartbeat.margin, watchdog.terminated
            supervision.on_terminated = lambda kill_at: terminated(
                watchdogs_turn(kill_at, margin))
        try:
            result, code = keeping.supervise(supervision, capture, self.session)
            # The lock's last confirmation: a keep for the next attempt counts against it.
            self.sent = heartbeat.last_sent
        except Exception as error:
            # A bug of ours must not leave the command running unlocked, nor the run
            # unrecorded.
            child.signal_family(signal.SIGKILL)
            child.wait()
            failure = RunResult(Outcome.FAILED, None, clock.now() - supervision.started,
                                error=f"pglock failed while the command ran: {error!r}")
            self.finish(run, failure, then="release")
            raise
        self.gate.child = None
        if capture is not None:
            capture.release(failed=result.outcome is not Outcome.SUCCEEDED)
        if self.options.expect_min is not None or self.options.expect_max is not None:
            from pglock.run.expected import judged

            result, _ = judged(result, self.options.expect_min, self.options.expect_max)
        return self.ended(run, result, code)

    def watch_slow(self, heartbeat: Heartbeat, run: ledger.StartedRun) -> None:
        """Have the heartbeat tell once when this attempt passes --expect-duration's MAX."""
        from pglock.run.environment import command_environment
        from pglock.run.expected import SlowWatch

        assert self.options.expect_max is not None
        watch = SlowWatch(self.session, self.claim, self.notifier, self.options.expect_max)
        watch.arm(heartbeat, run.id, command_environment(
            self.options, self.claim, run.id, run.attempt, self.notifier.trace))
        self.watches.append(watch)

    def keepers(self, child: Child) -> tuple[Heartbeat, Watchdog | None]:
        """The renewal thread, and (with --on-lost kill) the command's watchdog armed with
        the lock's deadline."""
        from pglock.run import keeping

        watchdog: Watchdog | None = None

        def renewed(lost_at: float) -> None:
            if watchdog is not None:
                watchdog.extend(watchdogs_turn(lost_at, heartbeat.margin))
            else:
                child.watchdog.resume()

        heartbeat = Heartbeat(keeping.renewer(self.session, self.claim),
                              acquired_sent_at=self.sent, kill_after=self.options.kill_after,
                              on_lost=self.gate.wake, on_renewed=renewed)
        if self.options.on_lost == "kill":
            # Armed since the fork (start()); it acts after the main loop would
            # (heartbeat.watchdogs_turn).
            watchdog = child.watchdog
        return heartbeat, watchdog

    def ended(self, run: ledger.StartedRun, result: RunResult, code: int) -> Attempted:
        """A supervised attempt recorded, and what went wrong said in one line."""
        from pglock.run.record import unrecorded

        lost_running = result.outcome is Outcome.LOCK_LOST
        ended, failure = self.finish(run, result, say=False, code=code)
        result = ended.result
        said = []
        if lost_running:
            action = ("stopped" if self.options.on_lost == "kill"
                      else "let finish (--on-lost continue)")
            said.append(f"{result.error}; the command was {action}")
        elif result.outcome is Outcome.LOCK_LOST:
            said.append(f"{result.error} (found when releasing it)")
            ended = ended._replace(code=ExitStatus.INTERNAL)
        if failure is not None:
            said.append(unrecorded(run.id, failure))
        if said:
            # One line, whatever happened: cron mails it.
            log.warning("job %r: %s", self.claim.job, "; ".join(said))
        return ended

    def finish(self, run: ledger.StartedRun, result: RunResult, *, code: int | None = None,
               say: bool = True, then: Then | None = None) -> tuple[Attempted, str | None]:
        """Record the attempt's end, and release the lock, or (`then` None) keep it when
        another attempt may follow (a failure or timeout with attempts left); tell the
        event log. With `say`, a failure to record is said here. The attempt, and why its
        end was not recorded."""
        from pglock.run.record import record_end, unrecorded

        retry = then is None
        keep = retry and _retrying(result, run)
        # A catch-up keeps the lock for its next slot after a slot's run ended by itself
        # (not lost, stopped, killed, nor unable to start).
        keep = keep or (retry and self.more and (
            result.outcome is Outcome.SUCCEEDED or result.retryable))
        recorded = record_end(self.session, self.claim, run.id, result,
                              then="keep" if keep else then or "release")
        late = (recorded.kept_at is not None and recorded.answered is not None
                and self._late(recorded.answered))
        if late:
            # Kept, but answered past the lock's local deadline: not acted on.
            log.warning("job %r: %s; the lock is released and no further attempt is made "
                        "here", self.claim.job, LATE)
            recorded = recorded._replace(kept_at=None)
        if keep and recorded.kept_at is None and (recorded.failure is not None or late):
            # Neither kept nor known released, or kept too late to count: let it go (it
            # expires in its ttl otherwise).
            with contextlib.suppress(psycopg.Error, PglockError):
                lease.release(self.session.get(), self.claim, self.claim.hold)
        if say and recorded.failure is not None:
            log.warning("job %r: %s", self.claim.job, unrecorded(run.id, recorded.failure))
        self.notifier.finished(recorded.result, recorded.failure is None, run)
        if code is None:
            code = (ExitStatus.INTERNAL if recorded.result.exit_code is None
                    else recorded.result.exit_code)
        ended = Attempted(run, recorded.result, code, recorded.finished, recorded.kept_at)
        return ended, recorded.failure

    def back_off(self, wait: float, renewed_at: float) -> tuple[str | None, str | None]:
        """Hold the lock through the wait before the next attempt (keeping.hold_through);
        why it ended early ('signal', 'stop', 'lost'; None: it did not), and a stop's
        reason. `sent` becomes the last renewal's: the next attempt's heartbeat counts
        from it."""
        from pglock.run import keeping

        renewer = keeping.renewer(self.session, self.claim)
        try:
            why, self.sent, reason = keeping.hold_through(
                renewer, self.gate, self.options.kill_after, wait, renewed_at)
        finally:
            if self.claim.mode == "lease":
                renewer.reset()
        return why, reason

    def interrupted(self, last: Attempted, why: str, reason: str | None = None) -> int:
        """The backoff ended early: no further attempt here. A stop signal ends pglock as
        if it had killed it (128+N); an operator's `stop` is the next attempt's, recorded
        `stopped` before it started (the slot closed, the lock released, exit 143, as a
        stop of a running command); a lost lock leaves the slot open for any host. The
        slot's end is told, with the last attempt's result."""
        if why == "stop" and (stopped := self.stopped_between(last, reason)) is not None:
            self.after(stopped)
            return 128 + signal.SIGTERM
        if why == "lost":
            log.warning("job %r: lock lost while waiting to retry; attempt %d was not started "
                        "here (another host may run it)", self.claim.job, last.run.attempt + 1)
        else:
            stop = why == "stop"
            try:
                lease.release(self.session.get(), self.claim, 0.0 if stop else self.claim.hold,
                              close_slot=self.claim.slot if stop else None)
            except (psycopg.Error, PglockError) as error:
                log.warning("job %r: the lock could not be released after the retries were "
                            "stopped (%s); it expires in its ttl", self.claim.job,
                            database.first_line(error))
        self.after(last)
        if why == "signal" and self.gate.stop_signal is not None:
            return 128 + self.gate.stop_signal
        return last.code

    def stopped_between(self, last: Attempted, reason: str | None) -> Attempted | None:
        """An operator's stop seen in the retry delay: the next attempt recorded `stopped`
        with nothing run, which releases the lock at once and closes the slot (as `stop
        --wait` waits for); None when that attempt could not be recorded (the slot was
        done meanwhile, or the database failed: the caller releases as before)."""
        try:
            run = self._record_start(last.run.attempt + 1)
        except PglockError as error:
            log.warning("job %r: the stop could not be recorded (%s)", self.claim.job, error)
            return None
        if run is None:
            return None
        result = RunResult(Outcome.STOPPED, None, 0.0, error=(
            f"stopped by pglock stop during the retry delay, before attempt {run.attempt} "
            f"started: {reason or ''}"))
        ended, _ = self.finish(run, result, then="release")
        return ended

    def after(self, last: Attempted) -> None:
        """The slot's end, once, with its last attempt: hooks and the final ping (on-failure
        fires once however many attempts failed); what they came to noted on its row."""
        from pglock.run.environment import command_environment
        from pglock.run.record import add_note

        # The hooks are not a database wait: a stop signal ends them as before.
        self.gate.deferring = False
        newest = last.finished is not None and last.finished.newest
        env = command_environment(self.options, self.claim, last.run.id, last.run.attempt,
                                  self.notifier.trace)
        note = self.notifier.after_run(last.result, self.before if newest else None, env)
        if note is not None and newest:
            add_note(self.session, self.claim, last.run.id, note)


def traced(environ: Mapping[str, str]) -> bool:
    """Whether this run is traced: TRACEPARENT or an OTLP endpoint is set."""
    return any(environ.get(name) for name in TRACED_BY)


def _trace(options: RunOptions, slot: datetime | None) -> Trace | None:
    """The run's trace and its first span, when traced (None: not, and nothing imported)."""
    if not traced(os.environ):
        return None
    from pglock.run.tracing import Trace

    trace = Trace.start(os.environ, options)
    if trace is not None:
        trace.begin(slot)
    return trace


def _cut(conn: psycopg.Connection[object], error: psycopg.OperationalError) -> bool:
    """Whether the acquire (or a start record) failed because its connection broke under it
    (not because it timed out, was not confirmed, or was stopped: pglock/db/bounded.py).
    Sent again, the acquire is safe whether or not the first one committed: the row is then
    ours (the same holder id), and its run, never started, is marked abandoned by the new
    start record (a start record: _record_start)."""
    from pglock.db import bounded

    if isinstance(error, (bounded.StatementTimeout, bounded.NotConfirmed, bounded.Stopped)):
        return False
    return conn.closed or conn.broken


def _retrying(result: RunResult, run: ledger.StartedRun) -> bool:
    """Whether another attempt of the same slot follows this one (a lock kept otherwise is
    kept, if at all, for a catch-up's next slot)."""
    return result.retryable and run.attempt < run.attempt_limit


def _backlog(options: RunOptions, scheduled: ledger.Scheduled) -> list[datetime] | None:
    """With --catch-up: the slots before this one that a catch-up may run (the acquire
    statement says which have no run), oldest first, none older than --deadline."""
    if options.catch_up == "none":
        return None
    from datetime import timedelta

    from pglock.settings import schedule

    zone, source = options.zone()
    plan = schedule.parse(options.schedule or "", zone, zone_source=source)
    not_before = None
    if options.deadline is not None:
        not_before = datetime.now(UTC) - timedelta(seconds=options.deadline)
    return schedule.backlog(plan, scheduled.slot, options.catch_up_limit,
                            options.parsed_windows(), not_before)


def _reentrant(options: RunOptions, conninfo: str, nested: Inherited) -> int:
    """Inside the command of a run of the same job: its command under that run's lock if
    the lock row confirms it is still held, else skipped (docs/jobs-file.md, Reentrant runs)."""
    from pglock.run import reentrant

    confirmed_at = reentrant.confirmed(conninfo, options.schema, options.job, nested,
                                       options.connect_timeout)
    if confirmed_at is None:
        log.debug("job %r: skipped: nested in a run of it whose lock is no longer held",
                  options.job)
        notifier = Notifier(options.notify, job=options.job, holder=options.holder)
        try:
            notifier.skipped("outer_lock_gone")
        finally:
            notifier.close()
        return options.conflict_exit_code
    log.debug("job %r: nested in the run holding its lock (fencing token %s): run under it",
              options.job, nested.fencing_token)
    return reentrant.run_directly(options.job, options.command, os.environ, confirmed_at)

