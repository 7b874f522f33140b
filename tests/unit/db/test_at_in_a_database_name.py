"""An @ in a database name is a database name, not a password cut short (issue 21, item 8):
in keyword form always, in a URI when nothing before it can hold a password; a URI whose @
may still end a password keeps the percent-encode refusal."""

from __future__ import annotations

import pytest

from pglock.db import database, redact


@pytest.mark.parametrize(("conninfo", "shown"), [
    ("host=db dbname=app@eu user=ops", "db:5432/app@eu"),
    ("postgresql:///app@eu?host=db", "db:5432/app@eu"),
    ("postgresql://db/app@eu", "db:5432/app@eu"),
    ("postgresql://db/app@eu?user=ops", "db:5432/app@eu"),
    ("postgresql://ops:pw@db:6432/app%40eu", "db:6432/app@eu"),
    ("postgresql://postgres@127.0.0.1:5433/a@b", "127.0.0.1:5433/a@b"),  # sweep L11
    ("postgresql://ops@db/app@eu", "db:5432/app@eu"),
])
def test_an_at_in_the_database_name_is_shown_as_written(conninfo: str, shown: str) -> None:
    assert not redact.misread(conninfo)
    assert database.describe(conninfo) == shown


@pytest.mark.parametrize("conninfo", [
    "postgresql://ops:Zm9v/YmFy@db/app",      # a / in the password
    "postgresql://ops:p@ss@db/app",           # an @ in the password
    "postgresql://ops:1234/x@db/app",         # host:port/db@x or user:pass/word@host
    "postgresql://ops:p@ss/x@db",             # or user ops, password p, host ss, db x@db
    "postgresql://ops:pw@db/app@eu",          # the same shape
])
def test_a_uri_whose_password_may_be_cut_is_still_refused(conninfo: str) -> None:
    assert redact.misread(conninfo)
    assert database.describe(conninfo) == "the configured database"
