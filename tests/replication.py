"""A real primary and a streaming standby (pg_basebackup -R), for failover and doctor tests.

Also used by scripts/measure_faults.py and the soak's cluster (tests/soak), so it imports
nothing from the test fixtures.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import psycopg

from pglock.db.embedded import SERVER_USER, EmbeddedServer, _install_dir


def socket_dir(conninfo: str) -> str:
    return conninfo.split("host=")[1].split()[0]


# Debian's faketime package: the library that shifts a process's clock.
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def faked(offset: str | None) -> dict[str, str]:
    """The environment that shifts a server's wall clock by `offset` ("-60s"), leaving its
    monotonic clock (timeouts, the WAL receiver's waits) alone; none for None."""
    if offset is None:
        return {}
    library = next(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"), Path(LIBFAKETIME))
    return {"LD_PRELOAD": str(library), "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}


def pg(program: str, *args: str, check: bool = True, timeout: float = 120,
       env: dict[str, str] | None = None) -> None:
    """One of the server's programs, as the server's account when the tests run as root,
    with no PG* variable of ours to lead it elsewhere (and `env` added)."""
    user = SERVER_USER if os.geteuid() == 0 else None
    # The group too: root's group would meet the tmp directories' empty group bits.
    ids = {"user": user, "group": user, "extra_groups": []} if user else {}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PG")}, **(env or {})}
    done = subprocess.run([str(_install_dir() / "bin" / program), *args],  # type: ignore[call-overload]
                          capture_output=True, text=True, timeout=timeout, env=env, **ids)
    if check and done.returncode != 0:
        raise RuntimeError(f"{program}: {done.stderr.strip()}")


class Pair:
    """A primary (embedded) and a hot standby streaming from it, on Unix sockets."""

    def __init__(self, directory: Path, *, synchronous: bool,
                 standby_clock: str | None = None) -> None:
        # A base backup needs full_page_writes, which the other tests turn off.
        self.primary = EmbeddedServer(directory / "primary", settings={"fsync": "off"})
        self.standby_dir = directory / "standby"
        self.synchronous = synchronous
        # libfaketime's offset for the standby's clock (e.g. "-60s": a minute behind the
        # primary's), for the rules that compare the two servers' clocks.
        self.standby_clock = standby_clock
        self.primary_dsn = ""

    def start(self) -> Pair:
        self.primary_dsn = self.primary.join()
        self.standby_dir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            account = pwd.getpwnam(SERVER_USER)
            os.chown(self.standby_dir, account.pw_uid, account.pw_gid)
        pg("pg_basebackup", "-D", str(self.standby_dir), "-R", "-h", self.primary_host,
           "-U", "postgres", "-X", "stream")
        # The primary's socket lives in its pgdata, so the backup carries its socket lock file.
        (self.standby_dir / ".s.PGSQL.5432.lock").unlink(missing_ok=True)
        options = f"-c listen_addresses='' -k {self.standby_dir} -c hot_standby=on"
        pg("pg_ctl", "-D", str(self.standby_dir), "-l", str(self.standby_dir / "log"),
           "-o", options, "-w", "start", env=faked(self.standby_clock))
        if self.synchronous:
            with psycopg.connect(self.primary_dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
        self.wait_streaming("sync" if self.synchronous else "async")
        return self

    @property
    def primary_host(self) -> str:
        return socket_dir(self.primary_dsn)

    @property
    def standby_dsn(self) -> str:
        return f"host={self.standby_dir} port=5432 dbname=postgres user=postgres"

    @property
    def both_dsn(self) -> str:
        """Both nodes, primary first; pglock adds target_session_attrs=read-write itself,
        the DSN says it too, as an operator's would."""
        return (f"host={self.primary_host},{self.standby_dir} port=5432,5432 dbname=postgres "
                "user=postgres target_session_attrs=read-write")

    def wait_streaming(self, state: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with psycopg.connect(self.primary_dsn, autocommit=True) as conn:
                row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
            if row == (state,):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby is not streaming ({state}): {row}")
            time.sleep(0.1)

    def replayed(self) -> None:
        """Wait until the standby has replayed everything the primary wrote so far."""
        with psycopg.connect(self.primary_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert row is not None
        deadline = time.monotonic() + 60
        with psycopg.connect(self.standby_dsn, autocommit=True) as conn:
            while conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                               (row[0],)).fetchone() != (True,):
                if time.monotonic() > deadline:
                    raise AssertionError("the standby does not catch up")
                time.sleep(0.05)

    def cut_standby(self) -> None:
        """Stop the standby receiving WAL (its walreceiver ends): it falls behind, silently."""
        with psycopg.connect(self.standby_dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(self.primary_dsn, autocommit=True) as conn:
                if conn.execute("SELECT count(*) FROM pg_stat_replication").fetchone() == (0,):
                    return
            if time.monotonic() > deadline:
                raise AssertionError("the standby still streams")
            time.sleep(0.05)

    def kill_primary(self) -> None:
        """The primary dies: no shutdown checkpoint, clients' connections just break."""
        pg("pg_ctl", "-D", str(self.primary.pgdata), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        pg("pg_ctl", "-D", str(self.standby_dir), "-w", "promote")

    @property
    def primary_socket(self) -> str:
        return f"{self.primary_host}/.s.PGSQL.5432"

    @property
    def standby_socket(self) -> str:
        return f"{self.standby_dir}/.s.PGSQL.5432"

    def close(self) -> None:
        pg("pg_ctl", "-D", str(self.standby_dir), "-m", "immediate", "-w", "stop", check=False)
        self.primary.leave()
