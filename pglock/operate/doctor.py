"""`pglock doctor`: check the setup pglock runs against, one finding per check.

Read-only: doctor never creates the schema nor writes a row. Each check says OK, WARN or
FAIL, what it saw, and what to do about it; the worst level is the exit status.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from pglock.db import database, engine, schema
from pglock.errors import DatabaseError, PglockError
from pglock.lock import heartbeat
from pglock.operate import platforms
from pglock.settings.config import Target
from pglock.settings.durations import format_bound, format_duration

# Below this, advisory mode's session settings (idle_session_timeout) and
# `clear --terminate`'s pg_terminate_backend(pid, timeout) do not exist.
MIN_VERSION = 140000
# Slots are read on the host's clock: past this, hosts disagree about which slot is due.
CLOCK_SKEW_WARN = 2.0
# Share of max_connections in use past which a fleet's next burst may be refused.
CONNECTIONS_WARN = 0.8
# A statement_timeout or lock_timeout this short cuts a write queued behind another
# holder's row lock, or waiting for a synchronous standby that is catching up.
TIMEOUT_WARN_MS = 10_000


class Purpose(enum.StrEnum):
    """What the host's role is for (`--purpose`, or the widest it can do): each check is
    judged by it, so a least-privilege runner or reader host can pass with exit 0."""

    RUNNER = "runner"
    READER = "reader"
    OPERATOR = "operator"

    @property
    def host(self) -> str:
        """`a runner host`, `an operator host`."""
        return f"{'an' if self is Purpose.OPERATOR else 'a'} {self} host"


# The capabilities (CAPABILITIES' columns, in order) and the purpose that needs each.
CAN = {"run jobs": Purpose.RUNNER, "read status, history, check and metrics": Purpose.READER,
       "operate (clear, prune, pause, resume, stop, replay, forget)": Purpose.OPERATOR}


class Level(enum.IntEnum):
    """A finding's severity, which is also doctor's exit status."""

    OK = 0
    WARN = 1
    FAIL = 2


# doctor's exit statuses (its worst finding): the source of its man page's EXIT STATUS and
# the README's line under the exit table.
EXIT_MEANINGS = {
    Level.OK: "OK: every check passed",
    Level.WARN: "WARN: at least one check warns, none fails",
    Level.FAIL: "FAIL: at least one check fails (a bad option is 2 as well)",
}


@dataclass(frozen=True)
class Finding:
    """One check's result: what was seen, and what to do when it is not OK."""

    check: str
    level: Level
    detail: str
    advice: str = ""


@dataclass(frozen=True)
class Diagnosis:
    """Every finding, and the database they are about."""

    place: str
    findings: list[Finding]

    @property
    def level(self) -> Level:
        return max((f.level for f in self.findings), default=Level.OK)


SERVER = """
SELECT current_setting('server_version_num')::int, current_setting('server_version'),
       pg_is_in_recovery(), current_user, current_database()
"""
VERSION_TEXT = "SELECT version()"
SCHEMA_VERSION = "SELECT value::int FROM {schema}.meta WHERE key = 'version'"
SCHEMA_EXISTS = "SELECT has_schema_privilege(%(schema)s, 'USAGE') FROM pg_namespace " \
                "WHERE nspname = %(schema)s"
CAN_CREATE_SCHEMA = "SELECT has_database_privilege(current_database(), 'CREATE')"
# What each kind of command needs, as (kind, role that has it, checks): `run` writes only
# through the run path's functions (schema version 4), the reports read, the operator
# commands write the tables (pglock init --print-grants).
CAPABILITIES = """
SELECT has_function_privilege(%(acquire)s, 'EXECUTE'),
       has_table_privilege(%(jobs)s, 'SELECT') AND has_table_privilege(%(runs)s, 'SELECT')
       AND has_column_privilege(%(locks)s, 'expires_at', 'SELECT'),
       has_table_privilege(%(locks)s, 'UPDATE') AND has_table_privilege(%(audit)s, 'INSERT')
       AND has_table_privilege(%(runs)s, 'DELETE')
"""
SIGNAL_BACKEND = """
SELECT rolsuper OR pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')
FROM pg_roles WHERE rolname = current_user
"""
# Whether the schema's owner, as whom acquire runs (SECURITY DEFINER), may end the session
# of an advisory holder stopped past its horizon (functions.sql, evict()).
OWNER_SIGNALS = """
SELECT r.rolname, r.rolsuper OR pg_has_role(r.oid, 'pg_signal_backend', 'MEMBER')
FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = %(schema)s
"""
# Without pg_monitor (or pg_read_all_stats) a role sees the rows but not sync_state.
REPLICATION = """
SELECT current_setting('synchronous_standby_names'),
       array(SELECT coalesce(sync_state, '?') FROM pg_stat_replication ORDER BY pid)
"""
SYNCHRONOUS_COMMIT = "SELECT current_setting('synchronous_commit')"
CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
SHORTEST_STEP = """
SELECT extract(epoch FROM min(candidate_step))::float8 FROM {schema}.jobs
WHERE candidates IS NOT NULL
"""
CONNECTIONS = """
SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
       current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int
"""
ROLE_TIMEOUTS = """
SELECT name, setting::bigint FROM pg_settings
WHERE name IN ('idle_session_timeout', 'statement_timeout', 'lock_timeout')
ORDER BY name
"""
BACKEND_PID = "SELECT pg_backend_pid()"
CAN_CREATE_IN = "SELECT has_schema_privilege(%(schema)s, 'CREATE')"


