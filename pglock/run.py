"""`pglock run`: take the job's lock, run the command under it, record how it went."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from pglock import advisory, clock, database, history, lease, output, schema
from pglock.config import check_job
from pglock.database import Reconnecting
from pglock.errors import ExitStatus, Interrupted, PglockError, UsageError
from pglock.heartbeat import Heartbeat, LeaseRenewer, Renewer, check_ttl
from pglock.history import Outcome, RunResult
from pglock.runner import CannotStart, Child
from pglock.supervise import SignalGate, Supervision
from pglock.watchdog import Watchdog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """Everything `pglock run` was asked to do."""

    job: str
    command: list[str]
    schema: str = "pglock"
    mode: str = "lease"
    ttl: float = 60.0
    wait: float = 0.0
    jitter: float = 0.0
    min_hold: float = 0.0
    max_runtime: float | None = None
    kill_after: float = 10.0
    on_lost: str = "kill"
    conflict_exit_code: int = ExitStatus.CONFLICT
    holder: str = field(default_factory=socket.gethostname)
    connect_timeout: float = 10.0
    schedule: str | None = None
    tz: str | None = None
    deadline: float | None = None
    grace: float | None = None
    output_tail: int = output.DEFAULT_TAIL
    output_on_failure: bool = False

    def validate(self) -> None:
        """Refuse bad input before anything touches the database."""
        check_job(self.job)
        if not self.command:
            raise UsageError("no command given: pglock run --job NAME -- COMMAND [ARG...]")
        check_ttl(self.ttl, self.kill_after)
        if self.mode not in ("lease", "advisory"):
            raise UsageError(f"--mode: {self.mode!r} is not one of lease, advisory")
        if self.on_lost not in ("kill", "continue"):
            raise UsageError(f"--on-lost: {self.on_lost!r} is not one of kill, continue")
        if not 0 <= self.conflict_exit_code <= 255:
            raise UsageError("--conflict-exit-code must be between 0 and 255")
        if self.max_runtime is not None and self.max_runtime <= 0:
            raise UsageError("--max-runtime must be more than 0")
        if not self.holder or len(self.holder) > 200:
            raise UsageError("--holder must be 1-200 characters")
        output.check_tail_size(self.output_tail)
        self._validate_schedule()

    def _validate_schedule(self) -> None:
        if self.schedule is None:
            for name, value in (("--tz", self.tz), ("--deadline", self.deadline),
                                ("--grace", self.grace)):
                if value is not None:
                    raise UsageError(f"{name} needs --schedule")
            return
        from pglock import schedule

        schedule.parse(self.schedule, self.tz)
        if self.deadline is not None and self.deadline <= 0:
            raise UsageError("--deadline must be more than 0")


def plan_slot(options: RunOptions) -> tuple[history.Scheduled | None, float]:
    """The slot of this start, and the stopwatch time past which it may no longer start."""
    if options.schedule is None:
        return None, float("inf")
    from pglock import schedule

    # Cron started us by this host's clock, so the slot is read on it (the same for every
    # host whose clock is within the interval); the deadline then runs on the stopwatch.
    wall, started = datetime.now(UTC), clock.now()
    plan = schedule.parse(options.schedule, options.tz)
    info = schedule.slot_info(plan, wall)
    grace = info.default_grace if options.grace is None else options.grace
    scheduled = history.Scheduled(plan.expr, plan.zone, info.slot, info.next, grace)
    if options.deadline is None:
        return scheduled, float("inf")
    return scheduled, started + options.deadline - (wall - info.slot).total_seconds()


def acquire(session: Reconnecting, claim: lease.Lease, options: RunOptions,
            start_by: float = float("inf")) -> float | None:
    """Try (or wait) for the lock; the stopwatch time the winning request was sent, or None."""
    if clock.now() > start_by:
        log.debug("job %r: skipped: started past --deadline", options.job)
        return None
    deadline = min(clock.now() + options.wait, start_by)
    attempt = 0
    with database.translated(f"cannot take the lock of job {options.job!r}"):
        conn = session.get()
        schema.ensure(conn, options.schema)
        while True:
            sent = clock.now()
            outcome = _try_acquire(session, conn, claim)
            if outcome is lease.Attempt.WON:
                return sent
            remaining = deadline - clock.now()
            if outcome in (lease.Attempt.SLOT_RAN, lease.Attempt.PAUSED) or remaining <= 0:
                log.debug("job %r: skipped: %s", options.job, outcome.value)
                return None
            attempt += 1
            time.sleep(min(remaining, random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2**attempt)))


def _try_acquire(session: Reconnecting, conn: psycopg.Connection[Any],
                 claim: lease.Lease) -> lease.Attempt:
    """One attempt; in advisory mode the session lock first, then the row."""
    if claim.mode == "lease":
        return lease.try_acquire(conn, claim)
    if not advisory.take(conn, claim):
        return lease.Attempt.HELD
    try:
        with session.connect() as other:
            advisory.verify_session(conn, other, claim)
        attempt = lease.try_acquire(conn, claim, advisory_held=True)
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            advisory.give_back(conn, claim)
        raise
    if attempt is not lease.Attempt.WON:
        # A lease-mode host holds the row, or the slot ran: whatever the session lock says.
        advisory.give_back(conn, claim)
    return attempt


def record_end(session: Reconnecting, claim: lease.Lease, run_id: int, result: RunResult,
               min_hold: float) -> str | None:
    """Write the end of the run, retrying across reconnects; why it never took, or None."""
    patience = max(session.timeout, claim.ttl)
    deadline = clock.now() + patience
    failure: list[str | None] = ["the database did not answer"]

    def attempts() -> None:
        while True:
            try:
                conn = session.get()
                history.finish(conn, claim.schema, run_id, result)
                lease.release(conn, claim, min_hold)
                failure[0] = None
                return
            except (psycopg.Error, PglockError) as error:
                failure[0] = database.first_line(error)
                session.close()
                if clock.now() >= deadline:
                    return
                time.sleep(1.0)

    # A server that stopped answering (not refusing) would block a statement for good;
    # the thread is given up on at the deadline, and pglock still exits.
    writer = threading.Thread(target=attempts, name="pglock-record", daemon=True)
    writer.start()
    writer.join(patience + 1.0)
    return failure[0]


def command_environment(options: RunOptions, claim: lease.Lease, run_id: int) -> dict[str, str]:
    """The command's environment: ours, plus what it needs to fence its own writes."""
    env = dict(os.environ)
    env.update(PGLOCK_JOB=options.job, PGLOCK_RUN_ID=str(run_id),
               PGLOCK_FENCING_TOKEN=str(claim.fencing_token), PGLOCK_HOLDER=options.holder)
    if claim.slot is not None:
        env["PGLOCK_SLOT"] = claim.slot.isoformat()
    return env


