"""The pglock schema: created once on first use, versioned, refused when newer than us."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pglock.database import first_line
from pglock.errors import DatabaseError, SchemaError
from pglock.keys import advisory_key

VERSION = 1

_READ_VERSION = "SELECT value::int, pg_is_in_recovery() FROM {schema}.meta WHERE key = 'version'"
# The creation lock is the advisory key of the empty job name, which no job can have.
_CREATION_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def query(text: str, schema: str) -> sql.Composed:
    """A module's SQL constant with the schema name quoted in."""
    return sql.SQL(text).format(schema=sql.Identifier(schema))


def ddl(schema: str) -> sql.Composed:
    """The whole DDL of this version, for `init --print-sql` and for creation."""
    from importlib import resources

    text = resources.files("pglock").joinpath("sql/schema.sql").read_text()
    return query(text, schema)


def ensure(conn: psycopg.Connection[Any], schema: str) -> None:
    """Check the schema version (creating it on first use), and that this is the primary."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        create(conn, schema)
        return
    except psycopg.Error as error:
        raise SchemaError(f"cannot read schema {schema!r}: {first_line(error)}") from error
    _check(row, schema)


def readable(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema exists (and is a version we understand); reports never create it."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return False
    except psycopg.Error as error:
        raise SchemaError(f"cannot read schema {schema!r}: {first_line(error)}") from error
    if row is None or row[0] > VERSION:
        _check(row, schema)
    return True


def create(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the schema under an advisory transaction lock, so 100 hosts create it once."""
    try:
        with conn.transaction():
            conn.execute(_CREATION_LOCK, (advisory_key(schema, ""),))
            try:
                with conn.transaction():
                    row = conn.execute(query(_READ_VERSION, schema)).fetchone()
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                conn.execute(ddl(schema))
                return
            _check(row, schema)
    except psycopg.errors.InsufficientPrivilege as error:
        raise SchemaError(f"cannot create schema {schema!r}: {first_line(error)}; "
                          "ask a DBA to run the output of `pglock init --print-sql`") from error
    except psycopg.errors.ReadOnlySqlTransaction as error:
        raise DatabaseError("the server is read-only; pglock needs the primary") from error
    except psycopg.Error as error:
        raise SchemaError(f"cannot create schema {schema!r}: {first_line(error)}") from error


def _check(row: tuple[Any, ...] | None, schema: str) -> None:
    if row is None:
        raise SchemaError(f"schema {schema!r} exists but has no version record")
    version, in_recovery = row
    if in_recovery:
        raise DatabaseError("the server is a standby (in recovery); pglock needs the primary")
    if version > VERSION:
        raise SchemaError(f"schema {schema!r} is version {version}, newer than this pglock "
                          f"understands ({VERSION}); upgrade pglock")
