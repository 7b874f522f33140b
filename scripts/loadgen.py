"""A fleet's load on one PostgreSQL: pglock's own statements from many simulated hosts.

Each simulated `pglock run` (a `Contender`) opens its own connections and calls pglock's
own functions, in the order a run calls them (`Slot.acquire`, `ledger.start`, the run's
renewer, `record.record_end`): when those statements change, the load follows. Threads in
one process stand in for the fleet's processes; the server, not the client, is what is
measured (its CPU, WAL and connections are read from /proc and the statistics views).

    scripts/loadgen acquire [--workers N] [--jobs K] [--seconds S] [--reuse] [--pgbouncer]
    scripts/loadgen renew [--holders N] [--workers N] [--seconds S] [--pgbouncer]
    scripts/loadgen storm [--hosts H] [--jobs J] [--jitter D] [--command-seconds C]
                          [--held] [--warm] [--candidates K [--candidate-step S]]
    scripts/loadgen refresh [--hosts H] [--jobs J] [--census-hosts N] [--candidates K]
                            [--together]

A throwaway embedded server is started (durable: fsync and synchronous_commit on, as a
fleet's database) unless --dsn names one; --fast turns durability off (the test suite's
settings). --pgbouncer puts a PgBouncer in transaction pooling in front. --repeat N
repeats the measurement and prints the spread; --json FILE writes every figure.
The schema `loadgen` (--schema) is dropped before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import pwd
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pglock.db import schema as schema_module
from pglock.db.database import Reconnecting
from pglock.db.embedded import SERVER_USER, EmbeddedServer
from pglock.lock import advisory, candidates, clock, lease, ledger
from pglock.lock.heartbeat import Renewer
from pglock.lock.ledger import Outcome, RunResult
from pglock.run import keeping, record
from pglock.run.notify import Notifier, NotifyOptions
from pglock.run.options import RunOptions
from pglock.run.slot import Slot
from pglock.run.supervise import SignalGate

SCHEMA = "loadgen"
DURABLE = {"max_connections": "400"}
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
        "max_connections": "400"}


# --- The adapter: the one place that knows which of pglock's functions a run calls. ---


class Contender:
    """One simulated `pglock run --job JOB` on host HOLDER, on connections of its own.

    pglock's winner records its start in the acquire statement (one call of the schema's
    acquire function) and its end with the release (one call of finish): start() only
    reads the run the acquire recorded; the loads above keep calling acquire, start,
    renew, end.
    """

    def __init__(self, conninfo: str, schema: str, job: str, holder: str, *,
                 ttl: float = 60.0, mode: str = "lease", min_hold: float | None = None,
                 jitter: float = 0.0, connect_timeout: float = 10.0,
                 turn: lease.Turn | None = None) -> None:
        self.started = clock.now()
        # With a turn (--candidates), its hold covers the later candidates' attempts.
        gated = {} if turn is None else {"candidates": turn.candidates,
                                         "candidate_step": turn.step}
        self.options = RunOptions(job=job, command=["true"], schema=schema, ttl=ttl,
                                      mode=mode, holder=holder, min_hold=min_hold,
                                      jitter=jitter, connect_timeout=connect_timeout,
                                      **gated)
        # As Slot.open builds them.
        self.session = Reconnecting(
            conninfo, application_name=f"pglock run {job} on {holder}", timeout=connect_timeout,
            user_timeout=2 * advisory.CHECK_INTERVAL if mode == "advisory" else None)
        # The simulated host's name is its census name too, as PGLOCK_HOST would make it.
        self.claim = lease.Claim(job=self.options.job, schema=schema, ttl=ttl, mode=mode,
                                 holder=holder, host=holder, turn=turn)
        self.sent: float | None = None
        self.run_id: int | None = None
        self.renewer: Renewer | None = None

    def acquire(self) -> bool:
        """Connect, try the lock and record the start (Slot.acquire); whether it was won."""
        gate = SignalGate()
        slot = Slot(self.options, self.session, self.claim, gate,
                    Notifier(NotifyOptions(), job=self.claim.job, holder=self.claim.holder))
        try:
            won = slot.acquire(start=ledger.RunStart(command="true"))
        finally:
            # A run's gate lives as long as its process; thousands of these in one process
            # would run out of file descriptors (a storm with --warm fires several).
            os.close(gate.wake_r)
            os.close(gate.wake_w)
        self.sent = slot.sent if won else None
        if won:
            self.claim.hold = self.options.hold(self.started, slot.sent)
        return won

    def start(self) -> int:
        """The start record the winning acquire wrote (the command itself is not spawned)."""
        started = self.claim.run
        assert started is not None
        self.claim.run = None
        self.run_id = started.id
        return started.id

    def renew(self) -> bool:
        """One heartbeat, on the renewer's connection (lease mode: one of its own)."""
        if self.renewer is None:
            self.renewer = keeping.renewer(self.session, self.claim)
        renewal, _ = self.renewer.renew()
        return renewal is not lease.Renewal.LOST

    def end(self, duration: float) -> bool:
        """The end record and the release (record.record_end); whether both took."""
        assert self.run_id is not None and self.sent is not None
        result = RunResult(Outcome.SUCCEEDED, 0, duration)
        recorded = record.record_end(self.session, self.claim, self.run_id, result)
        return recorded.failure is None and recorded.result.outcome is Outcome.SUCCEEDED

    def close(self) -> None:
        if self.renewer is not None:
            self.renewer.reset()
        self.session.close()


