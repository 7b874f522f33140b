"""Job names for shell completion: read from the database within a second, or nothing."""

from __future__ import annotations

import contextlib
import threading

import psycopg

from pglock.db.schema import query
from pglock.settings import config

NAMES = """
SELECT job FROM {schema}.jobs WHERE starts_with(job, %(prefix)s) ORDER BY job LIMIT 500
"""
TIMEOUT = 1.0


def job_names(dsn: str | None, schema: str | None, prefix: str,
              timeout: float = TIMEOUT) -> list[str]:
    """Known job names starting with `prefix`; [] on any failure or after `timeout`."""
    found: list[str] = []
    # libpq will not time a connection out in less than 2 s; a thread bounds it to
    # `timeout`, and is left behind (daemon) when the server is slower than that.
    reader = threading.Thread(target=_read, args=(dsn, schema, prefix, found), daemon=True)
    reader.start()
    reader.join(timeout)
    return [] if reader.is_alive() else found


def _read(dsn: str | None, schema: str | None, prefix: str, found: list[str]) -> None:
    # A shell's tab key must never print a traceback or a warning, whatever went wrong.
    with contextlib.suppress(Exception):
        conninfo = _conninfo(dsn)
        if conninfo is None:
            return
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=2,
                             application_name="pglock completion",
                             options="-c statement_timeout=1000") as conn:
            rows = conn.execute(query(NAMES, config.configured_schema(schema)),
                                {"prefix": prefix}).fetchall()
        found.extend(str(row[0]) for row in rows)


def _conninfo(dsn: str | None) -> str | None:
    """The configured database; the embedded one only if it is already running."""
    target = config.resolve_target(dsn)
    if target.conninfo is not None:
        return target.conninfo
    from pglock.db import embedded

    try:
        return embedded.EmbeddedServer(embedded.default_data_dir()).conninfo
    except embedded.EmbeddedError:
        return None
