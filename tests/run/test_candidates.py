"""Candidates (--candidates K, docs/fleet.md) with real processes as several hosts: each
host (PGLOCK_HOST, a state directory of its own) reaches the server through a relay of its
own, which counts its connections. After a warm-up (the first triggers contend: no host
has a roster yet), each slot runs once and only its candidates connect; the first
candidate silent, the second runs the slot a step later; every candidate silent, the slot
is missed and check says so; a stale, corrupt or unwritable roster makes its host contend.

A slot of `--schedule '* * * * *'` is the minute the trigger starts in: a test fires its
hosts away from a minute's edge, so that they all rank the same slot."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import PGLOCK, Env, Result
from operating import pglock_json
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from relay import Relay

MINUTELY = ("--schedule", "* * * * *", "--tz", "UTC")
STEP = 1.0


@dataclass
class Host:
    name: str
    relay: Relay
    home: Path
    env: dict[str, str]

    @property
    def roster_file(self) -> Path:
        [file] = (self.home / "pglock" / "candidates").rglob("*.json")
        return file


class Fleet:
    """Hosts of one test, each through its own relay."""

    def __init__(self, env: Env, count: int, k: int, step: float = STEP) -> None:
        self.env = env
        self.k = k
        self.step = step
        options = conninfo_to_dict(env.dsn)
        socket = f"{options['host']}/.s.PGSQL.{options.get('port', 5432)}"
        self.hosts: dict[str, Host] = {}
        for i in range(1, count + 1):
            name = f"web-{i}"
            relay = Relay(socket)
            home = env.tmp / name
            (home / "tmp").mkdir(parents=True)
            self.hosts[name] = Host(name, relay, home, {
                **env.env, "PGLOCK_HOST": name, "XDG_DATA_HOME": str(home),
                "TMPDIR": str(home / "tmp"),
                "PGLOCK_DSN": make_conninfo(env.dsn, host="127.0.0.1", port=str(relay.port)),
                "PGLOCK_EVENT_LOG": str(home / "events.jsonl")})

    def close(self) -> None:
        for host in self.hosts.values():
            host.relay.close()

    def fire(self, job: str, *args: str, only: list[str] | None = None,
             command: tuple[str, ...] = ("true",)) -> dict[str, tuple[Result, int]]:
        """Each host's trigger of the job at once: its result and how many connections it
        opened."""
        names = list(self.hosts) if only is None else only
        before = {name: self.hosts[name].relay.connections for name in names}
        started = {name: subprocess.Popen(
            [PGLOCK, "run", "--job", job, "--candidates", str(self.k), "--candidate-step",
             f"{self.step:g}s", *args, "--", *command], env=self.hosts[name].env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in names}
        done = {}
        for name, process in started.items():
            stdout, stderr = process.communicate(timeout=60)
            done[name] = Result(process.returncode, stdout, stderr)
        # A relay counts a connection once the server side is open: let the last settle.
        time.sleep(0.1)
        return {name: (done[name], self.hosts[name].relay.connections - before[name])
                for name in names}

    def warm_up(self, job: str, *args: str) -> None:
        """Two triggers of the job on every host: the first contend (no roster yet) and
        learn the hosts that asked before them, the second learn them all. The second
        finds the job paused: each candidate's acquire still answers the roster, and no
        one wins, so no winner of rank 2 in a partial roster marks the hosts above it as
        having passed their turn (a rerun of the minute within 1.5 steps, which only these
        compressed triggers make: --min-hold 0, steps of 1 s, the same minute)."""
        for extra in (("--candidates-refresh", "1s"), ()):
            if not extra:
                paused = self.env.run("pause", "--job", job, "--reason", "warm-up")
                assert paused.returncode == 0, paused
            for result, _ in self.fire(job, "--min-hold", "0", *args, *extra).values():
                assert result.returncode in (0, 75) and result.stderr == "", result.stderr
            if extra:
                # The first rosters due (a second at most) at the second triggers.
                time.sleep(1.1)
        resumed = self.env.run("resume", "--job", job)
        assert resumed.returncode == 0, resumed

    def ranked(self, job: str, slot: datetime) -> list[str]:
        """The slot's hosts in rank order, as `pglock hosts --slot` gives them."""
        found = pglock_json(self.env, "hosts", "--job", job, "--slot", slot.isoformat())
        assert found["candidates"] == self.k
        return [row["host"] for row in found["ranked"]]


@pytest.fixture
def fleet(env: Env) -> Any:
    made: list[Fleet] = []

    def make(count: int, k: int, step: float = STEP) -> Fleet:
        made.append(Fleet(env, count, k, step))
        return made[-1]

    yield make
    for each in made:
        each.close()


def this_minute() -> datetime:
    """The minute now, at least 5 seconds before its end (a fire spans it whole)."""
    now = datetime.now(UTC)
    if now.second >= 52:
        time.sleep(61 - now.second - now.microsecond / 1e6)
        now = datetime.now(UTC)
    return now.replace(second=0, microsecond=0)


