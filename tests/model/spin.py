"""Running SPIN on the protocol's models (docs/model.md): spin -a, a C compiler, pan.

Each case is a model file, the #defines that pick its mode or mutant, and how pan
searches (depth-first by default; breadth-first finds some mutants' short
counterexamples sooner). A case without a mutant must explore every state with no error;
a mutant must fail, and its trail is replayed (spin -t) into a timeline of the model's
printf lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Explored depth-first to this depth at most: deeper than any model goes (pan says
# "depth reached"; a search cut short by it would print "max search depth too small").
DEPTH = 1_000_000


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    defines: tuple[str, ...] = ()
    mutant: bool = False
    bfs: bool = False


# The protocol as checked: lease and advisory mode (one invocation per host), the slot
# (scheduled, and the literal crontab line's hold).
MODELS = [
    Case("lease", "protocol.pml", ("-DRUNS=1", "-DFAULTS=0")),
    Case("advisory", "protocol.pml", ("-DADVISORY", "-DRUNS=1", "-DFAULTS=0")),
    Case("slot", "slot.pml"),
    Case("slot-literal", "slot.pml", ("-DLITERAL",)),
]

# Each protection removed: each must yield a counterexample. ASYNC (asynchronous
# replication only) shortens the search of mutants whose failure needs it.
MUTANTS = [
    Case("no start-deadline check", "protocol.pml", ("-DRUNS=1", "-DNO_START_CHECK"), True),
    Case("renewal timed on the wall clock", "protocol.pml", ("-DRUNS=1", "-DWALL_CLOCK"), True),
    Case("no wait after a promotion", "protocol.pml", ("-DRUNS=1", "-DNO_PROMOTION_WAIT"),
         True, bfs=True),
    Case("tokens not raised across timelines", "protocol.pml",
         ("-DRUNS=1", "-DASYNC", "-DFLAT_TOKENS"), True),
    Case("a resent acquire takes its own row back after a promotion", "protocol.pml",
         ("-DRUNS=1", "-DASYNC", "-DFAULTS=1", "-DRESEND_ANYTIME"), True),
    Case("advisory takeover ignoring the incarnation", "protocol.pml",
         ("-DADVISORY", "-DRUNS=1", "-DASYNC", "-DNO_INCARNATION"), True),
    Case("advisory takeover before the old holder's deadline", "protocol.pml",
         ("-DADVISORY", "-DRUNS=1", "-DEARLY_TAKEOVER"), True, bfs=True),
    Case("the hold shortened below the cron skew", "slot.pml", ("-DLITERAL", "-DSHORT_HOLD"),
         True),
    Case("a further attempt's start record not sent again", "slot.pml",
         ("-DNO_RESEND",), True),
]


@dataclass
class Result:
    errors: int
    states: int
    depth: int
    seconds: float
    output: str
    timeline: list[str]


class Missing(Exception):
    """spin or a C compiler is not installed (.ci/run installs both)."""


def tools() -> tuple[str, str]:
    spin = shutil.which("spin")
    cc = shutil.which("cc") or shutil.which("gcc")
    if spin is None or cc is None:
        raise Missing("the model check needs spin and a C compiler (.ci/run installs "
                      f"them): spin {spin or 'missing'}, cc {cc or 'missing'}")
    return spin, cc


def check(case: Case) -> Result:
    spin, cc = tools()
    search = ("-DBFS",) if case.bfs else ()
    with tempfile.TemporaryDirectory(prefix="pglock-model-") as work:
        model = Path(work) / case.model
        shutil.copy(HERE / case.model, model)
        run = [spin, "-a", *search, *case.defines, case.model]
        subprocess.run(run, cwd=work, check=True, capture_output=True, text=True)
        subprocess.run([cc, "-O2", "-w", "-DSAFETY", *search, "-o", "pan", "pan.c"],
                       cwd=work, check=True, capture_output=True, text=True)
        # -E: no end-state check (the clock ticks on after the hosts are done).
        pan = subprocess.run(["./pan", "-E", f"-m{DEPTH}"], cwd=work, capture_output=True,
                             text=True, check=False)
        output = pan.stdout + pan.stderr
        timeline: list[str] = []
        if (Path(work) / f"{case.model}.trail").exists():
            replay = subprocess.run([spin, "-t", *search, *case.defines, case.model],
                                    cwd=work, capture_output=True, text=True, check=False)
            timeline = [line.strip().removeprefix("MSC: ")
                        for line in replay.stdout.splitlines()
                        if "MSC:" in line or "assertion violated" in line
                        or "text of failed assertion" in line]
    return Result(errors=_figure(r"errors: (\d+)", output),
                  states=_figure(r"(\d+) states, stored", output),
                  depth=_figure(r"depth reached (\d+)", output),
                  seconds=float(_match(r"elapsed time ([\d.e+]+)", output) or 0),
                  output=output, timeline=timeline)


def _match(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return found.group(1) if found else None


def _figure(pattern: str, text: str) -> int:
    found = _match(pattern, text)
    if found is None:
        raise AssertionError(f"pan said no {pattern!r}:\n{text}")
    return int(found)


def main(argv: list[str]) -> int:
    """scripts/model: every case, or those whose name contains an argument."""
    wanted = [case for case in MODELS + MUTANTS
              if not argv or any(word in case.name for word in argv)]
    failed = 0
    for case in wanted:
        result = check(case)
        good = (result.errors > 0) if case.mutant else (result.errors == 0)
        failed += not good
        kind = "mutant" if case.mutant else "model"
        print(f"{'ok' if good else 'WRONG':5} {kind:6} {case.name}: errors {result.errors}, "
              f"{result.states} states, depth {result.depth}, {result.seconds:.1f} s "
              f"({case.model} {' '.join(case.defines)})")
        for line in result.timeline:
            print(f"        {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
