"""The controlling terminal, handed to the command as a job-control shell hands it to its
foreground job (docs/lease.md, "The command's process tree").

The command has a process group of its own (child.py), and only the terminal's foreground
group may read the terminal: a command run by hand that asks for a line (a prompt, a
password) would be stopped at its first read (SIGTTIN) while pglock held the lock for it.
So when pglock is the terminal's foreground job, the command's group is made the
foreground group before the command execs (tree.child_setup), and pglock takes the
terminal back once the command has exited, or is stopped: the terminal's Ctrl-Z, Ctrl-C
and Ctrl-\\ then reach the command's group, not pglock's, and supervise.py acts on what
they did to it as a shell does (its job stopped, or ended by SIGINT).

Giving the terminal away from the background would stop pglock with SIGTTOU: each
tcsetpgrp here is made with SIGTTOU blocked, as shells do.
"""

from __future__ import annotations

import contextlib
import os
import signal


def controlling() -> int | None:
    """A descriptor of the controlling terminal; None without one (cron, a daemon)."""
    try:
        return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None


def foreground(terminal: int | None) -> int | None:
    """The terminal's foreground process group; None: no terminal, or none known."""
    if terminal is None:
        return None
    try:
        return os.tcgetpgrp(terminal)
    except OSError:
        return None


def ours() -> int | None:
    """Our process group when it is the controlling terminal's foreground group (we are
    the terminal's job, to hand it on); else None."""
    terminal = controlling()
    if terminal is None:
        return None
    try:
        group = os.getpgrp()
        return group if foreground(terminal) == group else None
    finally:
        os.close(terminal)


def hand(terminal: int | None, group: int) -> bool:
    """Make `group` the terminal's foreground group; False if it could not be."""
    if terminal is None:
        return False
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTTOU,))
    try:
        os.tcsetpgrp(terminal, group)
    except OSError:
        return False
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return True


def take_back(terminal: int | None, command: int) -> bool:
    """The terminal back to our group if the command's group has it; True if it had."""
    if terminal is None or foreground(terminal) != command:
        return False
    hand(terminal, os.getpgrp())
    return True


def give(terminal: int | None, command: int) -> bool:
    """The terminal to the command's group if our group has it (we are, or are again,
    the terminal's job: `fg`); True if given."""
    if terminal is None or foreground(terminal) != os.getpgrp():
        return False
    return hand(terminal, command)


def take_in_child(group: int) -> None:
    """Between fork and exec, in the command's process (its group made already): the
    terminal to its group, if `group` (pglock's) still has it. Signals are blocked there
    (SIGTTOU too): no stop, whatever the order."""
    with contextlib.suppress(OSError):
        terminal = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        try:
            if os.tcgetpgrp(terminal) == group:
                os.tcsetpgrp(terminal, os.getpgrp())
        finally:
            os.close(terminal)
