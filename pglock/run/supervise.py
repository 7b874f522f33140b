"""Supervising the command: signals in, deadlines watched, the outcome decided.

The main thread waits here on the command's exit (the watchdog's report of it), a wake-up
pipe (signals and the heartbeat thread write to it) and a timeout computed from the nearest
deadline: the lock's local deadline, --max-runtime, or the SIGKILL that follows a SIGTERM.
Nothing in this loop waits on the database.

When the command exits, the job is not done while processes it left behind run (a daemon
it started): the loop goes on, polling for them, with the same deadlines; stopping the
command stops them too (child.Child.signal_family).

On a terminal, the command has the terminal while it runs (run/terminal.py), so the
terminal's keys reach its group, not pglock's: pglock acts on what they did to it as a
shell acts on its job's. A Ctrl-Z that stopped it stops pglock's group too (the shell
sees its job stopped, and `fg` gives the terminal back to the command); a Ctrl-C or
Ctrl-\\ that ended it is pglock's stop signal too (the command's leftovers are stopped,
no further attempt is made).
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from pglock.db import bounded
from pglock.errors import ExitStatus, Interrupted
from pglock.lock import clock
from pglock.lock.heartbeat import Heartbeat
from pglock.lock.ledger import Outcome, RunResult
from pglock.run import terminal
from pglock.run.child import Child, exit_status
from pglock.run.tree import FORWARDED, STOPPING, SUSPENDING

# How often to look for the command's leftover processes once it has exited: they are
# not our children to wait on, only to find in /proc.
LINGER_POLL = 0.2


class SignalGate:
    """Around a database wait (the acquire to the fork, the record of an end) a stop signal
    is deferred: noted, the statement in flight cancelled, and acted on once that statement
    has answered (checkpoint()); elsewhere before the command starts it aborts; while the
    command runs, every signal is forwarded. Signals are never blocked across a database
    wait: only across the fork itself."""

    def __init__(self) -> None:
        self.child: Child | None = None
        self.stop_signal: int | None = None
        # Between two attempts (the backoff of --retries): a stop signal is noted, not
        # raised, so that the lock is released and the slot's end told.
        self.between = False
        # Inside a database wait of the main path: a stop signal is noted and the statement
        # cancelled (bounded.interrupt), then raised at the next checkpoint().
        self.deferring = False
        self.deferred_signal: int | None = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        # When a stopped pglock, continued, may let its command go on: before this stopwatch
        # time (the lock's local deadline with --on-lost kill); past it the lock may be gone.
        self.resume_before: Callable[[], float] = lambda: float("inf")
        # The controlling terminal (None: none, as under cron): run/terminal.py.
        self.terminal: int | None = None

    def install(self) -> None:
        for signum in FORWARDED:
            signal.signal(signum, self._handle)
        for signum in SUSPENDING:
            signal.signal(signum, self._suspend)
        signal.set_wakeup_fd(self.wake_w)
        self.terminal = terminal.controlling()

    def _suspend(self, _signum: int, _frame: FrameType | None) -> None:
        """A terminal's stop (Ctrl-Z, or reading or writing it from the background): stop
        the command with pglock, as a shell stops a job, and continue it with pglock, unless
        the lock's local deadline passed meanwhile (the watchdog, which no stop of pglock's
        group reaches, stops the command by then; pglock, continued, finds the lock lost).
        The terminal goes back to pglock's group for the stop, and to the command's again
        if pglock is continued as the terminal's job (`fg`, not `bg`)."""
        child = self.child
        if child is not None:
            # SIGSTOP, not the signal received: a command may ignore SIGTSTP.
            child.signal_family(signal.SIGSTOP, resume=False)
            terminal.take_back(self.terminal, child.pid)
        os.kill(os.getpid(), signal.SIGSTOP)
        if child is not None and self.child is child and clock.now() < self.resume_before():
            terminal.give(self.terminal, child.pid)
            child.signal_family(signal.SIGCONT, resume=False)
        self.wake()

    def interrupted(self, signum: int) -> None:
        """The terminal's Ctrl-C (or Ctrl-\\) ended the command that had the terminal: as
        if pglock had been sent it (a shell's job ends with it), its leftovers outside the
        command's group get it too."""
        if self.child is not None:
            self.child.signal_outside(signum)
        if self.stop_signal is None:
            self.stop_signal = signum

    def wake(self) -> None:
        """Wake the supervising loop from another thread."""
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"\0")

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.child is None:
            if signum in STOPPING:
                if self.between or self.deferring:
                    if self.stop_signal is None:
                        self.stop_signal = signum
                    if self.deferring and self.deferred_signal is None:
                        self.deferred_signal = signum
                    bounded.interrupt()
                    return
                raise Interrupted(signum)
            return
        if signum not in STOPPING:
            # USR1/USR2 mean something to the command itself (reopen logs, dump state);
            # its helpers would merely die of them.
            self.child.signal_leader(signum)
            return
        # A stopped command (`kill -STOP` of it alone) is continued so that it can die, as
        # timeout(1) does; not past the lock's local deadline, where a stopped pglock,
        # continued, leaves it to the watchdog (_suspend).
        self.child.signal_family(signum, resume=clock.now() < self.resume_before())
        if self.stop_signal is None:
            self.stop_signal = signum

    def checkpoint(self) -> None:
        """Raise Interrupted for a stop signal deferred so far."""
        if self.deferred_signal is not None and self.child is None:
            raise Interrupted(self.deferred_signal)

    def pause(self, seconds: float) -> None:
        """Sleep, cut short by any signal (a deferred stop is then raised)."""
        ready, _, _ = select.select([self.wake_r], [], [], max(0.0, seconds))
        if ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 512)
        self.checkpoint()

    @contextmanager
    def blocked(self) -> Iterator[None]:
        """Hold signals back while the command is forked, so none lands in between: no
        database wait may happen inside."""
        # The terminal's stops too: the watchdog, forked in between, must not run our handler.
        signal.pthread_sigmask(signal.SIG_BLOCK, (*FORWARDED, *SUSPENDING))
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, (*FORWARDED, *SUSPENDING))


