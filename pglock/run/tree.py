"""The command's process tree, as Linux shows it: signals meant for it, the calls made
between fork and exec, and its processes found through /proc.

Processes the command leaves behind (a daemon started with setsid, a double fork) are in
no group of ours: they are found as descendants (a child subreaper, PR_SET_CHILD_SUBREAPER,
has them reparented to itself rather than to init) and signalled by pid.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from pglock.run import terminal

# Signals an operator may send pglock; they go on to the command.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
# Of those, the ones that mean "stop": SIGKILL follows after --kill-after.
STOPPING = frozenset((signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT))
# What a terminal sends to stop its foreground job (Ctrl-Z; reading or writing it from the
# background): pglock stops the command with itself (supervise.SignalGate).
SUSPENDING = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def death_with_parent() -> Callable[[], None] | None:
    """A call that has Linux SIGKILL the calling process when the thread that forked it
    dies (PR_SET_PDEATHSIG); None elsewhere. Resolved before a fork: ctypes is not
    loaded between fork and exec."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def child_setup(parent_pid: int, terminal_of: int | None = None) -> Callable[[], None]:
    """What runs in the command's process between fork and exec: it dies with the
    process that forked it (the watchdog), and takes the controlling terminal from
    pglock's group `terminal_of` (pglock is the terminal's job: run/terminal.py)."""
    die_with_parent = death_with_parent()

    def setup() -> None:
        if terminal_of is not None:
            # While signals are still blocked: SIGTTOU would stop us otherwise.
            terminal.take_in_child(terminal_of)
        # pglock blocks its signals around the fork; the command must not inherit that.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (*FORWARDED, *SUSPENDING))
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


def descendants(root: int) -> list[int]:
    """Every process below `root`, parents before children."""
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children(pending.pop()):
            if child not in found:
                found.append(child)
                pending.append(child)
    return found


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped now (its state in /proc: T, or t under a
    debugger); a process that is gone is not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return bool(fields) and fields[0] in (b"T", b"t")


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
