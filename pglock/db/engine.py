"""Which engine answers: PostgreSQL, or one that only speaks its protocol (issue 21, item 9).

CockroachDB accepts pg_try_advisory_lock() and friends and locks nothing (they are no-ops
that return true): two hosts would both get an advisory lock. YugabyteDB has real
advisory locks from 2.25.1 only, behind server flags; before that they are refused with
an error. Both say who they are in what every server sends when a session starts (the
`server_version` and `crdb_version` parameters), so telling them apart costs no round
trip; `version()` text, when a caller has it, says the same.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from pglock.errors import DatabaseError

if TYPE_CHECKING:
    from typing import Any

    import psycopg

# YugabyteDB's server_version: "11.2-YB-2.25.1.0-b0" (version(): "PostgreSQL 11.2-YB-...").
_YUGABYTE = re.compile(r"-YB-(\d+)\.(\d+)\.(\d+)")
# CockroachDB's crdb_version and version(): "CockroachDB CCL v23.1.11 (x86_64-...)".
_COCKROACH = re.compile(r"CockroachDB(?: \w+)? v?(\d[\w.-]*)")
# The first YugabyteDB with advisory locks.
YUGABYTE_ADVISORY = (2, 25, 1)


class Engine(NamedTuple):
    """The engine, its version as it gives it, and whether its advisory locks lock."""

    name: str
    version: str
    # None: real session advisory locks; else what stands in the way.
    advisory: str | None

    def __str__(self) -> str:
        return f"{self.name} {self.version}".strip()


def identify(server_version: str | None, crdb_version: str | None = None,
             version_text: str | None = None) -> Engine:
    """The engine from the session's `server_version` and `crdb_version` parameters, or
    from `version()` text (any may be None)."""
    texts = [t for t in (crdb_version, version_text, server_version) if t]
    for text in texts:
        if (found := _COCKROACH.search(text)) is not None:
            return Engine("CockroachDB", found.group(1),
                          "its advisory-lock functions lock nothing (they always succeed)")
    for text in texts:
        if (found := _YUGABYTE.search(text)) is not None:
            release = tuple(int(n) for n in found.groups())
            version = ".".join(found.groups())
            if release < YUGABYTE_ADVISORY:
                return Engine("YugabyteDB", version, "no advisory locks before 2.25.1 (the "
                              "functions fail)")
            return Engine("YugabyteDB", version, None)
    if crdb_version:
        # A CockroachDB whose version text this module does not read.
        return Engine("CockroachDB", crdb_version, "its advisory-lock functions lock nothing "
                      "(they always succeed)")
    return Engine("PostgreSQL", (server_version or "").split(" ")[0], None)


def of(conn: psycopg.Connection[Any]) -> Engine:
    """The engine of an open session, from what it sent at the start (no round trip)."""
    info = conn.info
    return identify(info.parameter_status("server_version"),
                    info.parameter_status("crdb_version"))


def refuse_fake_advisory(conn: psycopg.Connection[Any]) -> None:
    """Advisory mode on an engine whose advisory locks do not lock: refused (exit 125),
    before any lock is asked for. YugabyteDB's refusals are its own errors."""
    engine = of(conn)
    if engine.name == "CockroachDB":
        raise DatabaseError(f"--mode advisory: the server is {engine}, where {engine.advisory}"
                            ": two hosts would both run; advisory mode needs PostgreSQL "
                            "(docs/advisory.md, Engines)")
