"""Running SPIN on the protocol's models (docs/model.md): spin -a, a C compiler, pan.

Each case is a model file, the #defines that pick its mode, bound or mutant, and what it
must come to: `pass` (every state explored, no error), or `fail` (a counterexample, which is
replayed with spin -t into a timeline of the model's printf lines). Reachability probes
(`reach:` cases) are states a model run must report reaching (protocol.pml's REACHED, built
with -DPROBES): a model change that makes one unreachable fails as surely as an error.

The suite's cases (MODELS, REACHES, MUTANTS) are the bound the findings live at: RUNS=1
FAULTS=1, asynchronous replication. `scripts/model --long` runs the larger bounds and the
controls (LONG), before each release. Every pan is given MEMLIM MB at most.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Explored depth-first to this depth at most: deeper than any model goes (pan says
# "depth reached"; a search cut short by it would print "max search depth too small").
DEPTH = 1_000_000
# pan's memory, in MB: the machine is shared, and each pan keeps under 4 GB.
MEMLIM = 3800


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    defines: tuple[str, ...] = ()
    expect: str = "pass"
    # How pan searches: depth-first in the model's order of processes, or the reverse one
    # (-DP_REVERSE), which finds some counterexamples sooner; breadth-first (-DBFS) finds
    # the shortest, at a memory cost only the small models can afford.
    search: tuple[str, ...] = ()
    # pan compiled -O2 (5 s of the compiler's time) for the long searches, -O0 (1 s, a
    # search half as fast) for those that end within a few million states.
    quick: bool = False
    # A bitstate search (1 GiB of bits): a partial one, for a space too large to store.
    bitstate: bool = False

    @property
    def mutant(self) -> bool:
        return self.expect == "fail"


@dataclass(frozen=True)
class Reach:
    """A state a model run must reach: protocol.pml's REACHED(probe, ...)."""

    name: str
    model: Case
    probe: int


def _protocol(name: str, *defines: str, expect: str = "pass", reverse: bool = False,
              quick: bool = False, bitstate: bool = False) -> Case:
    return Case(name, "protocol.pml", defines, expect,
                ("-DP_REVERSE",) if reverse else (), quick, bitstate)


LEASE = _protocol("lease", "-DFAULTS=1")
LEASE_TTLS = _protocol("lease, hosts on two ttls", "-DFAULTS=1", "-DTTL_DIFF", "-DPAST_ROW")
ADVISORY = _protocol("advisory", "-DADVISORY", "-DFAULTS=1")

# The protocol as checked, exhaustively: each mode with one invocation of pglock per host
# and one statement lost (RUNS=1 FAULTS=1), asynchronous replication (which includes every
# run of synchronous), one promotion, an advisory session ended; and the slot.
MODELS = [
    LEASE,
    LEASE_TTLS,
    ADVISORY,
    Case("slot", "slot.pml"),
    Case("slot-literal", "slot.pml", ("-DLITERAL",)),
]

# protocol.pml's probes, by number.
PROBES = {
    1: "both hosts run in turn",
    2: "a second renewal in one run",
    3: "a holder renews on the new primary",
    4: "a resent acquire finds its own row after a promotion",
    5: "an advisory contended, retry",
    6: "a takeover at stops_by",
    7: "a wait after a promotion refuses an acquire",
    8: "a kept lock's next attempt forks",
    9: "a watchdog kill",
    10: "the try after the wait's end wins (R6)",
    11: "an own row of an older timeline not kept (R3)",
    12: "an answer past the deadline counted lost (R4)",
    13: "a failover mid-run, then the other host runs",
    14: "a retake after a cut wins",
    15: "a resent acquire takes its own row back on its timeline",
    16: "a further attempt's start finds the lock no longer held",
    17: "an answer past the deadline acted on, on the lock's own timeline (R4)",
}
ADVISORY_ONLY = {5, 6, 14}

REACHES = [Reach(f"reach: {what} ({model.name})", model, probe)
           for model in (LEASE, ADVISORY)
           for probe, what in PROBES.items()
           if model is ADVISORY or probe not in ADVISORY_ONLY]


def as_assertion(reach: Reach) -> Case:
    """The probe as a case that must fail (`scripts/model --probes`): built with
    -DPROBE=n, the probed state is an assertion, so pan stops at the first state it names
    and the trail shows how it is reached. The suite reads the probes from its exhaustive
    runs instead (no run more); this checks that the two agree."""
    model = reach.model
    return Case(f"{reach.name}, as an assertion", model.model,
                (*model.defines, f"-DPROBE={reach.probe}"), "fail", model.search, quick=True)

