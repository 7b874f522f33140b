"""The roster a host keeps of a job run with --candidates: written whole, readable by its
user alone, trusted only while fresh and its own; a directory that cannot be written is
said once a day."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

import pytest

from pglock.lock.candidates import STALE_AFTER
from pglock.run import membership
from pglock.settings.config import Target

NOW = 1_800_000_000.0
REFRESH = 600.0


def kept(file: Path, *, learnt_at: float = NOW, hosts: tuple[str, ...] = ("a", "b")) -> bool:
    return membership.write(file, "sync", "a", membership.Roster(hosts, learnt_at,
                                                                 learnt_at + REFRESH))


def read(file: Path, now: float = NOW, **kwargs: str) -> membership.Roster | None:
    return membership.read(file, job=kwargs.get("job", "sync"), host=kwargs.get("host", "a"),
                           refresh=REFRESH, now=now)


def test_a_roster_is_kept_whole_and_readable_by_its_user_alone(tmp_path: Path) -> None:
    file = tmp_path / "state" / "candidates" / "x.json"
    assert kept(file)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    assert read(file) == membership.Roster(("a", "b"), NOW, NOW + REFRESH)
    # Written by a refresh of another job: its last trigger (the file's time) is kept.
    assert membership.write(file, "sync", "a", membership.Roster(("a",), NOW, NOW),
                            fired_at=NOW - 30)
    assert file.stat().st_mtime == NOW - 30
    membership.fired(file)
    assert abs(file.stat().st_mtime - time.time()) < 5
    assert kept(file)
    # Rewritten by a rename: no temporary file is left beside it.
    assert kept(file, hosts=("a", "b", "c"))
    assert [p.name for p in file.parent.iterdir()] == ["x.json"]
    found = read(file)
    assert found is not None and found.hosts == ("a", "b", "c")


@pytest.mark.parametrize("age", [STALE_AFTER * REFRESH + 1, -REFRESH - 1])
def test_a_stale_roster_is_none(tmp_path: Path, age: float) -> None:
    """Older than three refreshes, or from a clock set back since: the host contends."""
    file = tmp_path / "x.json"
    assert kept(file, learnt_at=NOW - age)
    assert read(file) is None
    assert read(file, now=NOW - age + STALE_AFTER * REFRESH) is not None


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": 1}', b"\xff\xfe",
                                     json.dumps({"format": 1, "job": "sync", "host": "a",
                                                 "hosts": "a", "learnt_at": NOW,
                                                 "refresh_at": NOW}).encode(),
                                     json.dumps({"format": 2, "job": "sync", "host": "a",
                                                 "hosts": [], "learnt_at": NOW,
                                                 "refresh_at": NOW}).encode()])
def test_a_corrupt_roster_is_none(tmp_path: Path, content: bytes) -> None:
    file = tmp_path / "x.json"
    file.write_bytes(content)
    assert read(file) is None


def test_another_jobs_or_hosts_roster_is_none(tmp_path: Path) -> None:
    file = tmp_path / "x.json"
    assert kept(file)
    assert read(file, job="other") is None
    assert read(file, host="b") is None
    assert read(tmp_path / "missing.json") is None


def test_each_database_schema_host_and_job_has_a_file_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    dsn = Target("host=db1 dbname=ops password=secret", "--dsn")
    file = membership.path(dsn, "pglock", "web-1", "sync")
    assert file.parent.parent == tmp_path / "pglock" / "candidates"
    # A host's jobs share a directory (one refresh asks for their rosters together).
    assert membership.path(dsn, "pglock", "web-1", "other").parent == file.parent
    assert len({file, membership.path(dsn, "pglock", "web-1", "other"),
                membership.path(dsn, "pglock", "web-2", "sync"),
                membership.path(dsn, "other", "web-1", "sync"),
                membership.path(Target("host=db2 dbname=ops", "--dsn"), "pglock", "web-1",
                                "sync")}) == 5
    # The password is no part of the name: another password, the same database.
    assert membership.path(Target("host=db1 dbname=ops password=other", "--dsn"), "pglock",
                           "web-1", "sync") == file
    # Any job name is a file name.
    assert "/" not in membership.path(dsn, "pglock", "web-1", "../../etc/x\n").name


def test_an_unwritable_directory_is_said_once_a_day(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.INFO, logger="pglock"):
        assert not kept(blocked / "candidates" / "x.json")
        assert not kept(blocked / "candidates" / "x.json")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "cannot keep the job's roster" in warnings[0].getMessage()
    # A day later it is said again.
    marker = next((tmp_path / "tmp").iterdir())
    os.utime(marker, (NOW, os.stat(marker).st_mtime - membership.WARN_EVERY - 1))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pglock"):
        assert not kept(blocked / "candidates" / "x.json")
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == 1


def test_the_next_refresh_is_spread_and_a_first_roster_is_learnt_again_soon() -> None:
    later = [membership.next_refresh(NOW, REFRESH) - NOW for _ in range(200)]
    assert min(later) >= REFRESH / 2 and max(later) <= REFRESH
    assert max(later) - min(later) > REFRESH / 4
    first = membership.next_refresh(NOW, REFRESH, first=True) - NOW
    assert first <= membership.FIRST_REFRESH


def test_a_refresh_takes_the_other_jobs_due_and_still_fired_here(tmp_path: Path) -> None:
    """One refresh asks for the rosters of the host's jobs that are due within its
    horizon and were fired within their promise; a job no longer fired (taken out of the
    crontab) is left to go stale."""
    now = time.time()
    directory = tmp_path / "host"

    def job(name: str, refresh_at: float, fired_at: float) -> Path:
        file = directory / f"{name}.json"
        assert membership.write(file, name, "a", membership.Roster(
            ("a",), now - 500, refresh_at, 60.0, 660.0, 64), fired_at=fired_at)
        return file

    mine = job("mine", now - 1, now)
    job("due", now - 1, now - 100)
    job("soon", now + 200, now - 100)
    job("later", now + 400, now - 100)
    job("dropped", now - 1, now - 700)
    found = membership.others(mine, "a", now, 300)
    assert sorted(due.job for due in found) == ["due", "soon"]
    assert {due.fired_at for due in found} == {now - 100}


def test_one_trigger_of_a_host_refreshes_at_a_time(tmp_path: Path) -> None:
    file = tmp_path / "host" / "x.json"
    with membership.refreshing(file) as first, membership.refreshing(file) as second:
        assert (first, second) == (True, False)
    with membership.refreshing(file) as again:
        assert again
