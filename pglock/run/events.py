"""The event log: one JSON object per line for each thing a run did, skips included.

A file target is opened with O_APPEND and each line goes out in one write(2), so the
kernel places every line whole at the end: many pglock processes can share one file.
`syslog` sends each event as one datagram to the local syslog socket (journald's
/dev/log), `syslog:/path` to another socket (a test's, a container's bind mount).

Nothing is ever printed: a target that cannot be written is said with -v only, except
a target that cannot be opened at all, which is said once on stderr (a misconfigured
log would otherwise go unnoticed for good).
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

SYSLOG_SOCKET = "/dev/log"
# How long one event may wait for a receiver that is not reading (a full syslog socket, a
# FIFO whose reader stalled): past it, the run's further events are dropped, said once.
# An event is written between the acquire and the command's fork, where a stall would
# eat the lock's time (docs/lease.md, "Never outside the lock").
EVENT_WAIT = 0.5
# Facility user (1); severities info (6) and warning (4).
_INFO, _WARNING = 1 * 8 + 6, 1 * 8 + 4


def check_target(target: str) -> str:
    """An event log target as given: a path, `syslog` or `syslog:/path/to/socket`."""
    from pglock.errors import UsageError

    if not target.strip():
        # A blank target would be a file named by its spaces, in whatever the cwd is.
        raise UsageError("--event-log: give a file path, 'syslog' or 'syslog:/path/to/socket'")
    if target.startswith("syslog:") and not target.removeprefix("syslog:"):
        raise UsageError("--event-log: 'syslog:' needs a socket path after the colon")
    return target


class EventLog:
    """Where events go, and the fields every event of this process carries."""

    def __init__(self, target: str, **context: Any) -> None:
        self.target = target
        self.context = {"host": socket.gethostname(), "pid": os.getpid(), **context}
        self.fd: int | None = None
        self.sock: socket.socket | None = None
        self.socket_path: str | None = None
        # Set when the receiver stopped taking events: the rest are dropped.
        self.stuck = False
        # Set once a write failed and that was said (a full disk is said once, not per event).
        self.failed = False
        # Pings report from threads of their own.
        self.lock = threading.Lock()
        try:
            if target == "syslog" or target.startswith("syslog:"):
                self.socket_path = target.removeprefix("syslog").removeprefix(":") or SYSLOG_SOCKET
                self.sock = self._connect()
            else:
                # Non-blocking: a FIFO with no reader fails to open (ENXIO) instead of
                # waiting for one, and a full one refuses a write instead of blocking.
                self.fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                                  | os.O_NONBLOCK, 0o644)
        except OSError as error:
            log.warning("--event-log %s cannot be opened (%s); events are not logged",
                        target, error.strerror or error)
            self.close()

    def emit(self, event: str, *, warning: bool = False, **fields: Any) -> None:
        """Write one event (to syslog as a warning if something went wrong); a failure to
        write is said with -v and otherwise ignored. Fields that are None are left out."""
        if self.stuck:
            return
        try:
            record = {"ts": datetime.now(UTC).isoformat(timespec="microseconds"),
                      "event": event, **self.context, **fields}
            record = {k: v for k, v in record.items() if v is not None}
            # Text that came from bytes not UTF-8 (a command's path) is written escaped.
            line = json.dumps(record, default=_plain, ensure_ascii=False,
                              separators=(",", ":")).encode("utf-8", "backslashreplace")
            if self.fd is not None:
                self._write(line + b"\n")
            elif self.sock is not None:
                with self.lock:
                    self._send(line, warning)
        except (BlockingIOError, TimeoutError):
            self.stuck = True
            log.warning("--event-log %s takes no events (waited %gs); the rest of this run's "
                        "events are not logged", self.target, EVENT_WAIT)
        except OSError as error:  # a full disk, an I/O error: said once, as an unopenable log
            if self.failed:
                log.info("--event-log %s: %s event not written: %s", self.target, event, error)
            else:
                self.failed = True
                log.warning("--event-log %s: an event could not be written (%s); events of this "
                            "run may be missing", self.target, error.strerror or error)
        except Exception as error:  # an event log never stops a run
            log.info("--event-log %s: %s event not written: %s", self.target, event, error)

    def _write(self, data: bytes) -> None:
        """Append one line, waiting up to EVENT_WAIT for a full FIFO to take it."""
        assert self.fd is not None
        fd = self.fd
        deadline = time.monotonic() + EVENT_WAIT
        while True:
            try:
                written = os.write(fd, data)
                break
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                select.select([], [fd], [], remaining)
        if written != len(data):
            raise OSError(f"short write ({written} of {len(data)} bytes)")

    def _connect(self) -> socket.socket:
        assert self.socket_path is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.settimeout(EVENT_WAIT)
        sock.connect(self.socket_path)
        return sock

    def _send(self, line: bytes, warning: bool) -> None:
        assert self.sock is not None
        priority = _WARNING if warning else _INFO
        stamp = time.strftime("%b %e %H:%M:%S")
        message = f"<{priority}>{stamp} pglock[{os.getpid()}]: ".encode() + line
        try:
            self.sock.send(message)
        except (BlockingIOError, TimeoutError):
            raise
        except OSError:
            # syslog or journald restarted: the old socket is gone, a new one is bound.
            self.sock.close()
            self.sock = self._connect()
            self.sock.send(message)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None



def _plain(value: Any) -> str:
    """JSON for what json cannot write: datetimes in ISO 8601, as everywhere in pglock."""
    return value.isoformat() if isinstance(value, datetime) else str(value)