def diagnose(target: Target, schema_name: str, conninfo: str, *, timeout: float,
             purpose: Purpose | None = None) -> Diagnosis:
    """Run every check against `conninfo` (the resolved `target`), judged for `purpose`
    (None: the widest this role can do)."""
    findings = [_target(target), _password(target)]
    try:
        conn = database.connect(conninfo, application_name="pglock doctor", timeout=timeout)
    except DatabaseError as error:
        findings.append(_unreachable(conninfo, str(error)))
        return Diagnosis(database.describe(conninfo), findings)
    with conn:
        place = database.EMBEDDED_PLACE if target.embedded else database.place(conn)
        findings.append(_guarded("server", lambda: _server(conn, place)))
        findings.append(_guarded("engine", lambda: _engine(conn)))
        named: tuple[platforms.Platform, str] | None = None
        if not target.embedded:
            try:
                named = platforms.identify(_reported(conn, timeout))
                findings.append(_platform(named))
            except (psycopg.Error, DatabaseError) as error:
                findings.append(Finding("platform", Level.WARN,
                                        f"could not check: {database.first_line(error)}"))
        can: dict[str, bool] | None = None
        try:
            found, can = _schema(conn, schema_name)
        except (psycopg.Error, DatabaseError) as error:
            found = Finding("schema", Level.WARN, f"could not check: {database.first_line(error)}")
        judged = purpose or _widest(can)
        findings.append(_for_purpose(found, can, purpose))
        checks: list[tuple[str, Callable[[], Finding]]] = [
            ("census", lambda: census(conn, schema_name, judged)),
            ("terminate", lambda: _signal_backend(conn, judged)),
            ("evict", lambda: _owner_signals(conn, schema_name)),
            ("timeouts", lambda: _timeouts(conn)),
            ("commit", lambda: _synchronous_commit(conn)),
            ("connections", lambda: _connections(conn)),
        ]
        # The embedded server is on this host, direct, and alone: nothing more to see.
        if not target.embedded:
            if named is not None and named[0].failover is not None:
                platform = named[0]
                checks.append(("failover", lambda: failover(platform, configured_ttls(),
                                                            judged)))
            checks += [
                ("pooling", lambda: _pooling(conn, conninfo, timeout, judged)),
                ("replication", lambda: _replication(conn, judged)),
                ("clock", lambda: _clock(conn, schema_name)),
            ]
        checks.append(("candidates", _rosters))
        findings += [_guarded(name, check) for name, check in checks]
    return Diagnosis(place, findings)


def embedded_not_running(target: Target) -> Diagnosis:
    """The embedded server is not running: doctor does not start it (it changes nothing),
    so there is no server to check."""
    return Diagnosis(database.EMBEDDED_PLACE, [
        _target(target), _password(target),
        Finding("server", Level.WARN, "the embedded server is not running; doctor does not "
                "start it (the next pglock command that needs it does)",
                "run doctor while a job runs, or after `pglock status` started it")])


def _guarded(name: str, check: Callable[[], Finding]) -> Finding:
    """A check the server refused is a finding too, not the end of the diagnosis."""
    try:
        return check()
    except (psycopg.Error, DatabaseError) as error:
        return Finding(name, Level.WARN, f"could not check: {database.first_line(error)}")


def _target(target: Target) -> Finding:
    if target.embedded:
        return Finding("database", Level.WARN,
                       "the embedded server: this host only, other hosts cannot see these locks",
                       "set PGLOCK_DSN (or dsn in the config file) to a PostgreSQL every "
                       "host of the fleet reaches")
    return Finding("database", Level.OK, f"from {target.source}")