def events(host: Host) -> list[dict[str, Any]]:
    path = host.home / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_each_slot_once_only_candidates_connect(env: Env, fleet: Any, mode: str) -> None:
    """After the warm-up, each slot runs once and only its K candidates connect: once each
    in lease mode (an advisory one that takes the session lock checks it from a second
    connection)."""
    hosts = fleet(5, 2)
    for job in ("sync", "report"):
        hosts.warm_up(job, "--mode", mode)
    slot = this_minute()
    for job in ("sync", "report"):
        fired = hosts.fire(job, "--mode", mode, *MINUTELY)
        ranked = hosts.ranked(job, slot)
        assert sorted(ranked) == sorted(hosts.hosts)
        first, second, *others = ranked
        # The first runs the slot; the second tries a step later and finds it done; the
        # others exit 75 at once, silently, without a connection.
        once = 1 if mode == "lease" else 2
        assert {name: (r.returncode, r.stdout, r.stderr, min(n, once))
                for name, (r, n) in fired.items()} == {
            first: (0, "", "", once), second: (75, "", "", once),
            **{name: (75, "", "", 0) for name in others}}
        assert fired[first][1] <= once and fired[second][1] <= once
        [run] = [r for r in env.runs(job) if r["slot"] is not None]
        assert (run["holder"], run["candidate_rank"], run["outcome"]) == (first, 1,
                                                                          "succeeded")
        # The event log says who ranked where.
        started = [e for e in events(hosts.hosts[first]) if e["event"] == "started"][-1]
        assert (started["job"], started["candidate_rank"], started["candidates"]) == (
            job, 1, 2)
        skipped = [e for e in events(hosts.hosts[others[0]]) if e["job"] == job][-1]
        assert (skipped["event"], skipped["reason"], skipped["candidate_rank"],
                skipped["slot"]) == ("skipped", "not_candidate", 3, slot.isoformat())
    history = pglock_json(env, "history", "--job", "sync")
    assert [r["candidate_rank"] for r in history["runs"] if r["slot"]] == [1]
    shown = env.run("history", "--job", "sync")
    assert f"{first} (rank 1)" in shown.stdout or "(rank 1)" in shown.stdout, shown
    status = env.run("status", "--job", "sync")
    assert "candidates: 2 per slot, 1.0s apart" in status.stdout, status


@pytest.mark.slow
def test_the_first_candidate_silent_the_second_runs_the_slot_a_step_later(
        env: Env, fleet: Any) -> None:
    hosts = fleet(3, 2)
    hosts.warm_up("sync")
    slot = this_minute()
    first, second, third = hosts.ranked("sync", slot)
    began = time.monotonic()
    fired = hosts.fire("sync", *MINUTELY, only=[second, third])
    assert {name: (r.returncode, r.stderr, n) for name, (r, n) in fired.items()} == {
        second: (0, "", 1), third: (75, "", 0)}
    [run] = [r for r in env.runs("sync") if r["slot"] is not None]
    assert (run["holder"], run["candidate_rank"]) == (second, 2)
    # A step after its trigger (the test started the triggers at `began`).
    started = [e for e in events(hosts.hosts[second]) if e["event"] == "started"][-1]
    assert datetime.fromisoformat(started["ts"]).timestamp() - (
        time.time() - (time.monotonic() - began)) >= STEP
    # The first passed its turn: out of the roster (and the next slots' ranking) until
    # it is seen again.
    [(passed,)] = env.query("SELECT passed_at FROM {schema}.attendance WHERE host = %s",
                            (first,))
    assert passed is not None
    assert first not in hosts.ranked("sync", slot)
    hosts.fire("sync", *MINUTELY, only=[first])
    assert first in hosts.ranked("sync", slot)


@pytest.mark.slow
def test_every_candidate_silent_the_slot_is_missed_and_check_says_so(
        env: Env, fleet: Any) -> None:
    """The next slot's candidates (hosts --next) do not fire: nobody runs it, the others
    never connect, and check calls the job overdue once its grace has passed."""
    hosts = fleet(4, 2)
    hosts.warm_up("sync", *MINUTELY, "--grace", "1s")
    found = pglock_json(env, "hosts", "--job", "sync", "--next")
    slot = datetime.fromisoformat(found["slot"])
    others = [row["host"] for row in found["ranked"] if not row["candidate"]]
    assert len(others) == 2 and [row["tries_at"] for row in found["ranked"][:2]] == [
        found["slot"], datetime.fromtimestamp(slot.timestamp() + STEP, UTC).isoformat()]
    time.sleep(max(0.0, slot.timestamp() + 0.5 - time.time()))
    fired = hosts.fire("sync", *MINUTELY, "--grace", "1s", only=others)
    assert {name: (r.returncode, r.stderr, n) for name, (r, n) in fired.items()} == {
        name: (75, "", 0) for name in others}
    time.sleep(max(0.0, slot.timestamp() + 3 - time.time()))
    checked = env.run("check", "--job", "sync")
    assert checked.returncode != 0 and "overdue: 1 slot missed" in checked.stdout, checked
    assert not [r for r in env.runs("sync") if r["slot"] == slot]


