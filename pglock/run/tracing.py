"""A run's place in a trace, without the OpenTelemetry SDK (docs/monitoring.md, "Tracing").

OpenTelemetry passes a trace to a batch job through its environment, as W3C Trace
Context: TRACEPARENT (`00-<trace id>-<parent span id>-<flags>`), TRACESTATE and BAGGAGE.
pglock reads them, gives each run that runs a span of its own (a child of that trace, or
the root of a new one) and hands the command TRACEPARENT naming that span, TRACESTATE and
BAGGAGE passed through, so that a command using OpenTelemetry continues the trace. The
span covers a trigger's attempts (one event per retry); a catch-up's slots are a span
each. pglock/run/otlp.py sends the spans once the run is over.

Imported only when asked for (slot.traced(): TRACEPARENT or an OTLP endpoint is set),
so a run without either pays nothing. The SDK's own tracer would cost more to import
than a whole run (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, MutableMapping
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from pglock.lock.ledger import Outcome, RunResult, StartedRun
from pglock.settings.config import shown

if TYPE_CHECKING:
    from typing import Protocol

    class Traced(Protocol):
        """What the trace needs of the run's options (run/options.py's RunOptions)."""

        @property
        def job(self) -> str: ...
        @property
        def command(self) -> list[str]: ...
        @property
        def holder(self) -> str: ...
        @property
        def mode(self) -> str: ...
        @property
        def trace_skips(self) -> bool: ...

log = logging.getLogger(__name__)

# The W3C limits pglock holds the variables to (longer ones are not propagated).
TRACEPARENT_MAX = 512
TRACESTATE_MAX = 512
TRACESTATE_MEMBERS = 32
BAGGAGE_MAX = 8192
# trace-flags: sampled, and (Trace Context level 2) a random trace id; pglock keeps both.
SAMPLED = 0x01
KNOWN_FLAGS = 0x03

# Compiled on first use (re's cache): a run with no TRACESTATE compiles none of its.
_TRACEPARENT = r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})"
_TRACESTATE_MEMBER = (
    r"(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_PRINTABLE_ASCII = r"[\x20-\x7e\t]*"

# The variables that name an OTLP endpoint (either turns tracing on: slot.traced()).
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# The outcomes whose span has status error (and error.type, the outcome).
FAILED = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOCK_LOST, Outcome.KILLED})


class Malformed(ValueError):
    """A trace variable that breaks the W3C rules: ignored, with a line under -v."""


class Parent(NamedTuple):
    """The span TRACEPARENT names: the run's parent."""

    trace_id: str
    span_id: str
    flags: int


def parse_traceparent(value: str) -> Parent:
    """TRACEPARENT by the W3C rules (Trace Context, "traceparent Header"): a version that
    is not ff, a 32-digit trace id and a 16-digit parent id, neither all zeros, two digits
    of flags, all lowercase hex; version 00 has nothing after its flags, a later version
    may have more after a dash. Malformed: why not."""
    text = value.strip(" \t")
    if len(text) > TRACEPARENT_MAX:
        raise Malformed(f"longer than {TRACEPARENT_MAX} characters")
    found = re.match(_TRACEPARENT, text)
    if found is None:
        raise Malformed("not VERSION-TRACEID-PARENTID-FLAGS of 2, 32, 16 and 2 lowercase "
                        "hex digits")
    version, trace_id, span_id, flags = found.groups()
    if version == "ff":
        raise Malformed("version ff is forbidden")
    rest = text[found.end():]
    if version == "00" and rest:
        raise Malformed("version 00 has nothing after its flags")
    if rest and not rest.startswith("-"):
        raise Malformed("no dash after the flags")
    if trace_id == "0" * 32:
        raise Malformed("the trace id is all zeros")
    if span_id == "0" * 16:
        raise Malformed("the parent id is all zeros")
    return Parent(trace_id, span_id, int(flags, 16))


def check_tracestate(value: str) -> str:
    """TRACESTATE as it may be passed on: at most 32 list members `key=value` by the W3C
    grammar, keys unique, 512 characters in all. Malformed: why not."""
    if len(value) > TRACESTATE_MAX:
        raise Malformed(f"longer than {TRACESTATE_MAX} characters")
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]
    if len(members) > TRACESTATE_MEMBERS:
        raise Malformed(f"more than {TRACESTATE_MEMBERS} members")
    for number, member in enumerate(members, 1):
        if re.fullmatch(_TRACESTATE_MEMBER, member) is None:
            raise Malformed(f"member {number} is not key=value by the W3C grammar")
    keys = [member.partition("=")[0] for member in members]
    if len(set(keys)) != len(keys):
        raise Malformed("a key is repeated")
    return value


