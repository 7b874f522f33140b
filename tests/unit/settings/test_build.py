"""`pglock --version` of a checkout and of an artifact (pglock.settings.build)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

import pglock
from pglock.settings import build


def test_a_checkout_prints_its_version_alone(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setattr(build, "BUILD_FILE", tmp_path / "BUILD.json")
    assert build.version_line() == f"pglock {pglock.__version__}"


def test_an_artifact_says_how_it_was_built(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    record = tmp_path / "BUILD.json"
    record.write_text(json.dumps({"kind": "deb", "commit": "4c7cd80"}))
    monkeypatch.setattr(build, "BUILD_FILE", record)
    assert build.version_line() == (f"pglock {pglock.__version__} (deb, Python "
                                    f"{platform.python_version()}, commit 4c7cd80)")


@pytest.mark.parametrize("text", ["", "[1, 2]", "{not json"])
def test_a_damaged_record_is_no_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       text: str) -> None:
    record = tmp_path / "BUILD.json"
    record.write_text(text)
    monkeypatch.setattr(build, "BUILD_FILE", record)
    assert build.version_line() == f"pglock {pglock.__version__}"
