"""`pglock crontab`'s output against the real crontab(1) (Debian's cron; .ci/run installs
it): every schedule pglock accepts gives a crontab that crontab(1) installs, with the
expression cron reads (issue 21)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from unit import strategies

from pglock.errors import UsageError
from pglock.operate import crontab
from pglock.run import jobsfile


def _has_crontab_n() -> bool:
    if shutil.which("crontab") is None:
        return False
    with tempfile.NamedTemporaryFile("w", suffix=".cron") as empty:
        return subprocess.run(["crontab", "-n", empty.name], capture_output=True,
                              timeout=30).returncode == 0


pytestmark = pytest.mark.skipif(
    not _has_crontab_n(), reason="needs crontab(1) with -n (Debian's cron; .ci/run installs it)")

PGLOCK = "/usr/local/bin/pglock"


def _crontab_n(text: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    fragment = tmp / "fragment"
    fragment.write_text(text)
    return subprocess.run(["crontab", "-n", str(fragment)], capture_output=True, text=True,
                          timeout=30)


def _fragment(tmp: Path, schedules: list[str], tz: str | None = None,
              tz_by: str = "cron") -> str:
    path = tmp / "config.toml"
    jobs = []
    for number, expr in enumerate(schedules):
        table: dict[str, object] = {"command": ["true"], "schedule": expr}
        if tz:
            table["tz"] = tz
        jobs.append(jobsfile.checked(path, f"job-{number}", table))
    return crontab.fragment(path, jobs, PGLOCK, tz_by=tz_by)


def test_what_the_sweep_found_installs_or_is_refused(tmp_path: Path) -> None:
    # @DAILY as typed made Debian's crontab refuse the whole file.
    text = _fragment(tmp_path, ["@DAILY", "@Hourly", "0 9 * * MON-FRI", "*/5 * * * *"],
                     "Europe/Berlin")
    assert "@daily PGLOCK_CONFIG=" in text and "@hourly PGLOCK_CONFIG=" in text
    checked = _crontab_n(text, tmp_path)
    assert checked.returncode == 0, checked.stderr
    for expr in ["0 3 L * *", "0 0 15W * *", "0 0 ? * *", "R * * * *", "0 0 * * 5#2"]:
        with pytest.raises(UsageError):
            _fragment(tmp_path, [expr])


def test_zoned_jobs_for_any_cron_install_with_no_cron_tz(tmp_path: Path) -> None:
    """--tz-by pglock: Debian's cron (which ignores CRON_TZ) gets every-minute lines."""
    text = _fragment(tmp_path, ["30 2 * * *", "@daily"], "Europe/Berlin", tz_by="pglock")
    assert "CRON_TZ" not in text
    entries = [line for line in text.splitlines() if not line.startswith("#")]
    assert [line.split()[:5] for line in entries] == [["*", "*", "*", "*", "*"]] * 2
    checked = _crontab_n(text, tmp_path)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.slow
@strategies.PROCESS
@given(strategies.cron_expressions)
def test_every_accepted_schedule_installs(tmp_path: Path, expr: str) -> None:
    try:
        text = _fragment(tmp_path, [expr])
    except UsageError as error:
        assert "\n" not in str(error)
        return
    checked = _crontab_n(text, tmp_path)
    assert checked.returncode == 0, (expr, checked.stderr)
    entry = text.splitlines()[-1]
    fields = 1 if expr.startswith("@") else 5
    assert entry.split()[:fields] == expr.lower().split() if fields == 1 \
        else entry.split()[:fields] == expr.split()
