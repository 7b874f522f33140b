"""The soak's database with a standby (`--replication sync|async`): two embedded servers,
one primary and one hot standby streaming from it, and the failovers the nemesis makes.

The lighter of the two designs issue 34 names (docs/soak.md, "A standby"): no Patroni,
no etcd. The nemesis is the cluster manager: it fences the old primary (a clean stop,
or SIGKILL of its postmaster and every process under it), promotes the standby
(`pg_ctl promote`), and rebuilds the old primary as the new standby from a fresh
`pg_basebackup` of the new one, so that a run fails over again and again. The nodes
listen on every host's link, node a on port 5432 and node b on 5433; the hosts reach
the primary through a multi-host DSN with target_session_attrs=read-write, as docs/ha.md
tells fleets to.

Synchronous replication is `synchronous_standby_names = '*'` on the primary, set again
once the rebuilt standby streams: a promoted standby runs alone meanwhile (as Patroni's
non-strict synchronous mode does), rather than blocking every write until it has a
standby of its own. No other fault of the server comes while a failover and its rebuild
last (the nemesis' "server" claim).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import signal
import time
from pathlib import Path

import psycopg
import replication

from pglock.db.embedded import SERVER_USER, EmbeddedServer

from . import server

PORTS = (5432, 5433)


class Node:
    def __init__(self, name: str, directory: Path, port: int, addresses: list[str]) -> None:
        self.name = name
        self.port = port
        self.embedded = EmbeddedServer(directory, settings={
            **server.settings(addresses), "port": str(port), "hot_standby": "on",
            "wal_level": "replica", "max_wal_senders": "5"})

    @property
    def pgdata(self) -> Path:
        return self.embedded.pgdata

    @property
    def local(self) -> str:
        return self.embedded.conninfo

    def crash(self) -> None:
        """SIGKILL the postmaster and every process under it, all at once (a machine
        that died): stopped first, so that nothing answers a client in between."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n")[0])
            # A stale pid file's number may belong to another process by now.
            if str(self.pgdata).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                return
        except (OSError, ValueError):
            return
        _signal(pid, signal.SIGSTOP)
        children = _children(pid)
        for child in children:
            _signal(child, signal.SIGKILL)
        _signal(pid, signal.SIGKILL)
        _signal(pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in [pid, *children]) and time.monotonic() < deadline:
            time.sleep(0.02)


class Cluster:
    """A primary and a standby; the same interface as Server (server.py) for the fleet and
    the nemesis, and the failovers."""

    def __init__(self, directory: Path, addresses: list[str], net: str,
                 synchronous: bool) -> None:
        self.nodes = [Node(name, directory / f"db-{name}", port, addresses)
                      for name, port in zip("ab", PORTS, strict=True)]
        self.net = net
        self.synchronous = synchronous
        self.primary = 0
        self.local = ""

    @property
    def current(self) -> Node:
        return self.nodes[self.primary]

    @property
    def standby(self) -> Node:
        return self.nodes[1 - self.primary]

    def start(self) -> str:
        """Start the primary, let the hosts in, create the guarded resource, build the
        standby; the primary's local DSN."""
        self.local = self.current.embedded.join()
        server.let_in(self.local, self.current.pgdata, self.net)
        self.rebuild()
        return self.local

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.standby.embedded.stop()
        with contextlib.suppress(Exception):
            self.current.embedded.stop()
        with contextlib.suppress(Exception):
            self.current.embedded.leave()

    # The faults of a single server, on the primary.

    def stop(self, mode: str) -> None:
        server.pg("pg_ctl", "-D", str(self.current.pgdata), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.current.embedded.start()

    def terminate(self, rng: random.Random) -> tuple[str, str] | None:
        return server.terminate(self.local, rng)

    def fetch(self, query: str) -> list[tuple[object, ...]]:
        return server.fetch(self.local, query)

    # Failovers. Each returns once the new primary takes writes; rebuild() follows.

    def switchover(self) -> str:
        """Planned: the primary stopped cleanly (its last WAL reaches the standby before it
        exits), then the standby promoted."""
        self.stop("fast")
        return self._promote()

    def failover(self) -> str:
        """Unplanned: the primary's postmaster killed with everything under it, then the
        standby promoted."""
        self.current.crash()
        return self._promote()

    def hold_back(self) -> None:
        """The standby's WAL receiver stopped (as scripts/measure-faults --only async
        does): the primary goes on alone, and what it commits from now on is lost in a
        failover. Asynchronous only (a synchronous primary would wait for it)."""
        with psycopg.connect(self.standby.local, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while self.streaming() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _promote(self) -> str:
        old = self.current
        server.pg("pg_ctl", "-D", str(self.standby.pgdata), "-w", "-t", "300", "promote")
        self.primary = 1 - self.primary
        self.local = self.current.local
        return f"{old.name}->{self.current.name}"

    def rebuild(self) -> None:
        """The node that is not the primary made its standby again: stopped (or found dead),
        its data replaced by a fresh base backup of the primary, started, and streaming
        (synchronous again, if the run is)."""
        target = self.standby
        with contextlib.suppress(Exception):
            target.embedded.stop()
        target.crash()  # a stop that failed: nothing of it may linger
        shutil.rmtree(target.pgdata, ignore_errors=True)
        directory = target.embedded.data_dir
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam(SERVER_USER)
            os.chown(directory, account.pw_uid, account.pw_gid)
        server.pg("pg_basebackup", "-D", str(target.pgdata), "-R", "-c", "fast", "-X", "stream",
                  "-h", replication.socket_dir(self.current.local), "-p", str(self.current.port),
                  "-U", "postgres")
        for lock in target.pgdata.glob(".s.PGSQL.*"):
            lock.unlink(missing_ok=True)
        # The primary's synchronous_standby_names came with the backup: a standby promoted
        # later starts without it (set again once it has a standby of its own).
        auto = target.pgdata / "postgresql.auto.conf"
        auto.write_text("".join(line for line in auto.read_text().splitlines(keepends=True)
                                if not line.startswith("synchronous_standby_names")))
        target.embedded.start()
        deadline = time.monotonic() + 120
        while not self.streaming():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby {target.name} does not stream")
            time.sleep(0.1)
        if self.synchronous:
            with psycopg.connect(self.local, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            while self.streaming() != "sync" and time.monotonic() < deadline:
                time.sleep(0.1)

    def streaming(self) -> str | None:
        """The standby's sync_state as the primary sees it (None: not streaming)."""
        try:
            with psycopg.connect(self.local, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication "
                                   "WHERE state = 'streaming'").fetchone()
        except psycopg.Error:
            return None
        return None if row is None else str(row[0])


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
