"""Tracing (issue 45): a traced run's span, sent to a real HTTP collector in the test as
OTLP/HTTP JSON and parsed with OpenTelemetry's own protobuf messages, against the run's
history row; the command continuing the trace with OpenTelemetry's API; collectors that
refuse, fail or hang; a header's secret never shown."""

from __future__ import annotations

import base64
import gzip
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Env, free_port
from endpoints import Quiet, serving
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service

from pglock.lock import advisory, lease, ledger

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
SECRET = "s3cret-Api-K3y"
HEADERS = f"Authorization=Bearer%20{SECRET},x-honeycomb-team={SECRET}"

# A command that continues the trace as an OpenTelemetry program does: the context read
# from its environment with the API's EnvironmentGetter, and passed on to its own children
# with the EnvironmentSetter; what it found written to the file it is given.
CONTINUES = """
import json, os, sys
from opentelemetry import trace
from opentelemetry.propagators._envcarrier import EnvironmentGetter, EnvironmentSetter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

propagator = TraceContextTextMapPropagator()
context = propagator.extract(os.environ, getter=EnvironmentGetter())
span = trace.get_current_span(context).get_span_context()
children = {}
propagator.inject(children, context=context, setter=EnvironmentSetter())
with open(sys.argv[1], "w") as out:
    json.dump({"trace_id": trace.format_trace_id(span.trace_id),
               "span_id": trace.format_span_id(span.span_id), "remote": span.is_remote,
               "sampled": span.trace_flags.sampled, "pid": os.getpid(),
               "environ": {k: os.environ.get(k) for k in ("TRACEPARENT", "TRACESTATE",
                                                            "BAGGAGE")},
               "children": children}, out)
sys.exit(int(sys.argv[2]))
"""


