"""`pglock run`: take the job's lock, run the command under it, record how it went."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import select
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from pglock.db import database
from pglock.db.database import Reconnecting
from pglock.errors import ExitStatus, Interrupted, PglockError
from pglock.lock import advisory, clock, lease, ledger
from pglock.lock.heartbeat import (
    RETRY_INTERVAL,
    Heartbeat,
    LeaseRenewer,
    Renewer,
    grace,
)
from pglock.lock.heartbeat import margin as heartbeat_margin
from pglock.lock.ledger import Outcome, RunResult
from pglock.run import output, reentrant, retry
from pglock.run.child import CannotStart, Child
from pglock.run.notify import Notifier
from pglock.run.options import RunOptions
from pglock.run.supervise import SignalGate, Supervision
from pglock.run.watchdog import Watchdog
from pglock.settings.config import shown

log = logging.getLogger(__name__)


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


def acquire(session: Reconnecting, claim: lease.Claim, options: RunOptions,
            start_by: float = float("inf"), notifier: Notifier | None = None, *,
            start: ledger.RunStart | None = None, gate: SignalGate | None = None,
            ) -> float | None:
    """Try (or wait) for the lock; the stopwatch time the winning request was sent, or None.

    With `start`, the winning statement records the run as started too (claim.run), and
    with `gate` signals are held back from that statement on: a run recorded as started
    has a command to forward them to (_start unblocks them after the fork).
    """
    if clock.now() > start_by:
        log.debug("job %r: skipped: started past --deadline", options.job)
        if notifier is not None:
            notifier.skipped("past_deadline")
        return None
    deadline = min(clock.now() + options.wait, start_by)
    attempt = 0
    with database.translated(f"cannot take the lock of job {options.job!r}"):
        conn = session.get()
        while True:
            sent = clock.now()
            if gate is not None:
                gate.block()
            try:
                outcome = _try_acquire(session, conn, claim, start)
            finally:
                if gate is not None and claim.run is None:
                    gate.unblock()
            if outcome is lease.Attempt.WON:
                if notifier is not None:
                    notifier.acquired(claim.fencing_token, claim.slot)
                return sent
            remaining = deadline - clock.now()
            if outcome is not lease.Attempt.HELD or remaining <= 0:
                log.debug("job %r: skipped: %s", options.job, outcome.value)
                if notifier is not None:
                    notifier.skipped(outcome.name.lower(), held_by=(
                        None if outcome is not lease.Attempt.HELD
                        else lambda: claim.held_by or lease.holder_of(conn, claim)))
                return None
            if claim.mode == "advisory":
                # A held session lock short-cuts the acquire statement, which notes it.
                lease.note_waiting(conn, claim)
            attempt += 1
            time.sleep(min(remaining, random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2**attempt)))


def _try_acquire(session: Reconnecting, conn: psycopg.Connection[Any],
                 claim: lease.Claim, start: ledger.RunStart | None) -> lease.Attempt:
    """One attempt; in advisory mode the session lock first, then the row."""
    if claim.mode == "lease":
        return lease.try_acquire(conn, claim, start)
    if not advisory.take(conn, claim):
        return lease.Attempt.HELD
    try:
        with session.connect() as other:
            advisory.verify_session(other, claim)
        attempt = lease.try_acquire(conn, claim, start)
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            advisory.give_back(conn, claim)
        raise
    if attempt is not lease.Attempt.WON:
        # A lease-mode host holds the row, or the slot ran: whatever the session lock says.
        advisory.give_back(conn, claim)
    return attempt


def record_end(session: Reconnecting, claim: lease.Claim, run_id: int, result: RunResult,
               hold: float, *, keep: bool = False,
               ) -> tuple[RunResult, ledger.Finished | None, str | None, float | None]:
    """Write the end of the run and release the lock (with `keep`, renew it for another
    attempt instead), retrying across reconnects.

    The result as recorded (lock_lost when the release found the lock no longer ours),
    what recording it learned about the job (None: nothing was written by this call),
    why the write never took (or None), and, when the lock was kept, the stopwatch time
    its renewal was sent (None: released, lost, or an operator asked it to stop).
    """
    # A run that lost its lock to an outage has waited long enough: the lock is gone,
    # and the next acquirer marks the run abandoned. Otherwise a blip at the end of a
    # run is ridden out for up to a ttl, the time the lease lasts anyway.
    patience = session.timeout if result.outcome is Outcome.LOCK_LOST else max(
        session.timeout, claim.ttl)
    deadline = clock.now() + patience
    failure: str | None = "the database did not answer"
    recorded = result
    finished: ledger.Finished | None = None
    kept_at: float | None = None

    def attempts() -> None:
        nonlocal failure, recorded, finished, kept_at
        while True:
            try:
                conn = session.get()
                sent = clock.now()
                # One statement: nobody sees the lock free before the run has ended.
                done = ledger.finish(conn, claim, run_id, result, hold=hold, keep=keep)
                # Nothing written: an earlier attempt of ours did commit, before the
                # connection broke, and its release found the lock ours.
                if done.recorded:
                    recorded, finished = done.result or result, done
                kept_at = sent if done.kept else None
                failure = None
                return
            except (psycopg.Error, PglockError) as error:
                failure = database.first_line(error)
                session.close()
                if clock.now() >= deadline:
                    return
                time.sleep(1.0)

    # A server that stopped answering (not refusing) would block a statement for good;
    # the thread is given up on at the deadline, and pglock still exits.
    writer = threading.Thread(target=attempts, name="pglock-record", daemon=True)
    writer.start()
    writer.join(patience + 1.0)
    return recorded, finished, failure, kept_at


# What the command finds in its environment (man pglock-run, ENVIRONMENT).
COMMAND_VARIABLES = {
    "PGLOCK_JOB": "the job name",
    "PGLOCK_RUN_ID": "the id of this run's history row",
    "PGLOCK_FENCING_TOKEN": "the lock's fencing token, higher at every acquisition: "
                            "compare it where the command writes",
    "PGLOCK_HOLDER": "the holder's name (--holder, default the host name)",
    "PGLOCK_HOLDER_ID": "this run's random holder id, a secret of the run's processes (in "
                        "their environment only, never shown): a nested pglock run of the "
                        "same job proves with it that it runs under this lock",
    "PGLOCK_SLOT": "with --schedule: the slot this run is for (ISO 8601)",
    "PGLOCK_SEAT": "with --limit: the seat this run holds (1 to N; its fencing token is the "
                   "seat's)",
    "PGLOCK_ATTEMPT": "the attempt (1-based; with --retries, and with --schedule counted over "
                      "every host's attempts at the slot): with PGLOCK_SLOT, an idempotency key",
}


def command_environment(options: RunOptions, claim: lease.Claim, run_id: int,
                        attempt: int = 1) -> dict[str, str]:
    """The command's environment: ours, plus what it needs to fence its own writes."""
    env = dict(os.environ)
    env.update(PGLOCK_JOB=options.job, PGLOCK_RUN_ID=str(run_id),
               PGLOCK_FENCING_TOKEN=str(claim.fencing_token), PGLOCK_HOLDER=options.holder,
               PGLOCK_HOLDER_ID=claim.holder_id, PGLOCK_ATTEMPT=str(attempt))
    if claim.slot is not None:
        env["PGLOCK_SLOT"] = claim.slot.isoformat()
    if claim.seat is not None:
        env["PGLOCK_SEAT"] = str(claim.seat)
    return env


