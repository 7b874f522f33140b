"""Which connection failures are retried, and how errors are told (pglock.db.database)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from pglock.db import database
from pglock.errors import ConfigError

TRANSIENT = [
    errors.TooManyConnections("sorry, too many clients already"),
    errors.CannotConnectNow("the database system is starting up"),
    errors.ConnectionFailure("x"),
    errors.SqlclientUnableToEstablishSqlconnection("x"),
    errors.SqlserverRejectedEstablishmentOfSqlconnection("x"),
    errors.AdminShutdown("terminating connection due to administrator command"),
    # psycopg reports these at connect time without an SQLSTATE: the text is all there is.
    psycopg.OperationalError("connection failed: FATAL:  sorry, too many clients already"),
    psycopg.OperationalError("FATAL:  remaining connection slots are reserved for roles with "
                             "the SUPERUSER attribute"),
    psycopg.OperationalError("FATAL:  the database system is shutting down"),
    psycopg.OperationalError("FATAL:  the database system is in recovery mode"),
    psycopg.OperationalError("FATAL:  the database system is not yet accepting connections"),
    psycopg.OperationalError('connection to server at "10.0.0.1", port 5432 failed: '
                             "Connection refused"),
    psycopg.OperationalError('connection to server on socket "/run/x/.s.PGSQL.5432" failed: '
                             "No such file or directory"),
    psycopg.OperationalError("connection failed: timeout expired"),
    psycopg.OperationalError("server closed the connection unexpectedly\n\tThis probably means "
                             "the server terminated abnormally"),
    psycopg.OperationalError("consuming input failed: could not receive data from server"),
    psycopg.OperationalError("FATAL:  too many connections for role \"app\""),
    # A Unix socket's listen queue full (scripts/loadgen storm: 1,000 connects at once).
    psycopg.OperationalError('connection to server on socket "/run/x/.s.PGSQL.5432" failed: '
                             "Resource temporarily unavailable"),
]
FOR_GOOD = [
    psycopg.OperationalError('FATAL:  password authentication failed for user "app"'),
    psycopg.OperationalError('FATAL:  database "nope" does not exist'),
    psycopg.OperationalError("FATAL:  no pg_hba.conf entry for host \"10.0.0.2\""),
    psycopg.OperationalError("could not translate host name \"db.example\" to address"),
    errors.InsufficientPrivilege("permission denied for schema pglock"),
    errors.UniqueViolation("duplicate key value violates unique constraint"),
    errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
    psycopg.ProgrammingError("invalid connection option \"hots\""),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__ + ":" + str(e)[:40])
def test_refusals_for_now_are_retried(error: Exception) -> None:
    assert database.is_transient(error)


@pytest.mark.parametrize("error", FOR_GOOD, ids=lambda e: type(e).__name__ + ":" + str(e)[:40])
def test_refusals_for_good_are_not(error: Exception) -> None:
    assert not database.is_transient(error)


@pytest.mark.parametrize(("error", "line"), [
    (psycopg.OperationalError("server closed the connection unexpectedly\n\tThis probably"),
     "server closed the connection unexpectedly"),
    (psycopg.OperationalError("  \nFATAL:  x\nDETAIL:  y"), "FATAL:  x"),
    (psycopg.OperationalError(""), "OperationalError"),
    (errors.UniqueViolation(""), "UniqueViolation"),
    (ValueError("plain"), "plain"),
])
def test_first_line(error: Exception, line: str) -> None:
    assert database.first_line(error) == line


@pytest.mark.parametrize("conninfo", [
    "host=x password=supersecret foo",
    "postgresql://u:supersecret@[::1",
    "host=x password='super secret",
    "postgresql://u:super\"secret\"@[::1",
])
def test_a_dsn_that_does_not_parse_is_refused_without_the_password(conninfo: str) -> None:
    with pytest.raises(ConfigError) as raised:
        database.check_conninfo(conninfo)
    message = str(raised.value)
    assert message.startswith("the DSN does not parse: ")
    assert "secret" not in message and "\n" not in message


def test_the_slot_ahead_allowance_is_the_same_in_acquire_and_in_python() -> None:
    """acquire refuses a slot more than lease.AHEAD_ALLOWED ahead of the server's clock
    (issue 46, N-L12); the figure is written in functions.sql as an interval literal."""
    from pglock.db.schema import _sql
    from pglock.lock.lease import AHEAD_ALLOWED, SLOT_AHEAD

    text = _sql("functions.sql").read_text()
    seconds = int(AHEAD_ALLOWED.total_seconds())
    assert f"IF p_slot > clock_timestamp() + interval '{seconds} seconds' THEN" in text
    assert f"USING ERRCODE = '{SLOT_AHEAD}'" in text
