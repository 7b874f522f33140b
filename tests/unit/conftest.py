"""The unit layer: pure logic and in-process CLI calls; no database, no subprocess.

A unit test that asks for a server fixture is refused at collection, so `pytest
tests/unit` never starts PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT = Path(__file__).parent
SERVER_FIXTURES = frozenset({"pg_server", "private_server", "dsn", "env"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT not in Path(str(item.path)).parents:
            continue
        used = SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if used:
            raise pytest.UsageError(f"{item.nodeid}: a unit test uses no database "
                                    f"(it asks for {', '.join(sorted(used))}); "
                                    "move it out of tests/unit")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No config file, data directory or variable of the developer's reaches a test."""
    empty = tmp_path / "empty-config.toml"
    empty.write_text("")
    monkeypatch.setenv("PGLOCK_CONFIG", str(empty))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    yield