def execute(options: RunOptions, conninfo: str) -> int:
    """Run the command under the job's lock; pglock's exit code."""
    nested = reentrant.inherited(options.job, os.environ)
    if nested is not None:
        return _reentrant(options, conninfo, nested)
    started = clock.now()
    scheduled, start_by = plan_slot(options)
    gate = SignalGate()
    gate.install()
    if options.jitter > 0:
        time.sleep(random.uniform(0, options.jitter))
    # tcp_user_timeout on the holder's session: a check must fail fast on a vanished server.
    session = Reconnecting(
        conninfo, application_name=f"pglock run {options.job} on {options.holder}",
        timeout=options.connect_timeout,
        user_timeout=2 * advisory.CHECK_INTERVAL if options.mode == "advisory" else None)
    claim = lease.Claim(job=options.job, schema=options.schema, ttl=options.ttl,
                        mode=options.mode, holder=options.holder,
                        slot=None if scheduled is None else scheduled.slot, rerun=options.rerun,
                        limit=options.limit)
    notifier = Notifier(options.notify, job=options.job, holder=options.holder)
    first = ledger.RunStart(command=shown(options.command[0]), scheduled=scheduled,
                            retries=options.retries)
    try:
        sent = acquire(session, claim, options, start_by, notifier, start=first, gate=gate)
        if sent is None:
            return options.conflict_exit_code
        try:
            return _run_locked(session, claim, options, gate, sent, scheduled,
                               options.hold(started, sent), notifier)
        except Interrupted:
            # A run recorded by the acquire but never started (the command was not forked)
            # is left running; the next acquirer marks it abandoned.
            # Stopped before the command started: nothing ran, so nobody need wait for us.
            with contextlib.suppress(psycopg.Error, PglockError):
                lease.release(session.get(), claim)
            raise
    finally:
        # Held back since a winning acquire: delivered now if nothing forked (a bug).
        gate.unblock()
        session.close()
        notifier.close()