def execute(options: RunOptions, conninfo: str) -> int:
    """Run the command under the job's lock; pglock's exit code."""
    options.validate()
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
    claim = lease.Lease(job=options.job, schema=options.schema, ttl=options.ttl,
                        mode=options.mode, holder=options.holder,
                        slot=None if scheduled is None else scheduled.slot)
    try:
        sent = acquire(session, claim, options, start_by)
        if sent is None:
            return options.conflict_exit_code
        try:
            return _run_locked(session, claim, options, gate, sent, scheduled)
        except Interrupted:
            # Stopped before the command started: nothing ran, so nobody need wait for us.
            with contextlib.suppress(psycopg.Error, PglockError):
                lease.release(session.get(), claim)
            raise
    finally:
        session.close()


def _start(session: Reconnecting, claim: lease.Lease, options: RunOptions, gate: SignalGate,
           scheduled: history.Scheduled | None, capture: output.Capture | None = None,
           ) -> tuple[history.StartedRun, Child | CannotStart] | None:
    """Record the run as started, then fork the command (or say why it could not start).

    None: another host's run of this slot got in between our acquire and our start.
    """
    # Signals wait from the start record to the fork: a run recorded as started always
    # has a command to forward them to.
    with gate.blocked():
        with database.translated(f"cannot record the start of job {options.job!r}"):
            conn = session.get()
            try:
                run = history.start(conn, options.schema, job=options.job, mode=claim.mode,
                                    holder=claim.holder, holder_pid=claim.holder_pid,
                                    fencing_token=claim.fencing_token,
                                    command=options.command[0], scheduled=scheduled)
            except psycopg.errors.UniqueViolation:
                lease.release(conn, claim)
                log.debug("job %r: skipped: this slot already ran", options.job)
                return None
            except psycopg.Error:
                # Nothing ran: others need not wait out our lease.
                with contextlib.suppress(psycopg.Error):
                    lease.release(conn, claim)
                raise
        try:
            gate.child = Child.spawn(options.command, command_environment(options, claim, run.id),
                                     None if capture is None else capture.child_fds())
        except CannotStart as error:
            return run, error
        return run, gate.child