# Each protection removed, or an older rule put back: each must yield a counterexample at
# the suite's bound (RUNS=1 FAULTS=1), but the two releases, which need a third claimant
# (RUNS=2). The search options only make pan find it sooner.
MUTANTS = [
    # The client's deadlines
    _protocol("no start-deadline check", "-DFAULTS=1", "-DNO_START_CHECK", expect="fail",
              quick=True),
    _protocol("renewals and deadlines on host0's wall clock (an NTP step)", "-DFAULTS=1",
              "-DWALL_CLOCK", expect="fail", quick=True),
    _protocol("the watchdog's deadline counted from the fork", "-DFAULTS=1",
              "-DKILL_FROM_FORK", expect="fail", quick=True),
    _protocol("the watchdog at its place, a stopwatch half a margin short", "-DFAULTS=1",
              "-DDRIFT=1", expect="fail", quick=True),
    # Takeovers and tokens
    _protocol("a takeover one tick before the expiry", "-DFAULTS=1", "-DTAKEOVER_EARLY",
              expect="fail", quick=True),
    _protocol("advisory takeover before the holder's stops_by", "-DADVISORY", "-DFAULTS=1",
              "-DEARLY_TAKEOVER", expect="fail", quick=True),
    _protocol("tokens not raised across timelines", "-DFAULTS=1", "-DFLAT_TOKENS",
              expect="fail", reverse=True, quick=True),
    _protocol("a takeover keeping the token", "-DFAULTS=1", "-DTOKEN_KEEP", expect="fail",
              reverse=True, quick=True),
    # The wait after a promotion (R5)
    _protocol("no wait after a promotion", "-DFAULTS=1", "-DNO_PROMOTION_WAIT",
              expect="fail", reverse=True, quick=True),
    _protocol("hosts on two ttls, R5's longest ttl undone", "-DFAULTS=1", "-DTTL_DIFF",
              "-DPAST_ROW", "-DNO_LONGEST", expect="fail", reverse=True, quick=True),
    # A resent acquire's own row (R1)
    _protocol("a resent acquire takes its own row back whatever its age", "-DFAULTS=1",
              "-DRESEND_ANYTIME", expect="fail", quick=True),
    _protocol("R1 undone (version 8's unexpired own row), advisory", "-DADVISORY",
              "-DFAULTS=1", "-DRESEND_EXPIRY", expect="fail"),
    _protocol("R1 undone, the new primary's clock 0.5 s behind", "-DFAULTS=1",
              "-DRESEND_EXPIRY", "-DOFFSET=1", expect="fail", quick=True),
    # Keeping an own row (R3, the server) and late answers (R4, the client)
    _protocol("R3 and R4 undone: a kept lock renewed with no expiry test", "-DFAULTS=1",
              "-DNO_R3", "-DNO_R4", expect="fail", reverse=True, quick=True),
    _protocol("R3 and R4 undone, advisory", "-DADVISORY", "-DFAULTS=1", "-DNO_R3",
              "-DNO_R4", expect="fail", quick=True),
    _protocol("R3 alone (R4 undone), the new primary's clock 0.5 s behind", "-DFAULTS=1",
              "-DNO_R4", "-DOFFSET=1", expect="fail", reverse=True, quick=True),
    _protocol("renew of anyone's row, R4 undone", "-DFAULTS=1", "-DRENEW_ANY", "-DNO_R4",
              expect="fail", quick=True),
    # Releases (R2), with a third claimant
    _protocol("release of anyone's row", "-DRUNS=2", "-DFAULTS=1", "-DRELEASE_ANY",
              expect="fail", quick=True),
    _protocol("release restamping an expired row", "-DRUNS=2", "-DFAULTS=1",
              "-DRELEASE_RESTAMP_ALWAYS", expect="fail", reverse=True),
    # Schema version 8 as released: R1-R4 undone, restamp() in renew, finish and release
    _protocol("version 8's rules, advisory", "-DADVISORY", "-DFAULTS=1", "-DRESEND_EXPIRY",
              "-DRESTAMP", "-DRELEASE_RESTAMP", "-DNO_R3", "-DNO_R4", expect="fail",
              quick=True),
    # Progress
    _protocol("progress: acquire never wins", "-DFAULTS=1", "-DNEVER_WIN", expect="fail",
              quick=True),
    _protocol("progress: no try after the wait's end (R6)", "-DFAULTS=1", "-DNO_R6",
              expect="fail", quick=True),
    # The slot
    Case("the hold shortened below the cron skew", "slot.pml", ("-DLITERAL", "-DSHORT_HOLD"),
         "fail", quick=True),
    Case("a further attempt's start record not sent again", "slot.pml", ("-DNO_RESEND",),
         "fail", quick=True),
]

