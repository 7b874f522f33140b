"""`pglock run`: take the job's lock, run the command under it, record how it went."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import selectors
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg

from pglock import advisory, clock, database, history, lease, schema
from pglock.config import check_job
from pglock.errors import ExitStatus, Interrupted, PglockError, UsageError
from pglock.heartbeat import Heartbeat, LeaseRenewer, Renewer, check_ttl
from pglock.history import Outcome, RunResult
from pglock.runner import FORWARDED, STOPPING, CannotStart, Child, exit_status

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


class SignalGate:
    """Before the command starts, a stop signal aborts; after, every signal is forwarded."""

    def __init__(self) -> None:
        self.child: Child | None = None
        self.stop_signal: int | None = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def install(self) -> None:
        for signum in FORWARDED:
            signal.signal(signum, self._handle)
        signal.set_wakeup_fd(self.wake_w)

    def wake(self) -> None:
        """Wake the supervising loop from another thread."""
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"\0")

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.child is None:
            if signum in STOPPING:
                raise Interrupted(signum)
            return
        if signum not in STOPPING:
            # USR1/USR2 mean something to the command itself (reopen logs, dump state);
            # its helpers would merely die of them.
            self.child.signal_leader(signum)
            return
        self.child.signal_group(signum, resume=False)
        if self.stop_signal is None:
            self.stop_signal = signum

    @contextmanager
    def blocked(self) -> Iterator[None]:
        """Hold signals back while the command is forked, so none lands in between."""
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)


@dataclass
class Supervision:
    """Wait for the command while watching the lock's local deadline and --max-runtime."""

    child: Child
    heartbeat: Heartbeat
    gate: SignalGate
    options: RunOptions
    started: float = field(default_factory=clock.now)
    lost: str | None = None
    timed_out: bool = False
    kill_at: float | None = None

    def wait(self) -> int:
        """Block until the command exits; its return code."""
        selector = selectors.DefaultSelector()
        exit_fd = self.child.exit_fd()
        if exit_fd is not None:
            selector.register(exit_fd, selectors.EVENT_READ)
        selector.register(self.gate.wake_r, selectors.EVENT_READ)
        try:
            while (returncode := self.child.poll()) is None:
                self._check(clock.now())
                for key, _ in selector.select(self._timeout(exit_fd is None)):
                    if key.fd == self.gate.wake_r:
                        os.read(self.gate.wake_r, 512)
        finally:
            selector.close()
            if exit_fd is not None:
                os.close(exit_fd)
        if self.lost or self.timed_out:
            # The leader is gone; nothing else of the group may go on working unlocked.
            self.child.signal_group(signal.SIGKILL)
        return returncode

    def _check(self, now: float) -> None:
        options = self.options
        if self.lost is None and (self.heartbeat.lost_reason or now >= self.heartbeat.lost_at()):
            self.lost = self.heartbeat.lost_reason or "no renewal succeeded in time"
            if options.on_lost == "kill":
                self._stop(now, self.heartbeat.grace)
        if (options.max_runtime is not None and not self.timed_out
                and now >= self.started + options.max_runtime):
            self.timed_out = True
            self._stop(now, options.kill_after)
        if self.gate.stop_signal is not None and self.kill_at is None:
            self.kill_at = now + options.kill_after
        if self.kill_at is not None and now >= self.kill_at:
            self.child.signal_group(signal.SIGKILL)
            self.kill_at = float("inf")

    def _stop(self, now: float, grace: float) -> None:
        if self.kill_at is None or self.kill_at == float("inf"):
            self.child.signal_group(signal.SIGTERM)
            self.kill_at = now + grace
        else:
            self.kill_at = min(self.kill_at, now + grace)

    def _timeout(self, polling: bool) -> float:
        deadlines = [self.heartbeat.lost_at()]
        if self.options.max_runtime is not None:
            deadlines.append(self.started + self.options.max_runtime)
        if self.kill_at is not None:
            deadlines.append(self.kill_at)
        timeout = max(0.0, min(deadlines) - clock.now())
        return min(timeout, 0.05) if polling else min(timeout, 3600.0)

    def result(self, returncode: int) -> tuple[RunResult, int]:
        """The recorded result and pglock's exit code."""
        status = exit_status(returncode)
        signum = -returncode if returncode < 0 else None
        duration = clock.now() - self.started
        if self.lost:
            return RunResult(Outcome.LOCK_LOST, status, duration, signum,
                             f"lock lost: {self.lost}"), ExitStatus.INTERNAL
        if self.timed_out:
            return RunResult(Outcome.TIMED_OUT, status, duration, signum,
                             "stopped by --max-runtime"), ExitStatus.TIMED_OUT
        if self.gate.stop_signal is not None or signum is not None:
            return RunResult(Outcome.KILLED, status, duration, signum or self.gate.stop_signal,
                             None), status
        outcome = Outcome.SUCCEEDED if status == 0 else Outcome.FAILED
        return RunResult(outcome, status, duration), status


