"""Engines that only look like PostgreSQL, told apart by what their sessions say when
they start (issue 21, item 9). We have no CockroachDB or YugabyteDB server: these are
the version strings they give."""

from __future__ import annotations

import pytest

from pglock.db import engine

COCKROACH = "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)"


@pytest.mark.parametrize(("server_version", "crdb_version", "version_text", "expected"), [
    # PostgreSQL: server_version alone, as every release sends it.
    ("16.4", None, None, ("PostgreSQL", "16.4", True)),
    ("18.6 (Debian 18.6-1.pgdg120+1)", None, None, ("PostgreSQL", "18.6", True)),
    ("16.4", None, "PostgreSQL 16.4 on x86_64-pc-linux-gnu, compiled by gcc", (
        "PostgreSQL", "16.4", True)),
    # CockroachDB: server_version says 13.0.0; crdb_version (sent at the start) says who.
    ("13.0.0", COCKROACH, None, ("CockroachDB", "23.1.11", False)),
    ("13.0.0", "CockroachDB OSS v21.2.17 (x86_64-unknown-linux-gnu)", None, (
        "CockroachDB", "21.2.17", False)),
    ("13.0.0", None, COCKROACH, ("CockroachDB", "23.1.11", False)),
    ("13.0.0", "v24.1.0-something-new", None, ("CockroachDB", "v24.1.0-something-new", False)),
    # YugabyteDB: real advisory locks from 2.25.1 only.
    ("11.2-YB-2.18.0.0-b0", None, None, ("YugabyteDB", "2.18.0", False)),
    ("11.2-YB-2.25.0.0-b489", None, None, ("YugabyteDB", "2.25.0", False)),
    ("15.12-YB-2.25.1.0-b0", None, None, ("YugabyteDB", "2.25.1", True)),
    ("15.12-YB-2025.1.0.0-b12", None, None, ("YugabyteDB", "2025.1.0", True)),
    ("11.2", None, "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu", (
        "YugabyteDB", "2.20.1", False)),
])
def test_the_engine_and_whether_its_advisory_locks_lock(
        server_version: str, crdb_version: str | None, version_text: str | None,
        expected: tuple[str, str, bool]) -> None:
    found = engine.identify(server_version, crdb_version, version_text)
    assert (found.name, found.version, found.advisory is None) == expected


def test_nothing_known_is_postgresql() -> None:
    assert engine.identify(None) == engine.Engine("PostgreSQL", "", None)
