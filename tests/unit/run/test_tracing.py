"""Tracing without a database: the W3C trace context read and passed on, the span built
from a run's attempts, the OTLP JSON document and the exporter's settings."""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service

from pglock.lock.ledger import Outcome, RunResult, StartedRun
from pglock.run import otlp, slot, tracing
from pglock.run.options import RunOptions
from pglock.run.tracing import Malformed, Parent, Trace, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"
LONG_FUTURE = f"cc-{TRACE}-{PARENT}-01-" + "x" * 500


@pytest.mark.parametrize(("value", "why"), [
    ("garbage", "not VERSION-TRACEID-PARENTID-FLAGS"),
    (f"00-{TRACE}-{PARENT}", "not VERSION-TRACEID-PARENTID-FLAGS"),
    (f"ff-{TRACE}-{PARENT}-01", "version ff is forbidden"),
    (f"00-{TRACE.upper()}-{PARENT}-01", "lowercase hex"),
    (f"00-{TRACE}-{PARENT.upper()}-01", "lowercase hex"),
    (f"0A-{TRACE}-{PARENT}-01", "lowercase hex"),
    (f"00-{'0' * 32}-{PARENT}-01", "the trace id is all zeros"),
    (f"00-{TRACE}-{'0' * 16}-01", "the parent id is all zeros"),
    (f"00-{TRACE[:31]}-{PARENT}-01", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}0-{PARENT}-01", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}-{PARENT[:15]}-01", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}-{PARENT}0-01", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}-{PARENT}-1", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}-{PARENT}-0g", "of 2, 32, 16 and 2"),
    (f"00-{TRACE}-{PARENT}-01-extra", "version 00 has nothing after its flags"),
    (f"00-{TRACE}-{PARENT}-01x", "version 00 has nothing after its flags"),
    (f"00-{TRACE}-{PARENT}-01\n", "version 00 has nothing after its flags"),
    (f"cc-{TRACE}-{PARENT}-01x", "no dash after the flags"),
    (f"0-{TRACE}-{PARENT}-01", "of 2, 32, 16 and 2"),
    (f"0g-{TRACE}-{PARENT}-01", "of 2, 32, 16 and 2"),
    (f"00_{TRACE}_{PARENT}_01", "of 2, 32, 16 and 2"),
    (f"00-{TRACE[:30]}é1-{PARENT}-01", "of 2, 32, 16 and 2"),
    (f"\n{VALID}", "of 2, 32, 16 and 2"),
    ("-" * 55, "of 2, 32, 16 and 2"),
    (LONG_FUTURE, "longer than 512 characters"),
])
def test_a_malformed_traceparent_is_refused_with_its_reason(value: str, why: str) -> None:
    with pytest.raises(Malformed, match=why.replace("(", r"\(")):
        parse_traceparent(value)


@pytest.mark.parametrize(("value", "parent"), [
    (VALID, Parent(TRACE, PARENT, 1)),
    (f"00-{TRACE}-{PARENT}-00", Parent(TRACE, PARENT, 0)),
    (f"00-{TRACE}-{PARENT}-ff", Parent(TRACE, PARENT, 0xFF)),
    (f" \t{VALID}\t ", Parent(TRACE, PARENT, 1)),
    (f"cc-{TRACE}-{PARENT}-01", Parent(TRACE, PARENT, 1)),
    (f"cc-{TRACE}-{PARENT}-01-what-the-future-holds", Parent(TRACE, PARENT, 1)),
])
def test_a_traceparent_by_the_rules_names_the_parent(value: str, parent: Parent) -> None:
    assert parse_traceparent(value) == parent


@pytest.mark.parametrize("value", [
    "congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    "tenant@vendor=x , other=y", "a=1,,b=2",
])
def test_a_tracestate_by_the_rules_is_kept(value: str) -> None:
    assert tracing.check_tracestate(value) == value