def _run_locked(session: Reconnecting, claim: lease.Lease, options: RunOptions, gate: SignalGate,
                sent: float, scheduled: history.Scheduled | None) -> int:
    capture = None
    if output.should_capture(options.output_tail, options.output_on_failure):
        capture = output.Capture(options.output_tail, options.output_on_failure)
    started = _start(session, claim, options, gate, scheduled, capture)
    if capture is not None and (started is None or isinstance(started[1], CannotStart)):
        capture.abandon()
    if started is None:
        return options.conflict_exit_code
    run, child = started
    if isinstance(child, CannotStart):
        result = RunResult(Outcome.FAILED, int(child.exit_status), 0.0, error=str(child))
        _finish(session, claim, run.id, result, options)
        raise child
    heartbeat, watchdog = _keepers(session, claim, options, gate, sent, child)
    supervision = Supervision(child, heartbeat, gate, max_runtime=options.max_runtime,
                              kill_after=options.kill_after, on_lost=options.on_lost)
    try:
        result, code = _supervise(supervision, capture, session, watchdog)
    except Exception as error:
        # A bug of ours must not leave the command running unlocked, nor the run unrecorded.
        child.signal_group(signal.SIGKILL)
        child.process.wait()
        failure = RunResult(Outcome.FAILED, None, clock.now() - supervision.started,
                            error=f"pglock failed while the command ran: {error!r}")
        _finish(session, claim, run.id, failure, options)
        raise
    if capture is not None:
        capture.release(failed=result.outcome is not Outcome.SUCCEEDED)
    _finish(session, claim, run.id, result, options)
    if result.outcome is Outcome.LOCK_LOST:
        action = "stopped" if options.on_lost == "kill" else "let finish (--on-lost continue)"
        log.warning("job %r: %s; the command was %s", options.job, result.error, action)
    return code


def _keepers(session: Reconnecting, claim: lease.Lease, options: RunOptions,
             gate: SignalGate, sent: float, child: Child) -> tuple[Heartbeat, Watchdog | None]:
    """The renewal thread, and (with --on-lost kill) the watchdog process beside it."""
    renewer: Renewer
    if claim.mode == "advisory":
        renewer = advisory.AdvisoryRenewer(claim, session)
    else:
        renewer = LeaseRenewer(claim, lambda: session.connect(claim.ttl / 3, claim.ttl / 3))
    watchdog: Watchdog | None = None

    def renewed(lost_at: float) -> None:
        if watchdog is not None:
            watchdog.extend(lost_at + heartbeat.margin / 2)

    heartbeat = Heartbeat(renewer, acquired_sent_at=sent, kill_after=options.kill_after,
                          on_lost=gate.wake, on_renewed=renewed)
    if options.on_lost == "kill":
        # Forked here, before any thread of ours runs. It acts half a margin after the main
        # loop would, so it only acts when pglock itself cannot: stopped, or stuck.
        watchdog = Watchdog(child.pid, heartbeat.lost_at() + heartbeat.margin / 2,
                            heartbeat.grace)
    return heartbeat, watchdog


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


def _finish(session: Reconnecting, claim: lease.Lease, run_id: int, result: RunResult,
            options: RunOptions) -> None:
    failure = record_end(session, claim, run_id, result, options.min_hold)
    if failure is not None:
        log.warning("job %r: the end of run %d could not be recorded (%s); it stays marked "
                    "running", options.job, run_id, failure)
