"""The database of the soak: an embedded PostgreSQL listening on the hosts' links, the
guarded resource, and the server's faults (restarts, terminated backends)."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import replication

from pglock.db.embedded import EmbeddedServer

# The resource pglock's holders write to: it refuses a token lower than the highest it
# has seen for the job and seat (Kleppmann's fencing check), and logs every write, taken
# or refused, in the order it took them (the row lock serializes them).
GUARD_SQL = """
CREATE SCHEMA IF NOT EXISTS soak;
CREATE TABLE IF NOT EXISTS soak.guard (
    job text, seat integer, token bigint NOT NULL, PRIMARY KEY (job, seat));
CREATE TABLE IF NOT EXISTS soak.writes (
    id bigserial PRIMARY KEY, job text NOT NULL, seat integer NOT NULL,
    token bigint NOT NULL, host text NOT NULL, accepted boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION soak.fenced_write(p_job text, p_seat integer, p_token bigint,
                                             p_host text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    seen bigint;
BEGIN
    INSERT INTO soak.guard VALUES (p_job, p_seat, p_token) ON CONFLICT DO NOTHING;
    SELECT token INTO seen FROM soak.guard WHERE job = p_job AND seat = p_seat FOR UPDATE;
    IF p_token >= seen THEN
        UPDATE soak.guard SET token = p_token WHERE job = p_job AND seat = p_seat;
    END IF;
    INSERT INTO soak.writes (job, seat, token, host, accepted)
    VALUES (p_job, p_seat, p_token, p_host, p_token >= seen);
    RETURN p_token >= seen;
END $$;
"""


def settings(addresses: list[str]) -> dict[str, str]:
    """The soak's server, listening on the hosts' links (a cluster's nodes add theirs)."""
    return {"listen_addresses": ",".join(addresses), "fsync": "off",
            "max_connections": "300", "log_min_messages": "warning"}


class Server:
    def __init__(self, directory: Path, addresses: list[str], net: str) -> None:
        self.embedded = EmbeddedServer(directory, settings=settings(addresses))
        self.net = net
        self.local = ""

    def start(self) -> str:
        """Start it, let the hosts in, create the guarded resource; the local DSN."""
        self.local = self.embedded.join()
        let_in(self.local, self.embedded.pgdata, self.net)
        return self.local

    def close(self) -> None:
        self.embedded.leave()

    def stop(self, mode: str) -> None:
        """pg_ctl stop -m fast (clients told, checkpoint) or immediate (a crash)."""
        pg("pg_ctl", "-D", str(self.embedded.pgdata), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.embedded.start()

    def terminate(self, rng: random.Random) -> tuple[str, str] | None:
        return terminate(self.local, rng)

    def fetch(self, query: str) -> list[tuple[object, ...]]:
        return fetch(self.local, query)


# What Server and Cluster (cluster.py) do alike, on the primary's local DSN.

def let_in(local: str, pgdata: Path, net: str) -> None:
    """Let the hosts in, create the guarded resource."""
    with (pgdata / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {net}.0.0/16 trust\n")
    with psycopg.connect(local, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(GUARD_SQL)


def terminate(local: str, rng: random.Random) -> tuple[str, str] | None:
    """pg_terminate_backend of one pglock session, at random: (its address, its job)."""
    with psycopg.connect(local, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pid, host(client_addr), application_name FROM pg_stat_activity "
            "WHERE application_name LIKE 'pglock run %' AND client_addr IS NOT NULL "
            "ORDER BY pid").fetchall()
        if not rows:
            return None
        pid, address, name = rng.choice(rows)
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return address, name.split()[2] if len(name.split()) > 2 else ""


def fetch(local: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(local, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def pg(program: str, *args: str, check: bool = True) -> None:
    """replication.pg with the time a loaded machine may take (a base backup, a promotion
    waited for up to 300 s)."""
    replication.pg(program, *args, check=check, timeout=600)