# --- Evidence: who held which job when, from the generator's own records. ---


@dataclass(frozen=True)
class Tenure:
    """One win: the fencing token, and the stopwatch times the winner held the lock between
    (from the acquire's answer to the moment its release was sent)."""

    job: str
    token: int
    won: float
    released: float


def overlaps(tenures: Sequence[Tenure]) -> list[str]:
    """Pairs of tenures of one job that overlap, or whose tokens do not rise in time order."""
    by_job: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures:
        by_job[tenure.job].append(tenure)
    found = []
    for job, held in by_job.items():
        held.sort(key=lambda t: t.won)
        for before, after in itertools.pairwise(held):
            if after.won < before.released or after.token <= before.token:
                found.append(f"job {job!r}: token {before.token} held until {before.released:.4f}, "
                             f"token {after.token} won at {after.won:.4f}")
    return found


def runs_table_problems(conninfo: str, schema: str, tenures: Sequence[Tenure],
                        since_id: int = 0) -> list[str]:
    """What the runs table says against the records: one row per win, every token once,
    no run of a job started before the previous one finished (runs after id `since_id`: a
    warm-up's are not counted)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT job, fencing_token, started_at, finished_at, outcome FROM {}.runs "
            "WHERE id > %s ORDER BY job, started_at").format(sql.Identifier(schema)),
            (since_id,)).fetchall()
    problems = []
    if len(rows) != len(tenures):
        problems.append(f"{len(rows)} runs recorded for {len(tenures)} wins")
    if sorted((r[0], r[1]) for r in rows) != sorted((t.job, t.token) for t in tenures):
        problems.append("the runs' (job, fencing token) pairs differ from the wins'")
    for before, after in itertools.pairwise(rows):
        if before[0] == after[0] and (before[3] is None or after[2] < before[3]
                                      or after[1] <= before[1]):
            problems.append(f"job {after[0]!r}: run of token {after[1]} started before "
                            f"token {before[1]}'s ended")
    problems += [f"job {r[0]!r}: token {r[1]} ended {r[4]}" for r in rows
                 if r[4] != "succeeded"]
    return problems


# --- The server's side: CPU from /proc, WAL and commits from the statistics views. ---


def _cpu_of(pid: int, children: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        # Exited backends' time, added to the postmaster's when it reaps them.
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def process_tree_cpu(pid: int) -> float:
    """CPU seconds of a server process and its children, living and reaped."""
    total = _cpu_of(pid, children=True)
    for child in _children(pid):
        with contextlib.suppress(OSError):
            total += _cpu_of(child, children=False)
    return total


@dataclass
class Snapshot:
    wall: float
    client_cpu: float
    server_cpu: float | None
    bouncer_cpu: float | None
    wal_bytes: int
    wal_fsyncs: int | None
    commits: int


class Server:
    """The database measured: its direct DSN, the DSN contenders use, where its CPU is read."""

    def __init__(self, direct: str, target: str, bouncer_pid: int | None = None) -> None:
        self.direct = direct
        self.target = target
        self.bouncer_pid = bouncer_pid
        with psycopg.connect(direct, autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_activity "
                               "WHERE backend_type = 'checkpointer'").fetchone()
            self.version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            self.settings = dict(conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', "
                "'synchronous_commit', 'full_page_writes', 'max_connections', "
                "'shared_buffers', 'wal_sync_method')").fetchall())
        self.postmaster: int | None = None
        with contextlib.suppress(OSError, TypeError, IndexError):
            stat = Path(f"/proc/{row[0]}/stat").read_text()  # type: ignore[index]
            self.postmaster = int(stat.rsplit(")", 1)[1].split()[1])

    def snapshot(self) -> Snapshot:
        with psycopg.connect(self.direct, autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
            commits = conn.execute("SELECT sum(xact_commit) FROM pg_stat_database").fetchone()
            fsyncs: Any = None
            with contextlib.suppress(psycopg.Error):
                fsyncs = conn.execute("SELECT sum(fsyncs) FROM pg_stat_io "
                                      "WHERE object = 'wal'").fetchone()
        times = os.times()
        return Snapshot(
            wall=clock.now(), client_cpu=times.user + times.system,
            server_cpu=None if self.postmaster is None else process_tree_cpu(self.postmaster),
            bouncer_cpu=None if self.bouncer_pid is None else process_tree_cpu(self.bouncer_pid),
            wal_bytes=int(lsn[0]) if lsn else 0,  # type: ignore[index]
            wal_fsyncs=None if fsyncs is None or fsyncs[0] is None else int(fsyncs[0]),
            commits=int(commits[0]) if commits and commits[0] is not None else 0)

    def backends(self) -> int:
        """Client backends now (pglock's, by application name)."""
        with psycopg.connect(self.direct, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE application_name LIKE 'pglock run %'").fetchone()
        return int(row[0]) if row else 0


STATEMENTS = """
SELECT calls, total_plan_time / calls, total_exec_time / calls, wal_bytes / calls,
       regexp_replace(left(query, 300), '\\s+', ' ', 'g')
FROM pg_stat_statements
WHERE query NOT LIKE '%%pg_stat%%' AND query NOT LIKE '%%pg_current_wal_lsn%%' AND calls >= 10
ORDER BY total_plan_time + total_exec_time DESC LIMIT %s
"""

STATEMENT_SETTINGS = {"shared_preload_libraries": "pg_stat_statements",
                      "pg_stat_statements.track_planning": "on",
                      "pg_stat_statements.track": "all"}


def reset_statements(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def statements(conninfo: str, count: int = 12) -> list[dict[str, Any]]:
    """The statements that took the server's time: calls, mean planning and execution."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(STATEMENTS, (count,)).fetchall()
    return [{"calls": calls, "plan_ms": float(plan), "exec_ms": float(execute),
             "wal_bytes": float(wal), "query": text[:110]}
            for calls, plan, execute, wal, text in rows]


def costs(before: Snapshot, after: Snapshot, count: int) -> dict[str, float | None]:
    """Per-operation cost over a measured stretch: server CPU, WAL, fsyncs, commits."""
    def each(a: float | None, b: float | None, scale: float = 1.0) -> float | None:
        return None if a is None or b is None or not count else (b - a) * scale / count

    wall = after.wall - before.wall
    return {
        "wall_s": wall, "count": count, "per_s": count / wall if wall else 0.0,
        "server_cpu_ms": each(before.server_cpu, after.server_cpu, 1000),
        "bouncer_cpu_ms": each(before.bouncer_cpu, after.bouncer_cpu, 1000),
        "client_cpu_ms": each(before.client_cpu, after.client_cpu, 1000),
        "server_cpu_share": None if before.server_cpu is None or after.server_cpu is None
        else (after.server_cpu - before.server_cpu) / wall,
        "wal_bytes": each(before.wal_bytes, after.wal_bytes),
        "wal_fsyncs": each(before.wal_fsyncs, after.wal_fsyncs),
        "commits": each(before.commits, after.commits)}


# --- The loads. ---


def error_kinds(errors: Sequence[str]) -> dict[str, int]:
    """Errors counted by their reason (the text after the last "failed: ")."""
    kinds: dict[str, int] = defaultdict(int)
    for error in errors:
        kinds[error.rsplit("failed: ", 1)[-1][:80]] += 1
    return dict(kinds)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Tally:
    """What the threads of one load counted (under a lock)."""

    wins: int = 0
    losses: int = 0
    # --candidates: contenders that were no candidate, and asked nothing.
    stood_by: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    tenures: list[Tenure] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def hold(contender: Contender, answered: float, seconds: float) -> Tenure:
    """A winner's run: the start record, `seconds` of command, the end record and release.

    The duration recorded runs from the start record's answer to the release's sending:
    within the real tenure, so that the runs table's intervals can be checked too.
    """
    contender.start()
    began = clock.now()
    time.sleep(seconds)
    released = clock.now()
    if not contender.end(released - began):
        raise RuntimeError("the end was not recorded")
    assert contender.claim.fencing_token is not None
    return Tenure(contender.options.job, contender.claim.fencing_token, answered, released)


def occupy(server: Server, schema: str, names: Sequence[str], mode: str) -> list[Contender]:
    """A running holder for each job."""
    holders = []
    for name in names:
        holder = Contender(server.target, schema, name, "running-host", mode=mode)
        if not holder.acquire():
            raise RuntimeError(f"{name}: not acquired")
        holder.start()
        holders.append(holder)
    return holders


def vacate(holders: Sequence[Contender], since: float, until: float) -> list[Tenure]:
    """End the holders' runs; their tenures."""
    tenures = []
    for holder in holders:
        holder.end(until - since)
        holder.close()
        tenures.append(Tenure(holder.options.job, holder.claim.fencing_token or 0, since, until))
    return tenures


def acquisitions(server: Server, schema: str, *, workers: int, jobs: int, seconds: float,
                 reuse: bool, mode: str = "lease", held: bool = False) -> dict[str, Any]:
    """Runs as fast as `workers` threads can go, each a whole winner's or loser's round
    (connect unless --reuse, version check, acquire; a winner's start, end and release).
    With `held`, a running holder has every job first: every round is a loser's."""
    names = [f"job-{n}" for n in range(jobs)]
    # The schema made first, outside the measured rounds (a first round that makes it is
    # not a winner's or a loser's round, and on a loaded machine may outlast `seconds`).
    with psycopg.connect(server.direct, autocommit=True) as conn:
        schema_module.ensure(conn, schema)
    holders = occupy(server, schema, names, mode) if held else []
    tally = Tally()
    stop_at = clock.now() + seconds

    def worker(index: int) -> None:
        session: Reconnecting | None = None
        rounds = 0
        # Each worker makes one round at least, however short `seconds` (a test's 0.2 s).
        while rounds == 0 or clock.now() < stop_at:
            rounds += 1
            contender = Contender(server.target, schema, names[index % jobs], f"host-{index}",
                                  min_hold=0.0, mode=mode)
            if reuse and session is not None:
                contender.session = session
            began = clock.now()
            try:
                won = contender.acquire()
                answered = clock.now()
                if won:
                    tenure = hold(contender, answered, 0.0)
            except Exception as error:
                with tally.lock:
                    tally.errors.append(f"{type(error).__name__}: {error}")
                contender.close()
                session = None
                continue
            with tally.lock:
                tally.latencies.append(answered - began)
                if won:
                    tally.wins += 1
                    tally.tenures.append(tenure)
                else:
                    tally.losses += 1
            if reuse:
                session = contender.session
            else:
                contender.close()
        if session is not None:
            session.close()

    before = server.snapshot()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = server.snapshot()
    tally.tenures += vacate(holders, before.wall, after.wall)
    result = costs(before, after, tally.wins + tally.losses)
    result.update(wins=tally.wins, losses=tally.losses, errors=len(tally.errors),
                  first_errors=error_kinds(tally.errors),
                  acquire_p50_ms=1000 * percentile(tally.latencies, 0.5),
                  acquire_p99_ms=1000 * percentile(tally.latencies, 0.99),
                  overlaps=overlaps(tally.tenures),
                  runs_table=runs_table_problems(server.direct, schema, tally.tenures))
    return result


def renewals(server: Server, schema: str, *, holders: int, workers: int, seconds: float,
             ttl: float = 60.0) -> dict[str, Any]:
    """`holders` running jobs (each its run's connection and its heartbeat's), renewed as
    fast as `workers` threads can go, each renewal on its holder's heartbeat connection."""
    running = []
    for n in range(holders):
        contender = Contender(server.target, schema, f"running-{n}", f"host-{n}", ttl=ttl)
        if not contender.acquire():
            raise RuntimeError(f"running-{n}: not acquired")
        contender.start()
        contender.renew()  # opens the heartbeat's connection, as the first renewal does
        running.append(contender)
    tally = Tally()
    stop_at = clock.now() + seconds

    def worker(index: int) -> None:
        mine = running[index::workers]
        done, lost, latencies = 0, 0, []
        while clock.now() < stop_at:
            for contender in mine:
                began = clock.now()
                if contender.renew():
                    done += 1
                else:
                    lost += 1
                latencies.append(clock.now() - began)
        with tally.lock:
            tally.wins += done
            tally.losses += lost
            tally.latencies += latencies

    backends = server.backends()
    before = server.snapshot()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = server.snapshot()
    for contender in running:
        contender.end(0.0)
        contender.close()
    result = costs(before, after, tally.wins + tally.losses)
    result.update(renewed=tally.wins, lost=tally.losses, holders=holders,
                  server_backends=backends,
                  renew_p50_ms=1000 * percentile(tally.latencies, 0.5),
                  renew_p99_ms=1000 * percentile(tally.latencies, 0.99))
    return result


# A minute passing, for the census (schema version 9): each host's rows as if written a
# minute before, so that the next storm finds every one due, as a minutely fleet's storm
# does. Nothing before version 9 has a census to age.
AGE_CENSUS = """
UPDATE {schema}.attendance SET last_attempt = last_attempt - interval '1 minute',
                               first_attempt = first_attempt - interval '1 minute'
"""


def age_census(conninfo: str, schema: str) -> None:
    """Move the census back a minute (every row due again), vacuum and checkpoint: the
    storm after it writes as a minutely fleet's next one would, its pages' first images
    after a checkpoint included."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".attendance',)).fetchone()
        if found is not None and found[0] is not None:
            conn.execute(sql.SQL(AGE_CENSUS).format(schema=sql.Identifier(schema)))
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


@dataclass
class Candidates:
    """--candidates K: each simulated host's roster of each job (learnt from its acquire,
    as pglock keeps it in a file), and the turn it ranks the storm's slot by."""

    k: int
    step: float
    at: datetime = field(default_factory=lambda: candidates.turn_of(datetime.now(UTC)))
    rosters: dict[tuple[int, int], list[str]] = field(default_factory=dict)

    def plan(self, host: int, job: int) -> tuple[int | None, lease.Turn] | None:
        """The contender's rank and turn (rank None: no roster yet, it contends at once),
        or None: not a candidate, it asks nothing."""
        roster = self.rosters.get((host, job))
        name, job_name = f"host-{host}", f"storm-{job}"
        turn = lease.Turn(self.k, self.step, 600.0 + 60.0, candidates.roster_size(self.k))
        if roster is None:
            return None, turn
        # A roster learnt in the warm-up is fresh: the acquire does not read it again.
        turn = replace(turn, roster=None)
        rank = candidates.rank(job_name, self.at, name, roster, self.k)
        if rank is None or rank > self.k:
            return None
        order = candidates.ranked(job_name, self.at, [*roster, name])
        return rank, replace(turn, rank=rank, passed=tuple(order[:rank - 1]))

    def learnt(self, host: int, job: int, roster: list[str] | None) -> None:
        """Keep the roster a contender's acquire answered (as its host's file would)."""
        if roster is not None:
            self.rosters[(host, job)] = roster


def storm(server: Server, schema: str, *, hosts: int, jobs: int, jitter: float,
          command_seconds: float, connect_timeout: float = 10.0, held: bool = False,
          warm: bool = False, gate: Candidates | None = None) -> dict[str, Any]:
    """H hosts x J jobs fired at the same instant (cron's :00), each host's run of each
    job sleeping a random 0..jitter first (--jitter); the winner of each job holds for
    command_seconds. Latency: from a contender's own start (after its jitter) to its
    answer; the storm lasts until the last contender has its answer. With `warm`, two
    storms first (not measured) make the schema and the census's rows, which are then
    moved a minute back (every host's row due, as at a minutely fleet's next :00); with
    `held`, a running holder has every job: every contender of the storm measured loses.
    With `gate` (--candidates K), the warm-up storms (at least two, every host contending:
    none has a roster yet) teach each host its roster of each job, and in the storm
    measured only each job's K candidates ask, the one of rank r (r-1) steps after the
    instant it fires."""
    names = [f"storm-{n}" for n in range(jobs)]
    # Two storms at least: the first makes each host's row of each job, the second (its
    # second attempt) adds the job to those the host attends, once in the pair's life;
    # more while a contender failed in one (a loaded server's schema creation timing out).
    # Without a census (before schema version 9), one.
    for round_ in range(4 if warm or gate else 0):
        warming = None if gate is None else replace(gate, rosters={})
        _fire(server, schema, hosts=hosts, jobs=jobs, jitter=0.0, command_seconds=0.0,
              connect_timeout=connect_timeout, min_hold=0.0, gate=warming)
        if gate is not None and warming is not None:
            gate.rosters.update(warming.rosters)
        if warm:
            age_census(server.direct, schema)
        if round_ >= 1 and _attended(server.direct, schema) in (None, hosts * jobs):
            break
    warmed = _runs(server.direct, schema) if warm or gate else 0
    holders = occupy(server, schema, names, "lease") if held else []
    fired = _fire(server, schema, hosts=hosts, jobs=jobs, jitter=jitter,
                  command_seconds=command_seconds, connect_timeout=connect_timeout, gate=gate)
    tally, before, after = fired.tally, fired.before, fired.after
    tally.tenures += vacate(holders, before.wall, after.wall)
    asked = tally.wins + tally.losses + len(tally.errors)
    result: dict[str, Any] = dict(costs(before, after, asked))
    result.update(
        hosts=hosts, jobs=jobs, jitter_s=jitter, candidates=None if gate is None else gate.k,
        contenders=asked, stood_by=tally.stood_by, wins=tally.wins, losses=tally.losses,
        server_cpu_per_slot_ms=None if result["server_cpu_ms"] is None
        else result["server_cpu_ms"] * asked / jobs,
        errors=len(tally.errors), first_errors=error_kinds(tally.errors),
        peak_client_connections=fired.peak_open,
        peak_server_backends=max(fired.samples, default=0),
        acquire_p50_ms=1000 * percentile(tally.latencies, 0.5),
        acquire_p99_ms=1000 * percentile(tally.latencies, 0.99),
        last_answer_s=max(fired.answers, default=fired.t0) - fired.t0,
        # The last answer less the steps the candidates waited by design: the storm's own.
        last_answer_less_steps_s=max(fired.unstepped, default=0.0),
        overlaps=overlaps(tally.tenures),
        runs_table=runs_table_problems(server.direct, schema, tally.tenures, warmed))
    winners: dict[str, int] = defaultdict(int)
    for tenure in tally.tenures:
        winners[tenure.job] += 1
    result["jobs_not_run_once"] = sorted(j for j in names if winners[j] != 1)
    return result


# Hosts the census knows for each job beyond those that ask: rows as a fleet's hosts
# leave them, each seen a moment ago and promising to be seen again (--candidates-refresh
# 10m + a minute), so that every one of them is in the job's roster but for its size.
CENSUS_HOSTS = """
INSERT INTO {schema}.attendance (job, host, first_attempt, ttl, outcome, last_attempt, due,
                                 roster_key)
SELECT job, 'census-' || i, now(), interval '60 seconds', 'standby', now(),
       interval '660 seconds', {schema}.roster_key(job, 'census-' || i)
FROM unnest(%(jobs)s::text[]) AS job, generate_series(1, %(count)s) AS i
"""


def refreshes(server: Server, schema: str, *, hosts: int, jobs: int, census_hosts: int,
              k: int, workers: int = 8, together: bool = False) -> dict[str, Any]:
    """H hosts x J jobs each learning its roster of a job as a trigger that is no
    candidate and whose roster is due does (Candidacy.refresh): a new connection, one
    members() statement, close; one job per statement (a host's refresh asks for all its
    due jobs in one: this is the dearer case). Two rounds (not measured) make each host's
    rows; the census is moved a minute back after each (every row due, as after a
    refresh's ten minutes); the third round is measured. `census_hosts` more hosts per
    job in the census show what a large fleet's refresh reads: the roster's size, not the
    fleet's. With `together`, each host asks for all its jobs' rosters in one statement,
    as a host whose rosters are all due does."""
    names = [f"storm-{n}" for n in range(jobs)]
    with psycopg.connect(server.direct, autocommit=True) as conn:
        schema_module.ensure(conn, schema)
        if census_hosts:
            conn.execute(sql.SQL(CENSUS_HOSTS).format(schema=sql.Identifier(schema)),
                         {"jobs": names, "count": census_hosts})
            conn.execute("VACUUM ANALYZE")
    size = candidates.roster_size(k)
    sizes: list[int] = []
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def one(host: int, asked: list[int]) -> None:
        began = clock.now()
        try:
            with psycopg.connect(server.target, autocommit=True, connect_timeout=10,
                                 application_name=f"pglock run storm-{asked[0]} on "
                                                  f"host-{host}") as conn:
                found = candidates.members(conn, schema, f"host-{host}", [{
                    "job": names[job], "slot": None, "ttl": 60.0, "due": 660.0,
                    "size": size} for job in asked])
        except Exception as error:
            with lock:
                errors.append(f"{type(error).__name__}: {error}")
            return
        with lock:
            latencies.append(clock.now() - began)
            sizes.extend(len(found[names[job]]) for job in asked)

    statements = [(h, list(range(jobs))) for h in range(hosts)] if together else [
        (h, [j]) for h in range(hosts) for j in range(jobs)]

    def round_() -> None:
        pairs = iter(statements)
        taking = threading.Lock()

        def worker() -> None:
            while True:
                with taking:
                    pair = next(pairs, None)
                if pair is None:
                    return
                one(*pair)

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Two rounds first: the first makes each host's row of each job, the second adds the
    # job to those the host attends (once in the pair's life, logged): the third is a
    # steady fleet's refresh.
    for _ in range(2):
        round_()
        age_census(server.direct, schema)
    sizes.clear()
    latencies.clear()
    before = server.snapshot()
    round_()
    after = server.snapshot()
    result: dict[str, Any] = dict(costs(before, after, len(statements)))
    result.update(hosts=hosts, jobs=jobs, jobs_per_statement=len(statements[0][1]),
                  census_hosts=census_hosts, roster_size=size,
                  roster_p50=percentile([float(n) for n in sizes], 0.5),
                  refresh_p50_ms=1000 * percentile(latencies, 0.5),
                  refresh_p99_ms=1000 * percentile(latencies, 0.99),
                  errors=len(errors), first_errors=error_kinds(errors))
    return result


def _attended(conninfo: str, schema: str) -> int | None:
    """How many (host, job) pairs the census has as attended (None: it has no census)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".hosts',)).fetchone()
        if found is None or found[0] is None:
            return None
        row = conn.execute(sql.SQL("SELECT sum(cardinality(jobs)) FROM {}.hosts").format(
            sql.Identifier(schema))).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _runs(conninfo: str, schema: str) -> int:
    """The newest run's id: a warm-up's runs are not the measured storm's."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT coalesce(max(id), 0) FROM {}.runs").format(
            sql.Identifier(schema))).fetchone()
    return int(row[0]) if row else 0


