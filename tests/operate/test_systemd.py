"""`pglock systemd`'s units against systemd's own tools (.ci/run installs systemd): every
unit passes `systemd-analyze verify`, and every timer's next 50 elapses from
`systemd-analyze calendar` are pglock's next 50 slots, or the job is refused in one line
(issue 36)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit import strategies
from unit.settings.test_schedule import CRON_READS, DAY_OF_MONTH, DAY_OF_WEEK, SLOTS

from pglock.errors import UsageError
from pglock.operate import systemd
from pglock.run import jobsfile
from pglock.settings import schedule

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="needs systemd-analyze (the systemd package; .ci/run installs it)")

ITERATIONS = 50
# Zones without changes, with whole-hour changes on either side of the equator, a
# half-hour offset, a half-hour change (Lord Howe) and changes at midnight (Santiago).
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "America/Santiago"]
START = datetime(2026, 11, 26, 12, 0, 30, tzinfo=UTC)
EXPRESSIONS = sorted({expr for expr, *_ in SLOTS} | set(CRON_READS) | {
    "30 2 * * *", "0 2 * * *", "0 3 * * *", "0 1 * * *", "*/20 2 * * *", "15 * * * *",
    "0 0 29 2 *", "0 0 */29 2 1", "0 0 1,15 * mon", "30 1 * * sun", "0 0 * * *"})
_ELAPSE = re.compile(r"^\s*(?:Next elapse|Iter\. #\d+|\(in UTC\)):\s+\w{3} "
                     r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$")


def bases(zone: str) -> list[datetime]:
    """Where the comparisons start: a plain day, and before the zone's next changes (a
    few hours: a minutely job's 50 elapses; two days: a daily one's)."""
    found = [START]
    for change in list(systemd.changes(schedule.resolve_zone(zone)[0], START))[:2]:
        found += [change.at - timedelta(hours=2, seconds=-30),
                  change.at - timedelta(days=2, seconds=-30)]
    return found


def elapses(timers: list[tuple[str, ...]], base: datetime,
            zone: str | None = None) -> list[list[datetime]]:
    """The next elapses of each timer (its OnCalendar= lines) by systemd-analyze calendar
    (the host's zone `zone` for lines without one), in UTC, the first 50 of each: one call
    for all, each line's block starting at its "Normalized form:"."""
    specs = [line for lines in timers for line in lines]
    called = subprocess.run(
        ["systemd-analyze", "calendar", f"--iterations={ITERATIONS}",
         f"--base-time={base.strftime('%Y-%m-%d %H:%M:%S')} UTC", *specs],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TZ": zone or "UTC", "SYSTEMD_COLORS": "0"})
    assert called.returncode == 0, called.stderr
    blocks: list[set[datetime]] = []
    for line in called.stdout.splitlines():
        if line.startswith("Normalized form:"):
            blocks.append(set())
        match = _ELAPSE.match(line)
        if match:
            blocks[-1].add(datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC))
    assert len(blocks) == len(specs)
    found = []
    for lines in timers:
        mine, blocks = blocks[:len(lines)], blocks[len(lines):]
        found.append(sorted(set().union(*mine))[:ITERATIONS])
    return found


def slots(plan: schedule.Schedule, base: datetime, count: int) -> list[datetime]:
    found, moment = [], base
    for _ in range(count):
        moment = schedule.next_after(plan, moment).astimezone(UTC)
        found.append(moment)
    return found


def assert_same(plans: list[schedule.Schedule], zone: str | None, bases: list[datetime],
                host_zone: str | None = None) -> None:
    """Each plan's timer fires at its slots from each base, or the plan is refused: the
    translation is made once, from the first base, for all the later ones."""
    accepted: list[tuple[schedule.Schedule, tuple[str, ...]]] = []
    for plan in plans:
        translated = systemd.translate(plan, zone, bases[0])
        if translated.refused is None:
            accepted.append((plan, translated.lines))
        else:
            assert "\n" not in translated.refused
            assert "no exact OnCalendar=" in translated.refused
    if not accepted:
        return
    for base in bases:
        timers = elapses([lines for _, lines in accepted], base, host_zone)
        for (plan, lines), timer in zip(accepted, timers, strict=True):
            expected = slots(plan, base, len(timer))
            assert timer == expected, (plan.expr, plan.zone, lines, base)
            if len(timer) < ITERATIONS:
                # systemd's calendar ends with 2199; pglock's slots go on.
                assert schedule.next_after(plan, expected[-1] if expected else base) >= \
                    systemd.CALENDAR_END


@pytest.mark.parametrize("zone", [
    zone if zone in ("UTC", "Europe/Berlin") else pytest.param(zone, marks=pytest.mark.slow)
    for zone in ZONES])
def test_the_schedule_tests_expressions_fire_at_pglocks_slots_or_are_refused(zone: str) -> None:
    assert_same([schedule.parse(expr, zone) for expr in EXPRESSIONS], zone, bases(zone))


@pytest.mark.parametrize("zone", ["UTC", pytest.param("Europe/Berlin", marks=pytest.mark.slow)])
def test_day_of_month_and_day_of_week_pairs_fire_at_pglocks_slots(zone: str) -> None:
    """Cron's OR of two restricted day fields is two OnCalendar= lines; its AND one."""
    assert_same([schedule.parse(f"0 4 {dom} * {dow}", zone) for dom in DAY_OF_MONTH
                 for dow in DAY_OF_WEEK], zone, [START])


def test_a_job_without_tz_fires_in_the_hosts_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """No zone in the line: systemd reads the host's, as pglock does (TZ here, both)."""
    monkeypatch.setenv("TZ", "America/New_York")
    plan = schedule.parse("0 9 * * mon-fri", None)
    translated = systemd.translate(plan, None, START)
    assert translated.lines == ("Mon,Tue,Wed,Thu,Fri *-*-* 09:00:00",)
    assert_same([plan], None, [START], "America/New_York")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(strategies.cron_expressions, st.sampled_from(ZONES))
def test_generated_expressions_fire_at_pglocks_slots_or_are_refused(expr: str,
                                                                    zone: str) -> None:
    try:
        plan = schedule.parse(expr, zone)
    except UsageError:
        return
    assert_same([plan], zone, [START])


# Every form an expression's fields take: steps that divide the field's cycle and steps
# that do not (a repetition systemd does not restart at the next hour, day, month or year
# as cron's list does: `*/7` ran 23:56, then 00:07), ranges with steps, lists, one-value
# ranges, and both day fields, alone and together (cron's OR).
FORMS = [
    "*/7 * * * *", "*/5 * * * *", "*/13 * * * *", "3-59/7 * * * *", "10-50/15 * * * *",
    "1-1/5 * * * *", "5-5 * * * *", "0,7,33,59 * * * *", "*/7 */5 * * *", "0 */7 * * *",
    "15 1-23/5 * * *", "0 2-2/3 * * *", "0 0,7,13,22 * * *", "59 23 * * *", "*/25 23 * * *",
    "0 0 */3 * *", "0 0 2-31/4 * *", "30 12 */10 * *", "0 0 1,15,31 * *", "0 0 29-31 * *",
    "0 0 */29 * *", "0 0 1 */5 *", "0 0 1 2-12/5 *", "0 0 31 */2 *", "0 12 * 1,6,12 *",
    "0 0 * * */2", "0 0 * * 1-6/4", "0 0 * * 0,3,5", "0 6 * * 7", "0 0 */3 * */2",
    "0 0 1-31/10 * 1-5/2", "0 0 13 * 5", "*/7 */5 */3 */5 */2", "59 23 */6 2-12/3 1-5",
    "0 0 1 1 *", "59 23 31 12 *", "0 0 * 2 1-5/2",
]
# Just before an hour's end, a day's, a month's (a 31-day, a 30-day and February's) and
# a year's: 50 elapses from each cross it (and a daily job's, months and years more).
EDGES = [datetime(2026, 11, 26, 12, 50, 30, tzinfo=UTC),
         datetime(2026, 11, 28, 23, 40, 30, tzinfo=UTC),
         datetime(2026, 11, 30, 23, 40, 30, tzinfo=UTC),
         datetime(2027, 1, 31, 23, 40, 30, tzinfo=UTC),
         datetime(2027, 2, 28, 23, 40, 30, tzinfo=UTC),
         datetime(2028, 2, 28, 23, 40, 30, tzinfo=UTC),
         datetime(2026, 12, 31, 23, 40, 30, tzinfo=UTC)]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", pytest.param(
    "Europe/Berlin", marks=pytest.mark.slow)])