def _reentrant(options: RunOptions, conninfo: str, nested: reentrant.Inherited) -> int:
    """Inside the command of a run of the same job: its command under that run's lock if
    the lock row confirms it is still held, else skipped (docs/jobs-file.md, Reentrant runs)."""
    if not reentrant.confirmed(conninfo, options.schema, options.job, nested,
                               options.connect_timeout):
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
    return reentrant.run_directly(options.job, options.command, os.environ)


def _start(session: Reconnecting, claim: lease.Claim, options: RunOptions, gate: SignalGate,
           scheduled: ledger.Scheduled | None, capture: output.Capture | None = None,
           attempt: int = 1) -> tuple[ledger.StartedRun, Child | CannotStart] | None:
    """Record the run as started, then fork the command (or say why it could not start).

    None: the slot is done (another host's run of it got in between our acquire and our
    start, or its attempts are spent). `attempt` numbers an unscheduled run's attempts; a
    scheduled one gets its slot's next.
    """
    # Signals wait from the start record to the fork: a run recorded as started always
    # has a command to forward them to. The first attempt's start was recorded by the
    # acquire statement, since when they have been held back (acquire's `gate`).
    with gate.blocked():
        run = claim.run
        claim.run = None
        with database.translated(f"cannot record the start of job {options.job!r}"):
            conn = session.get()
            try:
                if run is None:
                    run = ledger.start(conn, claim, ledger.RunStart(
                        command=shown(options.command[0]), scheduled=scheduled,
                        retries=options.retries, attempt=attempt))
            except (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation):
                lease.release(conn, claim)
                log.debug("job %r: skipped: this slot is done", options.job)
                return None
            except psycopg.Error:
                # Nothing ran: others need not wait out our lease.
                with contextlib.suppress(psycopg.Error):
                    lease.release(conn, claim)
                raise
        try:
            gate.child = Child.spawn(
                options.command, command_environment(options, claim, run.id, run.attempt),
                None if capture is None else capture.child_fds(),
                reap=not options.leave_descendants)
        except CannotStart as error:
            return run, error
        return run, gate.child


@dataclass(frozen=True)
class Attempted:
    """One attempt, ended and recorded."""

    run: ledger.StartedRun
    result: RunResult
    code: int
    finished: ledger.Finished | None
    # When the lock was kept for the next attempt: the stopwatch time its renewal was sent.
    kept_at: float | None
    # The command could not be started (raised once the slot's end is told).
    cannot_start: CannotStart | None = None


