"""The census's rule, judged against a chosen `now` (the database's clock in a real read):
who of a job's hosts attends it, who went silent and when, and how every report says so."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pglock.cli import census_screens, render, screens
from pglock.lock import census
from pglock.lock.census import Attendance, Recorded, Standing
from pglock.reports import check, hosts, jobs, metrics
from pglock.reports.jobs import Problem

from ..jobfactory import job

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTELY = Recorded("* * * * *", "UTC", 60.0)
HOURLY = Recorded("0 * * * *", "UTC", 360.0)


def row(host: str = "web-1", *, at: datetime = T0, slot: datetime | None = T0,
        gaps: tuple[int, ...] = (60, 60, 60), seen: datetime | None = None,
        job_name: str = "sync", version: str = "0.1.0") -> Attendance:
    """A host's attendance whose last recorded attempt was `at`, for `slot`."""
    return Attendance(job_name, host, T0 - timedelta(days=1), at, "held", slot, 60.0, gaps,
                      bool(gaps), False, version, "3.11.7", seen or at)


def standing(found: Attendance, now: datetime, recorded: Recorded,
             after: int = census.SILENT_AFTER) -> Standing:
    return census.judge(found, now, census.since(recorded, now, after), after).standing


# A host that attempted the minutely slot 12:00 (at 12:00:03) and then stopped: slots
# 12:01 and 12:02 pass without it; the second's grace (1m) ends at 12:03:00.
@pytest.mark.parametrize(("now", "expected"), [
    (T0 + timedelta(seconds=30), Standing.ATTENDING),
    (T0 + timedelta(minutes=2), Standing.ATTENDING),
    (T0 + timedelta(minutes=2, seconds=59), Standing.ATTENDING),
    (T0 + timedelta(minutes=3), Standing.SILENT),
    (T0 + timedelta(hours=5), Standing.SILENT),
])
def test_a_minutely_host_is_silent_after_two_missed_slots_and_not_before(
        now: datetime, expected: Standing) -> None:
    stopped = row(at=T0 + timedelta(seconds=3))
    assert standing(stopped, now, MINUTELY) is expected


def test_a_minutely_host_that_goes_on_attending_is_never_silent() -> None:
    for minutes in range(0, 30):
        now = T0 + timedelta(minutes=minutes, seconds=45)
        slot = T0 + timedelta(minutes=minutes)
        attending = row(at=slot + timedelta(seconds=2), slot=slot)
        assert standing(attending, now, MINUTELY) is Standing.ATTENDING, now


@pytest.mark.parametrize(("now", "expected"), [
    # Slots 11:00 and 12:00 missed; the second's grace (6m) ends at 12:06.
    (T0 + timedelta(minutes=5, seconds=59), Standing.ATTENDING),
    (T0 + timedelta(minutes=6), Standing.SILENT),
])
def test_an_hourly_host_waits_for_the_second_slots_grace(now: datetime,
                                                         expected: Standing) -> None:
    last = T0 - timedelta(hours=2)
    assert standing(row(at=last + timedelta(seconds=40), slot=last), now, HOURLY) is expected


def test_the_slot_the_host_asked_for_counts_not_the_database_time_it_asked() -> None:
    """A host whose clock runs 5 s ahead asks for slot 12:01 at 12:00:55 database time: it
    attended 12:01, whatever the database's clock said then."""
    ahead = row(at=T0 + timedelta(seconds=55), slot=T0 + timedelta(minutes=1))
    assert standing(ahead, T0 + timedelta(minutes=3, seconds=30), MINUTELY) \
        is Standing.ATTENDING


def test_slots_inside_a_window_are_no_slots_to_miss() -> None:
    """In a --window every trigger skips before it asks (nothing is recorded): the window's
    slots are not counted, as they are not for overdue."""
    windowed = Recorded("* * * * *", "UTC", 60.0, ("1 12 * * * 3m",))
    stopped = row(at=T0 + timedelta(seconds=3))
    # 12:01-12:03 are in the window: 12:04 and 12:05 are the two slots missed.
    assert standing(stopped, T0 + timedelta(minutes=5, seconds=59), windowed) \
        is Standing.ATTENDING
    assert standing(stopped, T0 + timedelta(minutes=6), windowed) is Standing.SILENT
    assert standing(stopped, T0 + timedelta(minutes=6), MINUTELY) is Standing.SILENT