def test_every_form_fires_at_pglocks_slots_across_hour_day_month_and_year(zone: str) -> None:
    """The sweep's class: a timer that agrees on a plain day and parts at a boundary."""
    offset = schedule.resolve_zone(zone)[0].utcoffset(START) or timedelta(0)
    # The edges of the zone's wall clock, not UTC's.
    assert_same([schedule.parse(expr, zone) for expr in FORMS], zone,
                [edge - offset for edge in EDGES])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(strategies.cron_expressions, st.sampled_from(["UTC", "Asia/Kolkata"]))
def test_generated_expressions_fire_at_pglocks_slots_across_boundaries(expr: str,
                                                                       zone: str) -> None:
    try:
        plan = schedule.parse(expr, zone)
    except UsageError:
        return
    offset = plan.tz.utcoffset(START) or timedelta(0)
    assert_same([plan], zone, [edge - offset for edge in EDGES])


@pytest.mark.parametrize(("expr", "zone", "words"), [
    ("30 2 * * *", "Europe/Berlin", "the clock jumps from 02:00 to 03:00 on 2027-03-28: "
     "pglock has a slot at 03:00 (UTC+0200), a timer would not fire"),
    ("*/20 1 * * *", "America/New_York", "the hour before 02:00 comes twice on 2027-11-07: "
     "pglock has a slot at 01:00 (UTC-0500), a timer would not fire"),
    ("0 2 * * *", "America/New_York", "the clock jumps from 02:00 to 03:00 on 2027-03-14"),
])
def test_what_daylight_saving_parts_is_refused_in_one_line(expr: str, zone: str,
                                                           words: str) -> None:
    translated = systemd.translate(schedule.parse(expr, zone), zone, START)
    assert translated.lines == () and translated.refused is not None
    assert words in translated.refused, translated.refused
    assert translated.refused.startswith(f"{expr!r} in {zone} has no exact OnCalendar=: ")