def _password(target: Target) -> Finding:
    """A password on the command line is readable by every local user (ps) while pglock
    runs; in a config file, by whoever may read the file."""
    if target.conninfo is None or not database.carries_password(target.conninfo):
        return Finding("password", Level.OK, "no password in the DSN" if target.conninfo
                       is not None else "the embedded server: no password")
    advice = ("put the password in ~/.pgpass (mode 0600) or PGPASSFILE, or use a service "
              "file (PGSERVICE) or a client certificate (docs/security.md)")
    if target.source == "--dsn":
        return Finding("password", Level.WARN, "the DSN given with --dsn carries a password: "
                       "every local user can read it (ps) while pglock runs", advice)
    if target.source.startswith("config file"):
        import os
        import stat

        from pglock.settings.config import read_config_file

        path, _ = read_config_file()
        if path is not None and os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return Finding("password", Level.WARN, f"the DSN of {target.source} carries a "
                           "password and the file is readable by others than its owner",
                           f"chmod 600 the file, or: {advice}")
    return Finding("password", Level.OK, f"the DSN of {target.source} carries a password, "
                   "readable only by this user")


def _unreachable(conninfo: str, error: str) -> Finding:
    """The read-write connection failed: a standby alone, or no server at all."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5,
                             target_session_attrs="any") as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    except psycopg.Error:
        row = None
    if row and row[0]:
        return Finding("connection", Level.FAIL,
                       f"{database.describe(conninfo)} is a standby (in recovery): pglock "
                       "refuses to lock there",
                       "point the DSN at the primary, or list every node with "
                       "target_session_attrs=read-write (pglock adds it) or use the HA "
                       "service's primary endpoint")
    return Finding("connection", Level.FAIL, error.removeprefix("pglock: "),
                   "check the DSN, the network and pg_hba.conf")


def _server(conn: psycopg.Connection[Any], place: str) -> Finding:
    row = conn.execute(SERVER).fetchone()
    assert row is not None
    number, version, _recovery, user, _dbname = row
    detail = f"{place}: PostgreSQL {version}, the primary, as role {user}"
    if number < MIN_VERSION:
        return Finding("server", Level.WARN, detail,
                       "advisory mode and clear --terminate need PostgreSQL 14 or later")
    return Finding("server", Level.OK, detail)


def _engine(conn: psycopg.Connection[Any]) -> Finding:
    """The engine behind the protocol, and whether its advisory locks lock (db/engine.py)."""
    row = conn.execute(VERSION_TEXT).fetchone()
    assert row is not None
    found = engine.identify(conn.info.parameter_status("server_version"),
                            conn.info.parameter_status("crdb_version"), row[0])
    if found.name == "PostgreSQL":
        return Finding("engine", Level.OK, f"{found}: leases and session advisory locks")
    if found.name == "CockroachDB":
        return Finding("engine", Level.FAIL, f"{found}: {found.advisory}, so `run --mode "
                       "advisory` is refused; pglock is built and tested for PostgreSQL",
                       "use PostgreSQL (docs/advisory.md, Engines)")
    if found.advisory is not None:
        return Finding("engine", Level.WARN, f"{found}: {found.advisory}, so `run --mode "
                       "advisory` fails; pglock is built and tested for PostgreSQL",
                       "use --mode lease, or YugabyteDB 2.25.1 or later with its advisory "
                       "locks enabled (docs/advisory.md, Engines)")
    return Finding("engine", Level.WARN, f"{found}: advisory locks from 2.25.1, behind server "
                   "flags; pglock is built and tested for PostgreSQL",
                   "enable YugabyteDB's advisory locks before --mode advisory, or use --mode "
                   "lease (docs/advisory.md, Engines)")


def _widest(can: dict[str, bool] | None) -> Purpose:
    """The purpose a role is judged by when none is given: the widest it can do (an
    unknown one, the schema's owner or a role that can do nothing, as an operator)."""
    if can is None or can["operate (clear, prune, pause, resume, stop, replay, forget)"]:
        return Purpose.OPERATOR
    return Purpose.RUNNER if can["run jobs"] else Purpose.READER


def _for_purpose(found: Finding, can: dict[str, bool] | None,
                 purpose: Purpose | None) -> Finding:
    """The schema's finding judged for the host's purpose: what it needs and cannot do is
    a FAIL; what it cannot do and does not need is least privilege at work."""
    if can is None or found.level is Level.FAIL:
        return found
    if purpose is None:
        return Finding("schema", Level.OK, f"{found.detail} (judged as "
                       f"{_widest(can).host}: --purpose says otherwise)")
    needed = [what for what, yes in can.items() if not yes and CAN[what] is purpose]
    if needed:
        return Finding("schema", Level.FAIL, f"{found.detail}; {purpose.host} needs to "
                       f"{needed[0]}", f"`pglock init --print-grants --{purpose}-role ROLE`, "
                       "run by the schema's owner (docs/security.md)")
    return Finding("schema", Level.OK, found.detail)


def _schema(conn: psycopg.Connection[Any], name: str) -> tuple[Finding, dict[str, bool] | None]:
    """The schema's finding, and what this role can do with it (None: not known)."""
    finding = _schema_state(conn, name)
    if isinstance(finding, Finding):
        return finding, None
    return _capabilities(conn, name, finding)


def _schema_state(conn: psycopg.Connection[Any], name: str) -> Finding | int:
    """The schema's version, or the finding that ends the check."""
    exists = conn.execute(SCHEMA_EXISTS, {"schema": name}).fetchone()
    if exists is None:
        row = conn.execute(CAN_CREATE_SCHEMA).fetchone()
        if row and row[0]:
            return Finding("schema", Level.OK,
                           f"schema {name!r} does not exist yet; the first run creates it "
                           f"(version {schema.VERSION}, as this pglock needs)")
        return Finding("schema", Level.FAIL,
                       f"schema {name!r} does not exist and this role may not create it",
                       "a DBA applies `pglock init --print-sql`, then "
                       "`pglock init --print-grants --runner-role ROLE` (docs/security.md)")
    if not exists[0]:
        return Finding("schema", Level.FAIL, f"schema {name!r} exists but this role lacks USAGE",
                       f"GRANT USAGE ON SCHEMA {name} TO the pglock role")
    try:
        with conn.transaction():
            row = conn.execute(schema.query(SCHEMA_VERSION, name)).fetchone()
    except psycopg.errors.UndefinedTable:
        row = None
    except psycopg.errors.InsufficientPrivilege as error:
        return Finding("schema", Level.FAIL, f"cannot read schema {name!r}: "
                       f"{database.first_line(error)}",
                       "`pglock init --print-grants --runner-role ROLE` (or --reader-role), "
                       "run by the schema's owner (docs/security.md)")
    if row is None and not (found := schema.tables(conn, name)):
        # Made empty for pglock (a DBA's CREATE SCHEMA): its first run creates the tables.
        created = conn.execute(CAN_CREATE_IN, {"schema": name}).fetchone()
        if created and created[0]:
            return Finding("schema", Level.OK, f"schema {name!r} is empty; the first run "
                           f"creates pglock's tables in it (version {schema.VERSION})")
        return Finding("schema", Level.FAIL,
                       f"schema {name!r} is empty and this role may not create in it",
                       "a DBA applies `pglock init --print-sql`, then "
                       "`pglock init --print-grants --runner-role ROLE` (docs/security.md)")
    if row is None:
        return Finding("schema", Level.FAIL,
                       f"schema {name!r} holds tables that are not pglock's "
                       f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}), which "
                       "every pglock command refuses",
                       "give pglock a schema of its own (--schema, PGLOCK_SCHEMA, or schema "
                       "in the config file)")
    if row[0] > schema.VERSION:
        return Finding("schema", Level.FAIL,
                       f"schema {name!r} is version {row[0]}, newer than this pglock "
                       f"({schema.VERSION})", "upgrade pglock on this host")
    return int(row[0])