@pytest.mark.slow
def test_a_stale_or_corrupt_roster_makes_its_host_contend(env: Env, fleet: Any) -> None:
    hosts = fleet(3, 1)
    hosts.warm_up("sync")
    slot = this_minute()
    _, second, third = hosts.ranked("sync", slot)
    file = hosts.hosts[second].roster_file
    file.write_text("{ not json")
    fired = hosts.fire("sync", *MINUTELY)
    # The corrupt one contends at once (it may win: the lock decides), the other one
    # outside the first K does not connect.
    assert fired[second][1] == 1 and fired[second][0].stderr == ""
    assert fired[third][1] == 0
    assert len([r for r in env.runs("sync") if r["slot"] is not None]) == 1
    assert json.loads(file.read_text())["hosts"], "the roster was learnt again"
    # Older than three refreshes (10m each): stale.
    data = json.loads(file.read_text())
    data["learnt_at"] -= 3 * 600 + 60
    file.write_text(json.dumps(data))
    fired = hosts.fire("sync", *MINUTELY)
    assert fired[second][1] == 1 and fired[second][0] == Result(75, "", "")
    assert fired[third][1] == 0
    # An operator's --rerun asks whatever its rank (the slot is done: 75).
    fired = hosts.fire("sync", *MINUTELY, "--rerun", only=[third])
    assert fired[third] == (Result(75, "", ""), 1)


def test_a_state_directory_that_cannot_be_written_is_said_once_and_the_host_contends(
        env: Env, fleet: Any) -> None:
    hosts = fleet(1, 1)
    [host] = hosts.hosts.values()
    blocked = host.home / "not-a-directory"
    blocked.write_text("")
    host.env["XDG_DATA_HOME"] = str(blocked)
    first = hosts.fire("sync", "--min-hold", "0")[host.name]
    second = hosts.fire("sync", "--min-hold", "0")[host.name]
    assert (first[0].returncode, first[1]) == (0, 1)
    assert first[0].stderr.startswith("pglock: --candidates: cannot keep the job's roster in ")
    assert first[0].stderr.count("\n") == 1
    assert second == (Result(0, "", ""), 1)


@pytest.mark.slow
def test_a_literal_crontab_lines_hold_covers_the_later_candidates(
        env: Env, fleet: Any) -> None:
    """Without --schedule the slot is the trigger's minute, and a short run's lock is held
    until the last candidate has asked: 20s + (K-1) steps after the trigger."""
    hosts = fleet(3, 2, step=3.0)
    hosts.warm_up("adhoc")
    this_minute()
    fired = hosts.fire("adhoc")
    ran = [name for name, (r, _) in fired.items() if r.returncode == 0]
    assert len(ran) == 1 and sum(n for _, n in fired.values()) == 2, fired
    [(held_for,)] = env.query("SELECT extract(epoch FROM expires_at - acquired_at) "
                              "FROM {schema}.locks WHERE job = 'adhoc'")
    # 23s from the trigger, less the moments from it to the acquire (20s without the steps).
    assert 20.5 < float(held_for) <= 23


@pytest.mark.slow
def test_one_statement_refreshes_the_rosters_of_a_hosts_jobs(env: Env, fleet: Any) -> None:
    """A trigger that is no candidate and whose roster is due learns, in its one
    statement, the rosters of its host's other jobs that are due and still fired there;
    their files keep their last trigger's time, and the census sees the host for each."""
    hosts = fleet(3, 1)
    for job in ("sync", "report"):
        hosts.warm_up(job)
    slot = this_minute()
    host = hosts.hosts[hosts.ranked("sync", slot)[-1]]
    files = {json.loads(f.read_text())["job"]: f
             for f in (host.home / "pglock" / "candidates").rglob("*.json")}
    fired_at = time.time() - 30
    for file in files.values():
        data = json.loads(file.read_text())
        data["refresh_at"] = time.time() - 1
        file.write_text(json.dumps(data))
        os.utime(file, (fired_at, fired_at))
    env.query("UPDATE {schema}.attendance SET last_attempt = last_attempt - interval "
              "'5 minutes' WHERE host = %s", (host.name,))
    fired = hosts.fire("sync", *MINUTELY, only=[host.name])
    assert fired[host.name] == (Result(75, "", ""), 1)
    report = json.loads(files["report"].read_text())
    assert report["learnt_at"] > fired_at + 20 and report["refresh_at"] > time.time() + 200
    assert files["report"].stat().st_mtime == pytest.approx(fired_at, abs=0.01)
    seen = dict(env.query("SELECT job, outcome FROM {schema}.attendance WHERE host = %s "
                          "AND last_attempt > now() - interval '1 minute'", (host.name,)))
    assert seen == {"sync": "standby", "report": "standby"}
