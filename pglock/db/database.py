"""Connections: explicit timeouts, a name in pg_stat_activity, retry on storms, clean errors."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import conninfo as libpq_conninfo

from pglock.db import bounded, redact
from pglock.db.bounded import BoundedConnection
from pglock.errors import ConfigError, DatabaseError
from pglock.settings.config import Target, undecodable

# Server-side reasons a connection is refused for now, not for good. psycopg reports
# "too many clients" without an SQLSTATE at connect time, so the text is all there is.
# Compiled on first use (re's cache): a connection that succeeds never needs it.
_TRANSIENT = (
    r"(?i)too many (clients|connections)|remaining connection slots|"
    r"the database system is (starting up|shutting down|in recovery mode|not yet accepting)|"
    r"connection refused|no such file or directory|timeout expired|"
    r"server closed the connection unexpectedly|could not receive data|"
    r"terminating connection|cannot connect now|"
    # EAGAIN from connect() on a Unix socket whose listen queue is full: a :00 storm.
    r"resource temporarily unavailable"
)
# Client-side TCP settings so a vanished server is noticed within seconds, not hours.
KEEPALIVES = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2",
              "keepalives_count": "3"}


def check_conninfo(conninfo: str) -> None:
    """Fail with one line if the DSN does not parse; never echo it (it may hold a password)."""
    if undecodable(conninfo):
        raise ConfigError("the DSN is not valid UTF-8")
    try:
        libpq_conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"the DSN does not parse: {_unquoted(first_line(error))}") from None


def _unquoted(message: str) -> str:
    """libpq quotes fragments of a DSN it cannot parse; they may hold a password.

    Everything from the first quote to the last goes: a password may contain quotes too.
    """
    return redact.redact(re.sub(r'".*"', '"…"', message, flags=re.DOTALL))


def _parsed(conninfo: str) -> dict[str, str]:
    try:
        return {k: str(v) for k, v in libpq_conninfo.conninfo_to_dict(conninfo).items()}
    except (psycopg.ProgrammingError, UnicodeError):
        return {}


def carries_password(conninfo: str) -> bool:
    """Whether the DSN itself holds a password (a keyword, a URI's user information or
    its ?password= parameter)."""
    return bool(_parsed(conninfo).get("password")) or redact.redact(conninfo) != conninfo


def without_password(conninfo: str) -> str | None:
    """The DSN with no password in it, pointing at the same database (for the commands'
    environment: docs/security.md); None when it does not parse."""
    try:
        fields = libpq_conninfo.conninfo_to_dict(conninfo)
    except (psycopg.ProgrammingError, UnicodeError):
        return None
    fields.pop("password", None)
    return libpq_conninfo.make_conninfo("", **fields)


def describe(conninfo: str) -> str:
    """host:port/dbname of a DSN for humans, from fields that cannot carry a password."""
    where = redact.place(conninfo, _parsed(conninfo))
    return "the configured database" if where is None else str(where)


def connect_failure(conninfo: str, error: BaseException) -> str:
    """Why a connection failed, in one line that names no password."""
    if redact.misread(conninfo):
        # libpq tried some other host, port or database, named by a piece of the password.
        return ("cannot connect: the DSN's user information holds an unencoded / or @; "
                "percent-encode them in a URI (%2F, %40)")
    parsed = _parsed(conninfo)
    reason = redact.scrubbed(first_line(error), conninfo, parsed)
    if re.search(_READ_ONLY, reason):
        # libpq's words for target_session_attrs=read-write: the monitoring host pointed at
        # a replica or a reader endpoint meets them too (status, check, metrics).
        reason += (" (a standby or read replica: pglock needs the primary, for status, "
                   "check and metrics too)")
    where = redact.place(conninfo, parsed)
    if where is None:
        return f"cannot connect: {_unquoted(reason)}"
    return f"cannot connect to {where}: {reason}"


# libpq's refusal of a server that is not read-write (PostgreSQL 14+, then older).
_READ_ONLY = r"session is read-only|could not make a writable connection"


def is_transient(error: BaseException) -> bool:
    """A refusal that may go away by itself: retry it with backoff."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate in ("53300", "57P03", "08006", "08001", "08004"):
        return True
    return bool(re.search(_TRANSIENT, str(error)))