def test_a_minutely_pattern_in_a_zone_with_changes_is_written_in_utc() -> None:
    """`*/5 * * * *` in Berlin fires every 5 minutes through both changes (a wildcard
    job: both passes of the repeated hour): the same instants as in UTC, which a timer
    reads without a change."""
    translated = systemd.translate(schedule.parse("*/5 * * * *", "Europe/Berlin"),
                                   "Europe/Berlin", START)
    assert translated.lines == ("*-*-* *:00/5:00 UTC",)
    # In Kolkata (+05:30) minute 0 is :30 in UTC: no such shortcut.
    kolkata = systemd.translate(schedule.parse("0 * * * *", "Asia/Kolkata"), "Asia/Kolkata",
                                START)
    assert kolkata.lines == ("*-*-* *:00:00 Asia/Kolkata",)


# ------------------------------------------------------------------ the units

THREE = """\
[jobs.backup]
command = ["/usr/bin/true"]
schedule = "0 3 * * *"
tz = "Europe/Berlin"
catch-up = "latest"

[jobs."a b/50% off $HOME \\\\ \\" é"]
command = ["true"]
schedule = "*/5 * * * *"
conflict-exit-code = 99

[jobs.either]
command = ["true"]
schedule = "0 0 1,15 * mon"

[jobs.manual]
command = ["true"]
"""


def _jobs(tmp_path: Path, text: str = THREE) -> tuple[Path, list[jobsfile.ConfiguredJob]]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    os.environ["PGLOCK_CONFIG"] = str(path)
    try:
        found, jobs = jobsfile.every_job()
    finally:
        del os.environ["PGLOCK_CONFIG"]
    assert found is not None
    return found, jobs