# scripts/model --long: the larger bounds, what each rule is worth alone, and the
# assumptions the protocol needs (a case that must fail without one). Run before each
# release; figures in docs/model.md.
LONG = [
    _protocol("lease, RUNS=2", "-DRUNS=2", "-DFAULTS=1"),
    _protocol("lease, FAULTS=2", "-DFAULTS=2"),
    _protocol("advisory, FAULTS=2", "-DADVISORY", "-DFAULTS=2"),
    _protocol("advisory, a second run on one host", "-DADVISORY", "-DRUNS=2", "-DRUNS1=1",
              "-DFAULTS=1"),
    _protocol("advisory, RUNS=2 (bitstate: a partial search)", "-DADVISORY", "-DRUNS=2",
              "-DFAULTS=1", bitstate=True),
    _protocol("advisory with a server restart", "-DADVISORY", "-DFAULTS=1", "-DRESTART"),
    _protocol("advisory, hosts on two ttls", "-DADVISORY", "-DFAULTS=1", "-DTTL_DIFF",
              "-DPAST_ROW"),
    # Two clocks: with R4 no bound on the new primary's offset
    _protocol("lease, the new primary's clock 1 s behind", "-DFAULTS=1", "-DOFFSET=2"),
    _protocol("lease, the new primary's clock 3 s behind", "-DFAULTS=1", "-DOFFSET=6"),
    _protocol("advisory, the new primary's clock 1 s behind", "-DADVISORY", "-DFAULTS=1",
              "-DOFFSET=2"),
    # Each layer alone: R4 (the client) whatever the clocks, R3 (the server) for older
    # pglocks with one clock; R4 as first written; the incarnation and version 8's
    # restamp, both redundant under version 9's rules
    _protocol("lease, R4 alone (R3 undone)", "-DFAULTS=1", "-DNO_R3"),
    _protocol("advisory, R4 alone (R3 undone)", "-DADVISORY", "-DFAULTS=1", "-DNO_R3"),
    _protocol("lease, R3 alone (R4 undone: older pglocks)", "-DFAULTS=1", "-DNO_R4"),
    _protocol("advisory, R3 alone (R4 undone: older pglocks)", "-DADVISORY", "-DFAULTS=1",
              "-DNO_R4"),
    _protocol("lease, R4 without the lock's own timeline", "-DFAULTS=1", "-DR4_STRICT"),
    _protocol("advisory, the incarnation test undone", "-DADVISORY", "-DFAULTS=1",
              "-DNO_INCARNATION"),
    _protocol("advisory, version 8's restamp in renew, finish and release", "-DADVISORY",
              "-DFAULTS=1", "-DRESTAMP", "-DRELEASE_RESTAMP"),
    # The stopwatch: pglock's own SIGKILL bears half a margin of error, the watchdog's
    # (the suite's mutant) does not
    _protocol("pglock's own SIGKILL alone, a stopwatch half a margin short", "-DFAULTS=1",
              "-DDRIFT=1", "-DWATCHDOG_AT_PGLOCK"),
    # R5's residual, as stated: a longer ttl first granted within the replication lag
    _protocol("R5's residual: a longer ttl first granted within the replication lag",
              "-DFAULTS=1", "-DTTL_DIFF", expect="fail", quick=True),
]


@dataclass
class Result:
    errors: int
    states: int
    depth: int
    seconds: float
    megabytes: float
    output: str
    timeline: list[str]
    reached: set[int] = field(default_factory=set)
    wall: float = 0.0
    # pan's own processor time (its elapsed time depends on the machine's load).
    cpu: float = 0.0
    # A bitstate search's bits per state (a full one would need far more than 100).
    hash_factor: float | None = None


class Missing(Exception):
    """spin or a C compiler is not installed (.ci/run installs both)."""


def tools() -> tuple[str, str]:
    spin = shutil.which("spin")
    cc = shutil.which("cc") or shutil.which("gcc")
    if spin is None or cc is None:
        raise Missing("the model check needs spin and a C compiler (.ci/run installs "
                      f"them): spin {spin or 'missing'}, cc {cc or 'missing'}")
    return spin, cc


_checked: dict[Case, Result] = {}


def check(case: Case) -> Result:
    """Run the case (once per process: `reach:` cases read their model's run)."""
    if case not in _checked:
        _checked[case] = _check(case)
    return _checked[case]


