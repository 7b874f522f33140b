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


RULE = "(letters, digits, _ . -, starting with a letter or _, at most 32 characters)"
LONG = "é" * 60
ESCAPED = "\\xc3\\xa9" * 60


@pytest.mark.parametrize(("args", "text", "line"), [
    (["systemd", "--prune"], JOBS, "pglock: --prune: needs --dir (it removes units from that "
     "directory)"),
    (["systemd", "--user", "a b"], JOBS, "pglock: --user: 'a b' is not a user name " + RULE),
    (["systemd", "--user", "a\x9bb"], JOBS, "pglock: --user: 'a\\x9bb' is not a user name "
     + RULE),
    # What User= would read as something else: a specifier, a user and a group, quotes, a
    # variable; and what no system names a user (issue 46, D13).
    *((["systemd", "--user", user], JOBS, f"pglock: --user: '{user}' is not a user name "
       + RULE)
      for user in ("%n", "nobody:nogroup", 'a"b', "$USER", "@daily", "a" * 33, "-x", "é")),
    # An empty --dir is the current directory to Python: refused (D9).
    (["systemd", "--dir", ""], JOBS, "pglock: --dir: an empty path; name the directory "
     "(/etc/systemd/system)"),
    # tz = "" is refused as the config file's error, as run and crontab refuse it (D11).
    (["systemd"], '[jobs.zj]\ncommand = ["true"]\nschedule = "0 4 * * *"\ntz = ""\n',
     "pglock: config file {path}: [jobs.zj] tz: '' is not a known time zone (examples: UTC, "
     "Europe/Berlin, America/New_York)"),
    # A zone that counts leap seconds: systemd's timer would fire 27 s after the slot (D12).
    (["systemd"], '[jobs.lz]\ncommand = ["true"]\nschedule = "30 2 * * *"\n'
     'tz = "right/UTC"\n', "pglock: [jobs.lz]: its tz 'right/UTC' counts leap seconds: a "
     "timer would fire about 27 s after each of pglock's slots; give the job tz = 'UTC'"),
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


def test_a_uid_and_user_names_that_are_names_are_written(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    for user in ("1000", "app", "_svc-1.a", "a" * 32, "machine$"):
        called = invoke("systemd", "--user", user, env={"PGLOCK_CONFIG": str(path)})
        assert (called.code, called.stderr) == (0, ""), user
        assert f"\nUser={user}\n" in called.stdout


def test_the_hosts_zone_that_counts_leap_seconds_is_refused(tmp_path: Path) -> None:
    """A job without tz takes the host's zone, which a timer reads the same way (D12)."""
    path = config_file(tmp_path, '[jobs.lz]\ncommand = ["true"]\nschedule = "@daily"\n')
    called = invoke("systemd", env={"PGLOCK_CONFIG": str(path), "TZ": "right/Europe/Berlin"})
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr == ("pglock: [jobs.lz]: the host's zone (no tz) 'right/Europe/Berlin' "
                             "counts leap seconds: a timer would fire about 27 s after each of "
                             "pglock's slots; give the job tz = 'Europe/Berlin'\n")


@pytest.mark.parametrize("command", [["crontab", "--tz-by", "pglock"], ["run", "--job", "zj"]])
def test_an_empty_tz_is_refused_by_crontab_and_run_alike(tmp_path: Path,
                                                         command: list[str]) -> None:
    """tz = "" was the host's zone to run, "in " to crontab and an error to systemd (D11)."""
    path = config_file(tmp_path, '[jobs.zj]\ncommand = ["true"]\nschedule = "0 4 * * *"\n'
                                 'tz = ""\n')
    called = invoke(*command, env={"PGLOCK_CONFIG": str(path)})
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr == (f"pglock: config file {path}: [jobs.zj] tz: '' is not a known "
                             "time zone (examples: UTC, Europe/Berlin, America/New_York)\n")


TWO = JOBS.replace("[jobs.manual]", '[jobs.gone]\ncommand = ["true"]\nschedule = "@daily"\n'
                   '\n[jobs.manual]')


@pytest.mark.parametrize("spelling", ["{tmp}/w/../w/config.toml",
                                      "{tmp}/link.toml"])
def test_prune_finds_the_units_of_any_spelling_of_the_jobs_file(tmp_path: Path,
                                                                spelling: str) -> None:
    """Written under one spelling of the path (relative, `..`, a link), pruned under
    another: the units of a job gone are removed all the same (D10)."""
    (tmp_path / "w").mkdir()
    path = config_file(tmp_path / "w", TWO)
    (tmp_path / "link.toml").symlink_to(path)
    directory = tmp_path / "units"
    directory.mkdir()
    written = invoke("systemd", "--dir", str(directory),
                     env={"PGLOCK_CONFIG": spelling.format(tmp=tmp_path)})
    assert (written.code, written.stderr) == (0, "")
    source = (directory / "pglock-gone.timer").read_text().splitlines()[1]
    # The spelling a unit names: absolute, without `.`, `..` or `//` (a link stays a link).
    assert source == "# Jobs file: " + (str(tmp_path / "link.toml") if "link" in spelling
                                        else str(path))
    path.write_text(JOBS)
    pruned = invoke("systemd", "--dir", str(directory), "--prune",
                    env={"PGLOCK_CONFIG": str(path)})
    assert (pruned.code, pruned.stderr) == (0, "")
    assert sorted(p.name for p in directory.iterdir()) == [
        "pglock-nightly.service", "pglock-nightly.timer"]