@pytest.mark.parametrize(("after", "silent_from"), [(1, 2), (2, 3), (3, 4)])
def test_silent_after_counts_the_slots(after: int, silent_from: int) -> None:
    stopped = row(at=T0 + timedelta(seconds=3))
    before = T0 + timedelta(minutes=silent_from, seconds=-1)
    at = T0 + timedelta(minutes=silent_from)
    assert standing(stopped, before, MINUTELY, after) is Standing.ATTENDING
    # Never sooner than two minutes after the last attempt, whatever --silent-after says.
    assert standing(stopped, at, MINUTELY, after) is (
        Standing.SILENT if silent_from * 60 - 3 > census.MIN_SILENCE else Standing.ATTENDING)


@pytest.mark.parametrize(("gaps", "quiet", "expected"), [
    # Every 5 minutes: silent past twice that.
    ((300, 300, 300), 599, Standing.ATTENDING),
    ((300, 300, 300), 601, Standing.SILENT),
    # The median, so one long outage among its gaps does not stretch it.
    ((300, 86400, 300, 310, 290), 601, Standing.SILENT),
    # Every minute (or faster: one write a minute): at least two minutes.
    ((60, 60), 119, Standing.ATTENDING),
    ((60, 60), 121, Standing.SILENT),
    ((1, 1, 1), 119, Standing.ATTENDING),
    # One attempt only (a run by hand?): no usual interval, never silent.
    ((), 10 * 86400, Standing.ONCE),
    ((), 60, Standing.ATTENDING),
])
def test_an_unscheduled_host_is_judged_by_its_usual_interval(
        gaps: tuple[int, ...], quiet: int, expected: Standing) -> None:
    found = row(slot=None, gaps=gaps)
    assert standing(found, T0 + timedelta(seconds=quiet), Recorded(None)) is expected


def test_a_host_that_attempted_nothing_at_all_is_silent_as_a_whole() -> None:
    now = T0 + timedelta(minutes=10)
    cutoff = census.since(MINUTELY, now)
    everything_stopped = census.judge(row(at=T0), now, cutoff)
    assert (everything_stopped.standing, everything_stopped.whole) == (Standing.SILENT, True)
    # Its crontab lost this job's line alone: it still attempts another job.
    one_line_lost = census.judge(row(at=T0, seen=now - timedelta(seconds=20)), now, cutoff)
    assert (one_line_lost.standing, one_line_lost.whole) == (Standing.SILENT, False)


def test_an_unreadable_schedule_falls_back_to_the_usual_interval() -> None:
    assert census.since(Recorded("* * * * *", "Mars/Olympus"), T0) is None
    found = row(slot=T0, gaps=(60, 60))
    assert standing(found, T0 + timedelta(minutes=3),
                    Recorded("* * * * *", "Mars/Olympus")) is Standing.SILENT


# The job model: the census read once, judged once, rendered by every report.

WEIRD = 'web|7 "x"\\\x1b[31m'


def census_job(*rows: Attendance, name: str = "sync") -> jobs.Job:
    """A minutely job at 12:05 with `rows` as its census."""
    now = T0 + timedelta(minutes=5)
    found = job(name, now=now, schedule="* * * * *", timezone="UTC")
    return jobs.attended(found, list(rows))


def test_the_job_model_adds_a_silent_host_problem_and_check_warns_naming_host_and_job(
        ) -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(row("web-1", at=now - timedelta(seconds=50), slot=now - timedelta(
        minutes=1)), row("web-2", at=T0, seen=T0))
    assert judged.census is not None
    assert [a.host for a in judged.census.attending] == ["web-1"]
    assert [a.host for a in judged.census.silent] == ["web-2"]
    assert Problem.SILENT_HOST in judged.problems
    report = check.evaluate(jobs.Snapshot(now, [judged]), check.Thresholds())
    assert report.status is check.PluginStatus.WARNING
    assert report.counts["silent_host"] == 1
    text = check.render_text(report).splitlines()
    assert text[1] == ("WARNING: sync: host stopped attempting it: web-2 (last attempt 5m00s "
                       "ago, and every other job) (pglock hosts --job sync; pglock "
                       "forget-host for a host retired)")
    # Judged again with every host attending: the problem goes.
    again = jobs.attended(judged, [row("web-1", at=now, slot=now)])
    assert Problem.SILENT_HOST not in again.problems


