"""The advisory-lock key of a job, documented so a DBA can find it in pg_locks."""

from __future__ import annotations


def advisory_key(schema: str, job: str) -> int:
    """First 8 bytes of sha256("pglock:" + schema + ":" + job), as a signed bigint."""
    # Imported here: most runs (lease mode, schema present) never need it, and every
    # millisecond of `pglock run`'s start-up counts.
    import hashlib

    digest = hashlib.sha256(f"pglock:{schema}:{job}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