@dataclass(eq=False)
class Supervision:
    """Wait for the command while watching the lock's local deadline and --max-runtime."""

    child: Child
    heartbeat: Heartbeat
    gate: SignalGate
    max_runtime: float | None
    kill_after: float
    on_lost: str
    started: float = field(default_factory=clock.now)
    lost: str | None = None
    timed_out: bool = False
    stopped: str | None = None
    # The watchdog was killed on its own while the command's tree ran: what is left of it
    # is stopped (nothing would stop it should pglock die next).
    unguarded: bool = False
    kill_at: float | None = None
    # Told the SIGKILL time when the lock is lost and the command gets its SIGTERM from
    # here (the watchdog then need not send one of its own).
    on_terminated: Callable[[float], None] | None = None

    def wait(self) -> int:
        """Block until the command exits; its return code."""
        selector = selectors.DefaultSelector()
        exit_fd = self.child.exit_fd()
        selector.register(exit_fd, selectors.EVENT_READ)
        selector.register(self.gate.wake_r, selectors.EVENT_READ)
        if self.on_lost == "kill":
            self.gate.resume_before = self.heartbeat.lost_at
        try:
            while (returncode := self.child.poll()) is None:
                self._pause(selector)
            if terminal.take_back(self.gate.terminal, self.child.pid) and \
                    -returncode in (signal.SIGINT, signal.SIGQUIT):
                self.gate.interrupted(-returncode)
            selector.unregister(exit_fd)
            # The lock is held until whatever the command left running has exited too.
            while self.child.lingering():
                self._guarded(clock.now())
                self._pause(selector, longest=LINGER_POLL)
        finally:
            selector.close()
            os.close(exit_fd)
            terminal.take_back(self.gate.terminal, self.child.pid)
        if self.lost or self.timed_out or self.stopped or self.unguarded:
            # The leader is gone; nothing else of the group may go on working unlocked.
            self.child.signal_family(signal.SIGKILL)
        return returncode

    def _pause(self, selector: selectors.BaseSelector, *, longest: float = 3600.0) -> None:
        """Act on what is due, then sleep until the next deadline, a signal or a wake-up."""
        if (stop := self.child.stopped()) is not None:
            self._command_stopped(stop)
        self._check(clock.now())
        for key, _ in selector.select(min(self._timeout(), longest)):
            if key.fd == self.gate.wake_r:
                os.read(self.gate.wake_r, 512)

    def _command_stopped(self, signum: int) -> None:
        """The command stopped: as a shell's job, pglock's group stops with it when it had
        the terminal (Ctrl-Z) or touched it from the background (SIGTTIN, SIGTTOU); but
        when pglock is the terminal's job (a `fg` while it ran in the background) the
        terminal is the command's to read, and it goes on."""
        fd = self.gate.terminal
        touched = signum in (signal.SIGTTIN, signal.SIGTTOU)
        if touched and terminal.give(fd, self.child.pid):
            self.child.signal_family(signal.SIGCONT)
        elif touched or terminal.foreground(fd) == self.child.pid:
            # Our own handler (SignalGate._suspend) stops the command's family and pglock.
            os.killpg(os.getpgrp(), signum if signum in SUSPENDING else signal.SIGTSTP)

    def _check(self, now: float) -> None:
        if self.lost is None and (self.heartbeat.lost_reason or now >= self.heartbeat.lost_at()):
            self.lost = self.heartbeat.lost_reason or "no renewal succeeded in time"
            if self.on_lost == "kill":
                # The SIGKILL is due a grace after the deadline, not after we noticed: a
                # host thawed past it (its lock may be another's by now) kills at once.
                due = self.heartbeat.lost_at() + self.heartbeat.grace
                self._stop(now, max(0.0, min(self.heartbeat.grace, due - now)))
                if self.on_terminated is not None and self.kill_at is not None:
                    self.on_terminated(self.kill_at)
        if self.stopped is None and self.heartbeat.stop_requested is not None:
            self.stopped = self.heartbeat.stop_requested
            self._stop(now, self.kill_after)
        if (self.max_runtime is not None and not self.timed_out
                and now >= self.started + self.max_runtime):
            self.timed_out = True
            self._stop(now, self.kill_after)
        if self.gate.stop_signal is not None and self.kill_at is None:
            self.kill_at = now + self.kill_after
        if self.kill_at is not None and now >= self.kill_at:
            # Again at every turn once due: a leftover process may have forked meanwhile.
            self.child.signal_family(signal.SIGKILL)
            self.kill_at = float("inf")

    def _guarded(self, now: float) -> None:
        """The watchdog killed on its own (`kill -9` of its pid): the command's own process
        died with it, and what it left, reparented to pglock, would run unguarded (a
        SIGKILL of pglock next would leave it to init): it is stopped, as a lost lock's."""
        if not self.unguarded and not self.child.watchdog.alive():
            self.unguarded = True
            self._stop(now, self.kill_after)

    def _stop(self, now: float, grace: float) -> None:
        if self.kill_at is None or self.kill_at == float("inf"):
            self.child.signal_family(signal.SIGTERM)
            self.kill_at = now + grace
        else:
            self.kill_at = min(self.kill_at, now + grace)

    def _timeout(self) -> float:
        deadlines = [self.heartbeat.lost_at()]
        if self.max_runtime is not None:
            deadlines.append(self.started + self.max_runtime)
        if self.kill_at is not None:
            deadlines.append(self.kill_at)
        return min(max(0.0, min(deadlines) - clock.now()), 3600.0)

    def result(self, returncode: int) -> tuple[RunResult, int]:
        """The recorded result and pglock's exit code."""
        status = exit_status(returncode)
        signum = -returncode if returncode < 0 else None
        duration = clock.now() - self.started
        if self.lost:
            return RunResult(Outcome.LOCK_LOST, status, duration, signum,
                             f"lock lost: {self.lost}"), ExitStatus.INTERNAL
        if self.stopped is not None:
            # As a command that SIGTERM ended; `stop` is the operator's, so never a retry.
            return RunResult(Outcome.STOPPED, status, duration, signum,
                             f"stopped by pglock stop: {self.stopped}"), 128 + signal.SIGTERM
        if self.timed_out:
            return RunResult(Outcome.TIMED_OUT, status, duration, signum,
                             "stopped by --max-runtime"), ExitStatus.TIMED_OUT
        if self.unguarded:
            return RunResult(Outcome.KILLED, status, duration, signum or signal.SIGKILL,
                             "its watchdog was killed: the command died with it, and what it "
                             "left running was stopped"), status
        if self.gate.stop_signal is not None or signum is not None:
            return RunResult(Outcome.KILLED, status, duration, signum or self.gate.stop_signal,
                             None), status
        outcome = Outcome.SUCCEEDED if status == 0 else Outcome.FAILED
        return RunResult(outcome, status, duration), status
