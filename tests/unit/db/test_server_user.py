"""The embedded server's system user under root: when it cannot be created, the line
says why (cron's PATH has no useradd; useradd's own complaint)."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from pglock.db import embedded

# A name no host has, so that _server_user always tries to create it.
NOBODY = "pglock-test-no-such-user"


@pytest.fixture
def absent_user(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyError):
        pwd.getpwnam(NOBODY)
    monkeypatch.setattr(embedded, "SERVER_USER", NOBODY)


@pytest.mark.usefixtures("absent_user")
def test_useradd_not_on_path_is_named_with_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(embedded.EmbeddedError) as raised:
        embedded._server_user()
    message = str(raised.value)
    assert message.startswith(f"cannot create the system user {NOBODY!r}")
    assert "useradd is not on PATH" in message
    assert f"useradd --system --no-create-home --shell /usr/sbin/nologin {NOBODY}" in message
    assert "PGLOCK_DSN" in message


@pytest.mark.usefixtures("absent_user")
def test_a_failing_useradd_is_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    useradd = tmp_path / "useradd"
    useradd.write_text("#!/bin/sh\necho 'useradd: Permission denied.' >&2\nexit 1\n")
    useradd.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(embedded.EmbeddedError) as raised:
        embedded._server_user()
    assert str(raised.value) == (f"cannot create the system user {NOBODY!r}: {useradd} "
                                 "exited 1: useradd: Permission denied.")