def _run_locked(session: Reconnecting, claim: lease.Claim, options: RunOptions, gate: SignalGate,
                sent: float, scheduled: ledger.Scheduled | None, hold: float,
                notifier: Notifier) -> int:
    """The slot's attempts under one lock, renewed through the backoff between them, until
    one succeeds, the attempts are spent, or one ends in a way no retry fixes; then the
    slot's end is told once. pglock's exit code: the last attempt's."""
    last: Attempted | None = None
    # The job's last outcome before this slot's first attempt: what a recovery is from.
    before: str | None = None
    number = 1
    while True:
        done = _attempt(session, claim, options, gate, sent, scheduled, hold, notifier, number)
        if done is None:
            if last is None:
                notifier.skipped("slot_ran")
                return options.conflict_exit_code
            break
        if last is None and done.finished is not None and done.finished.newest:
            before = done.finished.previous_outcome
        last = done
        if done.cannot_start is not None:
            _after_slot(session, options, claim, notifier, done, before)
            raise done.cannot_start
        if done.kept_at is None:
            break
        wait = retry.delay(options.retry_delay, done.run.attempt)
        notifier.emit("retry", warning=True, attempt=done.run.attempt,
                      attempts=done.run.attempt_limit, outcome=str(done.result.outcome),
                      exit_code=done.result.exit_code, delay=round(wait, 3))
        interrupted, sent = _back_off(session, claim, options, gate, wait, done.kept_at)
        if interrupted is not None:
            return _interrupted(session, claim, options, gate, notifier, done, before, hold,
                                interrupted)
        number = done.run.attempt + 1
    _after_slot(session, options, claim, notifier, last, before)
    return last.code


def _attempt(session: Reconnecting, claim: lease.Claim, options: RunOptions, gate: SignalGate,
             sent: float, scheduled: ledger.Scheduled | None, hold: float, notifier: Notifier,
             number: int) -> Attempted | None:
    """Start, supervise and record one attempt; None: the slot was done before it started.
    The lock is kept (renewed) when another attempt may follow, else released."""
    capture = None
    if output.should_capture(options.output_tail, options.output_on_failure):
        capture = output.Capture(options.output_tail, options.output_on_failure)
    started = _start(session, claim, options, gate, scheduled, capture, number)
    if capture is not None and (started is None or isinstance(started[1], CannotStart)):
        capture.abandon()
    if started is None:
        return None
    run, child = started
    if isinstance(child, CannotStart):
        result = RunResult(Outcome.FAILED, int(child.exit_status), 0.0, error=str(child))
        ended, _ = _finish(session, claim, run, result, options, hold, notifier)
        return dataclasses.replace(ended, cannot_start=child)
    heartbeat, watchdog = _keepers(session, claim, options, gate, sent, child)
    # After the watchdog's fork: the start ping has a thread of its own.
    notifier.started(run.id, options.command[0])
    supervision = Supervision(child, heartbeat, gate, max_runtime=options.max_runtime,
                              kill_after=options.kill_after, on_lost=options.on_lost)
    if watchdog is not None:
        margin, terminated = heartbeat.margin, watchdog.terminated
        supervision.on_terminated = lambda kill_at: terminated(kill_at + margin / 2)
    try:
        result, code = _supervise(supervision, capture, session, watchdog)
    except Exception as error:
        # A bug of ours must not leave the command running unlocked, nor the run unrecorded.
        child.signal_family(signal.SIGKILL)
        child.process.wait()
        failure = RunResult(Outcome.FAILED, None, clock.now() - supervision.started,
                            error=f"pglock failed while the command ran: {error!r}")
        _finish(session, claim, run, failure, options, hold, notifier, retry=False)
        raise
    gate.child = None
    if capture is not None:
        capture.release(failed=result.outcome is not Outcome.SUCCEEDED)
    lost_running = result.outcome is Outcome.LOCK_LOST
    ended, unrecorded = _finish(session, claim, run, result, options, hold, notifier,
                                say=False, code=code)
    result = ended.result
    said = []
    if lost_running:
        action = "stopped" if options.on_lost == "kill" else "let finish (--on-lost continue)"
        said.append(f"{result.error}; the command was {action}")
    elif result.outcome is Outcome.LOCK_LOST:
        said.append(f"{result.error} (found when releasing it)")
        ended = dataclasses.replace(ended, code=ExitStatus.INTERNAL)
    if unrecorded is not None:
        said.append(_unrecorded(run.id, unrecorded))
    if said:
        # One line, whatever happened: cron mails it.
        log.warning("job %r: %s", options.job, "; ".join(said))
    return ended


