"""The heartbeat's reconnect cadence is the one docs/ttl.md's table assumes: one attempt
per RETRY_INTERVAL, not a backoff of its own (issue 38: a 2.0 s outage at ttl 10 s, which
the table says is ridden out, stopped the command when the backoff slept up to 2 s)."""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest

from pglock.db.database import Reconnecting
from pglock.lock import clock, heartbeat, lease
from pglock.run import keeping


class Refusing:
    """A listener that takes each connection and closes it at once, as a server that is
    starting up or going down does; it notes when each attempt came."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.attempts: list[float] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.attempts.append(time.monotonic())
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.slow
def test_a_lost_connection_is_retried_once_a_retry_interval() -> None:
    server = Refusing()
    lost = threading.Event()
    try:
        session = Reconnecting(f"host=127.0.0.1 port={server.port} dbname=x user=x",
                               application_name="pglock test", timeout=5)
        claim = lease.Claim(job="cadence", schema="pglock", ttl=10.0)
        beat = heartbeat.Heartbeat(keeping.renewer(session, claim),
                                   acquired_sent_at=clock.now() - 10 / 3, kill_after=10,
                                   on_lost=lost.set)
        beat.start()
        # The first renewal is due at once; then a retry every RETRY_INTERVAL until the
        # deadline (6.5 s after the acquisition here, so 3.2 s from now).
        time.sleep(3.0)
        beat.stop()
    finally:
        server.close()
    attempts = server.attempts
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert len(attempts) >= 3, attempts
    # One attempt per renewal: a backoff inside the connect would try again within
    # 0.1 s, then wait up to 2 s, and a renewal could land after the SIGTERM.
    assert min(gaps) >= heartbeat.RETRY_INTERVAL * 0.9, gaps
    # Each retry comes a RETRY_INTERVAL after the last failed (the margin is for load).
    assert max(gaps) <= heartbeat.RETRY_INTERVAL + 0.5, gaps
