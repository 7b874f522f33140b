"""What the command finds in its environment: pglock's variables beside the caller's."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pglock.lock import lease
from pglock.run.options import RunOptions

if TYPE_CHECKING:
    from pglock.run.tracing import Trace

# What the command finds in its environment (man pglock-run, ENVIRONMENT).
COMMAND_VARIABLES = {
    "PGLOCK_JOB": "the job name",
    "PGLOCK_RUN_ID": "the id of this run's history row",
    "PGLOCK_FENCING_TOKEN": "the lock's fencing token, higher at every acquisition: "
                            "compare it where the command writes",
    "PGLOCK_HOLDER": "the holder's name (--holder, default the host name)",
    "PGLOCK_HOLDER_ID": "this run's random holder id, a secret of the run's processes (in "
                        "their environment only, never shown): a nested pglock run of the "
                        "same job proves with it that it runs under this lock",
    "PGLOCK_SLOT": "with --schedule: the slot this run is for (ISO 8601)",
    "PGLOCK_SEAT": "with --limit: the seat this run holds (1 to N; its fencing token is the "
                   "seat's)",
    "PGLOCK_ATTEMPT": "the attempt (1-based; with --retries, and with --schedule counted over "
                      "every host's attempts at the slot): with PGLOCK_SLOT, an idempotency key",
    "PGLOCK_DSN": "when pglock got it, without its password: the same database for a nested "
                  "pglock run, which authenticates by ~/.pgpass or the like (docs/security.md)",
    "TRACEPARENT": "when the run is traced (TRACEPARENT or an OTLP endpoint in pglock's "
                   "environment): the W3C trace context naming the run's span, so that a "
                   "command using OpenTelemetry continues the trace; TRACESTATE and BAGGAGE "
                   "as pglock got them (docs/monitoring.md, Tracing)",
}


# What `pglock run` reads besides its options' variables (man pglock-run, ENVIRONMENT):
# OpenTelemetry's, for tracing (docs/monitoring.md, Tracing; run/tracing.py, run/otlp.py).
TRACE_VARIABLES = {
    "TRACEPARENT": "the trace the run joins (W3C Trace Context; a malformed one is ignored, "
                   "said with -v, and the run starts a new trace); with TRACESTATE and "
                   "BAGGAGE, passed on to the command",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) the collector the "
                                   "run's span is sent to, as OTLP/HTTP JSON, once the lock "
                                   "is let go",
    "OTEL_EXPORTER_OTLP_HEADERS": "headers of that request (never shown); also _TIMEOUT "
                                  "(milliseconds, at most 2 s), _PROTOCOL, _COMPRESSION, "
                                  "_CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY, each with "
                                  "its _TRACES_ variant",
    "OTEL_SERVICE_NAME": "the span's service.name (default pglock); OTEL_RESOURCE_ATTRIBUTES, "
                         "its resource's other attributes",
    "OTEL_SDK_DISABLED": "true: no span, the trace context passed to the command as it came; "
                         "OTEL_TRACES_EXPORTER=none: the span is not sent",
}


def command_environment(options: RunOptions, claim: lease.Claim, run_id: int,
                        attempt: int = 1, trace: Trace | None = None) -> dict[str, str]:
    """The command's environment: ours, plus what it needs to fence its own writes (and,
    traced, to continue the trace)."""
    env = dict(os.environ)
    if trace is not None:
        trace.propagate(env)
    _without_dsn_password(env)
    env.update(PGLOCK_JOB=options.job, PGLOCK_RUN_ID=str(run_id),
               PGLOCK_FENCING_TOKEN=str(claim.fencing_token), PGLOCK_HOLDER=options.holder,
               PGLOCK_HOLDER_ID=claim.holder_id, PGLOCK_ATTEMPT=str(attempt))
    if claim.slot is not None:
        env["PGLOCK_SLOT"] = claim.slot.isoformat()
    if claim.seat is not None:
        env["PGLOCK_SEAT"] = str(claim.seat)
    return env


def _without_dsn_password(env: dict[str, str]) -> None:
    """PGLOCK_DSN as the command (and its hooks) get it: with no password. A nested pglock
    run still finds the same database by it, and authenticates as libpq does without one
    (~/.pgpass, PGPASSFILE, a certificate); had it no other way in, it fails in one line
    rather than fall back to another database. The job's own code never sees a secret it
    was not given. --dsn and the config file's dsn never reach the environment at all."""
    dsn = env.get("PGLOCK_DSN")
    if not dsn:
        return
    from pglock.db import database, redact

    if not database.carries_password(dsn):
        return
    cleaned = database.without_password(dsn)
    # Not parsed (it was not the DSN used): masked, so that a nested run fails on it as
    # the outer would have, never falls back to the config file or the embedded server.
    env["PGLOCK_DSN"] = cleaned if cleaned is not None else redact.redact(dsn)