def _capabilities(conn: psycopg.Connection[Any], name: str,
                  version: int) -> tuple[Finding, dict[str, bool] | None]:
    """What this role may do with the schema: run jobs, read reports, operate."""
    if version < 4:
        return Finding("schema", Level.OK, f"schema {name!r} version {version}; the next run "
                       f"upgrades it to {schema.VERSION}"), None
    quoted = '"' + name.replace('"', '""') + '"'
    from pglock.operate import roles

    row = conn.execute(CAPABILITIES, {
        "acquire": f"{quoted}.{roles.RUN_FUNCTIONS[0]}", "jobs": f'{quoted}."jobs"',
        "runs": f'{quoted}."runs"', "locks": f'{quoted}."locks"',
        "audit": f'{quoted}."audit"'}).fetchone()
    assert row is not None
    can = dict(zip(CAN, (bool(v) for v in row), strict=True))
    able = [what for what, yes in can.items() if yes]
    unable = [what for what, yes in can.items() if not yes]
    needs = ("as this pglock needs" if version == schema.VERSION
             else f"the next run upgrades it to {schema.VERSION}")
    detail = f"schema {name!r} version {version}, {needs}; this role can " + (
        "; ".join(able) if able else "do nothing with it")
    if unable:
        detail += "; it cannot " + "; ".join(unable)
    advice = ("if this host needs it: `pglock init --print-grants --runner-role ROLE` (or "
              "--reader-role, --operator-role), run by the schema's owner "
              "(docs/security.md)")
    if not able:
        return Finding("schema", Level.FAIL, detail, advice), can
    # What it cannot do is judged by the host's purpose (_for_purpose).
    return Finding("schema", Level.OK, detail), can


