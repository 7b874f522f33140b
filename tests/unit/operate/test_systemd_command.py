"""`pglock systemd` on the command line: what it prints, and bad input as one line and
exit 2 with nothing written (issue 36). systemd's own checks: tests/operate/test_systemd.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..inprocess import invoke

JOBS = """\
[jobs.nightly]
command = ["true"]
schedule = "0 3 * * *"
tz = "UTC"

[jobs.manual]
command = ["true"]
"""


def config_file(tmp_path: Path, text: str = JOBS) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_it_prints_each_unit_after_a_header(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    called = invoke("systemd", env={"PGLOCK_CONFIG": str(path)})
    assert (called.code, called.stderr) == (0, "")
    headers = [line for line in called.stdout.splitlines() if line.startswith("# ==> ")]
    assert headers == ["# ==> pglock-nightly.service <==", "# ==> pglock-nightly.timer <=="]
    assert "OnCalendar=*-*-* 03:00:00 UTC\n" in called.stdout
    assert "ExecStart=\"/" in called.stdout  # pglock by its absolute path


def test_it_writes_into_dir_and_prints_nothing(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    directory = tmp_path / "units"
    directory.mkdir()
    called = invoke("systemd", "--dir", str(directory), env={"PGLOCK_CONFIG": str(path)})
    assert (called.code, called.stdout, called.stderr) == (0, "", "")
    assert sorted(p.name for p in directory.iterdir()) == [
        "pglock-nightly.service", "pglock-nightly.timer"]


LONG = "é" * 60
ESCAPED = "\\xc3\\xa9" * 60


@pytest.mark.parametrize(("args", "text", "line"), [
    (["systemd", "--prune"], JOBS, "pglock: --prune: needs --dir (it removes units from that "
     "directory)"),
    (["systemd", "--user", "a b"], JOBS, "pglock: --user: 'a b' is not a user name"),
    (["systemd", "--user", "a\x9bb"], JOBS, "pglock: --user: 'a\\x9bb' is not a user name"),
    (["systemd", "--dir", "{tmp}/missing"], JOBS, "pglock: --dir: '{tmp}/missing' is not a "
     "directory"),
    (["systemd"], "dsn = 'host=db'\n", "pglock: no jobs configured (config file {path}): add "
     "[jobs.NAME] tables with a command and a schedule (docs/jobs-file.md)"),
    (["systemd"], '[jobs.x]\ncommand = ["true"]\nschedule = "30 2 * * *"\n'
     'tz = "Europe/Berlin"\n',
     "pglock: [jobs.x]: '30 2 * * *' in Europe/Berlin has no exact OnCalendar=: the clock "
     "jumps from 02:00 to 03:00 on {spring}: pglock has a slot at 03:00 (UTC+0200), a timer "
     "would not fire (move it out of the hours the zone changes in, or give the job tz = "
     "\"UTC\")"),
    (["systemd"], f'[jobs."{LONG}"]\ncommand = ["true"]\nschedule = "@daily"\n',
     f'pglock: [jobs."{LONG}"]: the unit name pglock-{ESCAPED}.service is 495 '
     "characters long (systemd-escape's form of the job name); systemd's limit is 255: "
     "shorten the name"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], text: str,
                                          line: str) -> None:
    path = config_file(tmp_path, text)
    called = invoke(*[arg.format(tmp=tmp_path) for arg in args],
                    env={"PGLOCK_CONFIG": str(path)})
    from datetime import UTC, datetime

    from pglock.operate.systemd import changes
    from pglock.settings.schedule import resolve_zone

    spring = next(c for c in changes(resolve_zone("Europe/Berlin")[0], datetime.now(UTC))
                  if c.after > c.before).at.date()
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr == line.format(tmp=tmp_path, path=path, spring=spring) + "\n"


def test_fleet_md_shows_what_it_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/fleet.md's pair for sync-invoices is the generator's output (a host in Berlin)."""
    import re
    from datetime import UTC, datetime

    from pglock.operate import systemd
    from pglock.run import jobsfile

    monkeypatch.setenv("TZ", "Europe/Berlin")
    text = (Path(__file__).parents[3] / "docs" / "fleet.md").read_text()
    shown = re.search(r"```ini\n(# ==> pglock-sync-invoices.*?)```", text, re.S)
    assert shown is not None
    config = Path("/etc/pglock/config.toml")
    job = jobsfile.checked(config, "sync-invoices", {
        "command": ["/opt/app/bin/sync-invoices"], "schedule": "*/5 * * * *", "ttl": "2m"})
    units = systemd.units(config, [job], "/usr/local/bin/pglock", datetime.now(UTC), "app")
    assert systemd.printed(units) == shown.group(1)


def test_a_config_path_with_a_control_character_is_refused(tmp_path: Path) -> None:
    """A newline in the path would end the Environment= line and start another."""
    directory = tmp_path / "evil\nExecStartPre=x"
    directory.mkdir()
    path = config_file(directory)
    called = invoke("systemd", env={"PGLOCK_CONFIG": str(path)})
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr.startswith("pglock: the config file's path ") and \
        called.stderr.endswith("a unit file cannot name it (move the file)\n")
    assert called.stderr.count("\n") == 1