def check_baggage(value: str) -> str:
    """BAGGAGE as it may be passed on: printable ASCII (its values are percent-encoded),
    8192 bytes at most. Its members are the command's business, not pglock's."""
    if len(value) > BAGGAGE_MAX:
        raise Malformed(f"longer than {BAGGAGE_MAX} bytes")
    if re.fullmatch(_PRINTABLE_ASCII, value) is None:
        raise Malformed("not printable ASCII")
    return value


def new_id(digits: int) -> str:
    """A random id of `digits` hex digits, never all zeros (which W3C reserves)."""
    while True:
        value = os.urandom(digits // 2).hex()
        if value.strip("0"):
            return value


class Event(NamedTuple):
    """Something that happened during a span (a retry)."""

    time_ns: int
    name: str
    attributes: dict[str, str | int | float]


class Span:
    """One run as a span: named after its job; its times on this host's clock. (A plain
    class: a dataclass's generated methods cost more to import than the rest of this
    module.)"""

    __slots__ = ("attributes", "end_ns", "events", "failed", "message", "name", "parent_id",
                 "ran", "skipped", "span_id", "start_ns", "trace_id")

    def __init__(self, trace_id: str, span_id: str, parent_id: str | None, name: str,
                 attributes: dict[str, str | int | float]) -> None:
        self.trace_id, self.span_id, self.parent_id = trace_id, span_id, parent_id
        self.name = name
        self.start_ns = time.time_ns()
        self.end_ns: int | None = None
        self.attributes = attributes
        self.events: list[Event] = []
        # Status error, and its message (None with `failed`: the outcome says it).
        self.failed = False
        self.message: str | None = None
        # An attempt of it was recorded (a run that ran), or it is a skip (--trace-skips).
        self.ran = False
        self.skipped = False

    def end(self) -> None:
        if self.end_ns is None:
            self.end_ns = time.time_ns()


class Incoming(NamedTuple):
    """What pglock's environment says of the trace it runs in."""

    parent: Parent | None
    tracestate: str | None
    baggage: str | None


def incoming(environ: Mapping[str, str]) -> Incoming:
    """The trace context of pglock's environment; what breaks the rules is left out, said
    with -v (a malformed TRACEPARENT starts a new trace, and its TRACESTATE goes with it)."""
    parent = state = baggage = None
    if value := environ.get("TRACEPARENT"):
        try:
            parent = parse_traceparent(value)
        except Malformed as error:
            log.debug("TRACEPARENT %s ignored (%s): the run starts a new trace",
                      shown(value[:80]), error)
    if (value := environ.get("TRACESTATE")) and parent is not None:
        state = _checked("TRACESTATE", value, check_tracestate)
    if value := environ.get("BAGGAGE"):
        baggage = _checked("BAGGAGE", value, check_baggage)
    return Incoming(parent, state, baggage)


def _checked(name: str, value: str, check: Callable[[str], str]) -> str | None:
    try:
        return check(value)
    except Malformed as error:
        log.debug("%s ignored (%s): not passed to the command", name, error)
        return None


class Trace:
    """One `pglock run` in a trace: the context it came with, and a span per run."""

    def __init__(self, context: Incoming, options: Traced) -> None:
        self.context = context
        parent = context.parent
        self.trace_id = new_id(32) if parent is None else parent.trace_id
        # A new trace is sampled; a child follows its parent (parent-based sampling).
        self.flags = SAMPLED if parent is None else parent.flags & KNOWN_FLAGS
        self.job = options.job
        self.trace_skips = options.trace_skips
        self.common: dict[str, str | int | float] = {
            "pglock.job": options.job, "pglock.holder": options.holder,
            "pglock.mode": options.mode,
            "process.executable.name": shown(os.path.basename(options.command[0]))}
        self.spans: list[Span] = []
        self.pid: int | None = None

    @classmethod
    def start(cls, environ: Mapping[str, str], options: Traced) -> Trace | None:
        """The trace of this run, from pglock's environment (None: OTEL_SDK_DISABLED)."""
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            log.debug("OTEL_SDK_DISABLED is true: no span, the trace context passed as is")
            return None
        return cls(incoming(environ), options)

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)

    @property
    def span(self) -> Span:
        return self.spans[-1]

    def begin(self, slot: datetime | None = None) -> Span:
        """A new span for the next run (a trigger's, or a catch-up's next slot)."""
        parent = self.context.parent
        span = Span(self.trace_id, new_id(16), None if parent is None else parent.span_id,
                    self.job, dict(self.common))
        if slot is not None:
            span.attributes["pglock.slot"] = slot.isoformat()
        self.spans.append(span)
        return span

    def ids(self) -> dict[str, str]:
        """The current span's ids, as the start record and the event log carry them."""
        return {"trace_id": self.trace_id, "span_id": self.span.span_id}

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span.span_id}-{self.flags:02x}"

    def propagate(self, env: MutableMapping[str, str]) -> None:
        """The command's environment: TRACEPARENT naming the run's span, the parent's
        TRACESTATE and BAGGAGE as they came (what broke the rules left out)."""
        env["TRACEPARENT"] = self.traceparent()
        for name, value in (("TRACESTATE", self.context.tracestate),
                            ("BAGGAGE", self.context.baggage)):
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value

    def acquired(self, fencing_token: int | None, slot: datetime | None) -> None:
        if fencing_token is not None:
            self.span.attributes["pglock.fencing_token"] = fencing_token
        if slot is not None:
            self.span.attributes["pglock.slot"] = slot.isoformat()

    def forked(self, pid: int) -> None:
        self.pid = pid

    def attempted(self, run: StartedRun, result: RunResult) -> None:
        """An attempt's end, as recorded: the span says the last one's."""
        span = self.span
        span.ran = True
        attributes = span.attributes
        attributes.update({"pglock.run_id": run.id, "pglock.attempt": run.attempt,
                           "pglock.outcome": str(result.outcome)})
        for key, value in (("process.pid", self.pid), ("process.exit.code", exit_code(result))):
            if value is None:
                attributes.pop(key, None)
            else:
                attributes[key] = value
        self.pid = None
        span.failed = result.outcome in FAILED
        span.message = result.error if span.failed else None
        if span.failed:
            attributes["error.type"] = str(result.outcome)
        else:
            attributes.pop("error.type", None)

    def retrying(self, run: StartedRun, result: RunResult, delay: float) -> None:
        """A span event: this attempt failed, the next comes after `delay`."""
        attributes: dict[str, str | int | float] = {
            "pglock.attempt": run.attempt, "pglock.outcome": str(result.outcome),
            "pglock.retry_delay": round(delay, 3)}
        if (code := exit_code(result)) is not None:
            attributes["process.exit.code"] = code
        self.span.events.append(Event(time.time_ns(), "retry", attributes))

    def skipped(self, reason: str) -> bool:
        """This trigger did not run: with --trace-skips, its span says why. Whether it has
        one."""
        if not self.trace_skips:
            return False
        span = self.span
        span.skipped = True
        span.attributes.update({"pglock.outcome": "skipped", "pglock.skip_reason": reason})
        span.end()
        return True

    def ended(self) -> None:
        """The run's end is recorded and its lock let go: its span ends."""
        self.span.end()

    def finished(self) -> list[Span]:
        """The spans to send: each run that ran (and skip, with --trace-skips), ended; none
        when the parent is not sampled."""
        if not self.sampled:
            return []
        done = [span for span in self.spans if span.ran or span.skipped]
        for span in done:
            span.end()
        return done

    def sending(self, environ: Mapping[str, str] = os.environ) -> list[Span]:
        """The finished spans, when an OTLP endpoint is set to send them to (pglock/run/
        otlp.py, imported only then)."""
        return self.finished() if exporting(environ) else []


def exporting(environ: Mapping[str, str]) -> bool:
    """Whether an OTLP endpoint is set (the spans are sent: pglock/run/otlp.py)."""
    return any(environ.get(name, "").strip() for name in ENDPOINTS)


def exit_code(result: RunResult) -> int | None:
    """The command's exit status as a shell tells it: its code, or 128 + the signal that
    ended it (None: it did not run)."""
    if result.exit_code is not None:
        return result.exit_code
    return None if result.signal is None else 128 + result.signal
