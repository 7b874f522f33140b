"""The operator's screens, built from the core's dataclasses; render.py draws them."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from pglock.cli.census_screens import census_json, census_line
from pglock.cli.render import NONE, Grid, Screen, ago, clip, escaped, header, iso, took, when
from pglock.operate.admin import Cleared
from pglock.reports.history import Action, History, RunRow, Summary
from pglock.reports.jobs import Job, Lock, Pause, Skipped, State
from pglock.reports.status import Status
from pglock.settings.durations import format_duration
from pglock.settings.schedule import MISSED_LIMIT

# On a terminal the state carries a glyph, so that it reads without colour (NO_COLOR).
STATE_LOOK = {
    State.DEAD: ("X dead", "bold red reverse"),
    State.STALE: ("! stale", "bold yellow"),
    State.FAILED: ("x failed", "bold red"),
    State.OVERDUE: ("@ overdue", "yellow"),
    State.CLEARED: ("~ cleared", "magenta"),
    State.SLOW: ("> slow", "bold green"),
    State.RUNNING: ("> running", "green"),
    State.PAUSED: ("| paused", "blue"),
    State.WINDOW: ("# in window", "blue"),
    State.HELD: ("= held", "cyan"),
    State.IDLE: ("  idle", "dim"),
}
SEVERITY = {state: rank for rank, state in enumerate(State)}
STATUS_HEADERS = ("JOB", "STATE", "HOLDER", "MODE", "RUNNING FOR", "EXPIRES IN", "NEXT DUE",
                  "LAST RUN", "EXIT", "ENDED", "TOOK", "LAST SUCCESS")
STATUS_OPTIONAL = ("MODE", "TOOK", "EXIT", "LAST SUCCESS", "ENDED", "RUNNING FOR")
BAR_WIDTH = 24
BAR_GLYPH = {"succeeded": "#", "running": ">"}
OUTCOME_STYLE = {"succeeded": "green", "running": "cyan", "cleared": "magenta"}
# Why a run started late, as history's NOTE says it (runs.late_reason).
LATE = {"promotion_wait": "started late: after the wait that followed a promotion"}
# Kept output is shown under its run, indented by this.
OUTPUT_INDENT = "    "


def status_screen(report: Status, place: str, schema: str, *, terminal: bool) -> Screen:
    """Worst first: what is stale, failed or overdue heads the table."""
    screen = Screen(header("status", place, schema, report.now))
    if not report.jobs and not report.unlisted:
        # A typo'd --schema looks like a quiet fleet: say which it is.
        screen.parts.append(f"no job has run here yet: schema {escaped(schema)!r} has no "
                            "pglock tables (a job's first run creates them; is --schema or "
                            "PGLOCK_SCHEMA right?)" if report.schema_missing
                            else "no job has run here yet")
        return screen
    if report.jobs:
        grid = Grid(STATUS_HEADERS, styled_column=1, optional=STATUS_OPTIONAL, whole="JOB")
        for job in sorted(report.jobs, key=lambda j: (SEVERITY[j.state], j.name)):
            label, style = STATE_LOOK[job.state]
            grid.add(status_cells(job, windowed(job, seated(
                job, label if terminal else str(job.state)))), style)
        screen.parts.append(grid)
    else:
        screen.parts.append("no job is running, held, paused or in trouble")
    screen.parts.append("\n" + tally_line(report))
    screen.parts.extend(pause_lines(report.jobs))
    screen.parts.extend(dead_lines(report.jobs))
    if report.job is not None and report.jobs[0].schedule is not None:
        screen.parts.append(schedule_line(report.jobs[0]))
        screen.parts.extend(skipped_lines(report.jobs[0].skipped))
    if report.job is not None and report.jobs[0].seats is not None:
        screen.parts.extend(seat_lines(report.jobs[0]))
    if report.job is not None and report.jobs[0].census is not None:
        screen.parts.append("\n" + census_line(report.jobs[0].name, report.jobs[0].census,
                                                report.now))
    if len(report.jobs) == 1 and report.runs:
        screen.parts.append(f"\nrecent runs of {report.jobs[0].name}:")
        screen.parts.append(runs_grid(report.runs, report.now, with_job=False))
    if report.actions:
        screen.parts.append("\noperator actions:")
        screen.parts.extend(action_line(action) for action in report.actions)
    return screen


def tally_line(report: Status) -> str:
    """`10000 jobs: 3 failed, 10 running, 9987 idle (not listed: --all lists every job)`."""
    tally = Counter(job.state for job in report.jobs)
    tally[State.IDLE] += report.unlisted
    total = len(report.jobs) + report.unlisted
    line = f"{total} job" + ("s" if total > 1 else "") + ": " + ", ".join(
        f"{tally[state]} {state}" for state in State if tally[state])
    # A failed or stale job can be overdue too: its state shows the worse.
    overdue = sum(job.overdue for job in report.jobs)
    if overdue > tally[State.OVERDUE]:
        line += f" ({overdue} overdue in all)"
    if report.unlisted:
        line += f"; the {report.unlisted} idle not listed (--all lists every job)"
    return line


def pause_lines(jobs: list[Job]) -> list[str]:
    """Who paused what, when, why and until when: `pause --all` once, other pauses each."""
    lines = []
    everywhere = next((job.pause for job in jobs if job.pause and job.pause.everywhere), None)
    if everywhere is not None:
        lines.append("every job is " + _paused_text(everywhere))
    for job in jobs:
        if job.pause is not None and not job.pause.everywhere:
            lines.append(f"{job.name} is " + _paused_text(job.pause))
    return ["", *lines] if lines else []


def dead_lines(jobs: list[Job]) -> list[str]:
    """Each dead slot: its attempts, its last error, and what brings it back."""
    lines = []
    for job in jobs:
        dead = job.dead
        if dead is not None and job.state is State.DEAD:
            error = f", last: {escaped(clip(dead.error))}" if dead.error else ""
            lines.append(f"{job.name} is dead: slot {when(dead.slot)} failed {dead.attempts} "
                         f"attempt{'s' if dead.attempts != 1 else ''}{error}; "
                         f"pglock replay --job {job.name} --reason TEXT")
    return ["", *lines] if lines else []


def _paused_text(pause: Pause) -> str:
    until = f" until {when(pause.until)}" if pause.until else " until resumed"
    return (f"paused since {when(pause.paused_at)} by {escaped(pause.paused_by)}{until}: "
            f"{escaped(pause.reason)}")


def action_line(action: Action) -> str:
    """One operator action, as status --job and history list them."""
    what = escaped(action.host) if action.host is not None else (
        "every job" if action.job == "" else action.job)
    reason = f": {escaped(action.reason)}" if action.reason else ""
    return f"  {when(action.at)}  {action.action} {what} by {escaped(action.by)}{reason}"


def action_json(action: Action) -> dict[str, Any]:
    return {"at": iso(action.at), "job": action.job or None, "host": action.host,
            "action": action.action, "by": action.by, "reason": action.reason,
            "detail": action.detail}


def windowed(job: Job, state: str) -> str:
    """A job in a maintenance window: `in window until 06:00` (in its schedule's zone)."""
    if job.state is not State.WINDOW or job.window_until is None:
        return state
    # The plain state is `window`; the terminal's label says `in window` already.
    label = state if "in window" in state else state.replace("window", "in window")
    return f"{label} until {clock_time(job.window_until, job.timezone)}"


def clock_time(moment: datetime, zone: str | None) -> str:
    """HH:MM in the schedule's zone (the host's when it has no name there)."""
    from zoneinfo import ZoneInfo

    try:
        local = moment.astimezone(ZoneInfo(zone)) if zone and zone != "localtime" \
            else moment.astimezone()
    except (KeyError, ValueError, OSError):
        local = moment.astimezone()
    return f"{local:%H:%M}"


def skipped_lines(found: Skipped) -> list[str]:
    """Slots of the one job shown that no run took: skipped while a run went on, given up
    by a catch-up."""
    lines = []
    if found.running:
        latest = f", latest {when(found.running_slot)}" if found.running_slot else ""
        lines.append(f"skipped while a run was still going: {found.running} "
                     f"slot{'s' if found.running != 1 else ''}{latest}"
                     f" ({found.streak} in a row)")
    if found.catch_up:
        latest = f", latest {when(found.catch_up_slot)}" if found.catch_up_slot else ""
        lines.append(f"given up by catch-up (older than its limit or deadline): "
                     f"{found.catch_up} slot{'s' if found.catch_up != 1 else ''}{latest}")
    if found.promotion:
        latest = f", latest {when(found.promotion_slot)}" if found.promotion_slot else ""
        lines.append(f"missed: the wait after a promotion ended past --deadline: "
                     f"{found.promotion} slot{'s' if found.promotion != 1 else ''}{latest}")
    return lines


def seated(job: Job, state: str) -> str:
    """A semaphore job's state with its seats taken of its limit: `running 2/3`."""
    return state if job.seats is None else f"{state} {job.seats.used}/{job.seats.limit}"


def seat_lines(job: Job) -> list[str]:
    """The seats of the one semaphore job shown, each with its holder and fencing token."""
    assert job.seats is not None
    lines = [f"\nseats of {job.name}: {job.seats.used} running of {job.seats.limit} (--limit)"]
    for seat in job.seats.holders:
        lock = seat.lock
        if lock.cleared_at is not None:
            what = f"cleared by {escaped(lock.cleared_by or '?')}, free in {expiry(job, lock)}"
        elif lock.released_at is not None:
            what = f"ended, held until {lock.expires_at.astimezone():%H:%M:%S} (min-hold)"
        else:
            what = (f"running for {took(job.seconds_since(lock.acquired_at))}, expires in "
                    f"{expiry(job, lock)}")
        lines.append(f"  seat {seat.seat}: {escaped(lock.holder)}:{lock.holder_pid} "
                     f"fencing token {lock.fencing_token}, {what}")
    return lines


def status_cells(job: Job, state: str) -> list[str]:
    lock, last = job.holding, job.last_run
    running_for = job.running_for
    others = job.seats.used - 1 if job.seats is not None and job.seats.used > 1 else 0
    return [
        job.name, state,
        (f"{escaped(lock.holder)}:{lock.holder_pid}" + (f" +{others}" if others else ""))
        if lock else NONE,
        lock.mode if lock else NONE,
        took(running_for) if running_for is not None else NONE,
        expiry(job, lock) if lock else NONE,
        next_due(job),
        last.outcome if last else NONE,
        NONE if last is None or last.exit_code is None else str(last.exit_code),
        ago(job.seconds_since(last.finished_at)) if last else NONE,
        took(last.duration) if last else NONE,
        ago(job.seconds_since(job.last_success_at), never="never"),
    ]


def expiry(job: Job, lock: Lock) -> str:
    left = -(job.seconds_since(lock.expires_at) or 0.0)
    if job.lock_state is State.STALE:
        return f"expired {format_duration(-left)} ago"
    if job.lock_state is State.CLEARED:
        return f"free in {format_duration(left)}"
    if job.held_until is not None:
        return f"held until {job.held_until.astimezone():%H:%M:%S} (min-hold)"
    return format_duration(left)


def next_due(job: Job) -> str:
    """When cron next starts the job, and the slots it missed: `in 4m00s, 3 missed`."""
    due = job.due
    if due is None:
        return "?" if job.schedule_note is not None else NONE
    if due.missed:
        return f"in {took(job.next_due_in)}, {missed(due.missed)}"
    if due.due_at <= job.now:
        # A slot came with no run yet, but within its grace: the run may still come.
        return f"due {ago(job.seconds_since(due.due_at))}"
    return f"in {took(job.next_due_in)}"


def missed(count: int) -> str:
    """`3 missed`; counting stops at schedule.MISSED_LIMIT: `1000+ missed`."""
    return f"{slots(count)} missed"


def slots(count: int) -> str:
    return f"{count}{'+' if count >= MISSED_LIMIT else ''}"


def schedule_line(job: Job) -> str:
    """The schedule of the one job shown, and where it stands against it."""
    text = f"\nschedule '{job.schedule}' ({job.timezone})"
    due = job.due
    if due is None:
        return f"{text}: {job.schedule_note or 'not judged'}"
    text += (f", grace {format_duration(due.grace)}: next due in {took(job.next_due_in)} "
             f"(at {when(due.next_fire)})")
    since = f"{ago(job.seconds_since(due.due_at))} (at {when(due.due_at)})"
    if due.missed:
        plural = "" if due.missed == 1 else "s"
        return f"{text}\noverdue: {slots(due.missed)} slot{plural} missed, the first due {since}"
    if due.due_at <= job.now:
        return f"{text}\npending: a slot came with no run yet, within its grace, {since}"
    return f"{text}; on time"


def status_json_parts(report: Status, place: str, schema: str,
                      ) -> tuple[dict[str, Any], str, Iterator[dict[str, Any]], dict[str, Any]]:
    """status --json as render.stream_json writes it: the head, the jobs (made as they
    are written), and what follows them (with --job: its recent runs and actions)."""
    head = {"database": place, "schema": schema, "now": iso(report.now)}
    tail: dict[str, Any] = {}
    if len(report.jobs) == 1 and report.runs:
        tail["recent_runs"] = [run_json(run) for run in report.runs]
    if report.job is not None:
        tail["actions"] = [action_json(action) for action in report.actions]
    return head, "jobs", (job_json(job) for job in report.jobs), tail


def job_json(job: Job) -> dict[str, Any]:
    lock, last = job.holding, job.last_run
    holder: dict[str, Any] | None = None
    if lock is not None:
        holder = {"host": lock.holder, "pid": lock.holder_pid, "mode": lock.mode,
                  "fencing_token": lock.fencing_token, "backend_pid": lock.backend_pid,
                  "acquired_at": iso(lock.acquired_at),
                  "running_for": job.running_for,
                  "expires_at": iso(lock.expires_at),
                  "expires_in": -(job.seconds_since(lock.expires_at) or 0.0),
                  "cleared_at": iso(lock.cleared_at), "cleared_by": lock.cleared_by,
                  "released_at": iso(lock.released_at)}
    return {
        "job": job.name, "state": str(job.state), "holder": holder,
        "last_run": None if last is None else {
            "id": last.id, "outcome": last.outcome, "exit_code": last.exit_code,
            "finished_at": iso(last.finished_at), "duration": last.duration},
        "last_success_at": iso(job.last_success_at),
        "outcome_counts": job.counts,
        "schedule": schedule_json(job),
        "paused": None if job.pause is None else {
            "since": iso(job.pause.paused_at), "by": job.pause.paused_by,
            "reason": job.pause.reason, "until": iso(job.pause.until),
            "every_job": job.pause.everywhere},
        "attempt": job.attempt, "attempt_limit": job.attempt_limit,
        "slow": None if job.slow_for is None else {
            "expected_max": job.slow_after, "over_by": job.slow_for},
        "seats": None if job.seats is None else {
            "used": job.seats.used, "limit": job.seats.limit,
            "holders": [{"seat": seat.seat, "host": seat.lock.holder,
                         "pid": seat.lock.holder_pid,
                         "fencing_token": seat.lock.fencing_token,
                         "acquired_at": iso(seat.lock.acquired_at),
                         "expires_at": iso(seat.lock.expires_at),
                         "released_at": iso(seat.lock.released_at),
                         "cleared_at": iso(seat.lock.cleared_at),
                         "cleared_by": seat.lock.cleared_by}
                        for seat in job.seats.holders]},
        "dead": None if job.dead is None else {
            "slot": iso(job.dead.slot), "attempts": job.dead.attempts,
            "error": job.dead.error},
        "window_until": iso(job.window_until),
        "skipped": {"running": job.skipped.running,
                    "running_slot": iso(job.skipped.running_slot),
                    "running_in_a_row": job.skipped.streak,
                    "catch_up": job.skipped.catch_up,
                    "catch_up_slot": iso(job.skipped.catch_up_slot),
                    "promotion_wait": job.skipped.promotion,
                    "promotion_wait_slot": iso(job.skipped.promotion_slot)},
        # The census (status --job reads it; null in the list of every job).
        "hosts": census_json(job.census),
    }


def schedule_json(job: Job) -> dict[str, Any] | None:
    if job.schedule is None:
        return None
    due = job.due
    return {"expression": job.schedule, "timezone": job.timezone,
            "grace": None if due is None else due.grace,
            "due_at": None if due is None else iso(due.due_at),
            "next_due": None if due is None else iso(due.next_fire),
            "next_due_in": job.next_due_in,
            "overdue": job.overdue,
            "missed_slots": None if due is None else due.missed,
            "note": job.schedule_note}


def history_screen(found: History, place: str, schema: str) -> Screen:
    screen = Screen(header("history", place, schema, found.now))
    if found.summary is not None:
        screen.parts.append(summary_line(found.filters.job or "", found.summary) + "\n")
    if not found.runs:
        screen.parts.append("no runs match")
    else:
        screen.parts.append(runs_grid(found.runs, found.now,
                                      with_job=found.filters.job is None,
                                      bars=found.summary is not None, outputs=found.outputs))
    if found.skipped is not None:
        screen.parts.append("")
        screen.parts.extend(skipped_lines(found.skipped))
    if found.actions:
        screen.parts.append("\noperator actions:")
        screen.parts.extend(action_line(action) for action in found.actions)
    return screen


def summary_line(job: str, summary: Summary) -> str:
    runs = "1 run" if summary.runs == 1 else f"{summary.runs} runs"
    if not summary.finished:
        return f"{job}: {runs}, none finished"
    rate = summary.success_rate or 0.0
    return (f"{job}: {runs} ({summary.finished} finished), success "
            f"{rate:.0%} ({summary.succeeded}/{summary.finished}), duration p50 "
            f"{took(summary.p50)}, p95 {took(summary.p95)}, max {took(summary.max)}")


def runs_grid(runs: list[RunRow], now: datetime, *, with_job: bool, bars: bool = False,
              outputs: bool = False) -> Grid:
    # Attempts of one slot are listed under it: the slot on its newest attempt's row.
    slotted = any(run.slot is not None or run.manual or (run.attempt or 1) > 1 for run in runs)
    headers = ["STARTED", *(["JOB"] if with_job else []), *(["SLOT"] if slotted else []),
               "HOST", "OUTCOME", "EXIT", "DURATION", *(["BAR"] if bars else []), "NOTE"]
    # Across jobs the job's name is what a row is about: kept whole, as status keeps it,
    # where a narrow terminal drops the slot and the rest.
    grid = Grid(headers, styled_column=headers.index("OUTCOME"),
                optional=("NOTE", "HOST", "EXIT", *(["SLOT"] if with_job and slotted else [])),
                whole="JOB" if with_job else None)
    lengths = [_length(run, now) for run in runs]
    longest = max((n for n in lengths if n is not None), default=0.0)
    previous: tuple[str, datetime | None] | None = None
    for run, length in zip(runs, lengths, strict=True):
        slot_cell = []
        if slotted:
            slot_cell = [slot_text(run, same=previous == (run.job, run.slot) and
                                   run.slot is not None)]
            previous = (run.job, run.slot)
        host = escaped(run.holder)
        if run.candidate_rank is not None:
            host += f" (rank {run.candidate_rank})"
        cells = [when(run.started_at), *([run.job] if with_job else []), *slot_cell,
                 host, run.outcome,
                 exit_text(run), NONE if length is None else took(length)]
        if run.outcome == "running":
            cells[-1] = f"{cells[-1]} so far"
        if bars:
            cells.append(bar(run.outcome, length, longest))
        cells.append(clip(run.error or LATE.get(run.late or "")))
        grid.add(cells, OUTCOME_STYLE.get(run.outcome, "bold red"),
                 output_lines(run) if outputs else None)
    return grid


def slot_text(run: RunRow, *, same: bool) -> str:
    """The slot a run was an attempt at (blank under its newer attempt), and which attempt;
    `manual` for a run by hand of a scheduled job."""
    if run.outcome == "cleared":
        return ""
    attempt = "" if run.attempt is None else f"#{run.attempt}"
    if attempt and run.attempt_limit is not None:
        attempt += f"/{run.attempt_limit}"
    if run.slot is None:
        what = "manual" if run.manual else ""
        return " ".join(part for part in (what, attempt if (run.attempt or 1) > 1 else "")
                        if part)
    caught = " caught up" if run.caught_up else ""
    return f"    {attempt}" if same else f"{when(run.slot)} {attempt}{caught}".strip()


def output_lines(run: RunRow) -> list[str] | None:
    """The run's kept output, to show under its line: printable, indented."""
    if run.outcome == "cleared":
        return None
    if run.output is None:
        note = ("(still running: its output is kept when it ends)" if run.outcome == "running"
                else "(no output kept)")
        return [OUTPUT_INDENT + note]
    text = decoded(run.output)
    if not text:
        return [OUTPUT_INDENT + "(no output)"]
    return [OUTPUT_INDENT + printable(line) for line in text.removesuffix("\n").split("\n")]


def decoded(tail: bytes) -> str:
    """A kept tail as text: UTF-8, with U+FFFD for what is not (a tail may start mid-character)."""
    return tail.decode("utf-8", errors="replace")


def printable(line: str) -> str:
    """A line of output with its control characters made visible as `cat -v` does (^[, ^M),
    so that no escape sequence reaches a screen, a mail or a file. A carriage return before
    the line's end is shown too (`^M`): a CRLF output looks as it is, as `cat -v` shows it."""
    if line.isprintable():
        return line
    shown = []
    for char in line:
        code = ord(char)
        if char == "\t":
            shown.append(char)
        elif code < 32 or code == 127:
            shown.append("^" + chr(code ^ 64))
        elif 0x80 <= code < 0xA0:
            shown.append(f"\\x{code:02x}")
        else:
            shown.append(char)
    return "".join(shown)


def _length(run: RunRow, now: datetime) -> float | None:
    if run.outcome == "running":
        return (now - run.started_at).total_seconds()
    return None if run.outcome == "cleared" else run.duration


def exit_text(run: RunRow) -> str:
    if run.exit_code is None:
        return NONE
    if run.signal is None:
        return str(run.exit_code)
    try:
        return f"{run.exit_code} ({signal.Signals(run.signal).name})"
    except ValueError:
        return f"{run.exit_code} (signal {run.signal})"


def bar(outcome: str, length: float | None, longest: float) -> str:
    """A duration bar scaled to the longest run shown; `!` marks a run that did not succeed."""
    if length is None or longest <= 0:
        return ""
    cells = max(1, round(BAR_WIDTH * length / longest)) if length > 0 else 0
    return BAR_GLYPH.get(outcome, "!") * cells


def run_json(run: RunRow, *, output: bool = False) -> dict[str, Any]:
    document = {"id": run.id, "job": run.job, "started_at": iso(run.started_at),
                "finished_at": iso(run.finished_at), "host": run.holder, "pid": run.holder_pid,
                "mode": run.mode, "outcome": run.outcome, "exit_code": run.exit_code,
                "signal": run.signal, "duration": run.duration,
                "fencing_token": run.fencing_token, "error": run.error,
                "slot": iso(run.slot), "attempt": run.attempt,
                "attempt_limit": run.attempt_limit, "manual": run.manual,
                "late": run.late, "trace_id": run.trace_id, "span_id": run.span_id,
                "candidate_rank": run.candidate_rank}
    if output:
        # The run's --output-tail size is not recorded, so whether the tail is all of the
        # output cannot be told: there is no output_truncated.
        document["output"] = None if run.output is None else decoded(run.output)
    return document


def history_json(found: History, place: str, schema: str) -> dict[str, Any]:
    summary = found.summary
    return {
        "database": place, "schema": schema, "now": iso(found.now),
        "filters": {"job": found.filters.job, "since": found.filters.since,
                    "outcome": found.filters.outcome, "host": found.filters.host,
                    "limit": found.filters.limit},
        "runs": [run_json(run, output=found.outputs) for run in found.runs],
        "actions": [action_json(action) for action in found.actions],
        "summary": None if summary is None else {
            "runs": summary.runs, "finished": summary.finished, "succeeded": summary.succeeded,
            "success_rate": summary.success_rate, "p50": summary.p50, "p95": summary.p95,
            "max": summary.max},
    }


def holder_line(job: Job) -> str:
    """Who holds the job's lock, for the question `clear` asks."""
    lock = job.holding
    assert lock is not None
    if job.seats is not None:
        holders = ", ".join(f"seat {seat.seat} {escaped(seat.lock.holder)}:"
                            f"{seat.lock.holder_pid} (token {seat.lock.fencing_token})"
                            for seat in job.seats.holders if seat.lock.released_at is None)
        return (f"job {job.name!r} runs on {job.seats.used} of its {job.seats.limit} seats: "
                f"{holders}; clear takes every one")
    text = (f"job {job.name!r} is held by {escaped(lock.holder)}:{lock.holder_pid} "
            f"({lock.mode} mode, "
            f"token {lock.fencing_token}) for {took(job.seconds_since(lock.acquired_at))}")
    if job.lock_state is State.CLEARED:
        text += f"; already cleared by {escaped(lock.cleared_by or NONE)}, {expiry(job, lock)}"
    return text


# The lock a clear was about to take was released or taken by another meanwhile.
CHANGED_HANDS = ("the lock of job {job!r} was released or changed hands meanwhile; nothing "
                 "cleared (see pglock status)")


def nothing_to_clear(job_name: str, job: Job | None, *, now: bool) -> str | None:
    """Why `clear` (the command's and the dashboard's) has nothing to do, or None: nobody
    holds the lock (an expired one included), or it is cleared already and not `now`."""
    if job is None or job.lock_state not in (State.RUNNING, State.CLEARED):
        return nobody_line(job_name, job)
    if job.lock_state is State.CLEARED and not now:
        return holder_line(job) + " (--now frees it at once)"
    return None


def nobody_line(job_name: str, job: Job | None) -> str:
    if job is None:
        return f"nobody holds job {job_name!r} (it never ran here); nothing to clear"
    if job.lock_state is State.STALE and job.lock is not None:
        advisory = (" or stopped: the next run ends its session if it still holds the "
                    "advisory lock (--terminate ends it now)" if job.lock.mode == "advisory"
                    else "")
        return (f"nobody holds job {job_name!r}: its lock expired "
                f"{ago(job.seconds_since(job.lock.expires_at))} with its run still marked "
                f"running (its holder vanished or is cut off{advisory}; the next run marks "
                "it abandoned); nothing to clear")
    if job.held_until is not None:
        return (f"nobody runs job {job_name!r}; --min-hold keeps its lock taken until "
                f"{when(job.held_until)}, so that no host reruns the same trigger; "
                "nothing to clear")
    return f"nobody holds job {job_name!r}; nothing to clear"


def cleared_line(done: Cleared) -> str:
    lock = done.lock
    free = ("free for others now" if done.free_in < 0.5
            else f"free for others in {format_duration(done.free_in)} (at {when(done.free_at)}), "
                 "once the holder has had its time to stop")
    if done.seats:
        return (f"cleared job {done.job!r}: seat{'s' if len(done.seats) > 1 else ''} "
                f"{', '.join(map(str, done.seats))} of its semaphore; each holder's next "
                f"renewal fails and it stops its command; {free}; audit rows from "
                f"{done.audit_id}")
    return (f"cleared job {done.job!r} from {escaped(lock.holder)}:{lock.holder_pid} "
            f"({lock.mode} mode, "
            f"token {lock.fencing_token}); its next renewal fails and it stops its command; "
            f"{free}; audit row {done.audit_id}")
