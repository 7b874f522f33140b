"""Least privilege: the SQL that makes pglock's three group roles and their grants
(`pglock init --print-grants`; docs/security.md says what each can and cannot do).

- pglock_runner: `pglock run` and nothing more. It writes only through the run path's
  SECURITY DEFINER functions, which act only on a claim whose random holder id the caller
  knows, and it cannot read the holder_id column: it takes, renews and releases its own
  claims only.
- pglock_reader: status, history, check, metrics, doctor, hosts: reads (the census too),
  no holder ids, no writes.
- pglock_operator: both, plus every write of clear, prune, pause, resume, stop, replay,
  forget and forget-host.
"""

from __future__ import annotations

from psycopg import sql

from pglock.db.schema import query
from pglock.errors import OPERATOR, READER, RUNNER

# The columns of `locks` no runner or reader reads: holder_id (with a holder id, the
# functions renew or release that holder's lock) and incarnation (the server lifetime an
# advisory row was stamped in, which only acquire compares). docs/security.md names them;
# tests/operate/test_roles.py checks that these and LOCK_COLUMNS are every column.
WITHHELD_LOCK_COLUMNS = ("holder_id", "incarnation")
# Every other column of `locks`.
LOCK_COLUMNS = ("job, mode, holder, holder_pid, fencing_token, ttl, acquired_at, renewed_at, "
                "expires_at, released_at, backend_pid, cleared_at, cleared_by, "
                "stop_requested_at, stop_requested_by, stop_reason, timeline, stops_by, "
                "longest_ttl")

# Every column of `seats` (a semaphore's, --limit) but these, for the same reason.
WITHHELD_SEAT_COLUMNS = ("holder_id",)
SEAT_COLUMNS = ("job, seat, seat_limit, mode, holder, holder_pid, fencing_token, ttl, "
                "acquired_at, renewed_at, expires_at, released_at, cleared_at, cleared_by, "
                "stop_requested_at, stop_requested_by, stop_reason, timeline, longest_ttl")

# The run path's functions (db/sql/functions.sql), by signature.
RUN_FUNCTIONS = (
    "take(integer, text, timestamptz, interval, text, text, text, interval)",
    "acquire(integer, text, text, text, integer, text, interval, timestamptz, bigint, "
    "boolean, text, text, text, timestamptz, interval, integer, integer, integer, boolean, "
    "timestamptz[], text[], text, text, text, text, text, text, integer, interval, interval, "
    "integer, integer, text[])",
    # The rosters a host that contends only in its turns asks for (--candidates).
    "members(integer, text, text, text, text[], timestamptz[], interval[], interval[], "
    "integer[])",
    "catch_up(text, text, bigint, timestamptz[], integer, integer, timestamptz)",
    "start_run(text, text, bigint, text, timestamptz, text, text, timestamptz, interval, "
    "integer, integer, text, text)",
    # Version 8's, which a run of that pglock calls through the upgrade to 9.
    "start_run(text, text, bigint, text, timestamptz, text, text, timestamptz, interval, "
    "integer, integer)",
    "renew(text, text, bigint, boolean)",
    "retake(text, text, bigint)",
    "release(text, text, bigint, interval, timestamptz)",
    "finish(bigint, text, text, bigint, interval, boolean, interval, integer, integer, text, "
    "text, bytea, boolean, boolean, text, text, text, text)",
    "note(bigint, text, text)",
    "holds(text, text, bigint)",
    # The fencing guard a command calls on its own connection (docs/lease.md, "Fencing").
    "fence(text, text, bigint)",
    "note_windows(text, text[])",
    # A slot a trigger gave up without a run (the wait after a promotion, past --deadline).
    "missed(text, timestamptz, text, integer)",
)

# The tables a reader reads whole (locks and seats: every column but holder_id).
# The census (hosts, attendance) too: a runner writes it only through acquire.
READ_TABLES = ("meta", "runs", "jobs", "slots", "pauses", "audit", "timelines", "hosts",
               "attendance")

