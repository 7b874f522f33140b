"""A second process that stops the command when the lock's deadline passes unrenewed.

pglock enforces the lock's local deadline in its own main thread; a pglock that is
stopped (SIGSTOP to its pid, a debugger) enforces nothing while its command, in a
process group of its own, goes on. The watchdog is forked before any thread starts,
learns each new deadline through a pipe, and SIGTERMs (then SIGKILLs) the command's
group when the deadline passes first. Once pglock has sent the SIGTERM itself (the lock
was lost while pglock was healthy), it says so, and the watchdog then only stands ready
to SIGKILL if pglock has not by the time it should have: a command that handles
SIGTERM never gets a second one. It ends when the pipe closes: pglock finished, or died
(and PR_SET_PDEATHSIG took the command along).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import time

from pglock.lock import clock
from pglock.run.child import death_with_parent, descendants, outside_group

_RECORD = struct.Struct("d")
_FIRED = 3


class Watchdog:
    """The watching process, seen from pglock."""

    def __init__(self, pgid: int, deadline: float, grace: float, *,
                 family: bool = False) -> None:
        read_end, self._write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover (the child never returns)
            os.close(self._write_end)
            _watch(read_end, pgid, deadline, grace, family)
        os.close(read_end)
        os.set_blocking(self._write_end, False)

    def extend(self, deadline: float) -> None:
        """A renewal succeeded: the new deadline (on the shared boot-time clock)."""
        # A full pipe means an unread deadline: a later one follows.
        with contextlib.suppress(OSError):
            os.write(self._write_end, _RECORD.pack(deadline))

    def terminated(self, kill_deadline: float) -> None:
        """pglock sent the SIGTERM itself: from now on only SIGKILL, at `kill_deadline`."""
        # A negative deadline is the message; the clock's times are all positive.
        with contextlib.suppress(OSError):
            os.write(self._write_end, _RECORD.pack(-kill_deadline))

    def stand_down(self) -> bool:
        """The command has ended: let the watchdog go; True if it had to stop the command."""
        os.close(self._write_end)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status) == _FIRED


def _watch(read_end: int, pgid: int, deadline: float, grace: float, family: bool) -> None:
    """The child: only os calls from here on, and never a return into pglock's code."""
    fired = False
    terminated = False
    try:
        # Hold nothing of pglock's: not cron's stdout (its mail would wait for us), not the
        # output pipes (their reader would wait for EOF), not the database sockets.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, read_end)
        os.closerange(read_end + 1, 65536)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                       signal.SIGUSR1, signal.SIGUSR2):
            # Signals meant for pglock (or its terminal's group) are forwarded by pglock.
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        _die_with_parent()
        while True:
            remaining = deadline - clock.now()
            if remaining <= 0:
                fired = True
                if terminated:
                    for signum in (signal.SIGCONT, signal.SIGKILL):
                        _signal(pgid, signum, family)
                else:
                    _stop(pgid, grace, family)
                break
            readable, _, _ = select.select([read_end], [], [], remaining)
            if readable:
                data = os.read(read_end, 4096)
                if not data:
                    break
                for (value,) in _RECORD.iter_unpack(data[:len(data) - len(data) % _RECORD.size]):
                    if value < 0:
                        terminated, deadline = True, -value
                    elif not terminated:
                        deadline = value
    finally:
        os._exit(_FIRED if fired else 0)


def _stop(pgid: int, grace: float, family: bool) -> None:
    for signum in (signal.SIGTERM, signal.SIGCONT):
        _signal(pgid, signum, family)
    time.sleep(grace)
    _signal(pgid, signal.SIGKILL, family)


def _signal(pgid: int, signum: int, family: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
    if family:
        # What the command left outside its group hangs below pglock (our parent).
        for pid in outside_group(descendants(os.getppid(), {os.getpid()}), pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def _die_with_parent() -> None:
    die_with_parent = death_with_parent()
    if die_with_parent is not None:
        die_with_parent()