def _back_off(session: Reconnecting, claim: lease.Claim, options: RunOptions, gate: SignalGate,
              wait: float, renewed_at: float) -> tuple[str | None, float]:
    """Hold the lock through the wait before the next attempt, renewing it on this thread;
    why the wait ended early ('signal', 'stop', 'lost'; None: it did not), and the
    stopwatch time the last renewal was sent (the next attempt's heartbeat counts from it)."""
    renewer = _renewer(session, claim)
    # The same local deadline the heartbeat keeps while a command runs.
    slack = heartbeat_margin(renewer.horizon) + grace(renewer.horizon, options.kill_after)
    end = clock.now() + wait
    next_renewal = renewed_at + renewer.interval
    gate.between = True
    try:
        while True:
            now = clock.now()
            if gate.stop_signal is not None:
                return "signal", renewed_at
            if now >= renewed_at + renewer.horizon - slack:
                return "lost", renewed_at
            if now >= end:
                return None, renewed_at
            if now >= next_renewal:
                try:
                    renewal, _ = renewer.renew()
                except (psycopg.Error, PglockError):
                    renewer.reset()
                    next_renewal = now + RETRY_INTERVAL
                    continue
                if renewal is lease.Renewal.LOST:
                    return "lost", renewed_at
                if renewal is lease.Renewal.STOP:
                    return "stop", renewed_at
                renewed_at, next_renewal = now, now + renewer.interval
            ready, _, _ = select.select([gate.wake_r], [], [],
                                        max(0.0, min(end, next_renewal) - clock.now()))
            if ready:
                os.read(gate.wake_r, 512)
    finally:
        gate.between = False
        if claim.mode == "lease":
            renewer.reset()


def _interrupted(session: Reconnecting, claim: lease.Claim, options: RunOptions,
                 gate: SignalGate, notifier: Notifier, last: Attempted, before: str | None,
                 hold: float, why: str) -> int:
    """The backoff ended early: no further attempt here. A stop signal ends pglock as if it
    had killed it (128+N); an operator's `stop` closes the slot; a lost lock leaves the
    slot open for any host. The slot's end is told, with the last attempt's result."""
    if why == "lost":
        log.warning("job %r: lock lost while waiting to retry; attempt %d was not started "
                    "here (another host may run it)", options.job, last.run.attempt + 1)
    else:
        try:
            lease.release(session.get(), claim, 0.0 if why == "stop" else hold,
                          close_slot=claim.slot if why == "stop" else None)
        except (psycopg.Error, PglockError) as error:
            log.warning("job %r: the lock could not be released after the retries were "
                        "stopped (%s); it expires in its ttl", options.job,
                        database.first_line(error))
    _after_slot(session, options, claim, notifier, last, before)
    if why == "signal" and gate.stop_signal is not None:
        return 128 + gate.stop_signal
    return last.code


def _keepers(session: Reconnecting, claim: lease.Claim, options: RunOptions,
             gate: SignalGate, sent: float, child: Child) -> tuple[Heartbeat, Watchdog | None]:
    """The renewal thread, and (with --on-lost kill) the watchdog process beside it."""
    watchdog: Watchdog | None = None

    def renewed(lost_at: float) -> None:
        if watchdog is not None:
            watchdog.extend(lost_at + heartbeat.margin / 2)

    heartbeat = Heartbeat(_renewer(session, claim), acquired_sent_at=sent,
                          kill_after=options.kill_after, on_lost=gate.wake, on_renewed=renewed)
    if options.on_lost == "kill":
        # Forked here, before any thread of ours runs. It acts half a margin after the main
        # loop would, so it only acts when pglock itself cannot: stopped, or stuck.
        watchdog = Watchdog(child.pid, heartbeat.lost_at() + heartbeat.margin / 2,
                            heartbeat.grace, family=child.reaping)
        child.spared.add(watchdog.pid)
    return heartbeat, watchdog


