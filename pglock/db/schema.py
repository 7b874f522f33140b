"""The pglock schema: created once on first use, versioned, upgraded in place, refused when
newer than us.

Version 1 is `sql/schema.sql`; each later version N is one file `sql/migrations/NNN_*.sql`
that upgrades N-1 to N. A new database gets the same statements in the same order, so a
database upgraded from any version and a new one cannot differ. Migrations only add
(tables, nullable columns, wider checks added NOT VALID): a holder that started under an
older version keeps renewing and recording its run through the upgrade.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pglock.db.database import first_line
from pglock.db.keys import advisory_key
from pglock.errors import DatabaseError, SchemaError

# The newest migration's number (a test checks it against sql/migrations/).
VERSION = 5

_READ_VERSION = "SELECT value::int, pg_is_in_recovery() FROM {schema}.meta WHERE key = 'version'"
# The creation lock is the advisory key of the empty job name, which no job can have.
_CREATION_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def query(text: str, schema: str) -> sql.Composed:
    """A module's SQL constant with the schema name quoted in ({schema} as a name,
    {schema_name} as a string literal: the advisory key computed in SQL hashes it)."""
    return sql.SQL(text).format(schema=sql.Identifier(schema), schema_name=sql.Literal(schema))


def migrations() -> list[tuple[int, str]]:
    """(version, SQL text) of every version after 1, in order."""
    from importlib import resources

    folder = resources.files("pglock.db").joinpath("sql/migrations")
    found = sorted((int(entry.name.split("_", 1)[0]), entry.read_text())
                   for entry in folder.iterdir() if entry.name.endswith(".sql"))
    return found


def ddl(schema: str, upto: int = VERSION) -> sql.Composed:
    """The whole DDL of a version (this one by default), for `init --print-sql` and creation."""
    from importlib import resources

    texts = [resources.files("pglock.db").joinpath("sql/schema.sql").read_text()]
    texts += [text for version, text in migrations() if version <= upto]
    return sql.Composed([query(text, schema) for text in texts])


def upgrade_sql(schema: str, current: int) -> sql.Composed:
    """The migrations that take a schema of version `current` to this one."""
    return sql.Composed([query(text, schema) for version, text in migrations()
                         if version > current])


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
    assert row is not None
    if row[0] < VERSION:
        create(conn, schema)


def readable(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema exists (and is a version we understand); reports never create it."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return False
    except psycopg.Error as error:
        raise SchemaError(f"cannot read schema {schema!r}: {first_line(error)}") from error
    if row is None or row[0] != VERSION:
        _check(row, schema)
        assert row is not None
        if row[0] < VERSION:
            # A report after an upgrade of pglock: the tables it reads must be this version's.
            create(conn, schema)
    return True


def create(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create (or upgrade) the schema under an advisory transaction lock, so 100 hosts
    starting at once create it once, and an upgrade runs once."""
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
            assert row is not None
            if row[0] < VERSION:
                conn.execute(upgrade_sql(schema, row[0]))
    except psycopg.errors.InsufficientPrivilege as error:
        raise SchemaError(f"cannot create or upgrade schema {schema!r}: {first_line(error)}; "
                          "ask a DBA to run the output of `pglock init --print-sql` (new) or "
                          "`pglock init --print-upgrade` (existing)") from error
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