@pytest.mark.parametrize(("value", "why"), [
    ("Upper=1", "member 1"), ("a=1,b", "member 2"), ("a=1,a=2", "repeated"),
    ("a=" + "x" * 600, "longer than 512"),
    (",".join(f"k{n}=v" for n in range(33)), "more than 32 members"),
    ("a=x=y", "member 1"), ("a=\x01", "member 1"), ("a=", "member 1"),
])
def test_a_malformed_tracestate_is_refused(value: str, why: str) -> None:
    with pytest.raises(Malformed, match=why):
        tracing.check_tracestate(value)


@pytest.mark.parametrize(("value", "ok"), [
    ("userId=alice,serverNode=DF%2028", True), ("a=b;prop", True),
    ("a=\x00", False), ("a=é", False), ("a=" + "x" * 9000, False)])
def test_baggage_is_passed_on_when_printable_and_within_its_limit(value: str, ok: bool) -> None:
    if ok:
        assert tracing.check_baggage(value) == value
    else:
        with pytest.raises(Malformed):
            tracing.check_baggage(value)


def options(**kwargs: Any) -> RunOptions:
    return RunOptions(job="nightly", command=["/usr/local/bin/backup", "--all"],
                      holder="web1", **kwargs)


def started(environ: dict[str, str], **kwargs: Any) -> Trace:
    trace = Trace.start(environ, options(**kwargs))
    assert trace is not None
    trace.begin()
    return trace


def test_a_run_under_a_traced_parent_is_its_child_and_the_command_continues_it() -> None:
    trace = started({"TRACEPARENT": VALID, "TRACESTATE": "congo=t61rcWkgMzE",
                     "BAGGAGE": "userId=alice"})
    span = trace.span
    assert (span.trace_id, span.parent_id, span.name) == (TRACE, PARENT, "nightly")
    assert len(span.span_id) == 16 and span.span_id != PARENT
    env = {"TRACEPARENT": VALID, "TRACESTATE": "congo=t61rcWkgMzE", "BAGGAGE": "userId=alice"}
    trace.propagate(env)
    assert env == {"TRACEPARENT": f"00-{TRACE}-{span.span_id}-01",
                   "TRACESTATE": "congo=t61rcWkgMzE", "BAGGAGE": "userId=alice"}
    assert trace.ids() == {"trace_id": TRACE, "span_id": span.span_id}