def _renewer(session: Reconnecting, claim: lease.Claim) -> Renewer:
    """How the lock is kept in its mode: the lease row on a connection of its own, or the
    advisory session lock (with its row) on the session."""
    if claim.mode == "advisory":
        return advisory.AdvisoryRenewer(claim, session)
    return LeaseRenewer(claim, lambda: session.connect(claim.ttl / 3, claim.ttl / 3))


def _supervise(supervision: Supervision, capture: output.Capture | None,
               session: Reconnecting, watchdog: Watchdog | None) -> tuple[RunResult, int]:
    """Run to the end with the lease renewed; the result (with the output tail) and exit code."""
    if capture is not None:
        capture.start()
    supervision.heartbeat.start()
    try:
        result, code = supervision.result(supervision.wait())
        if capture is not None:
            # Still renewing: helpers the command left behind may be finishing their output.
            result = dataclasses.replace(result, output_tail=capture.finish())
    finally:
        if not supervision.heartbeat.stop():
            session.abandon()
    if watchdog is not None and watchdog.stand_down() and result.outcome is not Outcome.LOCK_LOST:
        result = dataclasses.replace(
            result, outcome=Outcome.LOCK_LOST,
            error="lock lost: pglock was stopped past the lock's deadline, and its watchdog "
                  "stopped the command")
        code = ExitStatus.INTERNAL
    return result, code


def _unrecorded(run_id: int, failure: str) -> str:
    return f"the end of run {run_id} could not be recorded ({failure}); it stays marked running"


def _finish(session: Reconnecting, claim: lease.Claim, run: ledger.StartedRun,
            result: RunResult, options: RunOptions, hold: float, notifier: Notifier, *,
            code: int | None = None, say: bool = True, retry: bool = True,
            ) -> tuple[Attempted, str | None]:
    """Record the attempt's end, and release the lock, or keep it when another attempt
    may follow (a failure or timeout with attempts left); tell the event log. With `say`,
    a failure to record is said here. The attempt, and why its end was not recorded."""
    if result.outcome is Outcome.STOPPED:
        # An operator stopped it: the lock goes to the next contender at once, no hold.
        hold = 0.0
    keep = retry and result.retryable and run.attempt < run.attempt_limit
    result, finished, failure, kept_at = record_end(session, claim, run.id, result, hold,
                                                    keep=keep)
    if keep and kept_at is None and failure is not None:
        # Neither kept nor known released: let it go (it expires in its ttl otherwise).
        with contextlib.suppress(psycopg.Error, PglockError):
            lease.release(session.get(), claim, hold)
    if say and failure is not None:
        log.warning("job %r: %s", options.job, _unrecorded(run.id, failure))
    notifier.finished(result, recorded=failure is None)
    if code is None:
        code = ExitStatus.INTERNAL if result.exit_code is None else result.exit_code
    ended = Attempted(run, result, code, finished, kept_at)
    return ended, failure


def _after_slot(session: Reconnecting, options: RunOptions, claim: lease.Claim,
                notifier: Notifier, last: Attempted, before: str | None) -> None:
    """The slot's end, once, with its last attempt: hooks and the final ping (on-failure
    fires once however many attempts failed); what they came to noted on its row."""
    newest = last.finished is not None and last.finished.newest
    env = command_environment(options, claim, last.run.id, last.run.attempt)
    note = notifier.after_run(last.result, before if newest else None, env)
    if note is not None and newest:
        _add_note(session, options, claim, last.run.id, note)


def _add_note(session: Reconnecting, options: RunOptions, claim: lease.Claim, run_id: int,
              note: str) -> None:
    """Record what the hooks and pings came to with the run, bounded as its end was."""
    def write() -> None:
        try:
            ledger.add_note(session.get(), claim, run_id, note)
        except (psycopg.Error, PglockError) as error:
            log.info("job %r: the note of run %d was not recorded: %s", options.job, run_id,
                     database.first_line(error))

    writer = threading.Thread(target=write, name="pglock-note", daemon=True)
    writer.start()
    writer.join(session.timeout + 1.0)