def census(conn: psycopg.Connection[Any], schema_name: str, purpose: Purpose) -> Finding:
    """The fleet's pglock versions (skew: hosts on an older one than the newest seen) and
    its silent hosts (one that can no longer run the schema's version is one of them),
    from the census (docs/operators.md). Read only when the schema is this version's."""
    try:
        with conn.transaction():
            row = conn.execute(schema.query(SCHEMA_VERSION, schema_name)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        row = None
    if row is None or row[0] != schema.VERSION:
        return Finding("census", Level.OK, f"no census to read yet (it comes with schema "
                       f"version {schema.VERSION}; the next run creates or upgrades it)")
    from pglock.reports import hosts

    try:
        with conn.transaction():
            found = hosts.read(conn, schema_name)
    except PglockError as error:
        if purpose is Purpose.RUNNER:
            return Finding("census", Level.OK, f"not readable by this role, which "
                           f"{purpose.host} does not need ({database.first_line(error)})")
        return Finding("census", Level.WARN, f"could not read it: {database.first_line(error)}",
                       "`pglock init --print-grants --reader-role ROLE`, run by the schema's "
                       "owner after each upgrade (docs/security.md)")
    return census_finding(found)


def census_finding(found: Any) -> Finding:
    """The census judged: WARN for version skew or a silent host, naming them."""
    from pglock.settings.text import escaped

    if not found.hosts:
        return Finding("census", Level.OK, "no host in the census yet (each run adds its own)")
    versions = ", ".join(f"{escaped(v)} on {n}" for v, n in found.versions.most_common())
    detail = f"{len(found.hosts)} hosts, pglock {versions}"
    problems, advice = [], []
    if found.skewed:
        older = ", ".join(escaped(h.name) for h in found.skewed[:10])
        more = f" and {len(found.skewed) - 10} more" if len(found.skewed) > 10 else ""
        problems.append(f"version skew: older than {escaped(found.newest)}: {older}{more}")
        advice.append("upgrade pglock on the older hosts (pglock hosts marks them)")
    silent = [h for h in found.hosts if h.silent_jobs]
    if silent:
        named = ", ".join(f"{escaped(h.name)} ({', '.join(escaped(j) for j in h.silent_jobs)})"
                          for h in silent[:10])
        problems.append(f"silent: {named}" + (f" and {len(silent) - 10} more"
                                              if len(silent) > 10 else ""))
        advice.append("check those hosts' crontabs and pglock (one that cannot run this "
                      "schema's version stops attempting), or pglock forget-host NAME for a "
                      "host retired")
    drifting = found.drifting
    if drifting:
        named = "; ".join(
            f"{escaped(job)} ("
            + ", ".join(f"{format_duration(ttl)} on {', '.join(map(escaped, hosts))}"
                        for ttl, hosts in ttls.items()) + ")"
            for job, ttls in list(drifting.items())[:10])
        problems.append(f"hosts of one job on different ttls: {named}"
                        + (f" and {len(drifting) - 10} more" if len(drifting) > 10 else ""))
        advice.append("give every host of a job one ttl (the jobs file's `ttl`; the wait "
                      "after a promotion is the longest: docs/ha.md, \"One ttl per job\")")
    if not problems:
        return Finding("census", Level.OK, f"{detail}; none silent")
    return Finding("census", Level.WARN, f"{detail}; " + "; ".join(problems), "; ".join(advice))


def _signal_backend(conn: psycopg.Connection[Any], purpose: Purpose) -> Finding:
    row = conn.execute(SIGNAL_BACKEND).fetchone()
    if row and row[0]:
        return Finding("terminate", Level.OK, "this role may end a holder's backend "
                       "(clear --terminate)")
    if purpose is not Purpose.OPERATOR:
        return Finding("terminate", Level.OK, f"no pg_signal_backend, which {purpose.host} "
                       "does not need (only clear --terminate does)")
    return Finding("terminate", Level.WARN,
                   "this role lacks pg_signal_backend: clear --terminate cannot end an advisory "
                   "holder's session", "GRANT pg_signal_backend TO the pglock role (optional)")


def _owner_signals(conn: psycopg.Connection[Any], schema_name: str) -> Finding:
    """An advisory holder stopped past its horizon (Ctrl-Z, a debugger) keeps its session
    and its session lock: the next contender ends that session (evict(), as the schema's
    owner), which needs superuser or pg_signal_backend on the owner."""
    row = conn.execute(OWNER_SIGNALS, {"schema": schema_name}).fetchone()
    if row is None:
        return Finding("evict", Level.OK, f"schema {schema_name!r} does not exist yet: its "
                       "owner will be the role that creates it")
    owner, signals = row
    if signals:
        return Finding("evict", Level.OK, f"the schema's owner {owner!r} may end the session "
                       "of an advisory holder stopped past its lock's horizon")
    return Finding("evict", Level.WARN,
                   f"the schema's owner {owner!r} lacks pg_signal_backend: an advisory job "
                   "whose holder is stopped (Ctrl-Z, a debugger) is skipped by every host "
                   "until that holder wakes or is cleared",
                   f"GRANT pg_signal_backend TO {owner} (or use lease mode)")


def _pooling(conn: psycopg.Connection[Any], conninfo: str, timeout: float,
             purpose: Purpose) -> Finding:
    """Transaction pooling hands one client's statements to several server sessions.

    A second client asks right after the first: a pooler gives it the server session the
    first just released (PgBouncer reuses the last one first), which a direct connection
    never does; and the first client's next statement may come from another session.
    """
    changed = False
    with database.connect(conninfo, application_name="pglock doctor", timeout=timeout) as other:
        for _ in range(3):
            first = _pid(conn)
            if _pid(other) == first or _pid(conn) != first:
                changed = True
                break
    name = platforms.pooler(conn.info.host, str(conn.info.port), changed)
    if changed:
        # A reader takes no lock: a pooler is no concern of its own.
        return Finding("pooling", Level.OK if purpose is Purpose.READER else Level.WARN,
                       f"{name} is in the path (one connection's server session changed "
                       "between two transactions): advisory mode refuses to run here",
                       "use --mode lease (the default) through it, or connect advisory "
                       "jobs directly or through session pooling (docs/platforms.md)")
    if name is not None:
        return Finding("pooling", Level.OK, f"{name}: each connection keeps its own server "
                       "session")
    return Finding("pooling", Level.OK, "each connection keeps its own server session")


def _reported(conn: psycopg.Connection[Any], timeout: float) -> platforms.Reported:
    """What the server says of itself, for platforms.identify."""
    row = conn.execute(platforms.REPORTED, {
        "prefixes": [prefix + "%" for prefix in platforms.SETTING_PREFIXES],
        "roles": list(platforms.ROLES)}).fetchone()
    assert row is not None
    settings, roles, aurora = row
    version = _aurora_version(conn, timeout) if aurora else None
    return platforms.Reported(version, frozenset(settings), frozenset(roles))


def _aurora_version(conn: psycopg.Connection[Any], timeout: float) -> str:
    """aurora_version()'s answer, shown safely; within --connect-timeout, as every other
    wait of doctor's (a function of that name may be anyone's, and take any time)."""
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('statement_timeout', %s, true)",
                         (f"{max(1, round(timeout * 1000))}ms",))
            answer = conn.execute(platforms.AURORA_VERSION,
                                  {"most": platforms.AURORA_SHOWN + 1}).fetchone()
    except psycopg.errors.QueryCanceled:
        return f"(no answer within {timeout:g}s)"
    return platforms.aurora_answer(None if answer is None else answer[0])


