"""`scripts/soak`: run the fleet under the nemesis, then check and report.

    scripts/soak --minutes 30 [--seed N] [--hosts 5] [--replication none|sync|async] [--out DIR]
    scripts/soak --recheck DIR          (the checkers again, on a saved soak)

Needs root (network namespaces, signals to every process) and iproute2; clock offsets
need a C compiler (without one they are left out, and the report says so).
Exit 0 when the checkers found no defect, 1 when they did, 2 when the soak could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import figures
from .cluster import PORTS, Cluster
from .cron import PGLOCK, Cron, build_shim
from .fleet import hosts
from .history import (
    Fault,
    History,
    Invocation,
    JobSpec,
    Run,
    SlotRow,
    Write,
    dump,
    load,
    read_marks,
    read_stood_by,
)
from .nemesis import Nemesis, plan
from .server import Server
from .slots import MAX_OFFSET
from .watch import Watch

MINUTELY = "* * * * *"
TTL = 10.0
PERIOD = 5.0
GAP = (4.0, 12.0)


def fleet_jobs() -> list[JobSpec]:
    """Unscheduled jobs fired every few seconds (exclusion), minutely ones (slots)."""
    return [
        # A third of its first attempts fail: retried in place, this invocation's alone.
        JobSpec("ex-lease", retries=1, fail=(0.3, 0.0), seconds=(0.5, 3.0)),
        JobSpec("ex-advisory", mode="advisory", seconds=(0.5, 3.0)),
        JobSpec("ex-limit2", limit=2, seconds=(1.0, 4.0)),
        JobSpec("ex-wait", wait=4.0, seconds=(0.5, 2.0)),
        JobSpec("cron-lease", schedule=MINUTELY, seconds=(1.0, 8.0)),
        JobSpec("cron-advisory", mode="advisory", schedule=MINUTELY, seconds=(1.0, 8.0)),
        # The first attempt always fails, so every slot retries in place; a third of
        # the slots fail all three attempts and are dead.
        JobSpec("cron-retry", schedule=MINUTELY, retries=2, fail=(1.0, 0.6), seconds=(1.0, 4.0)),
        JobSpec("cron-retry-adv", mode="advisory", schedule=MINUTELY, retries=2,
                fail=(1.0, 0.6), seconds=(1.0, 4.0)),
        # Two candidates per slot (docs/fleet.md): the others ask nothing; a slot whose
        # candidates a fault took is missed, its misses explained by those faults.
        JobSpec("cron-candidates", schedule=MINUTELY, candidates=2, seconds=(1.0, 8.0)),
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the fleet fires")
    parser.add_argument("--seed", type=int, help="the nemesis' and the fleet's (random if none)")
    parser.add_argument("--hosts", type=int, default=5)
    parser.add_argument("--period", type=float, default=PERIOD,
                        help="seconds between a host's triggers of an unscheduled job (mean)")
    parser.add_argument("--gap", type=float, nargs=2, default=GAP,
                        metavar=("MIN", "MAX"), help="seconds between two faults' starts")
    parser.add_argument("--net", default="10.200",
                        help="first two octets of the private links made for the hosts")
    parser.add_argument("--prefix", default="sk", help="names of the namespaces and links")
    parser.add_argument("--replication", choices=("none", "sync", "async"), default="none",
                        help="a standby beside the primary, and failovers (docs/soak.md)")
    parser.add_argument("--out", type=Path, help="where the history and report are kept")
    parser.add_argument("--recheck", type=Path, metavar="DIR",
                        help="check a saved soak's history again; run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    # SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C: the fleet is torn down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.recheck:
        return report(args.recheck)
    problem = missing()
    if problem:
        print(f"soak: {problem}", file=sys.stderr)
        return 2
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    out = args.out or Path(tempfile.mkdtemp(prefix=f"pglock-soak-{args.seed}-"))
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)  # the server user must reach its data directory under it
    soak(args, out)
    return report(out)


def missing() -> str:
    if os.geteuid() != 0:
        return "needs root (network namespaces, signals to every host's processes)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    return ""


def soak(args: argparse.Namespace, out: Path) -> None:
    """Set the fleet up, run it, save the history, and tear it down whatever happens."""
    replicated = args.replication != "none"
    fleet = hosts(args.hosts, args.prefix, args.net, PORTS if replicated else (5432,))
    jobs = fleet_jobs()
    addresses = [h.server_ip for h in fleet]
    server = (Cluster(out, addresses, args.net, synchronous=args.replication == "sync")
              if replicated else Server(out / "db", addresses, args.net))
    meta: dict[str, Any] = {"seed": args.seed, "minutes": args.minutes,
                            "hosts": [h.name for h in fleet], "command": command_line(args),
                            "jobs": [asdict(j) for j in jobs],
                            "replication": args.replication}
    nemesis: Nemesis | None = None
    try:
        for host in fleet:
            host.create()
        local = server.start()
        subprocess.run([PGLOCK, "init", "-q", "--dsn", local], check=True)
        shim = build_shim(out)
        meta["clock_faults"] = shim is not None
        cron = Cron(fleet, jobs, out, args.seed, args.period, shim)
        nemesis = Nemesis(cron, server, fleet, out)
        fire(args, cron, nemesis, meta, out)
        save(server, out)
    finally:
        if nemesis is not None:
            nemesis.stopped.set()  # a soak stopped half-way: no fault after the teardown
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        server.close()
        for host in fleet:
            host.destroy()


def fire(args: argparse.Namespace, cron: Cron, nemesis: Nemesis, meta: dict[str, Any],
         out: Path) -> None:
    """The soak proper: cron fires for the minutes asked while the nemesis strikes; then
    the faults heal and every pglock started is waited for."""
    seconds = args.minutes * 60
    schedule = plan(args.seed, seconds, len(cron.hosts), TTL, tuple(args.gap),
                    clock=cron.shim is not None, replication=args.replication)
    meta["started"] = time.time()
    injector = threading.Thread(target=nemesis.run, args=(schedule, time.monotonic()),
                                daemon=True)
    injector.start()
    watch = Watch(out)
    threading.Thread(target=watch.run, daemon=True).start()
    cron.run(until=meta["started"] + seconds)
    meta["stopped"] = time.time()
    nemesis.stop()
    injector.join()
    meta["killed_at_drain"] = cron.drain(timeout=120)
    meta["faults_skipped"] = nemesis.skipped
    watch.stopped.set()
    meta["load"] = watch.load()


def command_line(args: argparse.Namespace) -> str:
    """The command that repeats this soak (its options that change what it does)."""
    words = ["scripts/soak", "--minutes", f"{args.minutes:g}", "--seed", str(args.seed),
             "--hosts", str(args.hosts)]
    if args.period != PERIOD:
        words += ["--period", f"{args.period:g}"]
    if tuple(args.gap) != GAP:
        words += ["--gap", *(f"{g:g}" for g in args.gap)]
    if args.replication != "none":
        words += ["--replication", args.replication]
    return " ".join(words)


def save(server: Server | Cluster, out: Path) -> None:
    """The database's side of the history, as JSON lines beside the fleet's."""
    runs = [Run(*row) for row in server.fetch(  # type: ignore[arg-type]
        "SELECT id, job, extract(epoch FROM slot)::float8, attempt, seat, holder, "
        "fencing_token, outcome, extract(epoch FROM started_at)::float8, "
        "extract(epoch FROM finished_at)::float8 FROM pglock.runs ORDER BY id")]
    slots = [SlotRow(*row) for row in server.fetch(  # type: ignore[arg-type]
        "SELECT job, extract(epoch FROM slot)::float8, attempts, attempt_limit, "
        "succeeded_run_id, closed_at IS NOT NULL FROM pglock.slots")]
    writes = [Write(*row) for row in server.fetch(  # type: ignore[arg-type]
        "SELECT id, job, seat, token, host, accepted FROM soak.writes ORDER BY id")]
    dump(runs, out / "runs.jsonl")
    dump(slots, out / "slots.jsonl")
    dump(writes, out / "writes.jsonl")


def history(out: Path) -> tuple[History, dict[str, Any]]:
    meta = json.loads((out / "meta.json").read_text())
    jobs = {j["name"]: JobSpec(**{k: tuple(v) if isinstance(v, list) else v  # type: ignore[arg-type]
                                  for k, v in j.items()}) for j in meta["jobs"]}
    found = History(jobs, meta["hosts"])
    found.marks = list(read_marks(sorted(out.glob("marks-*"))))
    found.faults = load(Fault, out / "faults.jsonl")
    found.invocations = load(Invocation, out / "invocations.jsonl")
    found.runs = load(Run, out / "runs.jsonl")
    found.slots = load(SlotRow, out / "slots.jsonl")
    found.writes = load(Write, out / "writes.jsonl")
    found.expected_slots = expected_slots(meta["started"], meta["stopped"])
    found.replication = meta.get("replication", "none")
    found.stood_by = read_stood_by(sorted(out.glob("events-*.jsonl")))
    return found, meta


def expected_slots(started: float, stopped: float) -> list[float]:
    """Every minute that every host's cron reached while firing, whatever its offset."""
    first = (int(started + MAX_OFFSET) // 60 + 1) * 60
    return [float(s) for s in range(first, int(stopped - MAX_OFFSET) + 1, 60)]


def report(out: Path) -> int:
    found, meta = history(out)
    result = figures.build(found)
    load = meta.get("load") or {}
    clock = "" if meta.get("clock_faults", True) else " (no clock faults: no C compiler)"
    header = [f"pglock soak: {meta['command']}{clock}",
              f"seed {meta['seed']}, {meta['minutes']} minutes, replication "
              f"{meta.get('replication', 'none')}, hosts "
              f"{', '.join(found.hosts)}, jobs {', '.join(found.jobs)}",
              f"faults skipped (target busy or absent): {meta.get('faults_skipped', '?')}; "
              f"pglock runs still going at the end and killed: "
              f"{meta.get('killed_at_drain', '?')}; load average (1 min) median "
              f"{load.get('median', '?')}, max {load.get('max', '?')}",
              f"history in {out}"]
    rendered = figures.text(result, header)
    print(rendered)
    (out / "report.txt").write_text(rendered + "\n")
    (out / "report.json").write_text(json.dumps(
        {"meta": meta, "figures": result.figures, "defects": result.defects,
         "excused": result.excused, "explained": result.explained, "passed": result.passed},
        indent=1))
    return 0 if result.passed else 1