@dataclass
class Fired:
    """One storm: its tally, the server's figures before and after, the instant it fired."""

    tally: Tally
    before: Snapshot
    after: Snapshot
    t0: float
    answers: list[float]
    peak_open: int
    samples: list[int]
    # Each answer's time from the instant it fired, less the steps its contender waited.
    unstepped: list[float] = field(default_factory=list)


def _wait(until: float, jitter: float) -> None:
    """Until a candidate's turn (the stopwatch), then a random --jitter."""
    time.sleep(max(0.0, until - clock.now()))
    if jitter > 0:
        time.sleep(random.uniform(0, jitter))


def _turn(gate: Candidates | None, host: int, job: int,
          ) -> tuple[float, lease.Turn | None] | None:
    """A contender's steps to wait and its turn; None: no candidate, it asks nothing."""
    if gate is None:
        return 0.0, None
    planned = gate.plan(host, job)
    if planned is None:
        return None
    rank, turn = planned
    return (0.0 if rank is None else (rank - 1) * gate.step), turn


def _fire(server: Server, schema: str, *, hosts: int, jobs: int, jitter: float,
          command_seconds: float, connect_timeout: float, min_hold: float | None = None,
          sample_every: float = 0.01, gate: Candidates | None = None) -> Fired:
    """H x J contenders fired at once; the server measured around them. With `gate`, only
    each job's candidates ask (each a step after the one above it), and each keeps the
    roster its acquire answered."""
    tally = Tally()
    answers: list[float] = []
    unstepped: list[float] = []
    fired = threading.Event()
    open_now = peak_open = 0
    counter = threading.Lock()

    def opened(delta: int) -> None:
        nonlocal open_now, peak_open
        with counter:
            open_now += delta
            peak_open = max(peak_open, open_now)

    def contender_thread(host: int, job: int) -> None:
        planned = _turn(gate, host, job)
        if planned is None:
            # Not a candidate: exits 75 at once, nothing asked (Candidacy, stand_by).
            fired.wait()
            with tally.lock:
                tally.stood_by += 1
            return
        steps, turn = planned
        contender = Contender(server.target, schema, f"storm-{job}", f"host-{host}",
                              jitter=jitter, connect_timeout=connect_timeout,
                              min_hold=min_hold, turn=turn)
        fired.wait()
        contender.started = t0
        _wait(t0 + steps, jitter)
        began = clock.now()
        opened(1)
        try:
            won = contender.acquire()
            answered = clock.now()
            if won:
                tenure = hold(contender, answered, command_seconds)
        except Exception as error:
            with tally.lock:
                tally.errors.append(f"{type(error).__name__}: {error}")
            return
        finally:
            contender.close()
            opened(-1)
        if gate is not None:
            gate.learnt(host, job, contender.claim.roster)
        with tally.lock:
            tally.latencies.append(answered - began)
            answers.append(answered)
            unstepped.append(answered - t0 - steps)
            if won:
                tally.wins += 1
                tally.tenures.append(tenure)
            else:
                tally.losses += 1

    threads = [threading.Thread(target=contender_thread, args=(h, j), daemon=True)
               for h in range(hosts) for j in range(jobs)]
    for thread in threads:
        thread.start()
    samples: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        # A connection of its own, opened before the storm: it is not counted.
        with psycopg.connect(server.direct, autocommit=True) as conn:
            while not sampling.is_set():
                row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                                   "WHERE application_name LIKE 'pglock run %'").fetchone()
                samples.append(int(row[0]) if row else 0)
                time.sleep(sample_every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(0.2)
    before = server.snapshot()
    t0 = clock.now()
    fired.set()
    for thread in threads:
        thread.join()
    after = server.snapshot()
    sampling.set()
    sampler.join()
    return Fired(tally, before, after, t0, answers, peak_open, samples, unstepped)


# --- Servers: a throwaway embedded one, a PgBouncer in front. ---


@contextlib.contextmanager
def embedded(directory: Path, settings: dict[str, str]) -> Iterator[str]:
    server = EmbeddedServer(directory, settings=settings)
    try:
        yield server.join()
    finally:
        server.leave()


BOUNCER_CONFIG = """
[databases]
* = host={host} port={port} user={user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
max_client_conn = 10000
default_pool_size = {pool}
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(conninfo: str, directory: Path, pool: int) -> Iterator[tuple[str, int]]:
    """A PgBouncer in transaction pooling in front of the server: its DSN and pid."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    directory.mkdir(parents=True, exist_ok=True)
    user = str(parts.get("user") or "postgres")
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    listen = _free_port()
    (directory / "pgbouncer.ini").write_text(BOUNCER_CONFIG.format(
        host=parts.get("host", "localhost"), port=parts.get("port", 5432), user=user,
        listen=listen, dir=directory, pool=pool))
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; the embedded server's user reaches its socket.
        account = pwd.getpwnam(SERVER_USER)
        for path in (directory, *directory.iterdir()):
            os.chown(path, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", SERVER_USER]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dsn = f"host=127.0.0.1 port={listen} dbname={parts.get('dbname', 'postgres')} user={user}"
    deadline = time.monotonic() + 20
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit("loadgen: PgBouncer did not start: "
                                 + (directory / "pgbouncer.log").read_text()[-500:]) from None
            time.sleep(0.1)
    try:
        yield dsn, process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def drop_schema(conninfo: str, schema: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# --- The command line. ---


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/loadgen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("load", choices=("acquire", "renew", "storm", "refresh"))
    parser.add_argument("--dsn", help="an existing server (default: a throwaway embedded one)")
    parser.add_argument("--fast", action="store_true",
                        help="embedded server without durability (fsync, synchronous_commit off)")
    parser.add_argument("--max-connections", type=int, default=400)
    parser.add_argument("--pgbouncer", action="store_true",
                        help="contenders connect through PgBouncer in transaction pooling")
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's server pool")
    parser.add_argument("--schema", default=SCHEMA)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8, help="threads issuing statements")
    parser.add_argument("--jobs", type=int, default=None,
                        help="acquire: distinct jobs (default: one per worker); storm: J")
    parser.add_argument("--reuse", action="store_true",
                        help="acquire: keep each worker's connection (default: one per run)")
    parser.add_argument("--mode", choices=("lease", "advisory"), default="lease")
    parser.add_argument("--holders", type=int, default=100, help="renew: running jobs")
    parser.add_argument("--hosts", type=int, default=20, help="storm: H")
    parser.add_argument("--jitter", type=float, default=0.0, help="storm: --jitter seconds")
    parser.add_argument("--command-seconds", type=float, default=1.0,
                        help="storm: how long each winner's command runs")
    parser.add_argument("--connect-timeout", type=float, default=10.0)
    parser.add_argument("--held", action="store_true",
                        help="acquire, storm: a running holder has every job: every round "
                             "(every contender of the storm) loses")
    parser.add_argument("--warm", action="store_true",
                        help="storm: two storms first (not measured) make the schema and "
                             "the census; moved a minute back and checkpointed, every host's "
                             "row is due in the storm measured, as at a minutely fleet's :00")
    parser.add_argument("--statements", action="store_true",
                        help="per statement: calls, planning and execution time "
                             "(pg_stat_statements; embedded server only)")
    parser.add_argument("--candidates", type=int, default=None, metavar="K",
                        help="storm: only each job's K candidates ask (pglock run "
                             "--candidates K; docs/fleet.md), after warm-up storms that "
                             "teach each host its rosters; refresh: the roster's K")
    parser.add_argument("--candidate-step", type=float, default=10.0,
                        help="storm: --candidate-step seconds")
    parser.add_argument("--together", action="store_true",
                        help="refresh: each host's jobs in one statement")
    parser.add_argument("--census-hosts", type=int, default=0,
                        help="refresh: hosts the census knows for each job beyond the "
                             "--hosts that ask (rows written first)")
    parser.add_argument("--repeat", type=int, default=1, help="measure N times, print the spread")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    drop_schema(server.direct, args.schema)
    if args.load == "acquire":
        return acquisitions(server, args.schema, workers=args.workers,
                            jobs=args.jobs or args.workers, seconds=args.seconds,
                            reuse=args.reuse, mode=args.mode, held=args.held)
    if args.load == "renew":
        return renewals(server, args.schema, holders=args.holders, workers=args.workers,
                        seconds=args.seconds)
    if args.load == "refresh":
        return refreshes(server, args.schema, hosts=args.hosts, jobs=args.jobs or 50,
                         census_hosts=args.census_hosts, k=args.candidates or 3,
                         together=args.together)
    gate = None if args.candidates is None else Candidates(args.candidates,
                                                           args.candidate_step)
    return storm(server, args.schema, hosts=args.hosts, jobs=args.jobs or 50,
                 jitter=args.jitter, command_seconds=args.command_seconds,
                 connect_timeout=args.connect_timeout, held=args.held, warm=args.warm,
                 gate=gate)


def shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def spread(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the median and [min-max] over repeats."""
    summary: dict[str, Any] = {}
    for key in results[0]:
        values = [r[key] for r in results]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) == len(values) and len(values) > 1:
            summary[key] = (f"{shown(float(statistics.median(numbers)))} "
                            f"[{shown(float(min(numbers)))}-{shown(float(max(numbers)))}]")
        else:
            summary[key] = values[-1] if len(values) == 1 else values
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="pglock-loadgen-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        settings = {**(FAST if args.fast else DURABLE),
                    **(STATEMENT_SETTINGS if args.statements else {}),
                    "max_connections": str(args.max_connections)}
        direct = args.dsn or stack.enter_context(embedded(tmp / "pg", settings))
        target, bouncer_pid = direct, None
        if args.pgbouncer:
            target, bouncer_pid = stack.enter_context(
                pgbouncer(direct, tmp / "pgbouncer", args.pool_size))
        server = Server(direct, target, bouncer_pid)
        stack.callback(drop_schema, direct, args.schema)
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        bouncer = (f", through PgBouncer (transaction pooling, pool {args.pool_size})"
                   if args.pgbouncer else "")
        print(f"loadgen {args.load}: PostgreSQL {server.version} "
              f"({', '.join(f'{k}={v}' for k, v in sorted(server.settings.items()))}){bouncer}"
              f"; {os.cpu_count()} CPUs, load {load}")
        results = []
        for n in range(args.repeat):
            if args.statements:
                reset_statements(direct)
            result = measure(args, server)
            if args.statements:
                result["statements"] = statements(direct)
            results.append(result)
            print(f"#{n + 1}: " + ", ".join(f"{k}={shown(v)}" for k, v in result.items()
                                            if not isinstance(v, list)))
            for row in result.get("statements", []):
                print(f"    {row['calls']:>7} calls  plan {row['plan_ms']:.3f} ms  exec "
                      f"{row['exec_ms']:.3f} ms  WAL {row['wal_bytes']:.0f} B  {row['query']}")
            for key in ("first_errors", "overlaps", "runs_table", "jobs_not_run_once"):
                if result.get(key):
                    found = result[key]
                    print(f"    {key}: {found if isinstance(found, dict) else found[:5]}")
        summary = spread(results)
        if args.repeat > 1:
            print("median [min-max]: " + ", ".join(
                f"{k}={v}" for k, v in summary.items() if isinstance(v, str)))
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                             "server": {"version": server.version,
                                                        "settings": server.settings},
                                             "results": results}, indent=1, default=str))
    bad = [r for r in results if r.get("overlaps") or r.get("runs_table")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