def _platform(found: tuple[platforms.Platform, str] | None) -> Finding:
    if found is None:
        return Finding("platform", Level.OK, "no managed service recognised (a server of "
                       "your own, Patroni, or one doctor does not know: docs/platforms.md)")
    platform, clues = found
    failover = ("" if platform.failover is None
                else f"; failovers take up to {platform.failover:g} s ({platform.source})")
    return Finding("platform", Level.OK, f"{platform.name} ({clues}){failover}")


def configured_ttls() -> dict[str, tuple[float, float]]:
    """The ttl and kill-after each job of the jobs file runs with, and `run`'s own for
    the jobs it does not list (PGLOCK_TTL, PGLOCK_KILL_AFTER, else the defaults)."""
    import os

    from pglock.run import flags, jobsfile
    from pglock.settings.durations import parse_duration

    def durations(values: Mapping[str, Any]) -> tuple[float, float]:
        """The ttl and kill-after a job's values give, else as `run` reads them."""
        ttl, kill_after = (parse_duration(str(
            values[name] if values.get(name) is not None
            else os.environ.get(flags.ENVIRONMENT[name]) or flags.DEFAULTS[name]))
            for name in ("ttl", "kill_after"))
        return ttl, kill_after

    ttls = {"": durations({})}
    try:
        _, jobs = jobsfile.every_job()
    except PglockError:
        return ttls
    for job in jobs:
        ttls[job.name] = durations(job.values)
    return ttls


