"""The advisory lock-delay (docs/advisory.md, "The lock-delay"): whatever ends an
advisory holder's session while the holder lives, a contender that gets the session lock
takes the row over only once the holder has stopped its command (the row's stops_by),
so two commands never run at once. The holder's command ignores SIGTERM, as many jobs
do: only the SIGKILL at its local deadline ends it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path

import psycopg
import pytest
from conftest import Env
from marks import marking_command
from psycopg.conninfo import conninfo_to_dict, make_conninfo

pytestmark = pytest.mark.slow

# Ticks every 0.1 s with its token, ignoring SIGTERM (the sleeps inherit that), for at
# most `seconds`: its last tick is the last moment it was alive.
TICKING = ('trap "" TERM; end=$(( $(date +%s) + {seconds} )); '
           'while [ "$(date +%s)" -lt "$end" ]; do '
           'echo "tick $PGLOCK_FENCING_TOKEN $(date +%s%N)" >> {marks}; sleep 0.1; done')


class Relay:
    """A TCP relay to the server's Unix socket that can be cut: every connection through
    it aborted on both sides at once (an RST to the client, the server's end closed), and
    no new one accepted, as a restarting HAProxy or pooler sidecar does."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.target)
            with self._lock:
                self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
            # An end on one side is passed on, as a proxy does (a dead client's backend ends).
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        # shutdown, not close alone, ends the accept() blocked on it.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._lock:
            for client, server in self.pairs:
                # SO_LINGER 0: close sends an RST, not a FIN.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                for end in (client, server):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)
                    end.close()


def spans(marks: Path) -> dict[int, tuple[int, int]]:
    """Each command's (first, last) mark in ns, by token (ticks, enter and leave alike)."""
    found: dict[int, list[int]] = {}
    for line in marks.read_text().splitlines():
        _, token, stamp = line.split()
        found.setdefault(int(token), []).append(int(stamp))
    return {token: (min(s), max(s)) for token, s in found.items()}


def holder_backend(env: Env) -> int:
    [(pid,)] = env.query("SELECT backend_pid FROM {schema}.locks WHERE job = 'cut'")
    return int(pid)


@pytest.mark.parametrize("fault", ["reset by a relay", "terminated backend", "SIGKILLed pglock"])
def test_a_contender_waiting_takes_over_only_once_the_holder_has_stopped(
        env: Env, fault: str) -> None:
    marks = env.tmp / "marks"
    options = conninfo_to_dict(env.dsn)
    relay = Relay(f"{options['host']}/.s.PGSQL.{options.get('port', 5432)}")
    through = make_conninfo(env.dsn, host="127.0.0.1", port=str(relay.port))
    holder = env.popen("run", "--job", "cut", "--mode", "advisory", "--ttl", "10s",
                       "--min-hold", "0s", "--dsn", through, "--",
                       "sh", "-c", TICKING.format(marks=marks, seconds=25))
    env.wait_for(lambda: marks.exists(), what="the holder's command")
    contender = env.popen("run", "--job", "cut", "--mode", "advisory", "--ttl", "10s",
                          "--min-hold", "0s", "--wait", "60s", "--",
                          *marking_command(marks, 0.2))
    if fault == "reset by a relay":
        relay.cut()
        # Nothing of the holder's reaches the server now: its row's stops_by is final.
        [(stops_by,)] = env.query("SELECT stops_by FROM {schema}.locks WHERE job = 'cut'")
    elif fault == "terminated backend":
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (holder_backend(env),))
    else:
        # The session lock goes with the socket at once; the command's tree is `tree`'s
        # (issue 33, item 3): here the command is one process.
        holder.kill()
    assert contender.communicate(timeout=90) == ("", "")
    assert contender.returncode == 0
    holder.communicate(timeout=60)
    (old_token, old), (new_token, new) = sorted(spans(marks).items())
    assert new[0] > old[1], f"overlap: {old} and {new}"
    assert new_token == old_token + 1
    if fault == "reset by a relay":
        # The holder could not reconnect: it lost the lock at its local deadline, and the
        # contender took the row at its stops_by, after that.
        assert holder.returncode == 125
        [run] = [r for r in env.runs("cut") if r["fencing_token"] == new_token]
        assert run["started_at"] >= stops_by
