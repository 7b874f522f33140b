"""The server's database connections: a few kept open between requests, one per request
at a time, a broken one thrown away."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from pglock.db import database

# Idle connections kept: the pages are read by a few people, not a crowd.
KEEP = 4


class Pool:
    """Connections to one conninfo, opened on demand (with pglock's connect: its timeouts,
    retries and password-free errors)."""

    def __init__(self, conninfo: str, *, timeout: float) -> None:
        self._conninfo = conninfo
        self._timeout = timeout
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one request; kept for the next if it ended well."""
        conn = self._take() or database.connect(
            self._conninfo, application_name="pglock serve", timeout=self._timeout)
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        self._give(conn)

    def _take(self) -> psycopg.Connection[Any] | None:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        return None

    def _give(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if len(self._idle) < KEEP and not conn.closed and not conn.broken:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
