"""A run's spans sent to an OpenTelemetry collector as OTLP/HTTP JSON, with the standard
library (docs/monitoring.md, "Tracing").

Configured as OpenTelemetry's exporters are, by their variables: OTEL_EXPORTER_OTLP_
(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT, _PROTOCOL, _COMPRESSION, _CERTIFICATE,
_CLIENT_CERTIFICATE, _CLIENT_KEY; OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_TRACES_EXPORTER=none. Sent once, when the run is over: its end recorded, its lock let
go (Slot.close closes the session first). A collector that refuses, fails or does not
answer within the timeout (at most EXPORT_CAP, whatever is asked) costs the run that
long and one line under -v: never its exit code, never a line in cron mail. A header's
value (an API key) is never shown, nor what follows the collector's host in its URL.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from pglock import __version__
from pglock.run.tracing import Span
from pglock.settings.text import has_control

log = logging.getLogger(__name__)

TRACES_PATH = "v1/traces"
# OpenTelemetry's default export timeout; a run waits at most EXPORT_CAP for it.
DEFAULT_TIMEOUT = 10.0
EXPORT_CAP = 2.0
# OTLP's enums: SpanKind INTERNAL (a CLI span's), Status UNSET and ERROR.
KIND_INTERNAL = 1
STATUS_UNSET, STATUS_ERROR = 0, 2
# Span.flags: the W3C trace flags in bits 0-7; bit 8 says bit 9 is known, bit 9 that the
# parent is remote (it came in TRACEPARENT).
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200
# How much of a collector's answer is read (its partial success).
ANSWER_MAX = 64 * 1024


class Settings(NamedTuple):
    """Where and how to send, from the OTEL_* variables."""

    url: str
    headers: dict[str, str]
    timeout: float
    resource: dict[str, str]
    gzip: bool = False
    cafile: str | None = None
    client: tuple[str, str | None] | None = None


def setting(environ: Mapping[str, str], name: str) -> str | None:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name> (unset: None)."""
    for variable in (f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def traces_url(environ: Mapping[str, str]) -> str | None:
    """The traces endpoint: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or
    OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces after its path (None: neither is set)."""
    own = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if own:
        return own
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not base:
        return None
    if url_problem(base) is not None:
        return base  # refused as it is (settings())
    return base + TRACES_PATH if base.endswith("/") else f"{base}/{TRACES_PATH}"


def settings(environ: Mapping[str, str]) -> Settings | None:
    """The export's settings; None (said with -v) when there is to be none."""
    url = traces_url(environ)
    if url is None:
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        log.debug("OTEL_TRACES_EXPORTER is none: the span is not sent")
        return None
    protocol = (setting(environ, "PROTOCOL") or "http/protobuf").lower()
    if protocol == "grpc":
        log.debug("OTEL_EXPORTER_OTLP_PROTOCOL is grpc: pglock sends OTLP/HTTP JSON only, "
                  "the span is not sent")
        return None
    problem = url_problem(url)
    if problem is not None:
        log.debug("the OTLP endpoint %s: the span is not sent", problem)
        return None
    client = setting(environ, "CLIENT_CERTIFICATE")
    return Settings(url, headers(setting(environ, "HEADERS") or ""), timeout(environ),
                    resource(environ),
                    gzip=(setting(environ, "COMPRESSION") or "").lower() == "gzip",
                    cafile=setting(environ, "CERTIFICATE"),
                    client=None if client is None else (client, setting(environ, "CLIENT_KEY")))


def url_problem(url: str) -> str | None:
    """What is wrong with an endpoint (None: nothing); never repeats the URL."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its check: a port that is not one raises)
    except ValueError:
        return "is not a URL"
    if parts.scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    if has_control(url) or " " in url:
        return "holds a space or a control character"
    return None


def shown(url: str) -> str:
    """The endpoint as pglock shows it: scheme://host:port, what follows (a path or a query
    that may hold a key) and any user:password left out."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def pairs(text: str, variable: str) -> dict[str, str]:
    """`key=value,key=value` (W3C baggage style, values percent-encoded), as
    OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES give them. A member that is not
    one is left out, said by its position only (its value may be a secret)."""
    found: dict[str, str] = {}
    for number, member in enumerate(text.split(","), 1):
        if not member.strip():
            continue
        key, equals, value = member.partition("=")
        key, value = unquote(key.strip()), unquote(value.strip())
        if not equals or not key or has_control(key + value):
            log.debug("%s: member %d is not key=value (left out)", variable, number)
            continue
        found[key] = value
    return found


def headers(text: str) -> dict[str, str]:
    return pairs(text, "OTEL_EXPORTER_OTLP_HEADERS")


def timeout(environ: Mapping[str, str]) -> float:
    """OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds; OpenTelemetry's default 10 s), at most
    EXPORT_CAP seconds."""
    text = setting(environ, "TIMEOUT")
    chosen = DEFAULT_TIMEOUT
    if text is not None:
        try:
            given = float(text) / 1000
        except ValueError:
            given = -1.0
        if 0 < given < float("inf"):
            chosen = given
        else:
            log.debug("OTEL_EXPORTER_OTLP_TIMEOUT is not a number of milliseconds above 0 "
                      "(left out)")
    return min(chosen, EXPORT_CAP)


