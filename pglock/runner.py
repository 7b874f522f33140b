"""The command: executed directly in its own process group, tied to pglock's life.

On Linux the child asks for SIGKILL when the thread that forked it dies
(PR_SET_PDEATHSIG), so a SIGKILLed pglock cannot leave its command running unlocked.
That ties it to the *thread*, and preexec_fn is unsafe once threads run: spawn from
the main thread before the heartbeat thread starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from pglock.errors import ExitStatus, PglockError

# Signals an operator may send pglock; they go on to the command.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
# Of those, the ones that mean "stop": SIGKILL follows after --kill-after.
STOPPING = frozenset((signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT))
_PR_SET_PDEATHSIG = 1


class CannotStart(PglockError):
    """The command could not be executed (126) or was not found (127)."""

    def __init__(self, message: str, exit_status: ExitStatus) -> None:
        super().__init__(message)
        self.exit_status = exit_status


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


class Child:
    """A running command and its process group."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str],
              outputs: tuple[int, int] | None = None) -> Child:
        """Start the command (output into `outputs`, else ours); CannotStart says why not."""
        stdout, stderr = outputs or (None, None)
        try:
            process = subprocess.Popen(list(argv), env=dict(env), process_group=0,
                                       stdout=stdout, stderr=stderr,
                                       preexec_fn=_child_setup(os.getpid()))
        except FileNotFoundError:
            raise CannotStart(f"command not found: {argv[0]}", ExitStatus.NOT_FOUND) from None
        except (PermissionError, IsADirectoryError, OSError) as error:
            reason = error.strerror or str(error)
            raise CannotStart(f"cannot execute {argv[0]}: {reason}",
                              ExitStatus.CANNOT_EXECUTE) from None
        return cls(process)

    def signal_group(self, signum: int, *, resume: bool = True) -> None:
        """Signal the whole group; a stopped process gets SIGCONT so it can die (as timeout(1))."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
            if resume and signum not in (signal.SIGKILL, signal.SIGCONT):
                os.killpg(self.pid, signal.SIGCONT)

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
