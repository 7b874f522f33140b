"""The advisory-lock key of a job, documented so a DBA can find it in pg_locks."""

from __future__ import annotations


def advisory_key(schema: str, job: str) -> int:
    """First 8 bytes of sha256("pglock:" + schema + ":" + job), as a signed bigint.

    A backslash or colon in the schema name is escaped with a backslash, so that schema
    "a:b" with job "c" and schema "a" with job "b:c" are two locks; the keys of schemas
    without them (every usual name) are as documented.
    """
    # Imported here: most runs (lease mode, schema present) never need it, and every
    # millisecond of `pglock run`'s start-up counts.
    import hashlib

    escaped = schema.replace("\\", "\\\\").replace(":", "\\:")
    digest = hashlib.sha256(f"pglock:{escaped}:{job}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
