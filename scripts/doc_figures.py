"""The figures the docs quote that the code decides (schema version, ranges, outcomes,
states, the ttl table), computed from the code; scripts/gen_docs.py writes each between
its markers in README.md and docs/*.md, and `scripts/gen-docs --check` fails on drift.

A figure is written `<!-- gen:NAME -->...<!-- /gen -->` (NAME may carry an argument after
a colon: `gen:range:--ttl`), inline or around whole lines; markdown shows only what is
between the markers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pglock.db.schema import VERSION
from pglock.lock import heartbeat
from pglock.lock.ledger import Outcome
from pglock.operate import roles
from pglock.operate.platforms import PLATFORMS
from pglock.reports.jobs import FINISHED, STATE_MEANINGS, State
from pglock.run import record
from pglock.run.flags import DEFAULTS
from pglock.serve.pool import KEEP
from pglock.settings import durations
from pglock.settings.durations import Bounds, format_bound, parse_duration

# A name is lower case (an argument after a colon may be anything): `gen:NAME` in prose
# that shows the syntax is no marker.
MARKER = re.compile(r"<!-- gen:(?P<name>[a-z][a-z-]*(?::[^>]+?)?) -->(?P<body>.*?)<!-- /gen -->",
                    re.DOTALL)

# The ttls the table shows: the minimum, the default, and what fleets use for long jobs.
TTLS = (5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
KILL_AFTER = parse_duration(str(DEFAULTS["kill_after"]))
CONNECT_TIMEOUT = parse_duration(str(DEFAULTS["connect_timeout"]))
DEFAULT_TTL = parse_duration(str(DEFAULTS["ttl"]))

# Ranges that are not durations: how each is written.
COUNTS: dict[str, Bounds] = {
    "--retries": durations.RETRIES, "--limit": durations.SEATS,
    "--catch-up-limit": durations.CATCH_UP_LIMIT, "history --limit": durations.HISTORY_LIMIT,
    "--candidates": durations.CANDIDATES,
}


def seconds(value: float) -> str:
    """A figure of the ttl table: tenths below 10 s, whole seconds to 1000, then minutes."""
    if value >= 1000:
        return _minutes(value) + " min"
    return f"{value:.1f}".removesuffix(".0") + " s" if value < 10 else f"{value:.0f} s"


def _minutes(value: float) -> str:
    return f"{value / 60:.1f}".removesuffix(".0")


def span(low: float, high: float) -> str:
    """low-high in one unit (minutes when high reaches 1000 s)."""
    if high >= 1000:
        return f"{_minutes(low)}-{_minutes(high)} min"
    return f"{seconds(low)[:-2]}-{seconds(high)}"


def _ttl_label(ttl: float) -> str:
    label = format_bound(ttl)
    if ttl == DEFAULT_TTL:
        return f"{label} (default)"
    if ttl == durations.DURATIONS["--ttl"].low:
        return f"{label} (minimum)"
    return label


def outage_table() -> str:
    """What a database outage does to a running lease-mode job, from the outage's start:
    each range runs from 'a renewal had just been sent' to 'one was about to be'."""
    lines = ["| `--ttl` | renewed every | the command gets SIGTERM | SIGKILL | pglock exits "
             "125 by | the lock expires on the server |", "|---|---|---|---|---|---|"]
    for ttl in TTLS:
        every = ttl / 3
        term = ttl - heartbeat.slack(ttl, KILL_AFTER)
        grace = heartbeat.grace(ttl, KILL_AFTER)
        # The end record is tried for --connect-timeout once the command ended, and its
        # writer waited for as long again as a statement takes to be cancelled when the
        # server answers not even the cancel (a blackhole): then one line and exit 125
        # (lease.md, "When pglock itself dies").
        exits = term + grace + CONNECT_TIMEOUT + record.CANCELLED
        lines.append(f"| {_ttl_label(ttl)} | {seconds(every)} | {span(term - every, term)} | "
                     f"{span(term - every + grace, term + grace)} | {seconds(exits)} | "
                     f"{span(ttl - every, ttl)} |")
    return "\n".join(lines)


def ridden(ttl: float) -> float:
    """The longest outage a running lease-mode job rides out for sure (heartbeat.py)."""
    return heartbeat.rides_out(ttl, KILL_AFTER)


def ridden_table() -> str:
    """What each ttl rides out, and what it costs."""
    lines = ["| `--ttl` | an outage or failover shorter than this stops no running command "
             "| a host that dies keeps its jobs locked for up to | a frozen host may overlap "
             "another's run after a freeze of more than | `pglock stop` reaches the command "
             "within |", "|---|---|---|---|---|"]
    for ttl in TTLS:
        every = ttl / 3
        lines.append(f"| {_ttl_label(ttl)} | {seconds(ridden(ttl))} | {seconds(ttl)} | "
                     f"{seconds(ttl - every)} | {seconds(every)} |")
    return "\n".join(lines)


def state_table() -> str:
    """Every state, worst first, with its meaning (reports/jobs.py)."""
    lines = ["| state | meaning |", "|---|---|"]
    lines += [f"| `{state}` | {STATE_MEANINGS[state]} |" for state in State]
    return "\n".join(lines)


def range_text(option: str) -> str:
    """The range an option accepts, as durations.py bounds it."""
    if option in COUNTS:
        bounds = COUNTS[option]
        return f"{bounds.low:g} to {bounds.high:g}"
    if option == "--output-tail":
        return f"0 to {durations.OUTPUT_TAIL.high / 1024**2:g}MiB"
    if option == "--expect-duration":
        return f"each end {durations.EXPECTED.text()}"
    return durations.DURATIONS[option.split()[-1]].text()


def _names(names: Iterable[str]) -> str:
    """`a`, `b` and `c`."""
    quoted = [f"`{name}`" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _codes(values: Iterable[str]) -> str:
    return ", ".join(f"`{value}`" for value in values)


FIGURES: dict[str, Callable[[str], str]] = {
    "schema-version": lambda _: str(VERSION),
    "outcomes": lambda _: _codes(Outcome),
    "finished-outcomes": lambda _: ", ".join(FINISHED),
    "states": lambda _: ", ".join(State),
    "states-code": lambda _: _codes(State),
    "state-table": lambda _: "\n" + state_table() + "\n",
    "ttl-outage": lambda _: "\n" + outage_table() + "\n",
    "ttl-ridden": lambda _: "\n" + ridden_table() + "\n",
    "range": range_text,
    # Figures of one ttl (its argument, in seconds).
    "ridden": lambda ttl: seconds(ridden(float(ttl))),
    "sigterm": lambda ttl: seconds(float(ttl) - heartbeat.slack(float(ttl), KILL_AFTER)),
    "sigkill": lambda ttl: seconds(float(ttl) - heartbeat.margin(float(ttl))),
    "serve-keep": lambda _: str(KEEP),
    "read-tables": lambda _: _names(roles.READ_TABLES),
    "withheld-lock-columns": lambda _: _names(roles.WITHHELD_LOCK_COLUMNS),
    "withheld-seat-columns": lambda _: _names(roles.WITHHELD_SEAT_COLUMNS),
    "kill-after": lambda _: format_bound(KILL_AFTER),
    "connect-timeout": lambda _: format_bound(CONNECT_TIMEOUT),
    "record-extra": lambda _: f"{record.CANCELLED:g} s",
    # The shortest ttl that rides out a failover of this many seconds (its argument).
    "ttl-for": lambda outage: format_bound(heartbeat.ttl_for(float(outage), KILL_AFTER)),
    # A platform's failover as doctor holds it (operate/platforms.py), and the ttl that
    # rides it out: docs/platforms.md's table is written from the one figure.
    "failover": lambda name: PLATFORMS[name].source,
    "platform-ttl": lambda name: platform_ttl(name),
}


def platform_ttl(name: str) -> str:
    """The shortest ttl that rides out the platform's failover."""
    failover = PLATFORMS[name].failover
    if failover is None:
        raise SystemExit(f"platform {name!r} has no failover figure to size a ttl by")
    return format_bound(heartbeat.ttl_for(failover, KILL_AFTER))


def fill(text: str, where: str) -> str:
    """text with every figure between its markers written anew."""
    def figure(match: re.Match[str]) -> str:
        name, _, argument = match["name"].partition(":")
        if name not in FIGURES:
            raise SystemExit(f"{where}: unknown figure {match['name']!r} (known: "
                             f"{', '.join(FIGURES)})")
        return f"<!-- gen:{match['name']} -->{FIGURES[name](argument)}<!-- /gen -->"
    return MARKER.sub(figure, text)