class Session:
    """The main connection of a run, reopened when the server dropped it."""

    def __init__(self, conninfo: str, options: RunOptions) -> None:
        self.conninfo = conninfo
        self.options = options
        self.application_name = f"pglock run {options.job} on {options.holder}"
        self.conn: psycopg.Connection[Any] | None = None

    def connect(self, timeout: float | None = None,
                user_timeout: float | None = None) -> psycopg.Connection[Any]:
        # tcp_user_timeout bounds how long a statement can hang on a vanished server.
        extra = {"tcp_user_timeout": int(user_timeout * 1000)} if user_timeout else None
        return database.connect(self.conninfo, application_name=self.application_name,
                                timeout=timeout or self.options.connect_timeout, extra=extra)

    def get(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            user_timeout = 2 * advisory.CHECK_INTERVAL if self.options.mode == "advisory" else None
            self.conn = self.connect(user_timeout=user_timeout)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def abandon(self) -> None:
        """Forget a connection another thread is stuck on; the next get() opens a new one."""
        self.conn = None


def acquire(session: Session, claim: lease.Lease, options: RunOptions) -> float | None:
    """Try (or wait) for the lock; the stopwatch time the winning request was sent, or None."""
    deadline = clock.now() + options.wait
    attempt = 0
    with database.translated(f"cannot take the lock of job {options.job!r}"):
        conn = session.get()
        schema.ensure(conn, options.schema)
        while True:
            sent = clock.now()
            if _try_acquire(session, conn, claim):
                return sent
            remaining = deadline - clock.now()
            if remaining <= 0:
                return None
            attempt += 1
            time.sleep(min(remaining, random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2**attempt)))


def _try_acquire(session: Session, conn: psycopg.Connection[Any], claim: lease.Lease) -> bool:
    """One attempt; in advisory mode the session lock first, then the row."""
    if claim.mode == "lease":
        return lease.try_acquire(conn, claim)
    if not advisory.take(conn, claim):
        return False
    try:
        with session.connect() as other:
            advisory.verify_session(conn, other, claim)
        if lease.try_acquire(conn, claim, advisory_held=True):
            return True
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            advisory.give_back(conn, claim)
        raise
    # A lease-mode host holds the row: it wins, whatever the session lock says.
    advisory.give_back(conn, claim)
    return False


def record_end(session: Session, claim: lease.Lease, run_id: int, result: RunResult,
               min_hold: float) -> str | None:
    """Write the end of the run, retrying across reconnects; why it never took, or None."""
    patience = max(session.options.connect_timeout, claim.ttl)
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
    return env


def execute(options: RunOptions, conninfo: str) -> int:
    """Run the command under the job's lock; pglock's exit code."""
    options.validate()
    gate = SignalGate()
    gate.install()
    if options.jitter > 0:
        time.sleep(random.uniform(0, options.jitter))
    session = Session(conninfo, options)
    claim = lease.Lease(job=options.job, schema=options.schema, ttl=options.ttl,
                        mode=options.mode, holder=options.holder)
    try:
        sent = acquire(session, claim, options)
        if sent is None:
            return options.conflict_exit_code
        try:
            return _run_locked(session, claim, options, gate, sent)
        except Interrupted:
            # Stopped before the command started: nothing ran, so nobody need wait for us.
            with contextlib.suppress(psycopg.Error, PglockError):
                lease.release(session.get(), claim)
            raise
    finally:
        session.close()


def _start(session: Session, claim: lease.Lease, options: RunOptions,
           gate: SignalGate) -> tuple[history.StartedRun, Child | CannotStart]:
    """Record the run as started, then fork the command (or say why it could not start)."""
    # Signals wait from the start record to the fork: a run recorded as started always
    # has a command to forward them to.
    with gate.blocked():
        with database.translated(f"cannot record the start of job {options.job!r}"):
            run = history.start(session.get(), options.schema, job=options.job, mode=claim.mode,
                                holder=claim.holder, holder_pid=claim.holder_pid,
                                fencing_token=claim.fencing_token, command=options.command[0])
        try:
            gate.child = Child.spawn(options.command, command_environment(options, claim, run.id))
        except CannotStart as error:
            return run, error
        return run, gate.child


def _run_locked(session: Session, claim: lease.Lease, options: RunOptions, gate: SignalGate,
                sent: float) -> int:
    run, child = _start(session, claim, options, gate)
    if isinstance(child, CannotStart):
        result = RunResult(Outcome.FAILED, int(child.exit_status), 0.0, error=str(child))
        _finish(session, claim, run.id, result, options)
        raise child
    renewer: Renewer
    if claim.mode == "advisory":
        renewer = advisory.AdvisoryRenewer(claim, session)
    else:
        renewer = LeaseRenewer(claim, lambda: session.connect(claim.ttl / 3, claim.ttl / 3))
    heartbeat = Heartbeat(renewer, acquired_sent_at=sent,
                          kill_after=options.kill_after, on_lost=gate.wake)
    heartbeat.start()
    supervision = Supervision(child, heartbeat, gate, options)
    try:
        returncode = supervision.wait()
    finally:
        if not heartbeat.stop():
            session.abandon()
    result, code = supervision.result(returncode)
    _finish(session, claim, run.id, result, options)
    if result.outcome is Outcome.LOCK_LOST:
        action = "stopped" if options.on_lost == "kill" else "let finish (--on-lost continue)"
        log.warning("job %r: %s; the command was %s", options.job, result.error, action)
    return code


def _finish(session: Session, claim: lease.Lease, run_id: int, result: RunResult,
            options: RunOptions) -> None:
    failure = record_end(session, claim, run_id, result, options.min_hold)
    if failure is not None:
        log.warning("job %r: the end of run %d could not be recorded (%s); it stays marked "
                    "running", options.job, run_id, failure)
