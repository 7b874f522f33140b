"""An operator's action on the census: `forget-host` retires a decommissioned host, so
that nothing calls it silent any more; an audit row says who, when and why. The host's
next run, if any, brings it back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from pglock.db import database, schema
from pglock.errors import NothingDone

# The host's row and its attendance, and the audit row, in one statement; nothing at all
# for a host the census does not know.
FORGET = """
WITH gone AS (
    DELETE FROM {schema}.hosts WHERE host = %(host)s RETURNING host, version, jobs
), dropped AS (
    DELETE FROM {schema}.attendance a
    WHERE a.host = %(host)s AND EXISTS (SELECT 1 FROM gone)
    RETURNING a.job, a.last_attempt
), audit AS (
    INSERT INTO {schema}.audit (job, host, action, by, reason, detail)
    SELECT NULL, host, 'forget-host', %(by)s, %(reason)s,
           'pglock ' || version || ', attended ' || cardinality(jobs) || ' job(s), last seen '
           || coalesce((SELECT max(last_attempt) FROM dropped)::text, 'before the census '
                       'restarted')
    FROM gone
    RETURNING id
)
SELECT (SELECT count(*) FROM (SELECT job FROM dropped UNION
                              SELECT unnest(jobs) FROM gone) AS j), id
FROM audit
"""


@dataclass(frozen=True)
class Forgotten:
    """What forget-host did: the jobs the host's attendance was of, and its audit row."""

    host: str
    jobs: int
    audit_id: int


def forget(conn: psycopg.Connection[Any], schema_name: str, host: str, *, reason: str,
           by: str) -> Forgotten:
    """Retire `host` from the census; NothingDone (nothing written) when it is unknown."""
    with database.translated(f"cannot forget host {host!r}"):
        schema.existing(conn, schema_name)
        with conn.transaction():
            row = conn.execute(schema.query(FORGET, schema_name),
                               {"host": host, "by": by, "reason": reason}).fetchone()
    if row is None:
        raise NothingDone(f"no host named {host!r} is in the census here (schema "
                          f"{schema_name!r}); pglock hosts lists them")
    return Forgotten(host, int(row[0]), int(row[1]))