def test_every_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    path, jobs = _jobs(tmp_path)
    units = systemd.units(path, jobs, "/usr/bin/true", START, user="root")
    assert sorted(unit.name for unit in units) == sorted([
        "pglock-backup.service", "pglock-backup.timer", "pglock-either.service",
        "pglock-either.timer",
        *(r"pglock-a\x20b-50\x25\x20off\x20\x24HOME\x20\x5c\x20\x22\x20\xc3\xa9" + suffix
          for suffix in (".service", ".timer"))])
    directory = tmp_path / "units"
    directory.mkdir()
    systemd.install(directory, units, path, prune=False)
    called = subprocess.run(["systemd-analyze", "verify", *sorted(map(str, directory.iterdir()))],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    assert called.returncode == 0 and called.stderr == "", called.stderr
    timer = (directory / "pglock-either.timer").read_text()
    assert "OnCalendar=*-*-01,15 00:00:00\nOnCalendar=Mon *-*-* 00:00:00\n" in timer
    assert "AccuracySec=1s\n" in timer and "Persistent=false\n" in timer
    assert "RandomizedDelaySec" not in timer
    assert "Persistent=true\n" in (directory / "pglock-backup.timer").read_text()
    service = (directory / "pglock-backup.service").read_text()
    assert "SuccessExitStatus=75\n" in service and "User=root\n" in service
    assert f'Environment="PGLOCK_CONFIG={path}"\n' in service
    odd = next(unit for unit in units if unit.name.endswith("\\xc3\\xa9.service"))
    assert 'run --job "a b/50%% off $$HOME \\\\ \\" é"\n' in odd.text
    assert "SuccessExitStatus=99\n" in odd.text


@pytest.mark.parametrize("name", ["backup", "a b/c", ".hidden", "x-y", "é", "a\\b", "50%",
                                  "a:b_c.d"])
def test_names_are_escaped_as_systemd_escape_does(name: str) -> None:
    called = subprocess.run(["systemd-escape", "--", name], capture_output=True, text=True,
                            timeout=30)
    assert systemd.escape(name) == called.stdout.strip()
    # A name that is a unit name already stays as it is (sync-invoices, not sync\x2dinvoices).
    plain = name in ("backup", "x-y", "a:b_c.d")
    assert systemd.unit_base(name) == "pglock-" + (name if plain else called.stdout.strip())


def test_two_jobs_that_would_share_a_unit_are_refused(tmp_path: Path) -> None:
    path, jobs = _jobs(tmp_path, '[jobs."a/b"]\ncommand = ["true"]\nschedule = "@daily"\n'
                                 '[jobs.a-b]\ncommand = ["true"]\nschedule = "@daily"\n')
    with pytest.raises(UsageError, match=r'^\[jobs.a-b\] and \[jobs."a/b"\] would both be '
                                         r"pglock-a-b.service"):
        systemd.units(path, jobs, "/usr/bin/true", START)


def test_prune_removes_only_its_own_units_of_jobs_gone(tmp_path: Path) -> None:
    path, jobs = _jobs(tmp_path)
    directory = tmp_path / "units"
    directory.mkdir()
    systemd.install(directory, systemd.units(path, jobs, "/usr/bin/true", START), path,
                    prune=False)
    # Not ours: a hand-written unit with our prefix, and one of another jobs file.
    (directory / "pglock-hand.timer").write_text("[Timer]\nOnCalendar=daily\n")
    other = directory / "pglock-other.timer"
    other.write_text(f"{systemd.MARKER}\n# Jobs file: /elsewhere/config.toml\n")
    path, jobs = _jobs(tmp_path, THREE.split('[jobs."a b')[0])
    removed = systemd.install(directory, systemd.units(path, jobs, "/usr/bin/true", START),
                              path, prune=True)
    assert removed == sorted([
        "pglock-either.service", "pglock-either.timer",
        *(r"pglock-a\x20b-50\x25\x20off\x20\x24HOME\x20\x5c\x20\x22\x20\xc3\xa9" + suffix
          for suffix in (".service", ".timer"))])
    assert sorted(p.name for p in directory.iterdir()) == [
        "pglock-backup.service", "pglock-backup.timer", "pglock-hand.timer",
        "pglock-other.timer"]


def test_a_unit_it_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    path, jobs = _jobs(tmp_path)
    directory = tmp_path / "units"
    directory.mkdir()
    mine = directory / "pglock-backup.timer"
    mine.write_text("[Timer]\nOnCalendar=daily\n")
    with pytest.raises(UsageError, match="exists and was not written by pglock systemd"):
        systemd.install(directory, systemd.units(path, jobs, "/usr/bin/true", START), path,
                        prune=False)
    assert mine.read_text() == "[Timer]\nOnCalendar=daily\n"
    assert sorted(p.name for p in directory.iterdir()) == ["pglock-backup.timer"]


def test_an_unwritable_dir_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    path, jobs = _jobs(tmp_path)
    units = systemd.units(path, jobs, "/usr/bin/true", START)
    with pytest.raises(UsageError, match="is not a directory"):
        systemd.install(tmp_path / "missing", units, path, prune=False)
    # /proc takes no new file, even from root.
    with pytest.raises(UsageError, match=r"^--dir: cannot write in /proc: "):
        systemd.install(Path("/proc"), units, path, prune=False)
    assert not list(Path("/proc").glob(".pglock-*"))
