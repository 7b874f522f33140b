"""The soak's two checkers against forged histories: a checker that cannot fail proves
nothing, so each must report an overlap, a duplicate slot and a silent miss, and must not
report what pglock's promise leaves out or what a fault explains (tests/soak)."""

from __future__ import annotations

from datetime import datetime

from soak import figures, overlap, slots
from soak.history import (
    FAILOVERS,
    NS,
    Fault,
    History,
    Invocation,
    JobSpec,
    Mark,
    Run,
    SlotRow,
    Write,
)

HOSTS = ["h1", "h2", "h3"]
SLOT = 1_800_000_000.0  # a minute boundary (epoch seconds)
T0 = 1_000 * NS  # boottime of the forged histories' first event


def command(job: str, host: str, pid: int, token: int, enter: float, leave: float,
            seat: int = 0, done: bool = True) -> list[Mark]:
    """A command's marks: enter, ticks every 0.1 s, done; times in seconds after T0."""
    at = [T0 + int(enter * NS) + i * NS // 10 for i in range(int((leave - enter) * 10) + 1)]
    kinds = ["enter"] + ["tick"] * (len(at) - 2) + ["done" if done else "tick"]
    return [Mark(t, kind, job, seat, token, host, pid) for t, kind in zip(at, kinds, strict=True)]


def fault(kind: str, host: str | None, start: float, end: float) -> Fault:
    return Fault(kind, host, T0 + int(start * NS), T0 + int(end * NS),
                 SLOT + start, SLOT + end)


def held_by_two(jobs: list[JobSpec], marks: list[Mark],
                faults: list[Fault] | None = None) -> list[overlap.Overlap]:
    specs = {j.name: j for j in jobs}
    return overlap.overlaps(overlap.intervals(marks), specs, faults or [])


# Checker 1: held by two.

def test_two_commands_of_one_job_at_once_are_a_defect() -> None:
    marks = command("a", "h1", 10, 1, 0, 3) + command("a", "h2", 20, 2, 2, 4)
    [found] = held_by_two([JobSpec("a")], marks)
    assert found.verdict == "defect"
    assert (found.first.token, found.second.token) == (1, 2)
    assert 0.9 < found.seconds < 1.1


def test_one_after_the_other_is_no_overlap() -> None:
    marks = command("a", "h1", 10, 1, 0, 3) + command("a", "h2", 20, 2, 3.05, 5)
    marks += command("b", "h2", 30, 1, 1, 2)  # another job meanwhile
    assert held_by_two([JobSpec("a"), JobSpec("b")], marks) == []


def test_a_command_killed_without_a_leave_ends_at_its_last_tick() -> None:
    marks = command("a", "h1", 10, 1, 0, 2, done=False) + command("a", "h2", 20, 2, 2.5, 4)
    assert held_by_two([JobSpec("a")], marks) == []


def test_a_semaphore_allows_its_limit_on_distinct_seats_and_no_more() -> None:
    two = command("s", "h1", 10, 1, 0, 3, seat=1) + command("s", "h2", 20, 1, 1, 3, seat=2)
    assert held_by_two([JobSpec("s", limit=2)], two) == []
    three = two + command("s", "h3", 30, 2, 2, 4, seat=1)
    [found] = held_by_two([JobSpec("s", limit=2)], three)
    assert found.verdict == "defect"
    same_seat = command("s", "h1", 10, 1, 0, 3, seat=1) + command("s", "h2", 20, 2, 1, 3, seat=1)
    assert [o.verdict for o in held_by_two([JobSpec("s", limit=2)], same_seat)] == ["defect"]


def test_a_host_frozen_past_its_lease_is_outside_the_promise_a_short_freeze_is_not() -> None:
    # h1's command entered at 0, its host froze from 1 to 16 (longer than a 10 s lease can
    # outlast), h2 took over at 12, h1 thawed and ticked on until 16.5.
    marks = (command("a", "h1", 10, 1, 0, 1, done=False) + command("a", "h1", 10, 1, 16, 16.5)
             + command("a", "h2", 20, 2, 12, 14))
    long_freeze = [fault("freeze-host", "h1", 1, 16)]
    assert [o.verdict for o in held_by_two([JobSpec("a")], marks, long_freeze)] == [
        "frozen-host"]
    short_freeze = [fault("freeze-host", "h1", 11, 13)]
    assert [o.verdict for o in held_by_two([JobSpec("a")], marks, short_freeze)] == ["defect"]
    other_host = [fault("freeze-host", "h3", 1, 16)]
    assert [o.verdict for o in held_by_two([JobSpec("a")], marks, other_host)] == ["defect"]


def test_an_advisory_overlap_after_a_terminated_backend_is_a_defect() -> None:
    """The row's stops_by keeps a contender out until the holder has stopped (issue 33):
    no window is excused any more, however short."""
    marks = command("v", "h1", 10, 1, 0, 3, done=False) + command("v", "h2", 20, 2, 2.9, 4)
    terminated = [fault("terminate", "h1", 1.5, 1.5)]
    advisory = JobSpec("v", mode="advisory")
    assert [o.verdict for o in held_by_two([advisory], marks, terminated)] == ["defect"]


def test_stale_writes_are_counted_and_an_accepted_lower_token_is_reported() -> None:
    writes = [Write(1, "a", 0, 1, "h1", True), Write(2, "a", 0, 2, "h2", True),
              Write(3, "a", 0, 1, "h1", False), Write(4, "a", 1, 1, "h3", True)]
    assert overlap.stale_writes(writes) == overlap.StaleWrites(1, [])
    forged = [*writes, Write(5, "a", 0, 1, "h1", True)]
    assert overlap.stale_writes(forged).accepted_lower == [forged[-1]]


# Checker 2: slots.

CRON = JobSpec("c", schedule="* * * * *")


def run(id_: int, host: str, outcome: str, start: float = 1, end: float | None = 5,
        attempt: int = 1) -> Run:
    return Run(id_, "c", SLOT, attempt, None, host, 1, outcome, SLOT + start,
               None if end is None else SLOT + end)


def invoked(host: str, code: int, fired: float = 0, ended: float = 2) -> Invocation:
    return Invocation(host, "c", SLOT, T0 + int(fired * NS), SLOT + fired,
                      T0 + int(ended * NS), SLOT + ended, code)


def verdict(runs: list[Run], invocations: list[Invocation], faults: list[Fault] | None = None,
            rows: list[SlotRow] | None = None) -> slots.SlotVerdict:
    history = History({"c": CRON}, HOSTS, faults=faults or [], invocations=invocations,
                      runs=runs, slots=rows or [], expected_slots=[SLOT])
    [found] = slots.check(history)
    return found


def losers(*hosts: str) -> list[Invocation]:
    return [invoked(h, 75) for h in hosts]


def test_a_slot_with_one_success_ran() -> None:
    assert verdict([run(1, "h1", "succeeded")], [invoked("h1", 0), *losers("h2", "h3")]
                   ).state == "ran"


def test_two_successes_of_one_slot_are_a_duplicate() -> None:
    found = verdict([run(1, "h1", "succeeded"), run(2, "h2", "succeeded", attempt=2)],
                    [invoked("h1", 0), invoked("h2", 0), *losers("h3")])
    assert found.state == "duplicate"


def test_a_slot_nobody_ran_without_a_fault_is_an_unexplained_miss() -> None:
    found = verdict([], losers(*HOSTS))
    assert found.state == "missed-unexplained"
    assert len(found.why) == 3
    # A host cron never fired, with no fault to say why, is no excuse either.
    assert verdict([], losers("h1", "h2")).state == "missed-unexplained"


def test_a_miss_during_a_server_restart_is_explained() -> None:
    down = [fault("restart-immediate", None, -1, 15)]
    found = verdict([], [invoked(h, 125, ended=12) for h in HOSTS], down)
    assert found.state == "missed-explained"


def test_a_slot_lost_to_the_wait_after_a_promotion_is_a_defect() -> None:
    """Every host refused (75) just after a failover, nobody holding the job: the wait
    after the promotion refused them, and a trigger waits that wait out now (docs/ha.md),
    so a slot lost to it is no longer excused by the failover. A restart still excuses."""
    for kind in FAILOVERS:
        promoted = [fault(kind, None, -3, -1)]
        found = verdict([], losers(*HOSTS), promoted)
        assert found.state == "missed-unexplained", kind
    restarted = [fault("restart-immediate", None, -3, -1)]
    assert verdict([], losers(*HOSTS), restarted).state == "missed-explained"


def test_a_miss_needs_every_host_accounted_for() -> None:
    # h1 cut off, but h2 and h3 reached the database and ran nothing: not explained.
    cut = [fault("partition", "h1", -1, 15)]
    found = verdict([], [invoked("h1", 125, ended=12), *losers("h2", "h3")], cut)
    assert found.state == "missed-unexplained"
    assert not any("h1" in why for why in found.why)


def test_a_last_attempt_cut_by_a_fault_explains_the_refusals_it_caused() -> None:
    killed = [fault("kill-pglock", "h1", 3, 3)]
    runs = [run(1, "h1", "abandoned", end=20)]
    assert verdict(runs, [invoked("h1", 137, ended=3), *losers("h2", "h3")], killed
                   ).state == "missed-explained"
    # The same run ended lock_lost with no fault anywhere: a defect.
    assert verdict([run(1, "h1", "lock_lost", end=20)],
                   [invoked("h1", 125, ended=20), *losers("h2", "h3")]
                   ).state == "missed-unexplained"


def test_a_host_that_was_no_candidate_is_accounted_for_only_beside_a_fault() -> None:
    """--candidates 2: h3 stood by (its event log says not_candidate); the slot's
    candidates h1 and h2 were frozen when cron would have fired them: explained. Every host
    standing by with no fault anywhere (a slot nobody was a candidate of), or fewer than K
    candidates taken by a fault, is a defect."""
    frozen = [fault("freeze-host", h, -5, 70) for h in ("h1", "h2")]
    history = History({"c": CRON}, HOSTS, faults=frozen, invocations=losers("h3"),
                      expected_slots=[SLOT], stood_by={("h3", "c", SLOT): 3})
    [found] = slots.check(history)
    assert found.state == "missed-explained"
    assert "h3: not a candidate (rank 3)" in found.why
    # Without the event's word, h3's refusal has no holder and no fault: unexplained.
    history.stood_by = {}
    assert slots.check(history)[0].state == "missed-unexplained"
    nobody = History({"c": CRON}, HOSTS, invocations=losers(*HOSTS), expected_slots=[SLOT],
                     stood_by={(h, "c", SLOT): 3 for h in HOSTS})
    assert slots.check(nobody)[0].state == "missed-unexplained"
    # K = 2 and one candidate frozen: the second should have run the slot a step later.
    two = JobSpec("c", schedule="* * * * *", candidates=2)
    one_frozen = History({"c": two}, HOSTS, faults=frozen[:1], invocations=losers("h2", "h3"),
                         expected_slots=[SLOT],
                         stood_by={("h2", "c", SLOT): 3, ("h3", "c", SLOT): 3})
    [found] = slots.check(one_frozen)
    assert found.state == "missed-unexplained"
    assert "a fault took 1 of its 2 candidates' parts" in found.why[0]
    # Both frozen: every candidate dead, the slot missed as documented.
    both = History({"c": two}, HOSTS, faults=frozen, invocations=losers("h3"),
                   expected_slots=[SLOT], stood_by={("h3", "c", SLOT): 3})
    assert slots.check(both)[0].state == "missed-explained"


def test_a_clock_offset_explains_nothing() -> None:
    skewed = [fault("clock", h, -30, 30) for h in HOSTS]
    assert verdict([], losers(*HOSTS), skewed).state == "missed-unexplained"


def test_spent_attempts_without_success_are_a_dead_slot() -> None:
    runs = [run(1, "h1", "failed", attempt=1), run(2, "h1", "failed", attempt=2)]
    rows = [SlotRow("c", SLOT, 2, 2, None, False)]
    assert verdict(runs, [invoked("h1", 1), *losers("h2", "h3")], rows=rows).state == "dead"


def test_the_report_fails_on_each_kind_of_defect() -> None:
    jobs = {"a": JobSpec("a"), "c": CRON}
    clean = History(jobs, HOSTS, marks=command("a", "h1", 10, 1, 0, 1),
                    runs=[run(1, "h1", "succeeded")],
                    invocations=[invoked("h1", 0), *losers("h2", "h3")],
                    expected_slots=[SLOT])
    assert figures.build(clean).passed
    overlapping = History(jobs, HOSTS, marks=clean.marks + command("a", "h2", 20, 2, 0.5, 2),
                          runs=clean.runs, invocations=clean.invocations,
                          expected_slots=[SLOT])
    report = figures.build(overlapping)
    assert not report.passed and report.figures["overlaps"] == 1
    duplicate = History(jobs, HOSTS, runs=[*clean.runs, run(2, "h2", "succeeded", attempt=2)],
                        invocations=clean.invocations, expected_slots=[SLOT])
    report = figures.build(duplicate)
    assert not report.passed and report.figures["duplicate_slots"] == 1
    silent = History(jobs, HOSTS, invocations=losers(*HOSTS), expected_slots=[SLOT])
    report = figures.build(silent)
    assert not report.passed and report.figures["unexplained_misses"] == 1


def test_a_restart_no_longer_excuses_an_advisory_overlap() -> None:
    # The lock was taken at 0, the server restarted from 0.2 to 0.8, the command (slow to
    # start) entered at 2, another host took the lock at 2.5 (seed 3 of the soak, before
    # issue 22): the row's incarnation now makes the other host wait, so it is a defect.
    marks = command("v", "h1", 10, 1, 2, 3.5, done=False) + command("v", "h2", 20, 2, 2.5, 4)
    restart = [fault("restart-immediate", None, 0.2, 0.8)]
    found = overlap.overlaps(overlap.intervals(marks), {"v": JobSpec("v", mode="advisory")},
                             restart)
    assert [o.verdict for o in found] == ["defect"]


def test_takeover_counts_from_the_fault_to_the_next_token_of_a_struck_job() -> None:
    jobs = {"a": JobSpec("a"), "c": CRON}
    runs = [Run(1, "a", None, 1, None, "h1", 1, "abandoned", SLOT, SLOT + 12),
            Run(2, "a", None, 1, None, "h2", 2, "succeeded", SLOT + 11.5, SLOT + 13),
            # Not struck: it succeeded, or ran on another host than the fault's.
            Run(3, "a", None, 1, None, "h3", 3, "succeeded", SLOT + 20, SLOT + 22),
            Run(4, "a", None, 1, None, "h3", 4, "lock_lost", SLOT + 30, SLOT + 32)]
    faults = [fault("kill-pglock", "h1", 1.5, 1.5), fault("kill-pglock", "h1", 21, 21),
              fault("partition", "h1", 31, 33)]
    history = History(jobs, HOSTS, runs=runs, faults=faults)
    assert figures.takeover(history) == {
        "kill-pglock": {"n": 1, "p50": 10.0, "p95": 10.0, "max": 10.0}}


def test_a_spent_slot_is_dead_only_if_every_attempt_failed_or_met_a_fault() -> None:
    rows = [SlotRow("c", SLOT, 3, 3, None, False)]
    runs = [run(1, "h1", "failed", attempt=1), run(2, "h1", "lock_lost", attempt=2),
            run(3, "h2", "failed", attempt=3)]
    invocations = [invoked("h1", 125), invoked("h2", 1), *losers("h3")]
    found = verdict(runs, invocations, rows=rows)
    assert found.state == "missed-unexplained"
    assert found.why == ["attempt #2 (run 2) ended lock_lost on h1, cut short by no fault"]
    cut = [fault("terminate", "h1", 3, 3)]
    assert verdict(runs, invocations, cut, rows).state == "dead"


def test_commands_with_one_pid_are_told_apart() -> None:
    # pids wrap: the same host and pid, two tokens, one after the other.
    marks = command("a", "h1", 10, 1, 0, 1) + command("a", "h1", 10, 2, 2, 3)
    assert len(overlap.intervals(marks)) == 2
    assert held_by_two([JobSpec("a")], marks) == []


def test_a_fault_aimed_at_another_jobs_pglock_explains_nothing() -> None:
    runs = [run(1, "h1", "lock_lost", end=3)]
    invocations = [invoked("h1", 125, ended=3), *losers("h2", "h3")]
    other = [Fault("terminate", "h1", T0 + 2 * NS, T0 + 2 * NS, SLOT + 2, SLOT + 2, "x")]
    assert verdict(runs, invocations, other).state == "missed-unexplained"
    ours = [Fault("terminate", "h1", T0 + 2 * NS, T0 + 2 * NS, SLOT + 2, SLOT + 2, "c")]
    assert verdict(runs, invocations, ours).state == "missed-explained"


def test_a_fault_that_ends_the_pglock_between_two_attempts_is_named() -> None:
    # The soak's defect 3 (seed 4242): attempts 1 and 2 failed on h1 (on purpose), the
    # server restarted during the retry delay, and h1's pglock ended (exit 125) before it
    # recorded attempt 3: the slot is missed, explained by the restart, named as such.
    runs = [run(1, "h1", "failed", 1, 3, attempt=1), run(2, "h1", "failed", 4, 6, attempt=2)]
    rows = [SlotRow("c", SLOT, 2, 3, None, False)]
    invocations = [invoked("h1", 125, ended=8), *losers("h2", "h3")]
    restart = [fault("restart-fast", None, 7.5, 9)]
    found = verdict(runs, invocations, restart, rows)
    assert found.state == "missed-explained"
    assert found.why[0] == ("run 2 on h1, then its pglock ended between attempts (exit 125): "
                            "restart-fast")
    # No fault, or one on another host, or one after the pglock ended: unexplained.
    assert verdict(runs, invocations, [], rows).state == "missed-unexplained"
    elsewhere = [fault("partition", "h2", 7.5, 9)]
    assert verdict(runs, invocations, elsewhere, rows).state == "missed-unexplained"
    later = [fault("restart-fast", None, 20, 21)]
    assert verdict(runs, invocations, later, rows).state == "missed-unexplained"


# Across failovers (a soak with a standby).

def test_a_token_given_twice_across_a_failover_is_a_defect_one_runs_attempts_are_not() -> None:
    # h1 held token 7 until 3; an asynchronous failover at 4 lost the token's increment and
    # h2 was given 7 again at 6, after h1's command had ended: no overlap, but a defect.
    marks = command("a", "h1", 10, 7, 0, 3) + command("a", "h2", 20, 7, 6, 8)
    lagged = [Fault("failover-lagged", None, T0 + 4 * NS, T0 + 5 * NS, SLOT + 4, SLOT + 5,
                    detail="a->b, WAL held back 2.0s")]
    assert held_by_two([JobSpec("a")], marks, lagged) == []
    [repeat] = overlap.repeated_tokens(overlap.intervals(marks), lagged)
    assert (repeat.first.host, repeat.second.host, repeat.failover) == ("h1", "h2", lagged[0])
    history = History({"a": JobSpec("a")}, HOSTS, marks=marks, faults=lagged)
    report = figures.build(history)
    assert not report.passed and report.figures["repeated_tokens"] == 1
    assert report.defects == ["repeated token: a seat 0: token 7 on h1 (pid 10) and on h2 "
                              "(pid 20), across failover-lagged (a->b, WAL held back 2.0s) "
                              "at 08:00:04"]
    # One host's pglock given token 7 twice for attempt 1 of no slot: a defect too.
    twice = command("a", "h1", 10, 7, 0, 3) + command("a", "h1", 11, 7, 6, 8)
    assert len(overlap.repeated_tokens(overlap.intervals(twice), [])) == 1
    # One run's attempts (a retry in place keeps its lock and token): none.
    attempts = [Mark(m.at, m.kind, m.job, m.seat, m.token, m.host, m.pid, "", n)
                for n, part in ((1, command("a", "h1", 10, 7, 0, 3)),
                                (2, command("a", "h1", 11, 7, 4, 6))) for m in part]
    assert overlap.repeated_tokens(overlap.intervals(attempts), lagged) == []


SLOT_ISO = "2027-01-15T08:00:00+00:00"  # SLOT as PGLOCK_SLOT says it


def completed(host: str, pid: int, token: int, enter: float, leave: float,
              attempt: int = 1, failed: bool = False) -> list[Mark]:
    """A command of the slot SLOT that worked to its end (exit 1 when `failed`)."""
    marks = [Mark(m.at, m.kind, "c", 0, token, host, pid, SLOT_ISO, attempt)
             for m in command("c", host, pid, token, enter, leave)]
    if failed:
        marks.insert(-1, Mark(marks[-1].at, "fail", "c", 0, token, host, pid, SLOT_ISO,
                              attempt))
    return marks


def replicated(runs: list[Run], marks: list[Mark], faults: list[Fault],
               replication: str = "async") -> slots.SlotVerdict:
    history = History({"c": CRON}, HOSTS, marks=marks, faults=faults,
                      invocations=[invoked("h1", 0), *losers("h2", "h3")], runs=runs,
                      expected_slots=[SLOT], replication=replication)
    [found] = slots.check(history)
    return found


def test_a_completion_lost_with_the_old_primary_is_counted_apart_async_only() -> None:
    assert datetime.fromisoformat(SLOT_ISO).timestamp() == SLOT
    # h1's command succeeded at 5 (token 1); the WAL receiver had been held back since 4,
    # the primary died and the standby was promoted at 7: the new primary has the run as
    # running. Counted on its own line, naming the failover.
    marks = completed("h1", 10, 1, 1, 5)
    lost_run = [run(1, "h1", "running", end=None)]
    lagged = [Fault("failover-lagged", None, T0 + 4 * NS, T0 + 7 * NS, SLOT + 4, SLOT + 7,
                    detail="a->b, WAL held back 2.0s")]
    found = replicated(lost_run, marks, lagged)
    assert found.state == "lost-completion"
    assert found.why == ["attempt 1 on h1 (token 1, pid 10) succeeded, its end lost with the "
                         "old primary in failover-lagged (a->b, WAL held back 2.0s)"]
    # Run again by another host afterwards: still the lost completion, with the rerun named.
    again = [*lost_run, run(2, "h2", "succeeded", 9, 12)]
    assert replicated(again, marks, lagged).why[0].endswith("; ran again: run 2 on h2")
    # Synchronous: no completion may be lost; a failover long before, or none: not excused.
    assert replicated(lost_run, marks, lagged, "sync").state != "lost-completion"
    early = [Fault("failover", None, T0 - 60 * NS, T0 - 58 * NS, SLOT - 60, SLOT - 58)]
    assert replicated(lost_run, marks, early).state == "missed-unexplained"
    # A command that failed on purpose completes nothing.
    failed = completed("h1", 10, 1, 1, 5, failed=True)
    assert replicated(lost_run, failed, lagged).state != "lost-completion"
    # Recorded: the slot ran.
    assert replicated([run(1, "h1", "succeeded")], marks, lagged).state == "ran"


def test_takeover_after_a_failover_counts_to_the_next_command_of_each_struck_job() -> None:
    jobs = {"a": JobSpec("a"), "b": JobSpec("b"), "c": CRON}
    marks = (command("a", "h1", 10, 1, 0, 3) + command("a", "h2", 20, 2, 4.5, 6)
             + command("b", "h3", 30, 1, 5, 6))  # b ran nothing when the failover came
    switch = [Fault("switchover", None, T0 + 2 * NS, T0 + 3 * NS, SLOT + 2, SLOT + 3)]
    history = History(jobs, HOSTS, marks=marks, faults=switch, replication="sync")
    report = figures.build(history)
    assert report.figures["takeover_after_failover"] == {
        "switchover": {"n": 1, "p50": 2.5, "p95": 2.5, "max": 2.5}}
    assert report.figures["failovers"] == 1
    assert "takeover after a failover (s), replication sync, 1 failovers, ttl 10 s:" in \
        figures.text(report, [])


def test_a_token_given_on_the_old_primary_is_repeated_across_the_failover() -> None:
    # Seed 23, async: h5 took token 4 on the old primary while its WAL receiver was held
    # back (the failover from 0 to 7), its command entered only at 9 (a loaded machine)
    # and stopped at 9.6; h1 was given token 4 again by the new primary at 16.
    marks = command("w", "h5", 10, 4, 9, 9.6, done=False) + command("w", "h1", 20, 4, 16, 18)
    lagged = [Fault("failover-lagged", None, T0, T0 + 7 * NS, SLOT, SLOT + 7, detail="a->b")]
    [repeat] = overlap.repeated_tokens(overlap.intervals(marks), lagged)
    assert repeat.failover == lagged[0]


def test_a_standby_adds_failovers_and_leaves_the_seeds_of_a_run_without_one_alone() -> None:
    from soak.nemesis import plan

    alone = plan(23, 150, 5, 10.0, (4.0, 12.0))
    # Seed 23's schedule as the soak drew it before the standby came (commit 616d9af).
    assert [(round(p.at, 2), p.kind, p.host) for p in alone][:6] == [
        (18.86, "partition", 0), (30.0, "restart-immediate", 3), (36.79, "pause-pglock", 2),
        (45.46, "freeze-host", 1), (49.57, "kill-command", 4), (54.31, "clock", 0)]
    assert not {p.kind for p in alone} & FAILOVERS
    assert plan(23, 150, 5, 10.0, (4.0, 12.0), replication="none") == alone
    # The suite's short soak (seed 23, 2.5 minutes, sync) meets a failover at 24 s.
    synced = plan(23, 150, 5, 10.0, (4.0, 12.0), replication="sync")
    assert next((round(p.at), p.kind) for p in synced if p.kind in FAILOVERS) == (24, "failover")
    assert "failover-lagged" not in {p.kind for p in synced}
    lagged = plan(23, 150, 5, 10.0, (4.0, 12.0), replication="async")
    assert "failover-lagged" in {p.kind for p in lagged}


def test_an_attempts_start_lost_with_the_old_primary_is_counted_apart_not_a_repeat() -> None:
    """The soak's seed 3435 (async, slot 04:22 of cron-retry): h1 ran attempt 2 under
    token 7; the lagged failover lost its start record, and h1, still holding its lock,
    ran attempt 2 again (the server numbers attempts from the slot's row). One holder, one
    token, one run recorded for the two: counted on its own line, not as a defect."""
    lagged = [Fault("failover-lagged", None, T0 + 4 * NS, T0 + 5 * NS, SLOT + 4, SLOT + 5,
                    detail="b->a, WAL held back 3.3s")]
    marks = [m for part in (completed("h1", 10, 7, 0, 3, attempt=2, failed=True),
                            completed("h1", 11, 7, 6, 8, attempt=2, failed=True))
             for m in part]
    recorded = [Run(1, "c", SLOT, 2, None, "h1", 7, "failed", SLOT + 6, SLOT + 8)]
    history = History({"c": CRON}, HOSTS, marks=marks, faults=lagged, runs=recorded,
                      replication="async")
    [repeat] = overlap.repeated_tokens(overlap.intervals(marks), lagged)
    assert overlap.lost_start(repeat, recorded)
    report = figures.build(history)
    assert report.figures["repeated_tokens"] == 0 and report.figures["lost_starts"] == 1
    assert ("attempt 2 of c on h1 (token 7, pid 10): its start lost with the old primary in "
            "failover-lagged (b->a, WAL held back 3.3s) at 08:00:04; its holder ran that "
            "attempt again (pid 11)") in report.lost
    # Both starts recorded (the command ran twice as one attempt), a plain failover (no
    # commit lost), or two hosts: a repeated token, a defect.
    twice = [*recorded, Run(2, "c", SLOT, 2, None, "h1", 7, "failed", SLOT, SLOT + 3)]
    assert not overlap.lost_start(repeat, twice)
    plain = [Fault("failover", None, T0 + 4 * NS, T0 + 5 * NS, SLOT + 4, SLOT + 5)]
    [unlagged] = overlap.repeated_tokens(overlap.intervals(marks), plain)
    assert not overlap.lost_start(unlagged, recorded)
    elsewhere = [Mark(m.at, m.kind, m.job, m.seat, m.token, "h2" if m.pid == 11 else m.host,
                      m.pid, m.slot, m.attempt) for m in marks]
    [two_hosts] = overlap.repeated_tokens(overlap.intervals(elsewhere), lagged)
    assert not overlap.lost_start(two_hosts, recorded)