@dataclass
class Received:
    """One request the collector got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def request(self) -> Any:
        """The body as an ExportTraceServiceRequest (OTLP/JSON's hex ids made base64 for
        protobuf's JSON mapping; an unknown field fails the parse)."""
        return json_format.ParseDict(_base64_ids(json.loads(self.body)),
                                     trace_service.ExportTraceServiceRequest())

    def spans(self) -> list[Any]:
        return [span for resource in self.request().resource_spans
                for scope in resource.scope_spans for span in scope.spans]


@dataclass
class Collector:
    """A collector on 127.0.0.1: answers `status` (with `body`), or with `hang` holds each
    request until released (or 60 s)."""

    status: int = 200
    body: bytes = b"{}"
    hang: bool = False
    received: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def spans(self) -> list[Any]:
        return [span for got in self.received for span in got.spans()]


@contextmanager
def collecting(collector: Collector) -> Iterator[Collector]:
    class Handler(Quiet):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            collector.received.append(Received(self.path, dict(self.headers), body))
            collector.arrived.set()
            if collector.hang:
                collector.release.wait(60)
            answer = collector.body.replace(b"{echo}", self.headers.get(
                "Authorization", "").encode())
            self.send_response(collector.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    with serving(Handler) as url:
        collector.url = url
        try:
            yield collector
        finally:
            collector.release.set()


def traced(collector_url: str, **extra: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": collector_url, "OTEL_EXPORTER_OTLP_HEADERS": HEADERS,
            **extra}


def attributes(span: Any) -> dict[str, Any]:
    found = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        found[item.key] = getattr(item.value, kind)
    return found


def nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000) * 1000


def test_a_traced_run_is_a_child_span_the_command_continues_and_history_names(
        env: Env) -> None:
    marks = env.tmp / "continued.json"
    events = env.tmp / "events.jsonl"
    with collecting(Collector()) as collector:
        result = env.run("run", "--job", "nightly", "--schedule", "* * * * *", "-v",
                         "--event-log", str(events), "--",
                         sys.executable, "-c", CONTINUES, str(marks), "0",
                         env=traced(collector.url, TRACEPARENT=TRACEPARENT,
                                    TRACESTATE="congo=t61rcWkgMzE",
                                    BAGGAGE="userId=alice"))
    assert result.returncode == 0, result
    assert SECRET not in result.stderr + result.stdout
    (got,) = collector.received
    assert got.path == "/v1/traces" and got.headers["Content-Type"] == "application/json"
    assert got.headers["Authorization"] == f"Bearer {SECRET}"
    (span,) = got.spans()
    (row,) = env.runs("nightly")
    # The ids: the parent's trace, pglock's span, as the history row has them.
    assert (span.trace_id.hex(), span.parent_span_id.hex()) == (TRACE, PARENT)
    assert (row["trace_id"], row["span_id"]) == (TRACE, span.span_id.hex())
    assert (span.name, span.kind, span.trace_state) == ("nightly", 1, "congo=t61rcWkgMzE")
    # The span stands for the run the row records: from before its start record to
    # after its end.
    assert span.start_time_unix_nano <= nanos(row["started_at"]) + 1000
    assert span.end_time_unix_nano >= nanos(row["finished_at"]) - 1000
    assert span.status.code == 0
    continued = json.loads(marks.read_text())
    assert attributes(span) == {
        "pglock.job": "nightly", "pglock.holder": row["holder"], "pglock.mode": "lease",
        "process.executable.name": Path(sys.executable).name,
        "pglock.fencing_token": row["fencing_token"], "pglock.slot": row["slot"].isoformat(),
        "pglock.run_id": row["id"], "pglock.attempt": 1, "pglock.outcome": "succeeded",
        "process.pid": continued["pid"], "process.exit.code": 0}
    # The command found TRACEPARENT naming pglock's span, and continues that trace.
    own = f"00-{TRACE}-{row['span_id']}-01"
    assert continued["environ"] == {"TRACEPARENT": own, "TRACESTATE": "congo=t61rcWkgMzE",
                                    "BAGGAGE": "userId=alice"}
    assert (continued["trace_id"], continued["span_id"], continued["remote"],
            continued["sampled"]) == (TRACE, row["span_id"], True, True)
    assert continued["children"] == {"TRACEPARENT": own, "TRACESTATE": "congo=t61rcWkgMzE"}
    # The ids in history --json and in every event of the run from its acquisition on.
    shown = json.loads(env.run("history", "--job", "nightly", "--json").stdout)
    assert [(r["trace_id"], r["span_id"]) for r in shown["runs"]] == [(TRACE, row["span_id"])]
    logged = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["event"], e["trace_id"], e["span_id"]) for e in logged] == [
        (name, TRACE, row["span_id"]) for name in ("acquired", "started", "finished")]


def test_retries_are_one_span_with_an_event_each_and_the_failure_is_its_status(
        env: Env) -> None:
    with collecting(Collector()) as collector:
        result = env.run("run", "--job", "flaky", "--retries", "1", "--retry-delay", "0",
                         "--", "sh", "-c", "exit 3",
                         env=traced(collector.url, OTEL_EXPORTER_OTLP_COMPRESSION="gzip"))
    assert (result.returncode, result.stderr) == (3, ""), result
    assert collector.received[0].headers["Content-Encoding"] == "gzip"
    (span,) = collector.spans()
    rows = env.runs("flaky")
    assert [(r["attempt"], r["outcome"]) for r in rows] == [(1, "failed"), (2, "failed")]
    # A new trace: pglock's span is its root, and both attempts are that span.
    assert span.parent_span_id == b""
    assert {(r["trace_id"], r["span_id"]) for r in rows} == {
        (span.trace_id.hex(), span.span_id.hex())}
    found = attributes(span)
    assert (found["pglock.attempt"], found["pglock.run_id"], found["process.exit.code"],
            found["error.type"], found["pglock.outcome"]) == (2, rows[1]["id"], 3, "failed",
                                                              "failed")
    assert span.status.code == 2
    (retry,) = span.events
    assert retry.name == "retry" and attributes(retry)["pglock.attempt"] == 1
    assert span.start_time_unix_nano < retry.time_unix_nano < span.end_time_unix_nano


