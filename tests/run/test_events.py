"""The event log with real processes: many writers share one file, skips say why,
syslog goes through a datagram socket the test listens on."""

from __future__ import annotations

import json
import re
import socket
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import Env
from marks import held_command, race

from run.test_run_basics import running_rows

NEW_YEAR = "0 0 1 1 *"


def events(path: Path) -> list[dict[str, Any]]:
    """Every line of the log, each of which must be one JSON object."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_fifty_processes_share_one_event_log(env: Env) -> None:
    log, release = env.tmp / "events.jsonl", env.tmp / "release"
    command = held_command(env.tmp / "marks", release)
    processes = [env.popen("run", "--job", "herd", "--holder", f"host-{i}",
                           "--event-log", str(log), "--", *command) for i in range(50)]
    ends = race(processes, release)
    assert sorted(code for code, _, _ in ends) == [0] + [75] * 49
    assert all((out, err) == ("", "") for _, out, err in ends)
    by_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in events(log):
        by_pid[event["pid"]].append(event)
    assert sorted(by_pid) == sorted(p.pid for p in processes)
    [winner] = [p for p in processes if p.returncode == 0]
    [run] = env.runs("herd")
    assert [e["event"] for e in by_pid[winner.pid]] == ["acquired", "started", "finished"]
    finished = by_pid[winner.pid][-1]
    assert (finished["outcome"], finished["exit_code"], finished["run_id"],
            finished["fencing_token"], finished["job"], finished["holder"]) == (
        "succeeded", 0, run["id"], run["fencing_token"], "herd", run["holder"])
    for process in processes:
        if process is winner:
            continue
        [skipped] = by_pid[process.pid]
        assert (skipped["event"], skipped["reason"], skipped["held_by"]) == (
            "skipped", "held", run["holder"])
        assert skipped["host"] == socket.gethostname()
        assert "run_id" not in skipped


def test_a_slot_that_already_ran_and_a_start_past_the_deadline(env: Env) -> None:
    log = env.tmp / "events.jsonl"
    scheduled = ("run", "--job", "yearly", "--schedule", NEW_YEAR, "--tz", "UTC",
                 "--event-log", str(log))
    assert env.run(*scheduled, "--", "true").returncode == 0
    assert env.run(*scheduled, "--", "true").returncode == 75
    late = env.run("run", "--job", "yearly-late", "--schedule", NEW_YEAR, "--tz", "UTC",
                   "--deadline", "1m", "--", "true", env={"PGLOCK_EVENT_LOG": str(log)})
    assert (late.returncode, late.stdout, late.stderr) == (75, "", "")
    lines = events(log)
    assert [e["event"] for e in lines] == ["acquired", "started", "finished", "skipped",
                                           "skipped"]
    assert lines[0]["slot"].startswith(f"{lines[0]['ts'][:4]}-01-01T00:00:00")
    assert [(e["job"], e["reason"]) for e in lines[3:]] == [
        ("yearly", "slot_ran"), ("yearly-late", "past_deadline")]
    assert "held_by" not in lines[3]


def test_hooks_pings_and_a_lost_lock_are_events(env: Env) -> None:
    log = env.tmp / "events.jsonl"
    result = env.run("run", "--job", "told", "--event-log", str(log),
                     "--ping-url", "http://127.0.0.1:1/never", "--on-failure", "exit 3",
                     "--", "sh", "-c", "exit 9")
    assert (result.returncode, result.stderr) == (9, "")
    by_event = defaultdict(list)
    for event in events(log):
        by_event[event["event"]].append(event)
    [hook] = by_event["hook"]
    assert (hook["hook"], hook["ok"], hook["exit_code"]) == ("on-failure", False, 3)
    assert sorted(p["ping"] for p in by_event["ping"]) == ["/9", "/start"]
    assert not any(p["ok"] for p in by_event["ping"])
    assert "127.0.0.1:1" not in log.read_text()  # the URL (a secret of sorts) is not logged



@pytest.mark.slow
def test_a_lost_lock_is_an_event_before_the_finished_one(env: Env) -> None:
    log = env.tmp / "events.jsonl"
    # A short ttl: the cleared holder notices at its next renewal (ttl/3), not 20 s later.
    holder = env.popen("run", "--job", "lost", "--ttl", "6s", "--event-log", str(log), "--",
                       "sleep", "60")
    env.wait_for(lambda: running_rows(env, "lost") == 1, what="the run to start")
    assert env.run("clear", "--job", "lost", "--yes", "--reason", "test").returncode == 0
    holder.communicate(timeout=60)
    assert holder.returncode == 125
    lines = events(log)
    assert [e["event"] for e in lines] == ["acquired", "started", "lock_lost", "finished"]
    assert lines[2]["error"].startswith("lock lost")
    assert lines[3]["outcome"] == "lock_lost"

def test_an_event_log_that_cannot_be_opened_is_said_once_and_the_job_runs(env: Env) -> None:
    result = env.run("run", "--job", "no-log", "--event-log",
                     str(env.tmp / "missing-dir" / "events.jsonl"), "--", "echo", "ran")
    assert (result.returncode, result.stdout) == (0, "ran\n")
    assert re.fullmatch(r"pglock: --event-log \S+ cannot be opened \(No such file or "
                        r"directory\); events are not logged\n", result.stderr)


def test_syslog_gets_one_datagram_per_event(env: Env) -> None:
    path = str(env.tmp / "log.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(path)
        listener.settimeout(30)
        result = env.run("run", "--job", "to-syslog", "--event-log", f"syslog:{path}",
                         "--", "sh", "-c", "exit 2")
        assert (result.returncode, result.stdout, result.stderr) == (2, "", "")
        messages = [listener.recv(65536).decode() for _ in range(3)]
    parsed = []
    for message in messages:
        match = re.fullmatch(r"<(\d+)>\w{3} [ \d]\d \d\d:\d\d:\d\d pglock\[(\d+)\]: (\{.*\})",
                             message)
        assert match, message
        parsed.append((int(match[1]), int(match[2]), json.loads(match[3])))
    assert [(priority, event["event"]) for priority, _, event in parsed] == [
        (14, "acquired"), (14, "started"), (12, "finished")]
    assert {pid for _, pid, _ in parsed} == {parsed[0][2]["pid"]}
    assert parsed[2][2]["outcome"] == "failed"