def failover(platform: platforms.Platform, ttls: dict[str, tuple[float, float]],
             purpose: Purpose) -> Finding:
    """Whether the jobs' ttls ride out the platform's failover (docs/ttl.md's rule): each
    job's (name -> ttl, kill-after; "" is run's own, for jobs the jobs file does not
    list). A reader runs nothing: said, not warned."""
    assert platform.failover is not None
    short = {name: ttl for name, (ttl, kill_after) in ttls.items()
             if heartbeat.rides_out(ttl, kill_after) < platform.failover}
    if not short:
        return Finding("failover", Level.OK, f"every ttl rides out a failover of "
                       f"{platform.failover:g} s")
    shown = ", ".join(f"{name or 'the default'} ({format_bound(ttl)})"
                      for name, ttl in sorted(short.items()))
    enough = heartbeat.ttl_for(platform.failover, ttls[""][1])
    advice = (f"a ttl of at least {format_bound(enough)} for the jobs that must outlive a "
              "failover (docs/ttl.md, docs/platforms.md; a longer ttl also keeps a dead "
              "host's jobs locked longer)")
    return Finding("failover", Level.OK if purpose is Purpose.READER else Level.WARN,
                   f"{platform.name} fails over in up to {platform.failover:g} s; a running "
                   f"command is stopped by a failover that long at the ttl of {shown}",
                   advice)


def _pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(BACKEND_PID).fetchone()
    assert row is not None
    return int(row[0])


def _replication(conn: psycopg.Connection[Any], purpose: Purpose) -> Finding:
    row = conn.execute(REPLICATION).fetchone()
    assert row is not None
    names, states = row
    synchronous = sum(state in ("sync", "quorum") for state in states)
    ha_advice = ("make a standby synchronous: synchronous_standby_names, Patroni "
                 "synchronous_mode (and synchronous_mode_strict), or the managed service's "
                 "HA setting (docs/ha.md)")
    if not states:
        if names:
            return Finding("replication", Level.FAIL,
                           f"synchronous_standby_names = {names!r} but no standby is connected: "
                           "every write waits for one (pglock run cancels its own at "
                           "--connect-timeout and exits 125; Patroni's "
                           "synchronous_mode_strict does this when no standby is left)",
                           "start the standby, or clear synchronous_standby_names")
        # Whether the database should have a standby is the operator's (or DBA's) call,
        # not a runner's or reader's host's: there, it is said, not warned.
        return Finding("replication", _operators(purpose),
                       "no standby streams from this server: a failover (if any) has nothing "
                       "up to date to promote",
                       "fine for one server; for HA, " + ha_advice +
                       " (a managed service's replicas may not show here)")
    if "?" in states:
        # A least-privilege role has no pg_monitor: its doctor cannot see, not a fault.
        return Finding("replication", _operators(purpose),
                       f"{len(states)} standby(s), their sync state hidden from this role",
                       "GRANT pg_monitor TO the pglock role to let doctor see it")
    if not synchronous:
        return Finding("replication", Level.WARN,
                       f"{len(states)} standby(s), none synchronous: a failover can lose the "
                       "last writes; no job then runs twice at once (each waits a ttl after "
                       "the promotion, tokens rise), but a run whose end was lost looks "
                       "unfinished and its slot may run again",
                       ha_advice)
    return Finding("replication", Level.OK,
                   f"{len(states)} standby(s), {synchronous} synchronous: an acknowledged "
                   "lock and run survive a failover (a new holder waits a ttl after the "
                   "promotion: docs/ha.md)")


def _operators(purpose: Purpose) -> Level:
    """A finding about the database as a whole: a WARN for the operator, said (OK) to the
    other hosts, which cannot change it."""
    return Level.WARN if purpose is Purpose.OPERATOR else Level.OK