def test_a_loser_sends_nothing_unless_asked_to_trace_skips(env: Env) -> None:
    holder, _ = env.start_holder("busy")
    try:
        with collecting(Collector()) as collector:
            quiet = env.run("run", "--job", "busy", "--", "true",
                            env=traced(collector.url, TRACEPARENT=TRACEPARENT))
            assert (quiet.returncode, quiet.stderr) == (75, ""), quiet
            assert collector.received == []
            told = env.run("run", "--job", "busy", "--trace-skips", "--", "true",
                           env=traced(collector.url, TRACEPARENT=TRACEPARENT))
            assert (told.returncode, told.stderr) == (75, ""), told
        (span,) = collector.spans()
    finally:
        holder.terminate()
        holder.communicate(timeout=30)
    found = attributes(span)
    assert (found["pglock.outcome"], found["pglock.skip_reason"], span.status.code) == (
        "skipped", "held", 0)
    assert span.parent_span_id.hex() == PARENT and "process.pid" not in found


def test_a_malformed_traceparent_is_one_line_under_v_and_the_run_starts_a_new_trace(
        env: Env) -> None:
    marks = env.tmp / "continued.json"
    bad = f"00-{TRACE}-{'0' * 16}-01"
    with collecting(Collector()) as collector:
        quiet = env.run("run", "--job", "bad", "--min-hold", "0", "--",
                        sys.executable, "-c", CONTINUES, str(marks), "0",
                        env=traced(collector.url, TRACEPARENT=bad, TRACESTATE="a=1"))
        assert (quiet.returncode, quiet.stderr) == (0, ""), quiet
        told = env.run("run", "--job", "bad", "-v", "--", "true",
                       env=traced(collector.url, TRACEPARENT=bad))
    assert told.returncode == 0, told
    assert [line for line in told.stderr.splitlines() if "TRACEPARENT" in line] == [
        f"pglock: TRACEPARENT {bad} ignored (the parent id is all zeros): the run starts a "
        "new trace"]
    first, _ = collector.spans()
    assert first.parent_span_id == b"" and first.trace_id.hex() != TRACE
    continued = json.loads(marks.read_text())
    assert continued["environ"] == {
        "TRACEPARENT": f"00-{first.trace_id.hex()}-{first.span_id.hex()}-01",
        "TRACESTATE": None, "BAGGAGE": None}


@pytest.mark.parametrize("answer", ["closed port", "500", "401 that quotes the key"])
def test_a_collector_that_refuses_costs_one_line_under_v_never_the_run(
        env: Env, answer: str) -> None:
    collector = Collector(status=500, body=b'{"message":"down"}')
    if answer.startswith("401"):
        collector = Collector(status=401, body=b'{"message":"bad key {echo}"}')
    with collecting(collector):
        url = f"http://127.0.0.1:{free_port()}" if answer == "closed port" else collector.url
        quiet = env.run("run", "--job", "refused", "--", "true", env=traced(url))
        assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", ""), quiet
        told = env.run("run", "--job", "refused", "--rerun", "-v", "--", "true",
                       env=traced(url))
    assert told.returncode == 0, told
    assert SECRET not in told.stderr + told.stdout
    said = [line for line in told.stderr.splitlines() if "not exported" in line]
    expected = {"closed port": "failed: Connection refused", "500": "HTTP 500",
                "401 that quotes the key": "HTTP 401"}[answer]
    assert said == [f"pglock: spans not exported to {url}: {expected}"
                    + (" Internal Server Error" if answer == "500" else
                       " Unauthorized" if answer.startswith("401") else "")]
    assert [r["outcome"] for r in env.runs("refused")] == ["succeeded", "succeeded"]