def test_check_hosts_min_warns_for_a_job_fewer_hosts_fire() -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(row("web-1", at=now, slot=now))
    few = check.evaluate(jobs.Snapshot(now, [judged]), check.Thresholds(hosts_min=2))
    assert few.status is check.PluginStatus.WARNING
    assert few.counts["few_hosts"] == 1
    assert check.render_text(few).splitlines()[1] == (
        "WARNING: sync: 1 host fires it (web-1), fewer than --hosts min=2")
    enough = check.evaluate(jobs.Snapshot(now, [judged]), check.Thresholds(hosts_min=1))
    assert enough.status is check.PluginStatus.OK


@pytest.mark.parametrize("text", ["max=2", "min=", "min=x", "2", "min=-1"])
def test_check_hosts_takes_min_n_only(text: str) -> None:
    with pytest.raises(check.UsageError, match=r"--hosts: .* is not min=N"):
        check.parse_hosts(text)


def test_a_host_name_is_data_in_the_plugin_text_the_terminal_and_the_labels() -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(row(WEIRD, at=T0, seen=T0))
    line = check.render_text(check.evaluate(jobs.Snapshot(now, [judged]),
                                            check.Thresholds())).splitlines()[1]
    # One line, no escape sequence, no `|` to forge performance data.
    assert "\x1b" not in line and "|" not in line and "web¦7 \"x\"\\^[[31m" in line
    assert census_screens.census_line("sync", judged.census or census.Census(), now) == (
        'hosts of sync: 0 hosts fire it; silent: web|7 "x"\\^[[31m (last attempt 5m00s ago, '
        "every job)")
    exposition = metrics.render(metrics.Exposition(
        jobs.Snapshot(now, [judged]), hosts=[(WEIRD, 'v"1\n', "3.11", T0, T0)]))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(exposition) for s in f.samples}
    assert samples[("pglock_host_last_seen_timestamp_seconds",
                    (("host", WEIRD), ("version", 'v"1\n')))] == T0.timestamp()
    assert samples[("pglock_job_silent_hosts", (("job", "sync"),))] == 1
    assert samples[("pglock_job_hosts", (("job", "sync"),))] == 0


def test_metrics_give_no_census_sample_for_a_job_whose_census_was_not_read() -> None:
    text = metrics.render(jobs.Snapshot(T0, [job("sync")]))
    assert "pglock_job_hosts{" not in text and "pglock_job_silent_hosts{" not in text


@pytest.mark.parametrize(("older", "newer"), [
    ("0.1.0", "0.2.0"), ("0.9.1", "0.10.0"), ("0.2.0rc1", "0.2.0"), ("0.2.0.dev3", "0.2.0a1"),
    ("0.2.0", "0.2.0.post1"), ("1.0", "1.0.1"), ("garbage", "0.0.1"), ("0.2", "0.2.0+local"),
])
def test_versions_order_as_releases_do(older: str, newer: str) -> None:
    assert hosts.version_key(older) < hosts.version_key(newer)


def test_one_and_one_point_zero_are_the_same_release() -> None:
    assert hosts.version_key("1") == hosts.version_key("1.0.0")