_CREATE = """DO $roles$ BEGIN
    CREATE ROLE {role} NOLOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END $roles$;
"""

_GRANTS = f"""
-- {RUNNER}: `pglock run` only. EXECUTE on the run path's functions; no table writes;
-- the lock rows without their holder ids (read while waiting for a holder).
GRANT USAGE ON SCHEMA {{schema}} TO {RUNNER};
GRANT SELECT ON {{schema}}.meta TO {RUNNER};
GRANT SELECT ({LOCK_COLUMNS}) ON {{schema}}.locks TO {RUNNER};
""" + "".join(f"GRANT EXECUTE ON FUNCTION {{schema}}.{f} TO {RUNNER};\n"
              for f in RUN_FUNCTIONS) + f"""
-- {READER}: status, history, check, metrics, doctor, hosts. Reads only, holder ids
-- excepted.
GRANT USAGE ON SCHEMA {{schema}} TO {READER};
""" + "".join(f"GRANT SELECT ON {{schema}}.{t} TO {READER};\n" for t in READ_TABLES) + f"""\
GRANT SELECT ({LOCK_COLUMNS}) ON {{schema}}.locks TO {READER};
GRANT SELECT ({SEAT_COLUMNS}) ON {{schema}}.seats TO {READER};
-- The fencing guard, for a command whose own connection has only the reader's role.
GRANT EXECUTE ON FUNCTION {{schema}}.fence(text, text, bigint) TO {READER};
-- A job's roster, as its hosts rank their slots over it (`pglock hosts --next`): it reads
-- the census with the caller's rights.
GRANT EXECUTE ON FUNCTION {{schema}}.roster(text, integer) TO {READER};

-- {OPERATOR}: a runner and a reader, plus the writes of clear, prune, pause, resume,
-- stop, replay, forget and forget-host.
GRANT {RUNNER}, {READER} TO {OPERATOR};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {{schema}} TO {OPERATOR};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {{schema}} TO {OPERATOR};
-- `pglock clear --terminate` ends a holder's backend; that needs pg_signal_backend,
-- which may signal any non-superuser backend of the cluster: grant it only if wanted.
-- GRANT pg_signal_backend TO {OPERATOR};
-- An advisory contender ends the session of a holder stopped past its horizon (acquire's
-- evict(), run as the schema's owner): without pg_signal_backend on the owner, such a
-- job waits until its holder wakes up or is cleared (docs/advisory.md). A superuser
-- owner needs nothing; another runs, once: GRANT pg_signal_backend TO <the owner>;
"""


def not_a_member(role: str) -> str | None:
    """Why `role` cannot be made a member of pglock's groups (the GRANT would fail when
    applied), or None."""
    if role in (RUNNER, READER, OPERATOR):
        return "one of pglock's own group roles"
    if role == "public":
        return "PostgreSQL's name for every role, not a role"
    if role.startswith("pg_"):
        return "one of PostgreSQL's reserved roles"
    return None


def grants(schema: str, members: dict[str, list[str]] | None = None) -> sql.Composed:
    """The SQL that creates the three group roles (NOLOGIN, once per cluster), grants them
    what they need on `schema`, and makes each of `members` (group -> login roles) a
    member. Run by the schema's owner with CREATEROLE, or a superuser; again after an
    upgrade of the schema."""
    header = sql.SQL(
        "-- pglock's roles for schema {}: run by the schema's owner with CREATEROLE (or a\n"
        "-- superuser), again after each upgrade of the schema. The three roles are the\n"
        "-- cluster's, shared by every database in it (docs/security.md).\n"
    ).format(sql.Literal(schema))
    parts: list[sql.Composable] = [header]
    parts += [sql.SQL(_CREATE).format(role=sql.Identifier(role))
              for role in (RUNNER, READER, OPERATOR)]
    parts.append(query(_GRANTS, schema))
    for group, names in (members or {}).items():
        for name in names:
            parts.append(sql.SQL("GRANT {} TO {};\n").format(sql.Identifier(group),
                                                           sql.Identifier(name)))
    return sql.Composed(parts)