def resource(environ: Mapping[str, str]) -> dict[str, str]:
    """The resource's attributes: OTEL_RESOURCE_ATTRIBUTES, host.name, and service.name
    from OTEL_SERVICE_NAME (which wins), else pglock."""
    found = {"host.name": socket.gethostname(), "service.name": "pglock"}
    found.update(pairs(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES"))
    if name := environ.get("OTEL_SERVICE_NAME", "").strip():
        found["service.name"] = name
    return found


def value(item: str | int | float | bool) -> dict[str, Any]:
    """An attribute's value in OTLP JSON (64-bit integers as strings, as protobuf's JSON)."""
    if isinstance(item, bool):
        return {"boolValue": item}
    if isinstance(item, int):
        return {"intValue": str(item)}
    if isinstance(item, float):
        return {"doubleValue": item}
    return {"stringValue": item}


def attributes(items: Mapping[str, str | int | float | bool]) -> list[dict[str, Any]]:
    return [{"key": key, "value": value(item)} for key, item in items.items()]


def span_json(span: Span, flags: int) -> dict[str, Any]:
    """One span as OTLP JSON (ids in lowercase hex, times in nanoseconds as strings)."""
    document: dict[str, Any] = {
        "traceId": span.trace_id, "spanId": span.span_id, "name": span.name,
        "kind": KIND_INTERNAL, "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns or span.start_ns),
        "attributes": attributes(span.attributes),
        "flags": flags | HAS_IS_REMOTE | (IS_REMOTE if span.parent_id else 0)}
    if span.parent_id:
        document["parentSpanId"] = span.parent_id
    if span.events:
        document["events"] = [{"timeUnixNano": str(event.time_ns), "name": event.name,
                               "attributes": attributes(event.attributes)}
                              for event in span.events]
    status: dict[str, Any] = {"code": STATUS_ERROR if span.failed else STATUS_UNSET}
    if span.failed and span.message:
        status["message"] = span.message
    document["status"] = status
    return document


class Batch(NamedTuple):
    """What is sent: the spans of one pglock run, their trace's flags and state."""

    spans: list[Span]
    flags: int
    tracestate: str | None


def document(batch: Batch, resource_attributes: Mapping[str, str]) -> dict[str, Any]:
    """An ExportTraceServiceRequest in OTLP JSON: one resource (this host's pglock), one
    scope (pglock), the spans."""
    spans = [span_json(span, batch.flags) for span in batch.spans]
    if batch.tracestate:
        for span in spans:
            span["traceState"] = batch.tracestate
    return {"resourceSpans": [{
        "resource": {"attributes": attributes(resource_attributes)},
        "scopeSpans": [{"scope": {"name": "pglock", "version": __version__}, "spans": spans}],
    }]}


def export(batch: Batch, environ: Mapping[str, str]) -> None:
    """Send the spans, waiting at most the timeout (the request goes on in a thread that
    the process's exit ends); a failure is one line under -v."""
    if not batch.spans:
        return
    chosen = settings(environ)
    if chosen is None:
        return
    body = json.dumps(document(batch, chosen.resource), ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8", "backslashreplace")
    answer: list[str | None] = []
    sender = threading.Thread(target=lambda: answer.append(_post(chosen, body)),
                              name="pglock-otlp", daemon=True)
    sender.start()
    sender.join(chosen.timeout)
    if not answer:
        log.debug("spans not exported: the collector at %s did not answer within %gs",
                  shown(chosen.url), chosen.timeout)
    elif answer[0] is not None:
        log.debug("spans not exported to %s: %s", shown(chosen.url),
                  hidden(answer[0], chosen))


def hidden(detail: str, chosen: Settings) -> str:
    """`detail` with no header value in it (an error that quotes one)."""
    for secret in sorted(chosen.headers.values(), key=len, reverse=True):
        if secret:
            detail = detail.replace(secret, "<hidden>")
    return detail.replace(chosen.url, shown(chosen.url))


def _post(chosen: Settings, body: bytes) -> str | None:
    """One POST; None when the collector took it, else what went wrong."""
    import http.client

    try:
        connection = _connection(chosen)
        parts = urlsplit(chosen.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = {"Content-Type": "application/json", "User-Agent": f"pglock/{__version__}",
                **chosen.headers}
        if chosen.gzip:
            import gzip

            body = gzip.compress(body)
            sent["Content-Encoding"] = "gzip"
        try:
            connection.request("POST", target, body, sent)
            reply = connection.getresponse()
            answer = reply.read(ANSWER_MAX)
        finally:
            connection.close()
    except OSError as error:
        return f"failed: {error.strerror or error}"
    except (http.client.HTTPException, ValueError) as error:
        # ValueError: a header http.client refuses (its message would quote the value).
        return f"failed: {type(error).__name__}"
    if not 200 <= reply.status < 300:
        return f"HTTP {reply.status} {reply.reason}"
    return _partial(answer)


def _connection(chosen: Settings) -> Any:
    import http.client

    parts = urlsplit(chosen.url)
    if parts.scheme == "http":
        return http.client.HTTPConnection(parts.hostname or "", parts.port,
                                          timeout=chosen.timeout)
    import ssl

    # Verified as the standard library does: the system's CAs (or the one given), the
    # host name checked.
    context = ssl.create_default_context(cafile=chosen.cafile)
    if chosen.client is not None:
        context.load_cert_chain(*chosen.client)
    return http.client.HTTPSConnection(parts.hostname or "", parts.port,
                                       timeout=chosen.timeout, context=context)


def _partial(answer: bytes) -> str | None:
    """A collector that took the request may still have rejected spans (partialSuccess)."""
    if b"rejectedSpans" not in answer:
        return None
    try:
        rejected = int(json.loads(answer)["partialSuccess"]["rejectedSpans"])
    except (ValueError, KeyError, TypeError):
        return None
    return f"the collector rejected {rejected} span(s)" if rejected else None