def test_the_hosts_roll_marks_older_versions_and_silent_hosts() -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(row("web-1", at=now, slot=now), row("web-2", at=T0, seen=T0),
                        row("old", at=now, slot=now, version="0.0.9"))
    found = hosts.roll(jobs.Snapshot(now, [judged]), [
        ("old", "0.0.9", "3.11.7", T0, now), ("web-1", "0.1.0", "3.11.7", T0, now),
        ("web-2", "0.1.0", "3.11.7", T0, T0), ("idle", "0.1.0", "3.12.1", T0, T0)])
    assert found.newest == "0.1.0"
    assert [h.name for h in found.skewed] == ["old"]
    by_name = {h.name: h for h in found.hosts}
    assert by_name["web-2"].silent and by_name["web-2"].silent_jobs == ["sync"]
    assert not by_name["web-1"].silent and by_name["idle"].jobs == ()
    screen = render.plain(census_screens.hosts_screen(found, "db", "pglock", terminal=False))
    assert "web-2  silent" in screen and "0.0.9 (older)" in screen
    assert "version skew: pglock 0.1.0 on 3, 0.0.9 on 1; older than 0.1.0: old" in screen
    document = census_screens.hosts_json(found, "db", "pglock")
    assert document["versions"] == {"0.0.9": 1, "0.1.0": 3}
    assert [h["host"] for h in document["hosts"] if h["skewed"]] == ["old"]


def test_status_json_gives_the_census_of_the_job_read_with_it() -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(row("web-1", at=now, slot=now), row("web-2", at=T0, seen=T0))
    assert screens.job_json(judged)["hosts"] == {
        "attending": ["web-1"],
        "silent": [{"host": "web-2", "last_attempt": T0.isoformat(), "whole": True}],
        "candidates": None}
    assert screens.job_json(job("sync"))["hosts"] is None


def test_the_hosts_screen_shows_a_hostile_name_as_data() -> None:
    now = T0 + timedelta(minutes=5)
    hostile = "web\x1b[2J\u202eone"
    judged = census_job(row(hostile, at=T0, seen=T0))
    found = hosts.roll(jobs.Snapshot(now, [judged]), [(hostile, "0.1\x07", "3.11", T0, T0)])
    for screen in (census_screens.hosts_screen(found, "db", "pglock", terminal=False),
                   census_screens.hosts_screen(hosts.Roll(now, found.hosts, found.newest,
                                                          "sync"), "db", "pglock",
                                               terminal=True)):
        text = render.plain(screen)
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
        assert "web^[[2J\\u202eone" in text


def lost(host: str = "web-2", *, restart: datetime = T0) -> Attendance:
    """A host's attendance of a job it attends (hosts.jobs), whose row a crash or a
    failover emptied at `restart`: no attempt known since."""
    return Attendance("sync", host, None, restart, None, None, None, (), True, True,
                      "0.1.0", "3.11.7", None)


def test_a_host_that_does_not_come_back_after_a_crash_is_silent_after_two_slots() -> None:
    """Judged as if it attempted at the census's restart: not silent for two slots."""
    assert standing(lost(), T0 + timedelta(minutes=2, seconds=59), MINUTELY) \
        is Standing.ATTENDING
    judged = census.judge(lost(), T0 + timedelta(minutes=3),
                          census.since(MINUTELY, T0 + timedelta(minutes=3)))
    assert (judged.standing, judged.whole) == (Standing.SILENT, True)


def test_an_unscheduled_host_lost_in_a_crash_gets_a_day() -> None:
    """Its usual interval went with the attempts."""
    assert standing(lost(), T0 + timedelta(hours=23), Recorded(None)) is Standing.ATTENDING
    assert standing(lost(), T0 + timedelta(hours=24, seconds=1), Recorded(None)) \
        is Standing.SILENT


def test_a_host_that_contends_in_its_turns_is_judged_by_its_promise() -> None:
    """A host run with --candidates attempts few of a minutely job's slots: seen 15
    minutes ago at its last refresh, it is not silent while its promise (refresh + the
    job's interval: 11 minutes) has not passed twice; the slot rule alone would call it
    silent after two slots."""
    now = T0 + timedelta(minutes=15)
    recorded = Recorded("* * * * *", "UTC")
    gated = replace(row("web-1", at=T0, slot=T0), due=660.0)
    assert standing(row("web-1", at=T0, slot=T0), now, recorded) is Standing.SILENT
    assert standing(gated, now, recorded) is Standing.ATTENDING
    assert standing(gated, T0 + timedelta(minutes=22, seconds=1), recorded) is Standing.SILENT
    assert standing(gated, T0 + timedelta(minutes=21, seconds=59), recorded) is (
        Standing.ATTENDING)


