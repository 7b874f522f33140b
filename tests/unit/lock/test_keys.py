"""The advisory-lock key: documented in docs/advisory.md, so a DBA can find holders."""

from __future__ import annotations

import hashlib

import pytest

from pglock.db.keys import advisory_key


# Pinned: a change here moves every job to another lock, and breaks the DBA's queries.
@pytest.mark.parametrize(("schema", "job", "key"), [
    ("pglock", "nightly-backup", -1819656384410338866),
    ("pglock", "", -7310385809441262363),
    ("app_locks", "sync-invoices", 1015667976855345512),
    ("pglock", "sync-ü-日本", 5257000022482308518),
])
def test_advisory_keys_are_pinned(schema: str, job: str, key: int) -> None:
    assert advisory_key(schema, job) == key


@pytest.mark.parametrize(("schema", "job"), [("pglock", "nightly-backup"),
                                             ("app_locks", "sync-invoices"), ("a:b", "c")])
def test_the_key_is_the_documented_formula(schema: str, job: str) -> None:
    # A colon (or backslash) in the schema name is escaped, as documented.
    quoted = schema.replace("\\", "\\\\").replace(":", "\\:")
    digest = hashlib.sha256(("pglock:" + quoted + ":" + job).encode()).digest()
    assert advisory_key(schema, job) == int.from_bytes(digest[:8], "big", signed=True)


@pytest.mark.parametrize(("schema", "job"), [("pglock", "nightly-backup"), ("pglock", "")])
def test_the_documented_pg_locks_query_finds_the_key(schema: str, job: str) -> None:
    """pg_locks splits a bigint key into classid (high 32 bits) and objid (low 32 bits),
    both unsigned; the documented `(classid::bigint << 32) | objid::bigint` wraps to it."""
    key = advisory_key(schema, job)
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    classid, objid = unsigned >> 32, unsigned & 0xFFFF_FFFF
    shifted = (classid << 32) & 0xFFFF_FFFF_FFFF_FFFF  # bigint << wraps in PostgreSQL
    combined = shifted | objid
    assert combined - (1 << 64 if combined >= 1 << 63 else 0) == key


def test_the_same_job_in_two_schemas_has_two_keys() -> None:
    assert advisory_key("pglock", "x") != advisory_key("other", "x")


def test_schema_and_job_cannot_be_confused() -> None:
    assert advisory_key("a", "b:c") != advisory_key("a:b", "c")