def _synchronous_commit(conn: psycopg.Connection[Any]) -> Finding:
    row = conn.execute(SYNCHRONOUS_COMMIT).fetchone()
    assert row is not None
    value = row[0]
    if value in ("off", "local"):
        return Finding("commit", Level.OK, f"synchronous_commit = {value} for this role; "
                       "pglock's own writes set it to on")
    return Finding("commit", Level.OK, f"synchronous_commit = {value}")


def _clock(conn: psycopg.Connection[Any], schema_name: str) -> Finding:
    """The host's wall clock against the server's, to within half a round trip; and
    against the shortest --candidate-step of the jobs run with --candidates (a host whose
    cron fires more than a step off tries out of its turn: the lock still decides)."""
    before = time.time()
    row = conn.execute(CLOCK).fetchone()
    after = time.time()
    assert row is not None
    skew = (before + after) / 2 - row[0]
    uncertainty = (after - before) / 2
    detail = f"this host's clock is {abs(skew):.2f}s {'ahead of' if skew > 0 else 'behind'} " \
             f"the server's (±{uncertainty:.2f}s)"
    step = _shortest_step(conn, schema_name)
    if step is not None and abs(skew) - uncertainty > step:
        return Finding("clock", Level.WARN, f"{detail}, more than --candidate-step "
                       f"({step:g}s): its cron fires out of its turn among the candidates "
                       "(the lock still decides: a step later or sooner, never twice)",
                       "run NTP (chrony, systemd-timesyncd) here")
    if abs(skew) - uncertainty > CLOCK_SKEW_WARN:
        return Finding("clock", Level.WARN, detail,
                       "run NTP (chrony, systemd-timesyncd) here: --schedule reads slots on "
                       "the host clock, and --min-hold must cover the skew")
    return Finding("clock", Level.OK, detail)


def _shortest_step(conn: psycopg.Connection[Any], schema_name: str) -> float | None:
    """The shortest --candidate-step any job's last run recorded (None: none, or not read)."""
    try:
        with conn.transaction():
            row = conn.execute(schema.query(SHORTEST_STEP, schema_name)).fetchone()
    except psycopg.Error:
        return None
    return None if row is None or row[0] is None else float(row[0])


def _rosters() -> Finding:
    """Where this host keeps the rosters of its jobs run with --candidates: a directory it
    cannot write makes every trigger of those jobs contend (docs/fleet.md)."""
    from pglock.run import membership

    where = membership.state_dir()
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK) or (probe == where and not where.is_dir()):
        return Finding("candidates", Level.WARN, f"{where} cannot be written: the jobs run "
                       "with --candidates contend at every trigger on this host",
                       "make it writable by the user cron runs pglock as, or set "
                       "XDG_DATA_HOME to a directory that is")
    kept = len(list(where.glob("*.json"))) if where.is_dir() else 0
    return Finding("candidates", Level.OK, f"rosters kept in {where} ({kept} "
                   f"job{'s' if kept != 1 else ''})")


def _connections(conn: psycopg.Connection[Any]) -> Finding:
    row = conn.execute(CONNECTIONS).fetchone()
    assert row is not None
    used, limit, reserved = row
    usable = max(1, limit - reserved)
    detail = f"{used} of {usable} connections in use (max_connections {limit})"
    if used / usable > CONNECTIONS_WARN:
        return Finding("connections", Level.WARN, detail,
                       "each running lease-mode job holds two, a skipped host one briefly: "
                       "raise max_connections or put PgBouncer (transaction pooling, lease "
                       "mode) in front (docs/ha.md)")
    return Finding("connections", Level.OK, detail)


def _timeouts(conn: psycopg.Connection[Any]) -> Finding:
    values = dict(conn.execute(ROLE_TIMEOUTS).fetchall())
    problems = []
    if values.get("idle_session_timeout", 0) > 0:
        problems.append(f"idle_session_timeout {values['idle_session_timeout']}ms ends a lease "
                        "holder's idle session (it reconnects, at a cost)")
    for name in ("statement_timeout", "lock_timeout"):
        if 0 < values.get(name, 0) < TIMEOUT_WARN_MS:
            problems.append(f"{name} {values[name]}ms can cancel a write waiting for a row "
                            "lock or a synchronous standby")
    if problems:
        return Finding("timeouts", Level.WARN, "; ".join(problems),
                       "ALTER ROLE <pglock role> SET idle_session_timeout = 0 (and "
                       "statement_timeout, lock_timeout = 0 or >= 10s)")
    return Finding("timeouts", Level.OK,
                   "no role timeout cuts pglock's sessions (idle_session_timeout, "
                   "statement_timeout, lock_timeout)")
