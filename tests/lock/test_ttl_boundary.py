"""docs/ttl.md's "an outage or failover shorter than this stops no running command",
at its boundary: an outage that refuses connections, starting just before a renewal is
due and ending a little before the table's figure, is ridden out (issue 38: at ttl 10 s
a 2.0 s outage, which the table says is ridden out, stopped the command in 2 of 6 tries,
when the heartbeat's reconnects backed off up to 2 s)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
from conftest import Env
from psycopg import conninfo as libpq_conninfo

from pglock.lock import heartbeat

pytestmark = pytest.mark.slow

TTL = 10.0
# The table's figure at ttl 10 s less a margin for a loaded machine (the renewal must be
# answered, not only sent, before the deadline).
OUTAGE = heartbeat.rides_out(TTL, 10.0) - 0.6


class Outage:
    """A TCP front for the test server's Unix socket that can refuse every connection at
    once, as a server that restarts does (its open connections closed, new ones refused)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.socket_path)
            with self.lock:
                self.open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        _close(source, sink)

    def cut(self) -> None:
        self.down.set()
        with self.lock:
            ends, self.open = self.open, []
        _close(*ends)

    def restore(self) -> None:
        self.down.clear()

    def close(self) -> None:
        self.cut()
        self.listener.close()


def _close(*ends: socket.socket) -> None:
    for end in ends:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


def test_an_outage_just_shorter_than_the_table_says_is_ridden_out(env: Env) -> None:
    fields = libpq_conninfo.conninfo_to_dict(env.dsn)
    if not str(fields.get("host", "")).startswith("/"):
        pytest.skip("needs the embedded test server's Unix socket")
    outage = Outage(f"{fields['host']}/.s.PGSQL.{fields.get('port', 5432)}")
    marks = env.tmp / "term"
    assert env.run("init", "-q").returncode == 0
    try:
        proxied = libpq_conninfo.make_conninfo(env.dsn, host="127.0.0.1", port=str(outage.port))
        holder = env.popen("run", "--dsn", proxied, "--job", "boundary", "--ttl", f"{TTL:g}s",
                           "--", "sh", "-c", f"trap 'echo TERM >> {marks}; exit 1' TERM; "
                           "sleep 13 & wait")

        def renewed_at() -> object:
            rows = env.query("SELECT renewed_at FROM {schema}.locks WHERE job = 'boundary'")
            return rows[0][0] if rows else None

        env.wait_for(renewed_at, what="the acquisition")
        acquired = renewed_at()
        # The first renewal (ttl/3 after the acquisition), seen here within a poll.
        env.wait_for(lambda: renewed_at() != acquired, timeout=10, what="a renewal")
        seen = time.monotonic()
        # The next renewal is due ttl/3 after that one was sent: cut just before.
        time.sleep(max(0.0, seen + TTL / 3 - 0.25 - time.monotonic()))
        before = renewed_at()
        outage.cut()
        time.sleep(OUTAGE)
        outage.restore()
        _, stderr = holder.communicate(timeout=40)
    finally:
        outage.close()
    assert (holder.returncode, stderr) == (0, ""), stderr
    assert not marks.exists(), "the command got SIGTERM"
    # Renewed after the outage, by the heartbeat's retries.
    assert env.query("SELECT renewed_at > %s FROM {schema}.locks WHERE job = 'boundary'",
                     (before,)) == [(True,)]
