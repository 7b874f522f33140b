"""The command: its own process group, forked by the watchdog, tied to pglock's life.

pglock forks the watchdog (run/watchdog.py) and the watchdog forks the command: the
command's whole tree hangs below a process that outlives pglock, so that whatever kills
pglock (SIGKILL, the OOM killer) kills the tree too, and that a stop of pglock's process
group (a terminal's Ctrl-Z) cannot stop the one that enforces the lock's deadline. The
command's exit status comes from the watchdog, which reaps it.

pglock stays a child subreaper too (PR_SET_CHILD_SUBREAPER): a watchdog killed on its own
takes the command's own process along (PR_SET_PDEATHSIG) and leaves pglock the rest.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pglock.errors import ExitStatus, PglockError
from pglock.lock import clock
from pglock.run.tree import become_subreaper, children, descendants, is_stopped, outside_group
from pglock.settings.config import shown

# A host that loses the race needs Child for its signal gate's types only: the watchdog
# is imported by the spawn.
if TYPE_CHECKING:
    from pglock.run.watchdog import Watchdog


@dataclass(frozen=True)
class Deadlines:
    """When the command may be forked at the latest (on the stopwatch), and, with
    --on-lost kill, the watchdog's first deadline and the grace between its SIGTERM and
    its SIGKILL: armed from the fork on, so that no moment of the command's life is
    unwatched (renewals extend it)."""

    start_by: float = float("inf")
    watch_until: float | None = None
    grace: float = 0.0


class CannotStart(PglockError):
    """The command could not be executed (126) or was not found (127)."""

    def __init__(self, message: str, exit_status: ExitStatus) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class LateStart(PglockError):
    """The lock was lost before the command could be forked (its local deadline passed,
    or a renewal found it another's): it is not started, and the attempt is recorded
    lock_lost (125)."""


def _late(lateness: str) -> LateStart:
    return LateStart(f"not started: the lock's deadline to start the command passed "
                     f"{lateness}s before it could be forked (pglock was held up)")


def _reap(pid: int) -> bool:
    """Collect `pid` if it is a child of ours that has exited; True if it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not os.path.exists(f"/proc/{pid}")
    return done == pid


class Child:
    """A running command, its process group, and (when reaping) what it leaves behind."""

    def __init__(self, watchdog: Watchdog, *, reaping: bool = False) -> None:
        self.watchdog = watchdog
        self.pid = watchdog.started.value
        # Whether what the command leaves running is the job's, to wait for and stop.
        self.reaping = reaping

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str],
              outputs: tuple[int, int] | None = None, *, reap: bool = False,
              deadlines: Deadlines = Deadlines()) -> Child:
        """Start the command (output into `outputs`, else ours); CannotStart says why not.

        With `reap`, what the command leaves running stays the job's to wait for and stop,
        and is killed if pglock dies. Past `start_by` on the stopwatch, checked after every
        preparation and immediately before the fork, nothing is forked: LateStart.
        """
        from pglock.run import terminal
        from pglock.run.watchdog import Command, Watchdog

        if not argv or not argv[0]:
            # execvp("") fails with EACCES on some systems: still a command not found.
            raise CannotStart("command not found: ''", ExitStatus.NOT_FOUND)
        # Our own: for orphans of a watchdog that was killed on its own.
        reaping = reap and become_subreaper()
        late = clock.now() - deadlines.start_by
        if late >= 0:
            raise _late(f"{late:.1f}")
        # A shell's foreground job hands the terminal on to its command (run/terminal.py).
        watchdog = Watchdog(Command(argv, env, outputs, terminal.ours()), reaping,
                            (deadlines.start_by, deadlines.watch_until, deadlines.grace))
        started = watchdog.started
        if started.kind == b"S":
            return cls(watchdog, reaping=reaping)
        watchdog.stand_down()
        if started.kind == b"L":
            raise _late(started.reason)
        if started.kind == b"N":
            raise CannotStart(f"command not found: {shown(argv[0])}", ExitStatus.NOT_FOUND)
        if started.kind == b"E":
            raise CannotStart(f"cannot execute {shown(argv[0])}: {started.reason}",
                              ExitStatus.CANNOT_EXECUTE)
        raise CannotStart(f"not started: pglock failed before the fork "
                          f"({shown(started.reason or 'the watchdog did not start')})",
                          ExitStatus.INTERNAL)

    def signal_group(self, signum: int, *, resume: bool = True) -> None:
        """Signal the whole group; a stopped process gets SIGCONT so it can die (as timeout(1))."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
            if resume and signum not in (signal.SIGKILL, signal.SIGCONT):
                os.killpg(self.pid, signal.SIGCONT)

    def lingering(self) -> list[int]:
        """The command's other processes: its descendants, and once it has exited, what it
        left running (below the watchdog, or below us if the watchdog was killed); those
        that exited are reaped. Empty unless reaping."""
        if not self.reaping:
            return []
        keeper = self.watchdog.pid
        direct = set(children(os.getpid())) - {keeper}
        return [pid for pid in descendants(os.getpid())
                if pid not in (keeper, self.pid) and not (pid in direct and _reap(pid))]

    def signal_family(self, signum: int, *, resume: bool = True) -> None:
        """Signal the group and every process the command left outside it."""
        self.signal_group(signum, resume=resume)
        # Only those outside the group: one inside got the group's signal already, and a
        # process the command forks as it handles that signal (a trap's `date`) must not
        # be killed by a second one before it has done its work.
        for pid in outside_group(self.lingering(), self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
                if resume and signum not in (signal.SIGKILL, signal.SIGCONT):
                    os.kill(pid, signal.SIGCONT)

    def signal_leader(self, signum: int) -> None:
        """Signal the command's own process only."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signum)

    def poll(self) -> int | None:
        """The return code once the command has exited (-N for signal N)."""
        status = self.watchdog.exit_status()
        return None if status is None else _returncode(status)

    def stopped(self) -> int | None:
        """The signal that stopped the command since last asked (seen by poll()), if it
        is stopped still; None: none. A stop that is over is no news: pglock's own
        (SignalGate._suspend stops the command with itself, and continues it)."""
        signum = self.watchdog.stopped()
        return signum if signum is not None and is_stopped(self.pid) else None

    def signal_outside(self, signum: int) -> None:
        """Signal what the command left outside its group (its group had the signal)."""
        for pid in outside_group(self.lingering(), self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def wait(self) -> int:
        """Block until the command has exited; its return code."""
        status = self.watchdog.exit_status(block=True)
        assert status is not None
        return _returncode(status)

    def exit_fd(self) -> int:
        """A descriptor that becomes readable when the command exits (the watchdog's
        reports); the caller closes it."""
        return os.dup(self.watchdog.reports)

    def stand_down(self) -> bool:
        """The job's processes have ended: let the watchdog go; True if it had to stop the
        command (pglock was stopped or stuck past the lock's deadline)."""
        return self.watchdog.stand_down()


def _returncode(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return -signal.SIGKILL


def exit_status(returncode: int) -> int:
    """A shell's view of a return code: 128+N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