def test_without_a_parent_the_run_starts_a_sampled_trace() -> None:
    trace = started({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    span = trace.span
    assert span.parent_id is None and len(span.trace_id) == 32 and span.trace_id.strip("0")
    assert trace.traceparent() == f"00-{span.trace_id}-{span.span_id}-01"


def test_a_malformed_traceparent_starts_a_new_trace_and_drops_its_tracestate(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pglock")
    trace = started({"TRACEPARENT": f"00-{'0' * 32}-{PARENT}-01", "TRACESTATE": "a=1",
                     "BAGGAGE": "k=v"})
    assert trace.span.parent_id is None and trace.trace_id != "0" * 32
    env = {"TRACESTATE": "a=1", "BAGGAGE": "k=v"}
    trace.propagate(env)
    assert env == {"TRACEPARENT": trace.traceparent(), "BAGGAGE": "k=v"}
    assert [r.getMessage() for r in caplog.records] == [
        f"TRACEPARENT 00-{'0' * 32}-{PARENT}-01 ignored (the trace id is all zeros): the run "
        "starts a new trace"]


def test_a_child_of_an_unsampled_parent_is_passed_on_unsampled_and_never_sent() -> None:
    trace = started({"TRACEPARENT": f"00-{TRACE}-{PARENT}-00"})
    trace.attempted(StartedRun(1, datetime.now(UTC)), RunResult(Outcome.SUCCEEDED, 0, 1.0))
    assert trace.traceparent().endswith("-00")
    assert trace.finished() == []


def test_flags_other_than_sampled_and_random_are_not_passed_on() -> None:
    assert started({"TRACEPARENT": f"00-{TRACE}-{PARENT}-ff"}).traceparent().endswith("-03")


def test_sdk_disabled_means_no_span_and_the_context_left_as_it_came() -> None:
    assert Trace.start({"TRACEPARENT": VALID, "OTEL_SDK_DISABLED": "TRUE"}, options()) is None


def test_the_span_says_the_last_attempt_and_each_retry_is_an_event() -> None:
    trace = started({"TRACEPARENT": VALID})
    trace.acquired(41, datetime(2026, 5, 1, 3, tzinfo=UTC))
    trace.forked(1234)
    first = StartedRun(7, datetime.now(UTC), attempt=1, attempt_limit=2)
    failed = RunResult(Outcome.FAILED, 3, 0.5, error="exit 3")
    trace.attempted(first, failed)
    trace.retrying(first, failed, 1.2345)
    span = trace.span
    assert (span.failed, span.message, span.attributes["error.type"]) == (True, "exit 3",
                                                                          "failed")
    trace.forked(1240)
    trace.attempted(StartedRun(8, datetime.now(UTC), attempt=2, attempt_limit=2),
                    RunResult(Outcome.SUCCEEDED, 0, 0.2))
    trace.ended()
    assert span.attributes == {
        "pglock.job": "nightly", "pglock.holder": "web1", "pglock.mode": "lease",
        "process.executable.name": "backup", "pglock.fencing_token": 41,
        "pglock.slot": "2026-05-01T03:00:00+00:00", "pglock.run_id": 8, "pglock.attempt": 2,
        "pglock.outcome": "succeeded", "process.pid": 1240, "process.exit.code": 0}
    assert (span.failed, span.message) == (False, None)
    assert [(e.name, e.attributes) for e in span.events] == [("retry", {
        "pglock.attempt": 1, "pglock.outcome": "failed", "pglock.retry_delay": 1.234,
        "process.exit.code": 3})]
    assert span.end_ns is not None and span.end_ns >= span.start_ns
    assert trace.finished() == [span]


@pytest.mark.parametrize(("result", "code", "error"), [
    (RunResult(Outcome.KILLED, None, 1.0, signal=9), 137, "killed"),
    (RunResult(Outcome.TIMED_OUT, None, 1.0, signal=15), 143, "timed_out"),
    (RunResult(Outcome.LOCK_LOST, None, 0.0, error="lock lost: x"), None, "lock_lost"),
    (RunResult(Outcome.FAILED, 127, 0.0, error="not found"), 127, "failed"),
    (RunResult(Outcome.STOPPED, None, 1.0, signal=15), 143, None),
])
def test_a_run_that_did_not_succeed_has_status_error_save_an_operators_stop(
        result: RunResult, code: int | None, error: str | None) -> None:
    trace = started({"TRACEPARENT": VALID})
    trace.attempted(StartedRun(1, datetime.now(UTC)), result)
    attributes = trace.span.attributes
    assert attributes.get("process.exit.code") == code
    assert "process.pid" not in attributes  # never forked
    assert (attributes.get("error.type"), trace.span.failed) == (error, error is not None)


def test_a_skip_has_a_span_only_with_trace_skips() -> None:
    quiet = started({"TRACEPARENT": VALID})
    assert not quiet.skipped("held")
    assert quiet.finished() == []
    told = started({"TRACEPARENT": VALID}, trace_skips=True)
    assert told.skipped("held")
    (span,) = told.finished()
    assert (span.attributes["pglock.outcome"], span.attributes["pglock.skip_reason"],
            span.failed) == ("skipped", "held", False)


def test_each_slot_of_a_catch_up_is_a_span_of_its_own() -> None:
    trace = started({"TRACEPARENT": VALID})
    first = trace.span
    trace.begin(datetime(2026, 5, 1, 2, tzinfo=UTC))
    trace.attempted(StartedRun(1, datetime.now(UTC)), RunResult(Outcome.SUCCEEDED, 0, 0.1))
    trace.ended()
    trace.begin(datetime(2026, 5, 1, 3, tzinfo=UTC))
    trace.attempted(StartedRun(2, datetime.now(UTC)), RunResult(Outcome.SUCCEEDED, 0, 0.1))
    done = trace.finished()
    assert first not in done and len({span.span_id for span in done}) == 2
    assert [span.attributes["pglock.slot"] for span in done] == [
        "2026-05-01T02:00:00+00:00", "2026-05-01T03:00:00+00:00"]
    assert {span.parent_id for span in done} == {PARENT}


def test_what_turns_tracing_on_is_said_in_one_place_each() -> None:
    assert set(slot.TRACED_BY) == {"TRACEPARENT", *tracing.ENDPOINTS}
    assert not slot.traced({"OTEL_SERVICE_NAME": "x", "TRACESTATE": "a=1"})
    assert slot.traced({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"})


# ---------------------------------------------------------------- the OTLP exporter


@pytest.mark.parametrize(("environ", "url"), [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/otlp"}, "https://c/otlp/v1/traces"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/custom"}, "https://c/custom"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/t"}, "http://b:4318/t"),
])
def test_the_traces_endpoint_follows_opentelemetrys_rules(environ: dict[str, str],
                                                          url: str | None) -> None:
    assert otlp.traces_url(environ) == url


ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


@pytest.mark.parametrize(("extra", "seconds"), [
    ({}, 2.0), ({"OTEL_EXPORTER_OTLP_TIMEOUT": "500"}, 0.5),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "60000"}, 2.0),
    ({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250", "OTEL_EXPORTER_OTLP_TIMEOUT": "900"}, 0.25),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, 2.0), ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-5"}, 2.0),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, 2.0), ({"OTEL_EXPORTER_OTLP_TIMEOUT": "nan"}, 2.0),
])
def test_the_export_timeout_is_milliseconds_and_never_above_two_seconds(
        extra: dict[str, str], seconds: float) -> None:
    chosen = otlp.settings({**ENDPOINT, **extra})
    assert chosen is not None and chosen.timeout == seconds


@pytest.mark.parametrize("extra", [
    {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
    {"OTEL_TRACES_EXPORTER": "none"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:99999"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector/a b"},
])
def test_no_export_where_pglock_cannot_or_should_not_send(extra: dict[str, str]) -> None:
    assert otlp.settings({**ENDPOINT, **extra}) is None


def test_headers_are_percent_decoded_and_a_bad_member_is_named_by_position_only(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pglock")
    chosen = otlp.settings({**ENDPOINT, "OTEL_EXPORTER_OTLP_HEADERS":
                            "Authorization=Bearer%20s3cret, x-api-key = k3y ,s3cr3tnoequals,"
                            "x-bad=a%0Ab"})
    assert chosen is not None
    assert chosen.headers == {"Authorization": "Bearer s3cret", "x-api-key": "k3y"}
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "member 3" in said and "member 4" in said
    assert "s3cr" not in said and "k3y" not in said
    only = otlp.settings({**ENDPOINT, "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
                          "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"})
    assert only is not None and only.headers == {"b": "2"}


def test_the_resource_names_the_service_pglock_unless_told() -> None:
    chosen = otlp.settings(ENDPOINT)
    assert chosen is not None and chosen.resource["service.name"] == "pglock"
    assert chosen.resource["host.name"]
    told = otlp.resource({"OTEL_RESOURCE_ATTRIBUTES": "service.name=a,deployment.environment="
                                                      "prod%2Deu,host.name=h",
                          "OTEL_SERVICE_NAME": "cron"})
    assert told == {"host.name": "h", "service.name": "cron",
                    "deployment.environment": "prod-eu"}


def test_what_is_shown_of_an_endpoint_is_its_scheme_host_and_port() -> None:
    url = "https://user:pw@collector.example:4318/v1/traces?api_key=s3cret"
    assert otlp.shown(url) == "https://collector.example:4318"
    assert otlp.shown("http://[::1]/v1/traces") == "http://[::1]"
    chosen = otlp.Settings(url, {"Authorization": "Bearer s3cret"}, 1.0, {})
    assert otlp.hidden(f"refused Bearer s3cret at {url}", chosen) == (
        "refused <hidden> at https://collector.example:4318")


def test_https_is_verified_as_the_standard_library_does() -> None:
    import ssl

    chosen = otlp.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318"})
    assert chosen is not None
    connection = otlp._connection(chosen)
    context = connection._context
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert (connection.host, connection.port, connection.timeout) == (
        "collector.example", 4318, 2.0)


def sent(trace: Trace) -> dict[str, Any]:
    batch = otlp.Batch(trace.finished(), trace.flags, trace.context.tracestate)
    return otlp.document(batch, {"service.name": "pglock", "host.name": "web1"})


def test_the_document_is_an_otlp_export_request() -> None:
    """Parsed by OpenTelemetry's own protobuf messages (its JSON mapping, save the ids,
    which OTLP/JSON writes in hex where protobuf's JSON has base64): no field unknown."""
    trace = started({"TRACEPARENT": VALID, "TRACESTATE": "congo=t61rcWkgMzE"})
    trace.forked(99)
    run = StartedRun(5, datetime.now(UTC))
    trace.attempted(run, RunResult(Outcome.FAILED, 2, 0.1, error="exit 2"))
    trace.retrying(run, RunResult(Outcome.FAILED, 2, 0.1), 0.5)
    trace.ended()
    document = sent(trace)
    request = json_format.ParseDict(base64_ids(document),
                                    service.ExportTraceServiceRequest())
    (resource,) = request.resource_spans
    assert {a.key: a.value.string_value for a in resource.resource.attributes} == {
        "service.name": "pglock", "host.name": "web1"}
    (scope,) = resource.scope_spans
    assert scope.scope.name == "pglock"
    (span,) = scope.spans
    assert (span.trace_id.hex(), span.parent_span_id.hex(), span.span_id.hex()) == (
        TRACE, PARENT, trace.span.span_id)
    assert (span.name, span.kind, span.trace_state) == ("nightly", 1, "congo=t61rcWkgMzE")
    assert (span.status.code, span.status.message) == (2, "exit 2")
    assert span.start_time_unix_nano == trace.span.start_ns
    assert span.end_time_unix_nano == trace.span.end_ns
    assert span.flags == 0x01 | 0x100 | 0x200
    values = {a.key: a.value for a in span.attributes}
    assert (values["process.exit.code"].int_value, values["process.pid"].int_value,
            values["error.type"].string_value, values["pglock.run_id"].int_value) == (
        2, 99, "failed", 5)
    (event,) = span.events
    assert (event.name, {a.key for a in event.attributes}) == ("retry", {
        "pglock.attempt", "pglock.outcome", "pglock.retry_delay", "process.exit.code"})


def test_a_root_span_has_no_parent_and_a_success_no_status() -> None:
    trace = started({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    trace.attempted(StartedRun(5, datetime.now(UTC)), RunResult(Outcome.SUCCEEDED, 0, 0.1))
    (span,) = sent(trace)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert "parentSpanId" not in span and "traceState" not in span
    assert (span["status"], span["flags"]) == ({"code": 0}, 0x01 | 0x100)
    assert {"key": "process.exit.code", "value": {"intValue": "0"}} in span["attributes"]


def base64_ids(document: Any) -> Any:
    """OTLP/JSON's hex ids as protobuf's JSON mapping has bytes (base64)."""
    if isinstance(document, list):
        return [base64_ids(item) for item in document]
    if not isinstance(document, dict):
        return document
    return {key: (base64.b64encode(bytes.fromhex(item)).decode()
                  if key in ("traceId", "spanId", "parentSpanId") else base64_ids(item))
            for key, item in document.items()}