def contend(env: Env, job: str, mode: str) -> lease.Attempt:
    """A contender for the job through pglock's own statements (the session lock in
    advisory mode, then acquire with the start record, then finish), in-process: it answers
    in milliseconds whatever the machine's load, while a pglock process may take seconds."""
    claim = lease.Claim(job=job, schema=env.schema, ttl=60, mode=mode)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        if mode == "advisory" and not advisory.take(conn, claim):
            return lease.Attempt.HELD
        attempt = lease.try_acquire(conn, claim, ledger.RunStart("true"))
        if claim.run is not None:
            ledger.finish(conn, claim, claim.run.id,
                          ledger.RunResult(ledger.Outcome.SUCCEEDED, 0, 0.0))
    return attempt


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lease", "advisory"])
def test_a_hanging_collector_costs_at_most_the_timeout_and_never_the_lock(
        env: Env, mode: str) -> None:
    """The export waits 2 s at most whatever OTEL_EXPORTER_OTLP_TIMEOUT says, and only once
    the lock is let go (the advisory session closed too): while the collector holds the
    request, a contender gets the lock and records its run, and the first pglock is still
    waiting on the collector."""
    collector = Collector(hang=True)
    with collecting(collector):
        first = env.popen("run", "--job", "shared", "--mode", mode, "--min-hold", "0", "--",
                          "true",
                          env=traced(collector.url, OTEL_EXPORTER_OTLP_TIMEOUT="60000"))
        assert collector.arrived.wait(60), "the span never arrived"
        arrived = time.monotonic()
        contended = contend(env, "shared", mode)
        still_waiting = first.poll() is None
        stdout, stderr = first.communicate(timeout=60)
        waited = time.monotonic() - arrived
    assert contended is lease.Attempt.WON
    assert still_waiting, "the contender was answered only after the first pglock exited"
    assert (first.returncode, stdout, stderr) == (0, "", "")
    assert waited < 15, f"the export held pglock {waited:.1f}s (the cap is 2 s)"
    rows = env.runs("shared")
    assert [r["outcome"] for r in rows] == ["succeeded", "succeeded"]
    assert rows[0]["trace_id"] is not None and rows[1]["trace_id"] is None


def test_an_untraced_run_imports_nothing_of_tracing_and_passes_no_traceparent(
        env: Env) -> None:
    marks = env.tmp / "continued.json"
    plain = env.run("run", "--job", "plain", "--min-hold", "0", "--",
                    sys.executable, "-c", CONTINUES, str(marks), "0",
                    env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert plain.returncode == 0, plain
    imported = {line.rsplit("|", 1)[-1].strip() for line in plain.stderr.splitlines()}
    assert "pglock.run.notify" in imported
    assert not {"pglock.run.tracing", "pglock.run.otlp"} & imported
    assert json.loads(marks.read_text())["environ"]["TRACEPARENT"] is None
    (row,) = env.runs("plain")
    assert (row["trace_id"], row["span_id"]) == (None, None)
    # A trace to join but no collector: the ids and the variable, no exporter.
    joined = env.run("run", "--job", "plain", "--", "true",
                     env={"PYTHONPROFILEIMPORTTIME": "1", "TRACEPARENT": TRACEPARENT})
    imported = {line.rsplit("|", 1)[-1].strip() for line in joined.stderr.splitlines()}
    assert "pglock.run.tracing" in imported and "pglock.run.otlp" not in imported
    assert env.runs("plain")[1]["trace_id"] == TRACE


def test_sdk_disabled_passes_the_parents_context_as_it_came(env: Env) -> None:
    marks = env.tmp / "continued.json"
    with collecting(Collector()) as collector:
        result = env.run("run", "--job", "off", "--", sys.executable, "-c", CONTINUES,
                         str(marks), "0", env=traced(collector.url, TRACEPARENT=TRACEPARENT,
                                                     OTEL_SDK_DISABLED="true"))
    assert (result.returncode, result.stderr) == (0, ""), result
    assert collector.received == []
    assert json.loads(marks.read_text())["environ"]["TRACEPARENT"] == TRACEPARENT
    assert env.runs("off")[0]["trace_id"] is None


def _base64_ids(document: Any) -> Any:
    if isinstance(document, list):
        return [_base64_ids(item) for item in document]
    if not isinstance(document, dict):
        return document
    return {key: (base64.b64encode(bytes.fromhex(item)).decode()
                  if key in ("traceId", "spanId", "parentSpanId") else _base64_ids(item))
            for key, item in document.items()}

