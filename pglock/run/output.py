"""The command's output: passed through as it comes with its tail kept for history, or
held back and printed only when the command failed (as chronic does).

The command writes into two pipes, so its stdout still reaches pglock's stdout and its
stderr pglock's stderr. A thread pumps them: a reader of pglock's output that stalls
blocks that thread only, never the loop that must stop the command when the lock is lost.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import struct
import threading
from typing import IO

from pglock.errors import UsageError
from pglock.settings.durations import OUTPUT_TAIL

log = logging.getLogger(__name__)

DEFAULT_TAIL = 4096
# The tail goes into a history row; more than this belongs in a log, not in `runs`.
MAX_TAIL = int(OUTPUT_TAIL.high)
# Held-back output beyond this goes to a temporary file: the wrapper stays under 40 MB.
SPOOL = 1024**2
# After the command exits, how long to wait for helpers it left holding the pipes.
DRAIN = 2.0
_CHUNK = 65536
_RECORD = struct.Struct(">BI")



def check_tail_size(size: int) -> int:
    """Refuse a tail that does not fit a history row."""
    if size > MAX_TAIL:
        raise UsageError(f"--output-tail: at most {MAX_TAIL // 1024**2}MiB is kept in history")
    return size


def should_capture(tail_size: int, hold_back: bool) -> bool:
    """Hold-back always captures; a tail only when neither stdout nor stderr is a terminal."""
    if hold_back:
        return True
    return tail_size > 0 and not (os.isatty(1) or os.isatty(2))


class Tail:
    """The last `size` bytes seen, in arrival order, in a ring that never reallocates."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring = bytearray(size)
        self.end = 0
        self.wrapped = False

    def add(self, chunk: bytes) -> None:
        data = memoryview(chunk)[-self.size:]
        first = min(len(data), self.size - self.end)
        self.ring[self.end:self.end + first] = data[:first]
        rest = len(data) - first
        self.ring[:rest] = data[first:]
        self.wrapped = self.wrapped or self.end + len(data) >= self.size
        self.end = (self.end + len(data)) % self.size

    def value(self) -> bytes:
        if not self.wrapped:
            return bytes(self.ring[:self.end])
        return bytes(self.ring[self.end:]) + bytes(self.ring[:self.end])


class HeldBack:
    """Everything the command wrote, with the stream of each chunk, in order: in memory up
    to SPOOL, then in a temporary file. When that file cannot be written (a full TMPDIR),
    add() raises OSError and what was held is still whole (replay)."""

    def __init__(self) -> None:
        self.memory = bytearray()
        self.file: IO[bytes] | None = None
        # The bytes of whole records in the file: a failed write leaves none half there.
        self.spilled = 0

    def add(self, fd: int, chunk: bytes) -> None:
        record = _RECORD.pack(fd, len(chunk)) + chunk
        if self.file is None and len(self.memory) + len(record) <= SPOOL:
            self.memory += record
            return
        if self.file is None:
            import tempfile  # only chronic-style runs with much output need it

            self.file = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115
        fd_out = self.file.fileno()
        os.lseek(fd_out, self.spilled, os.SEEK_SET)
        view = memoryview(record)
        while view:
            view = view[os.write(fd_out, view):]
        self.spilled += len(record)

    def replay(self) -> None:
        """Write it all out, each chunk to the stream it came from."""
        _replay(bytes(self.memory))
        if self.file is None:
            return
        # Record by record: a spilled output is never read whole into memory.
        self.file.seek(0)
        left = self.spilled
        while left >= _RECORD.size:
            fd, length = _RECORD.unpack(self.file.read(_RECORD.size))
            left -= _RECORD.size + length
            while length:
                piece = self.file.read(min(length, _CHUNK))
                if not piece:
                    return
                write_all(fd, piece)
                length -= len(piece)

    def close(self) -> None:
        self.memory = bytearray()
        if self.file is not None:
            self.file.close()
            self.file = None


