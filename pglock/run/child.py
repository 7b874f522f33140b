"""The command: executed directly in its own process group, tied to pglock's life.

On Linux the child asks for SIGKILL when the thread that forked it dies
(PR_SET_PDEATHSIG), so a SIGKILLed pglock cannot leave its command running unlocked.
That ties it to the *thread*, and preexec_fn is unsafe once threads run: spawn from
the main thread before the heartbeat thread starts.

A command may leave processes behind (a daemon started with setsid, a double fork):
pglock makes itself their "child subreaper" (PR_SET_CHILD_SUBREAPER), so they are
reparented to it rather than to init, and it can wait for them and stop them with the
command. Found through /proc, they are signalled by pid: they are in no group of ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from pglock.errors import ExitStatus, PglockError
from pglock.lock import clock
from pglock.settings.config import shown

# Signals an operator may send pglock; they go on to the command.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
# Of those, the ones that mean "stop": SIGKILL follows after --kill-after.
STOPPING = frozenset((signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT))
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class CannotStart(PglockError):
    """The command could not be executed (126) or was not found (127)."""

    def __init__(self, message: str, exit_status: ExitStatus) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class LateStart(PglockError):
    """The lock's local deadline passed before the command could be forked: it is not
    started, and the attempt is recorded lock_lost (125)."""


def death_with_parent() -> Callable[[], None] | None:
    """A call that has Linux SIGKILL the calling process when the thread that forked it
    dies (PR_SET_PDEATHSIG); None elsewhere. Resolved before a fork: ctypes is not
    loaded between fork and exec."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _child_setup(parent_pid: int) -> Callable[[], None]:
    """What runs in the child between fork and exec."""
    die_with_parent = death_with_parent()

    def setup() -> None:
        # The parent blocks forwarded signals around the fork; the command must not inherit that.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        if die_with_parent is not None:
            die_with_parent()
            # The parent may have died before prctl: then no signal would ever come.
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGKILL)

    return setup


def become_subreaper() -> bool:
    """Have orphans of our descendants reparented to us, not to init; False if impossible."""
    if sys.platform != "linux":
        return False
    import ctypes

    return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def children(pid: int) -> list[int]:
    """The direct children of `pid`, from /proc (every thread's list)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(root: int, spared: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """Every process below `root`, parents before children, leaving out `spared` subtrees."""
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children(pending.pop()):
            if child not in spared and child not in found:
                found.append(child)
                pending.append(child)
    return found


def outside_group(pids: list[int], pgid: int) -> list[int]:
    """The processes of `pids` that are not in process group `pgid` (nor gone)."""
    found = []
    for pid in pids:
        try:
            if os.getpgid(pid) != pgid:
                found.append(pid)
        except ProcessLookupError:
            continue
    return found


def _reap(pid: int) -> bool:
    """Collect `pid` if it is a child of ours that has exited; True if it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not os.path.exists(f"/proc/{pid}")
    return done == pid


class Child:
    """A running command, its process group, and (as subreaper) what it leaves behind."""

    def __init__(self, process: subprocess.Popen[bytes], *, reaping: bool = False) -> None:
        self.process = process
        self.pid = process.pid
        # Whether orphans of the command come to us; pids of our own helpers to leave alone.
        self.reaping = reaping
        self.spared: set[int] = set()

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str],
              outputs: tuple[int, int] | None = None, *, reap: bool = False,
              start_by: float = float("inf")) -> Child:
        """Start the command (output into `outputs`, else ours); CannotStart says why not.

        With `reap`, what the command leaves running stays ours to wait for and stop.
        Past `start_by` on the stopwatch, checked after every preparation and immediately
        before the fork, nothing is forked: LateStart.
        """
        stdout, stderr = outputs or (None, None)
        if not argv or not argv[0]:
            # execvp("") fails with EACCES on some systems: still a command not found.
            raise CannotStart("command not found: ''", ExitStatus.NOT_FOUND)
        reaping = reap and become_subreaper()
        setup = _child_setup(os.getpid())
        environment = dict(env)
        late = clock.now() - start_by
        if late >= 0:
            raise LateStart(f"not started: the lock's deadline to start the command passed "
                            f"{late:.1f}s before it could be forked (pglock was held up)")
        try:
            process = subprocess.Popen(list(argv), env=environment, process_group=0,
                                       stdout=stdout, stderr=stderr, preexec_fn=setup)
        except FileNotFoundError:
            raise CannotStart(f"command not found: {shown(argv[0])}",
                              ExitStatus.NOT_FOUND) from None
        except (PermissionError, IsADirectoryError, OSError) as error:
            reason = error.strerror or type(error).__name__
            raise CannotStart(f"cannot execute {shown(argv[0])}: {reason}",
                              ExitStatus.CANNOT_EXECUTE) from None
        return cls(process, reaping=reaping)

    def signal_group(self, signum: int, *, resume: bool = True) -> None:
        """Signal the whole group; a stopped process gets SIGCONT so it can die (as timeout(1))."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
            if resume and signum not in (signal.SIGKILL, signal.SIGCONT):
                os.killpg(self.pid, signal.SIGCONT)

    def lingering(self) -> list[int]:
        """The command's other processes: its descendants, and once it has exited, what it
        left running; those that exited are reaped. Empty unless reaping."""
        if not self.reaping:
            return []
        direct = set(children(os.getpid())) - {self.pid}
        return [pid for pid in descendants(os.getpid(), self.spared)
                if pid != self.pid and not (pid in direct and _reap(pid))]

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
        return self.process.poll()

    def exit_fd(self) -> int | None:
        """A descriptor that becomes readable when the command exits (Linux pidfd)."""
        try:
            return os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return None


def exit_status(returncode: int) -> int:
    """A shell's view of a return code: 128+N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