def first_line(error: BaseException) -> str:
    """The server's or libpq's message, first line only."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def connect(conninfo: str, *, application_name: str, timeout: float,
            extra: dict[str, Any] | None = None,
            bound: float | None = None, once: bool = False) -> psycopg.Connection[Any]:
    """An autocommit connection, retried with full-jitter backoff within `timeout` seconds;
    with `bound`, each of its statements is cancelled past that many seconds (bounded.py).
    With `once`, one attempt only: the caller keeps its own cadence (the heartbeat retries
    every RETRY_INTERVAL, which docs/ttl.md's table assumes; a backoff of up to 2 s inside
    this loop would let a renewal land later than that)."""
    deadline = time.monotonic() + timeout
    params = {**KEEPALIVES, **(extra or {})}
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        try:
            # No server-side prepared statements: a transaction-pooling PgBouncer would
            # hand them to another client's session.
            # read-write: never a standby, where locks and rows would mean nothing; with
            # several hosts listed, libpq moves on to the next.
            conn = BoundedConnection.connect(
                conninfo, autocommit=True, prepare_threshold=None,
                target_session_attrs="read-write",
                application_name=application_name[:63],
                connect_timeout=max(2, int(remaining + 0.999)), **params)
            return conn.bounded(bound) if bound is not None else conn
        except psycopg.OperationalError as error:
            remaining = deadline - time.monotonic()
            if once or not is_transient(error) or remaining <= 0:
                raise DatabaseError(connect_failure(conninfo, error)) from None
            attempt += 1
            time.sleep(min(remaining, random.uniform(0, min(2.0, 0.05 * 2**attempt))))
        except psycopg.ProgrammingError as error:
            raise ConfigError(f"the DSN is not usable: {_unquoted(first_line(error))}") from None
        except UnicodeError:
            # psycopg's message would quote the whole conninfo, password and all.
            raise ConfigError("the DSN or a name sent with it (--job, --holder) is not valid "
                              "UTF-8") from None


class Reconnecting:
    """A connection of one run, reopened on demand when the server dropped it."""

    def __init__(self, conninfo: str, *, application_name: str, timeout: float,
                 user_timeout: float | None = None) -> None:
        # `timeout` bounds each connection (its attempts) and each statement.
        self.conninfo = conninfo
        self.application_name = application_name
        self.timeout = timeout
        self.user_timeout = user_timeout
        self.conn: psycopg.Connection[Any] | None = None
        self._installing = threading.Lock()

    def connect(self, timeout: float | None = None, user_timeout: float | None = None,
                once: bool = False) -> psycopg.Connection[Any]:
        """A new connection of the same name (the caller owns it); `once`: one attempt."""
        # tcp_user_timeout bounds how long a statement can hang on a vanished server.
        user_timeout = user_timeout or self.user_timeout
        extra = {"tcp_user_timeout": int(user_timeout * 1000)} if user_timeout else None
        timeout = timeout or self.timeout
        return connect(self.conninfo, application_name=self.application_name,
                       timeout=timeout, extra=extra, bound=timeout, once=once)

    def get(self) -> psycopg.Connection[Any]:
        """The run's connection, opened if it is not. One at a time: a thread whose
        connection opened after another's was installed closes its own and uses that one,
        so that no session of the run (and no advisory lock on it) lives unseen."""
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        conn = self.connect()
        with self._installing:
            if self.conn is not None and not self.conn.closed:
                conn.close()
                return self.conn
            self.conn = conn
        return conn

    def usable(self, conn: psycopg.Connection[Any] | None = None) -> bool:
        """Whether the run's connection (or `conn`, one a thread used) is open, unbroken
        and idle (a statement on it that failed or was cancelled left its session, and any
        session lock, in place)."""
        conn = self.conn if conn is None else conn
        return (conn is not None and not conn.closed and not conn.broken
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def drop(self, conn: psycopg.Connection[Any]) -> None:
        """Close `conn`, a connection a thread used, and forget it if it is still the run's:
        never the one another thread opened since (this one was abandoned meanwhile)."""
        with self._installing:
            if self.conn is conn:
                self.conn = None
        conn.close()

    def backend_pid(self) -> int | None:
        """The server process of the open connection (None: none is open)."""
        conn = self.conn
        if conn is None or conn.closed:
            return None
        return conn.info.backend_pid

    def abandon(self) -> None:
        """Forget a connection another thread is stuck on; the next get() opens a new one.
        Its statement is cancelled (its own bound would, later): nothing of ours is left
        waiting on the server once pglock exits. Its socket is shut down: the stuck thread
        fails at once, and the server ends its session (and an advisory lock the run's
        next session must take back) as soon as it hears, not when it drops a silent
        client (docs/advisory.md, "A session of our own in the way")."""
        with self._installing:
            conn, self.conn = self.conn, None
        if conn is None or conn.closed:
            return
        # A duplicate of its descriptor: the stuck thread still owns the original.
        with contextlib.suppress(OSError, psycopg.Error), \
                socket.socket(fileno=os.dup(conn.pgconn.socket)) as end:
            end.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(psycopg.Error):
            conn.cancel_safe(timeout=bounded.CANCEL_WAIT)


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn psycopg's errors during `action` into one-line DatabaseErrors."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as error:
        raise DatabaseError(f"{action}: permission denied ({first_line(error)})") from error
    except psycopg.Error as error:
        raise DatabaseError(f"{action}: {first_line(error)}") from error


EMBEDDED_PLACE = "embedded, this host only"


def place(conn: psycopg.Connection[Any]) -> str:
    """host:port/dbname of an open connection, as libpq resolved it; never the password."""
    return f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"


@contextlib.contextmanager
def session(target: Target, *, application_name: str,
            timeout: float) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """A connection to `target`, and the name of the database to show a human."""
    with opened(target) as conninfo, connect(
            conninfo, application_name=application_name, timeout=timeout) as conn:
        yield conn, EMBEDDED_PLACE if target.embedded else place(conn)


def running_embedded() -> str | None:
    """The conninfo of this host's embedded server if it runs, else None: neither started
    nor joined (doctor looks without changing anything)."""
    from pglock.db import embedded

    try:
        return embedded.EmbeddedServer(embedded.default_data_dir()).conninfo
    except embedded.EmbeddedError:
        return None


@contextlib.contextmanager
def opened(target: Target) -> Iterator[str]:
    """The conninfo of `target`; the embedded server is joined for the duration."""
    if target.conninfo is not None:
        check_conninfo(target.conninfo)
        if target.source == "--dsn" and carries_password(target.conninfo):
            # Said with -v only: cron mails what a plain run prints.
            logging.getLogger("pglock").info(
                "the DSN given with --dsn carries a password, which every local user can "
                "read (ps) while pglock runs: put it in ~/.pgpass, PGPASSFILE or a service "
                "file (PGSERVICE) instead (docs/security.md)")
        yield target.conninfo
        return
    from pglock.db import embedded

    server = embedded.EmbeddedServer(embedded.default_data_dir(), linger=target.linger)
    try:
        conninfo = server.join()
    except embedded.EmbeddedError as error:
        raise DatabaseError(str(error)) from error
    if server.created:
        # Said once per host, when the cluster is made: a host whose DSN went missing
        # must not run its jobs alone without a word.
        logging.getLogger("pglock").warning(
            "using an embedded PostgreSQL private to this host under %s; set PGLOCK_DSN "
            "for a fleet", server.data_dir)
    try:
        yield conninfo
    finally:
        server.leave()
        if server.no_reaper is not None:
            # Said once per host: the README's warm linger silently gone, every run paying
            # a server start, is what the operator would otherwise never learn.
            logging.getLogger("pglock").warning(
                "the embedded server's linger is off: its reaper could not be started "
                "(%s), so the server stops with its last user and each command starts it "
                "again; said once", server.no_reaper)