def _replay(records: bytes) -> None:
    view = memoryview(records)
    while len(view) >= _RECORD.size:
        fd, length = _RECORD.unpack(view[:_RECORD.size])
        write_all(fd, view[_RECORD.size:_RECORD.size + length].tobytes())
        view = view[_RECORD.size + length:]


def write_all(fd: int, data: bytes) -> bool:
    """Write every byte; False when the reader went away (or the stream was closed)."""
    return _written(fd, data) is None


def _written(fd: int, data: bytes) -> int | None:
    """Write every byte; None, or the errno of the write that failed."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
        except OSError as error:
            return error.errno
    return None


class Capture:
    """Pipes for the command's stdout and stderr, and the thread that empties them."""

    def __init__(self, tail_size: int, hold_back: bool) -> None:
        self.tail = Tail(tail_size) if tail_size > 0 else None
        self.held = HeldBack() if hold_back else None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        out_r, self.out_w = os.pipe()
        err_r, self.err_w = os.pipe()
        self._readers = {out_r: 1, err_r: 2}
        # pglock's streams that cannot be written (closed, `>&-`; a full disk): what the
        # command writes there is kept in the tail and dropped.
        self._dropped: set[int] = set()
        self._thread = threading.Thread(target=self._pump, name="pglock-output", daemon=True)

    def child_fds(self) -> tuple[int, int]:
        """The command's stdout and stderr."""
        return self.out_w, self.err_w

    def start(self) -> None:
        """Begin pumping, once the command holds its own copies of the write ends."""
        self._close_writers()
        self._thread.start()

    def finish(self) -> bytes | None:
        """Wait for the pipes to close (a bounded while); the tail."""
        self._close_writers()
        if self._thread.is_alive():
            self._thread.join(DRAIN)
            self._stop.set()
            self._thread.join(0.5)
        with self._lock:
            return self.tail.value() if self.tail is not None else None

    def release(self, failed: bool) -> None:
        """Print held-back output if the command failed; drop it otherwise."""
        if self.held is None:
            return
        with self._lock:
            if failed:
                self.held.replay()
            self.held.close()

    def abandon(self) -> None:
        """The command never started: close everything."""
        self._close_writers()
        for fd in self._readers:
            os.close(fd)
        if self.held is not None:
            self.held.close()

    def _close_writers(self) -> None:
        for fd in (self.out_w, self.err_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.out_w = self.err_w = -1

    def _pump(self) -> None:
        selector = selectors.DefaultSelector()
        for fd, target in self._readers.items():
            selector.register(fd, selectors.EVENT_READ, target)
        try:
            while selector.get_map() and not self._stop.is_set():
                for key, _ in selector.select(0.1):
                    chunk = os.read(key.fd, _CHUNK)
                    if not chunk or not self._take(key.data, chunk):
                        # EOF, or our reader went away (EPIPE): the command's next write
                        # gets SIGPIPE, as it would have without pglock in between.
                        selector.unregister(key.fd)
                        os.close(key.fd)
        finally:
            for key in list(selector.get_map().values()):
                os.close(key.fd)
            selector.close()

    def _take(self, target: int, chunk: bytes) -> bool:
        with self._lock:
            if self.tail is not None:
                self.tail.add(chunk)
            if self.held is not None:
                try:
                    self.held.add(target, chunk)
                    return True
                except OSError as error:
                    self._pass_through(error)
        if target in self._dropped:
            return True
        failed = _written(target, chunk)
        if failed is not None and failed != errno.EPIPE:
            # Not a reader that left: a stream that was never open (pglock started with
            # `>&-`) or a full disk. Without pglock the command's writes would fail and it
            # would go on; killing it by SIGPIPE would be pglock's doing.
            self._dropped.add(target)
        return failed != errno.EPIPE

    def _pass_through(self, error: OSError) -> None:
        """Holding back failed (a full TMPDIR): what was held goes out now, the rest as it
        comes; said once. The command runs on."""
        assert self.held is not None
        log.warning("--output-on-failure: the output cannot be held back (%s in the "
                    "temporary directory); it is passed through", error.strerror or error)
        held, self.held = self.held, None
        held.replay()
        held.close()
