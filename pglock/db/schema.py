"""The pglock schema: created once on first use, versioned, upgraded in place, refused when
newer than us.

Tables and the version: version 1 is `sql/schema.sql`; each later version N is one file
`sql/migrations/NNN_*.sql` that upgrades N-1 to N (a migration may also drop a function
whose signature changes). Functions: `sql/functions.sql` holds the current body of each,
with who may call it, and runs after the migrations of every creation and every upgrade,
in the same transaction as the version bump. A new database gets the same statements in
the same order as an upgraded one, so the two cannot differ. Migrations only add (tables,
nullable columns, wider checks added NOT VALID), and a function keeps the signature an
older pglock calls it by: a holder that started under an older version keeps renewing
and recording its run through the upgrade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from pglock.db.database import first_line
from pglock.db.keys import advisory_key
from pglock.errors import DatabaseError, SchemaError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

# The newest migration's number (a test checks it against sql/migrations/).
VERSION = 9

_READ_VERSION = "SELECT value::int, pg_is_in_recovery() FROM {schema}.meta WHERE key = 'version'"
# The creation lock is the advisory key of the empty job name, which no job can have.
_CREATION_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def query(text: str, schema: str) -> sql.Composed:
    """A module's SQL constant with the schema name quoted in ({schema} as a name,
    {schema_name} as a string literal: the advisory key computed in SQL hashes it)."""
    return sql.SQL(text).format(schema=sql.Identifier(schema), schema_name=sql.Literal(schema))


def migrations() -> list[tuple[int, str]]:
    """(version, SQL text) of every version after 1, in order."""
    found = sorted((int(entry.name.split("_", 1)[0]), entry.read_text())
                   for entry in _sql("migrations").iterdir() if entry.name.endswith(".sql"))
    return found


def ddl(schema: str) -> sql.Composed:
    """The whole DDL of a new schema of this version, for `init --print-sql` and creation:
    version 1, every migration, then the functions."""
    texts = [_sql("schema.sql").read_text(), *(text for _, text in migrations())]
    return _with_functions(schema, texts)


def upgrade_sql(schema: str, current: int) -> sql.Composed:
    """The migrations that take a schema of version `current` to this one, then the
    functions (which replace the bodies of those it has)."""
    return _with_functions(schema, [text for version, text in migrations()
                                    if version > current])


# What `init --print-upgrade` wraps around the SQL: one transaction under the creation
# lock, so a pglock upgrading at the same moment waits; and a guard, so a script printed
# for one version cannot be applied to another (psql then rolls the whole of it back).
_SCRIPT_GUARD = """
BEGIN;
SELECT pg_advisory_xact_lock({key});
DO $guard$ BEGIN
    IF {expected}::int IS DISTINCT FROM (SELECT max(value::int) FROM {schema}.meta
                                          WHERE key = 'version') THEN
        RAISE EXCEPTION 'schema % is not version %: print the upgrade again',
            {schema_name}, {expected}::text;
    END IF;
END $guard$;
"""
_SCRIPT_NEW = """
BEGIN;
SELECT pg_advisory_xact_lock({key});
"""


def upgrade_script(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """The SQL a privileged role applies to create the schema or bring it to this version,
    in one guarded transaction; None when it is this version already. Nothing is run."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        refuse_foreign(conn, schema)
        row = None
        head, body = _SCRIPT_NEW, ddl(schema)
    except psycopg.Error as error:
        raise SchemaError(f"cannot read schema {schema!r}: {first_line(error)}") from error
    else:
        _check(row, schema)
        assert row is not None
        if row[0] == VERSION:
            return None
        head, body = _SCRIPT_GUARD, upgrade_sql(schema, row[0])
    guard = sql.SQL(head).format(
        key=sql.Literal(advisory_key(schema, "")), schema=sql.Identifier(schema),
        schema_name=sql.Literal(schema), expected=sql.Literal(None if row is None else row[0]))
    return sql.Composed([guard, body, sql.SQL("\nCOMMIT;")]).as_string(None)


def _with_functions(schema: str, texts: list[str]) -> sql.Composed:
    texts = [*texts, _sql("functions.sql").read_text()]
    return sql.Composed([query(text, schema) for text in texts])