def _check(case: Case) -> Result:
    spin, cc = tools()
    started = time.monotonic()
    bfs = tuple(flag for flag in case.search if flag == "-DBFS")
    # The probes report themselves in the runs that must pass (c_code: not in BFS builds).
    probes = ("-DPROBES",) if case.model == "protocol.pml" and not case.mutant else ()
    defines = (*bfs, *probes, *case.defines)
    with tempfile.TemporaryDirectory(prefix="pglock-model-") as work:
        model = Path(work) / case.model
        shutil.copy(HERE / case.model, model)
        subprocess.run([spin, "-a", *defines, case.model], cwd=work, check=True,
                       capture_output=True, text=True)
        storage = ("-DBITSTATE",) if case.bitstate else ("-DCOLLAPSE",)
        subprocess.run([cc, "-O0" if case.quick else "-O2", "-w", "-DSAFETY", "-DNOFAIR",
                        *storage, f"-DMEMLIM={MEMLIM}", *case.search, "-o", "pan", "pan.c"],
                       cwd=work, check=True, capture_output=True, text=True)
        # -E: no end-state check (the clock ticks on after the hosts are done).
        bits = ("-w33",) if case.bitstate else ()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        pan = subprocess.run(["./pan", "-E", f"-m{DEPTH}", *bits], cwd=work,
                             capture_output=True, text=True, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        output = pan.stdout + pan.stderr
        timeline: list[str] = []
        if (Path(work) / f"{case.model}.trail").exists():
            replay = subprocess.run([spin, "-t", *defines, case.model], cwd=work,
                                    capture_output=True, text=True, check=False)
            timeline = [line.strip().removeprefix("MSC: ")
                        for line in replay.stdout.splitlines()
                        if "MSC:" in line or "assertion violated" in line
                        or "text of failed assertion" in line]
    for trouble in ("max search depth too small", "reached -DMEMLIM bound", "out of memory"):
        if trouble in output:
            raise AssertionError(f"pan's search of {case.name!r} was cut short "
                                 f"({trouble}):\n{output}")
    return Result(errors=_figure(r"errors: (\d+)", output),
                  # (pan writes a count past 10^8 as 1.8401987e+08)
                  states=_figure(r"([\d.e+]+) states, stored", output),
                  depth=_figure(r"depth reached (\d+)", output),
                  seconds=float(_match(r"elapsed time ([\d.e+]+)", output) or 0),
                  megabytes=float(_match(r"([\d.]+)\s+total actual memory usage", output)
                                  or 0),
                  output=output, timeline=timeline,
                  reached={int(n) for n in re.findall(r"^reached: (\d+)$", output, re.M)},
                  wall=time.monotonic() - started, cpu=cpu,
                  hash_factor=(float(factor) if (factor := _match(r"hash factor: ([\d.]+)",
                                                                  output)) else None))


def _match(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return found.group(1) if found else None


def _figure(pattern: str, text: str) -> int:
    found = _match(pattern, text)
    if found is None:
        raise AssertionError(f"pan said no {pattern!r}:\n{text}")
    return int(float(found))


def good(case: Case, result: Result) -> bool:
    return result.errors > 0 if case.mutant else result.errors == 0


def main(argv: list[str]) -> int:
    """scripts/model [--long | --probes] [WORD...]: the suite's cases (with --long, the
    larger bounds and the controls instead; with --probes, each probe as an assertion that
    must fail), or those whose name contains a word."""
    long = "--long" in argv
    probes = "--probes" in argv
    words = [word for word in argv if word not in ("--long", "--probes")]
    cases: list[Case]
    reaches: list[Reach]
    if long:
        cases, reaches = LONG, []
    elif probes:
        cases, reaches = [as_assertion(reach) for reach in REACHES], []
    else:
        cases, reaches = MODELS + MUTANTS, REACHES
    wanted = [case for case in cases if not words or any(word in case.name for word in words)]
    wanted_reaches = [reach for reach in reaches
                      if not words or any(word in reach.name for word in words)]
    for reach in wanted_reaches:
        if reach.model not in wanted:
            wanted.insert(0, reach.model)
    failed = 0
    for case in wanted:
        result = check(case)
        failed += not good(case, result)
        kind = ("probe" if case.name.startswith("reach:") else
                "mutant" if case.mutant else "model")
        print(f"{'ok' if good(case, result) else 'WRONG':5} {kind:6} {case.name}: errors "
              f"{result.errors}, {result.states:,} states, depth {result.depth}, "
              f"{result.cpu:.1f} s of CPU ({result.wall:.0f} s in all), "
              f"{result.megabytes:.0f} MB"
              f"{'' if result.hash_factor is None else f', hash factor {result.hash_factor}'}"
              f" ({case.model} {' '.join(case.defines)})", flush=True)
        for line in result.timeline:
            print(f"        {line}")
    for reach in wanted_reaches:
        reached = reach.probe in check(reach.model).reached
        failed += not reached
        print(f"{'ok' if reached else 'WRONG':5} {reach.name}"
              f"{'' if reached else ': not reached'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
