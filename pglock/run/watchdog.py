"""The watchdog: the command's parent, which outlives pglock and stops the command's tree.

pglock forks the watchdog, and the watchdog forks the command. It is made so that
whatever happens to pglock, the command cannot run on unlocked:

- It is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the command leaves behind
  (a background subshell, a `setsid` daemon, a double fork) is reparented to it, not to
  init, so it knows the command's whole tree for as long as any of it runs.
- It does not die with pglock: it learns of pglock's death from its control pipe (the
  write end is pglock's alone, and the kernel closes it however pglock dies) and then
  SIGKILLs every process of the tree, again and again until none is left. No
  PR_SET_PDEATHSIG: a SIGKILL of pglock is exactly when it is needed.
- It lives in a process group of its own, so a terminal's stop (Ctrl-Z, SIGTTIN,
  SIGTTOU), `kill -STOP -- -PGID` or `kill -KILL -- -PGID` of pglock's group cannot
  reach it; it ignores the signals meant for pglock. With --on-lost kill it enforces the
  lock's local deadline on its own clock, so a pglock that is stopped (or stuck) cannot
  leave the command running past it: half a margin after pglock would, it SIGTERMs the
  command's tree, then SIGKILLs it. Once pglock has sent the SIGTERM itself (the lock was
  lost while pglock was healthy), it only stands ready to SIGKILL: a command that
  handles SIGTERM never gets a second one.

The command is asked to die with the watchdog (PR_SET_PDEATHSIG), and pglock stays a
subreaper too, so a watchdog killed on its own takes the command along and leaves
pglock its orphans, which pglock stops (supervise.Supervision._guarded). A watchdog
stopped on its own is continued by pglock at each renewal (Watchdog.resume). Only pglock
and its watchdog SIGKILLed together can leave orphans of the command to init
(docs/lease.md, "The command's process tree").

With --leave-descendants the watchdog is no subreaper: once the command's own process has
exited, what it left is on its own, and on pglock's death only that process is killed
(by PR_SET_PDEATHSIG, as the watchdog exits).

Messages to the watchdog are records of a kind and a stopwatch time (the shared boot-time
clock); from it, on a second pipe, the command's start (or why it could not start), its
stops and its wait status.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from pglock.lock import clock
from pglock.run.tree import FORWARDED, become_subreaper, child_setup, descendants, outside_group

_RECORD = struct.Struct("c7xd")
_REPORT = struct.Struct("ci")
_FIRED = 3
# How often the tree is looked at again while a SIGKILL is being made to stick.
_KILL_PACE = 0.02
# Signals a terminal or an operator sends pglock's group: never the watchdog's business.
_IGNORED = (*FORWARDED, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
_KEPT: list[subprocess.Popen[bytes]] = []


class Command(NamedTuple):
    """What the watchdog starts: the command, its environment, where its output goes
    (None: pglock's own), and pglock's process group when the command is to take the
    controlling terminal from it (run/terminal.py)."""

    argv: Sequence[str]
    env: Mapping[str, str]
    outputs: tuple[int, int] | None = None
    terminal_of: int | None = None


class Started:
    """What the watchdog said of the start: the command's pid, or why it did not start."""

    def __init__(self, kind: bytes, value: int, reason: str) -> None:
        # b"S": started (value is the pid); b"N": not found; b"E": cannot execute;
        # b"L": too late (reason is the lateness in seconds); b"I": failed otherwise.
        self.kind, self.value, self.reason = kind, value, reason


class Watchdog:
    """The watching process, seen from pglock."""

    def __init__(self, command: Command, reap: bool,
                 deadlines: tuple[float, float | None, float]) -> None:
        """Fork the watchdog, which forks the command unless past `start_by`, and watches
        it from then on until `watch_until` (extended by renewals), if not None."""
        control_r, self._control_w = os.pipe()
        report_r, report_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover (the child never returns)
            os.close(self._control_w)
            os.close(report_r)
            _watch(control_r, report_w, command, reap, deadlines)
        os.close(control_r)
        os.close(report_w)
        # The heartbeat thread writes here: it must never wait on a watchdog that is not
        # reading (a full pipe means unread deadlines; a later one follows).
        os.set_blocking(self._control_w, False)
        self.reports = report_r
        self._unread = b""
        # Held while the watchdog is signalled, and while it is reaped: a pid signalled is
        # always still ours (a reaped one may be another process's).
        self._reaping = threading.Lock()
        self._reaped = False
        self.ended: int | None = None
        # The signal that stopped the command, told and not yet taken (stopped()).
        self.stop: int | None = None
        # The watchdog closed its reports before telling the command's exit: it is gone.
        self.gone = False
        self.started = self._started()

    def _started(self) -> Started:
        kind, value = self._report(block=True) or (b"I", 0)
        reason = ""
        if kind != b"S" and value > 0:
            reason = self._exactly(value).decode(errors="replace")
        return Started(kind, value, reason)

    def _exactly(self, size: int) -> bytes:
        while len(self._unread) < size:
            data = os.read(self.reports, 4096)
            if not data:
                break
            self._unread += data
        taken, self._unread = self._unread[:size], self._unread[size:]
        return taken

    def _report(self, *, block: bool) -> tuple[bytes, int] | None:
        """The next report; None: none yet (or the watchdog is gone: see `gone`)."""
        if len(self._unread) < _REPORT.size:
            if not block and not select.select([self.reports], [], [], 0)[0]:
                return None
            data = self._exactly(_REPORT.size)
            if len(data) < _REPORT.size:
                self.gone = True
                return None
            self._unread = data + self._unread
        kind, value = _REPORT.unpack(self._unread[:_REPORT.size])
        self._unread = self._unread[_REPORT.size:]
        return kind, value

    def exit_status(self, *, block: bool = False) -> int | None:
        """The command's wait status once it has exited; a watchdog gone first counts as a
        SIGKILL (the command was asked to die with it)."""
        while self.ended is None and not self.gone:
            report = self._report(block=block)
            if report is None:  # none yet; blocking, only a gone watchdog gives none
                break
            if report[0] == b"X":
                self.ended = report[1]
            elif report[0] == b"P":
                self.stop = report[1]
        if self.ended is None and self.gone:
            self.ended = signal.SIGKILL
        return self.ended

    def stopped(self) -> int | None:
        """The signal that stopped the command since last asked (its report read by
        exit_status()); None: no stop."""
        signum, self.stop = self.stop, None
        return signum

    def _send(self, kind: bytes, value: float) -> None:
        # A full pipe means unread records: later ones follow; a gone watchdog hears nothing.
        with contextlib.suppress(OSError):
            os.write(self._control_w, _RECORD.pack(kind, value))

    def extend(self, deadline: float) -> None:
        """A renewal succeeded: the new deadline (on the shared boot-time clock)."""
        self._send(b"D", deadline)
        self.resume()

    def resume(self) -> None:
        """Continue the watchdog should it be stopped on its own (`kill -STOP` of its pid:
        no terminal's stop reaches its group). Stopped, it neither reaps the command nor
        tells its exit, and pglock would hold the lock for a command long gone; sent at
        each renewal, after the new deadline, which it then reads first."""
        with self._reaping:
            if not self._reaped:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGCONT)

    def alive(self) -> bool:
        """Whether the watchdog still runs (not killed on its own); it is not reaped."""
        with self._reaping:
            if self._reaped:
                return False
            try:
                return os.waitid(os.P_PID, self.pid,
                                 os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            except ChildProcessError:
                return False

    def terminated(self, kill_deadline: float) -> None:
        """pglock sent the SIGTERM itself: from now on only SIGKILL, at `kill_deadline`."""
        self._send(b"T", kill_deadline)

    def stand_down(self) -> bool:
        """The command and what it left have ended: let the watchdog go; True if it had to
        stop the command."""
        self._send(b"Z", 0.0)
        os.close(self._control_w)
        with self._reaping:
            self._reaped = True
        _, status = os.waitpid(self.pid, 0)
        os.close(self.reports)
        return os.waitstatus_to_exitcode(status) == _FIRED


def _tell(report: int, kind: bytes, value: int, text: str = "") -> None:
    data = text.encode(errors="replace")
    with contextlib.suppress(OSError):
        os.write(report, _REPORT.pack(kind, len(data) if text else value) + data)


def _start(report: int, command: Command, reap: bool, start_by: float) -> int:
    """Fork the command; its pid, or 0 once the reason it did not start has been told."""
    argv, env, outputs, terminal_of = command
    stdout, stderr = outputs or (None, None)
    try:
        os.setpgid(0, 0)
        if reap:
            become_subreaper()
    except Exception as error:
        _tell(report, b"I", 0, f"{type(error).__name__}: {error}")
        return 0
    late = clock.now() - start_by
    if late >= 0:
        _tell(report, b"L", 0, f"{late:.1f}")
        return 0
    try:
        process = subprocess.Popen(list(argv), env=dict(env), process_group=0, stdout=stdout,
                                   stderr=stderr,
                                   preexec_fn=child_setup(os.getpid(), terminal_of))
    except FileNotFoundError:
        _tell(report, b"N", 0, "-")
        return 0
    except OSError as error:  # PermissionError, IsADirectoryError, ENOEXEC...
        _tell(report, b"E", 0, error.strerror or type(error).__name__)
        return 0
    except Exception as error:
        _tell(report, b"I", 0, f"{type(error).__name__}: {error}")
        return 0
    _tell(report, b"S", process.pid)
    # Kept for good: a Popen collected as garbage reaps its process (waitpid) if it has
    # exited, and the exit status is then lost to us.
    _KEPT.append(process)
    return process.pid


def _watch(control: int, report: int, command: Command, reap: bool,
           deadlines: tuple[float, float | None, float]) -> None:
    """The child: only os calls from here on, and never a return into pglock's code."""
    code = 0
    try:
        # The command is forked first: it must inherit pglock's dispositions (reset by
        # exec), not the watchdog's ignored ones (kept by exec).
        start_by, watch_until, grace = deadlines
        pid = _start(report, command, reap, start_by)
        if pid:
            watch = _Watch(control, report, pid, reap)
            if watch_until is not None:
                watch.deadline, watch.grace = watch_until, grace
            code = watch.run()
    finally:
        os._exit(code)


class _Watch:
    """The watchdog's state: the command, the deadline, what pglock said."""

    def __init__(self, control: int, report: int, command: int, reap: bool) -> None:
        self.control, self.report, self.command, self.reap = control, report, command, reap
        self.deadline = float("inf")
        self.grace = 0.0
        self.kill_at = float("inf")
        self.fired = False
        self.waiting = True  # the command's exit not yet told
        self.pending = b""  # a record of pglock's read in part
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake = wake_r
        # Hold nothing of pglock's: not cron's stdout (its mail would wait for us), not the
        # output pipes (their reader would wait for EOF), not the database sockets.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        keep = sorted({control, report, wake_r, wake_w})
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 65536)
        for signum in _IGNORED:
            signal.signal(signum, signal.SIG_IGN)
        # A child's exit wakes the loop (through the wake-up pipe) to collect it.
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        signal.set_wakeup_fd(wake_w)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())

    def run(self) -> int:
        while True:
            self.collect()
            now = clock.now()
            if now >= self.deadline and select.select([self.control], [], [], 0)[0]:
                # Continued after a stop of our own (SIGSTOP of this pid, a thawed VM), with
                # pglock's renewals queued meanwhile: they come before a deadline they moved.
                ended = self.hear()
                if ended is not None:
                    return ended
                continue
            if now >= self.deadline:
                # The SIGKILL is due a grace after the deadline, not after we noticed: a
                # host thawed past it (its lock may be another's by now) kills at once, as
                # pglock itself does (supervise.py), should pglock still be stopped.
                due = self.deadline + self.grace
                self.deadline = float("inf")
                self.fired = True
                self.signal(signal.SIGTERM)
                self.signal(signal.SIGCONT)
                self.kill_at = min(self.kill_at, max(now, due))
            if now >= self.kill_at:
                # Again at every turn once due: a leftover process may have forked meanwhile.
                self.fired = True
                self.signal(signal.SIGKILL)
                self.kill_at = now + _KILL_PACE if self.tree() else float("inf")
            timeout = max(0.0, min(self.deadline, self.kill_at) - clock.now())
            readable, _, _ = select.select([self.control, self.wake], [], [],
                                           min(timeout, 3600.0))
            if self.wake in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake, 512)
            if self.control not in readable:
                continue
            ended = self.hear()
            if ended is not None:
                return ended

    def hear(self) -> int | None:
        """Read what pglock said; the exit code once it stood us down or is gone."""
        data = os.read(self.control, 4096)
        if not data:
            # pglock is gone without standing us down: nothing of the tree may go on.
            self.kill_tree()
            return _FIRED if self.fired else 0
        self.pending += data
        whole = len(self.pending) - len(self.pending) % _RECORD.size
        records, self.pending = self.pending[:whole], self.pending[whole:]
        for kind, value in _RECORD.iter_unpack(records):
            if kind == b"Z":
                return _FIRED if self.fired else 0
            self.told(kind, value)
        return None

    def told(self, kind: bytes, value: float) -> None:
        if kind == b"D" and self.kill_at == float("inf") and not self.fired:
            self.deadline = value
        elif kind == b"T":
            self.deadline = float("inf")
            self.kill_at = min(self.kill_at, value)

    def collect(self) -> None:
        """Reap every child that has exited; tell pglock of the command's exit, and of
        its stops (a terminal's Ctrl-Z reaches the command's group when it has the
        terminal: pglock stops with it, as a shell's job)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFSTOPPED(status):
                if pid == self.command and self.waiting:
                    _tell(self.report, b"P", os.WSTOPSIG(status))
                continue
            if pid == self.command and self.waiting:
                self.waiting = False
                _tell(self.report, b"X", status)

    def tree(self) -> list[int]:
        """The command and every process below us (only the command's own, unless reaping)."""
        if not self.reap:
            return [self.command] if self.waiting else []
        return descendants(os.getpid())

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.command, signum)
        if self.reap:
            for pid in outside_group(self.tree(), self.command):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    def kill_tree(self) -> None:
        """SIGKILL the tree until nothing of it is left: as subreaper, every process of it
        that loses its parent becomes our child, so no child left means no tree left."""
        if not self.reap:
            # The command's own process dies with us (PR_SET_PDEATHSIG).
            return
        while True:
            self.signal(signal.SIGKILL)
            self.collect()
            try:
                os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            select.select([self.wake], [], [], _KILL_PACE)
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake, 512)