def _sql(name: str) -> Traversable:
    """A file or folder of pglock/db/sql/ (imported here: only creation and upgrades read
    them, and the run path stays light)."""
    from importlib import resources

    return resources.files("pglock.db").joinpath("sql").joinpath(name)


def ensure(conn: psycopg.Connection[Any], schema: str) -> None:
    """Check the schema version (creating it on first use), and that this is the primary."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        # Judged under the creation lock (create() refuses a schema of someone else's
        # tables there): a host whose statement ran while another created the schema may
        # find its tables and not yet its version record (found by test_candidates: 5
        # hosts through TCP relays on a new schema, one in five storms).
        create(conn, schema)
        return
    except psycopg.Error as error:
        raise SchemaError(f"cannot read schema {schema!r}: {first_line(error)}") from error
    _check(row, schema)
    assert row is not None
    if row[0] < VERSION:
        create(conn, schema)


def existing(conn: psycopg.Connection[Any], schema: str) -> None:
    """ensure() for the operator commands, which never create a schema: a typo'd --schema
    must not become a new empty one (where `pause --all` would pause nothing real). An
    older version is upgraded, as by any command."""
    if not readable(conn, schema):
        raise SchemaError(f"schema {schema!r} does not exist in this database; pglock "
                          "creates it at a job's first run or with pglock init (is --schema "
                          "or PGLOCK_SCHEMA right?)")


def readable(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema exists (and is a version we understand); reports never create it."""
    try:
        row = conn.execute(query(_READ_VERSION, schema)).fetchone()
    except psycopg.errors.UndefinedTable:
        refuse_foreign(conn, schema)
        return False
    except psycopg.errors.InvalidSchemaName:
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


# The relations of a schema, a few by name: one without pglock's version record that holds
# any is someone else's.
_RELATIONS = """
SELECT array(SELECT c.relname::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             ORDER BY 1 LIMIT 4)
"""


def tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """A few of the schema's tables (and views) by name; none: it is empty, or missing."""
    row = conn.execute(_RELATIONS, (schema,)).fetchone()
    return list(row[0]) if row else []


def refuse_foreign(conn: psycopg.Connection[Any], schema: str) -> None:
    """A schema without pglock's version record is pglock's to create in only while it
    holds no table: one that holds someone else's (a `locks` of their own) would be read
    as an empty pglock schema (status, check OK - 0 jobs), and `run` would fail on it."""
    names = tables(conn, schema)
    if names and not _versioned(conn, schema):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise SchemaError(f"schema {schema!r} holds tables that are not pglock's ({shown}) "
                          "and no pglock version record: give pglock a schema of its own "
                          "(--schema, PGLOCK_SCHEMA, or schema in the config file)")


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
                refuse_foreign(conn, schema)
                conn.execute(ddl(schema))
                return
            _check(row, schema)
            assert row is not None
            if row[0] < VERSION:
                conn.execute(upgrade_sql(schema, row[0]))
    except psycopg.errors.InsufficientPrivilege as error:
        raise SchemaError(f"cannot create or upgrade schema {schema!r}: {first_line(error)}; "
                          "ask a DBA to run `pglock init` as its owner, or to apply what "
                          "`pglock init --print-upgrade` prints") from error
    except psycopg.errors.ReadOnlySqlTransaction as error:
        raise DatabaseError("the server is read-only; pglock needs the primary") from error
    except psycopg.Error as error:
        raise SchemaError(f"cannot create schema {schema!r}: {first_line(error)}") from error


def _versioned(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema has pglock's version record now: read again after its tables
    were seen, since another pglock may have committed its creation in between (100
    hosts starting at once on a new schema)."""
    try:
        with conn.transaction():
            return conn.execute(query(_READ_VERSION, schema)).fetchone() is not None
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return False


def _check(row: tuple[Any, ...] | None, schema: str) -> None:
    if row is None:
        raise SchemaError(f"schema {schema!r} exists but has no version record")
    version, in_recovery = row
    if in_recovery:
        raise DatabaseError("the server is a standby (in recovery); pglock needs the primary")
    if version > VERSION:
        raise SchemaError(f"schema {schema!r} is version {version}, newer than this pglock "
                          f"understands ({VERSION}); upgrade pglock")