def test_status_names_the_jobs_candidates() -> None:
    now = T0 + timedelta(minutes=5)
    judged = census_job(replace(row("web-1", at=now, slot=now), due=660.0, candidates=3,
                                step=10.0))
    assert screens.job_json(judged)["hosts"]["candidates"] == {"k": 3, "step": 10.0}
    assert judged.census is not None
    line = census_screens.census_line("sync", judged.census, now)
    assert line.endswith("candidates: 3 per slot, 10s apart (pglock hosts --job sync --next)")


def ttl_row(host: str, ttl: float, now: datetime) -> Attendance:
    """A host attending the minutely job now, with its ttl."""
    found = row(host, at=now - timedelta(seconds=2), slot=now - timedelta(seconds=2))
    return Attendance(found.job, found.host, found.first_attempt, found.last_attempt,
                      found.outcome, found.slot, ttl, found.gaps, found.repeated, found.lost,
                      found.version, found.python, found.last_seen)


def test_hosts_of_one_job_on_different_ttls_are_drift_in_check_jobs_and_doctor() -> None:
    """Runs of one job at 30 s and 45 s used to show nothing anywhere (issue 42, case 3):
    the wait after a promotion is as long as the longest, and a longer ttl first used in
    the replication lag before an asynchronous failover is not waited out."""
    from pglock.operate.doctor import census_finding
    from pglock.reports import configured

    now = T0 + timedelta(minutes=5)
    drifting = census_job(ttl_row("web-1", 30.0, now), ttl_row("web-2", 30.0, now),
                          ttl_row("web-3", 45.0, now))
    assert drifting.census is not None
    assert drifting.census.ttls == {30.0: ["web-1", "web-2"], 45.0: ["web-3"]}
    assert Problem.TTL_DRIFT in drifting.problems
    report = check.evaluate(jobs.Snapshot(now, [drifting]), check.Thresholds())
    assert report.status is check.PluginStatus.WARNING
    assert check.render_text(report).splitlines()[1] == (
        "WARNING: sync: its hosts run it with different ttls: 30s on web-1, web-2; 45s on "
        "web-3 (the wait after a promotion is the longest: give every host one ttl; "
        "docs/ha.md)")
    assert configured.notes(None, drifting) == (
        "not in the jobs file", "hosts run it with different ttls: 30s on web-1, web-2; 45s "
        "on web-3")
    roll = hosts.Roll(now, [hosts.Host(a.host, a.version, a.python, T0, now, (a,))
                            for a in drifting.census.hosts], "0.1.0")
    finding = census_finding(roll)
    assert finding.level.name == "WARN"
    assert "hosts of one job on different ttls: sync (30s on web-1, web-2, 45s on web-3)" \
        in finding.detail
    # One ttl: no drift, anywhere.
    one = census_job(ttl_row("web-1", 30.0, now), ttl_row("web-3", 30.0, now))
    assert Problem.TTL_DRIFT not in one.problems
    assert check.evaluate(jobs.Snapshot(now, [one]), check.Thresholds()).status \
        is check.PluginStatus.OK
    assert configured.notes(None, one) == ("not in the jobs file",)


def test_a_jobs_files_ttl_other_than_its_hosts_is_noted() -> None:
    from pathlib import Path

    from pglock.reports import configured
    from pglock.run.jobsfile import ConfiguredJob

    now = T0 + timedelta(minutes=5)
    ran = dataclasses.replace(census_job(ttl_row("web-1", 30.0, now)), last_run_id=1)
    wanted = ConfiguredJob("sync", Path("jobs.toml"), {"command": ["true"], "ttl": "45s",
                                                        "schedule": "* * * * *"})
    assert configured.notes(wanted, ran)[-1:] == (
        "ttl differs: file 45s, hosts ran 30s on web-1",)
    same = ConfiguredJob("sync", Path("jobs.toml"), {"command": ["true"], "ttl": "30s",
                                                      "schedule": "* * * * *"})
    assert not any("ttl" in note for note in configured.notes(same, ran))
