"""Telling people how a slot went: hooks, healthchecks.io-style pings, the event log.

`pglock run` calls a Notifier at fixed points: skipped (with the reason), acquired,
started, finished (each attempt's recorded end), and after_run, once per slot with its
final result, which runs the hooks and sends the final ping. Only the host that ran
the command gets past `skipped`, so only it runs hooks or pings.

With --retries, the run's attempts loop (run._run_locked) calls `finished` after every
attempt, writes a `retry` event between attempts, and calls `after_run` once, with the
last attempt's result: `--on-failure` fires once per slot, when the slot is dead.

Nothing here changes pglock's exit code or prints on its own: a hook or a ping that
failed is said with -v and returned as a note for the run's history row.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pglock import __version__
from pglock.errors import UsageError
from pglock.lock import clock
from pglock.lock.ledger import Outcome, RunResult
from pglock.run.events import EventLog, check_target

log = logging.getLogger(__name__)

# One request's limit, for the connection and for each read.
PING_TIMEOUT = 5.0
PING_RETRIES = 2
# The final ping (with a start ping still under way) keeps pglock at most this long.
PING_BUDGET = 10.0
PING_BODY = 10 * 1024
# How much of a failed hook's output is kept for -v and the history note.
HOOK_OUTPUT = 500
DEFAULT_HOOK_TIMEOUT = 30.0

# A success after one of these is a recovery.
NOT_SUCCEEDED = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOCK_LOST,
                           Outcome.KILLED, Outcome.ABANDONED})


@dataclass(frozen=True)
class NotifyOptions:
    """The run options that tell people: hooks, ping URL, event log."""

    on_failure: str | None = None
    on_success: str | None = None
    on_recovery: str | None = None
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT
    ping_url: str | None = None
    event_log: str | None = None

    def validate(self) -> None:
        for name, hook in (("--on-failure", self.on_failure), ("--on-success", self.on_success),
                           ("--on-recovery", self.on_recovery)):
            if hook is not None and not hook.strip():
                raise UsageError(f"{name}: the hook command is empty")
        if not 0 < self.hook_timeout <= 24 * 3600:
            raise UsageError("--hook-timeout must be more than 0 and at most 1d")
        if self.ping_url is not None and not self.ping_url.startswith(("http://", "https://")):
            raise UsageError("--ping-url must be an http:// or https:// URL")
        if self.event_log is not None:
            check_target(self.event_log)


@dataclass(frozen=True)
class Told:
    """One hook or ping and what it came to."""

    what: str
    ok: bool
    detail: str

    def note(self) -> str:
        return f"{self.what} {self.detail}"


class Notifier:
    """One run's hooks, pings and events."""

    def __init__(self, options: NotifyOptions, *, job: str, holder: str) -> None:
        self.options = options
        self.job = job
        self.events = (None if options.event_log is None
                       else EventLog(options.event_log, job=job, holder=holder))
        self.pinger = None if options.ping_url is None else Pinger(options.ping_url)

    def emit(self, event: str, *, warning: bool = False, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, warning=warning, **fields)

    def skipped(self, reason: str, held_by: Callable[[], str | None] | None = None) -> None:
        """Not run: `held`, `slot_ran`, `paused`, `past_deadline`. `held_by` is asked
        (a statement) only when events are logged."""
        if self.events is None:
            return
        holder = None
        if held_by is not None:
            try:
                holder = held_by()
            except Exception as error:  # the skip stands whatever the lookup came to
                log.info("the holder of the lock could not be read: %s", error)
        self.emit("skipped", reason=reason, held_by=holder)

    def acquired(self, fencing_token: int | None, slot: object = None) -> None:
        if self.events is not None:
            self.events.context.update(fencing_token=fencing_token, slot=slot)
        self.emit("acquired")

    def started(self, run_id: int, command: str) -> None:
        """The command was forked: the `started` event, the start ping in the background."""
        if self.events is not None:
            self.events.context["run_id"] = run_id
        self.emit("started", command=command)
        if self.pinger is not None:
            self.pinger.start(self)

    def finished(self, result: RunResult, recorded: bool) -> None:
        """One attempt's end, once it is recorded (or given up on)."""
        if result.outcome is Outcome.LOCK_LOST:
            self.emit("lock_lost", warning=True, error=result.error)
        self.emit("finished", warning=result.outcome is not Outcome.SUCCEEDED,
                  outcome=str(result.outcome), exit_code=result.exit_code,
                  signal=result.signal, duration=round(result.duration, 3),
                  error=result.error, recorded=recorded)

    def after_run(self, result: RunResult, previous_outcome: str | None,
                  env: dict[str, str]) -> str | None:
        """The slot's final result: hooks, then the final ping; a note of what failed."""
        tail = result.output_tail or b""
        final = None
        if self.pinger is not None:
            final = threading.Thread(target=self.pinger.finish, args=(self, result, tail),
                                     name="pglock-ping", daemon=True)
            final.start()
        hook_env = {**env, "PGLOCK_OUTCOME": str(result.outcome),
                    "PGLOCK_EXIT_CODE": "" if result.exit_code is None else str(result.exit_code),
                    "PGLOCK_DURATION": f"{result.duration:.3f}",
                    "PGLOCK_PREVIOUS_OUTCOME": previous_outcome or "",
                    "PGLOCK_ERROR": result.error or ""}
        told = [self._hook(name, command, hook_env, tail)
                for name, command in self._hooks(result, previous_outcome)]
        if final is not None and self.pinger is not None:
            final.join(PING_BUDGET + 1.0)
            told += list(self.pinger.told)
        failed = [t for t in told if not t.ok]
        for t in failed:
            log.info("job %r: %s", self.job, t.note())
        return "; ".join(t.note() for t in failed) or None

    def _hooks(self, result: RunResult,
               previous_outcome: str | None) -> list[tuple[str, str]]:
        options = self.options
        if result.outcome is not Outcome.SUCCEEDED:
            chosen = [("on-failure", options.on_failure)]
        else:
            recovered = previous_outcome in NOT_SUCCEEDED
            chosen = [("on-success", options.on_success),
                      ("on-recovery", options.on_recovery if recovered else None)]
        return [(name, command) for name, command in chosen if command is not None]

    def _hook(self, name: str, command: str, env: dict[str, str], tail: bytes) -> Told:
        began = clock.now()
        told, exit_code = run_hook(name, command, {**env, "PGLOCK_HOOK": name}, tail,
                                   self.options.hook_timeout)
        self.emit("hook", warning=not told.ok, hook=name, ok=told.ok, exit_code=exit_code,
                  duration=round(clock.now() - began, 3),
                  detail=None if told.ok else told.detail)
        return told

    def close(self) -> None:
        if self.events is not None:
            self.events.close()


def run_hook(name: str, command: str, env: dict[str, str], stdin: bytes,
             timeout: float) -> tuple[Told, int | None]:
    """`sh -c command` in a session of its own, killed (its whole group) at the timeout;
    its output is kept (the end of it) only to say why it failed."""
    what = f"{name} hook"
    try:
        process = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    except OSError as error:
        return Told(what, False, f"could not start: {error.strerror or error}"), None
    try:
        output, _ = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        try:
            process.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            # Something that left the group still holds its output pipe.
            process.wait()
        return Told(what, False, f"killed after --hook-timeout {timeout:g}s"), None
    if process.returncode == 0:
        return Told(what, True, "exited 0"), 0
    said = output[-HOOK_OUTPUT:].decode(errors="replace").strip().replace("\n", " | ")
    code = process.returncode
    detail = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    return Told(what, False, detail + (f": {said}" if said else "")), code


class Pinger:
    """healthchecks.io's protocol as runitor speaks it: URL/start when the command starts,
    URL on success, URL/<exit code> on failure, the output tail as the body; each run's
    pings carry one run id (rid), so the service pairs a start with its end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.rid = _uuid4()
        self.starting: threading.Thread | None = None
        self.told: list[Told] = []

    def start(self, notifier: Notifier) -> None:
        self.starting = threading.Thread(target=self._send, args=(notifier, "/start", b""),
                                         name="pglock-ping-start", daemon=True)
        self.starting.start()

    def finish(self, notifier: Notifier, result: RunResult, tail: bytes) -> None:
        deadline = clock.now() + PING_BUDGET
        if self.starting is not None:
            # The start should arrive first; one that is still retrying is not waited out
            # (the run id lets the service pair an end that overtook its start).
            self.starting.join(PING_TIMEOUT)
        self._send(notifier, _final_suffix(result), tail[-PING_BODY:], deadline)

    def _send(self, notifier: Notifier, suffix: str, body: bytes,
              deadline: float | None = None) -> None:
        if deadline is None:
            deadline = clock.now() + PING_BUDGET
        ok, detail, attempts = post(address(self.url, suffix, self.rid), body, deadline)
        self.told.append(Told(f"ping {suffix or '/'}", ok, detail))
        notifier.emit("ping", warning=not ok, ping=suffix or "/", ok=ok, detail=detail,
                      attempts=attempts)


def _final_suffix(result: RunResult) -> str:
    """`` on success, else `/<code>`: the code pglock exits with (124 timed out, 125 lock
    lost), or `/fail` when there is no code to tell."""
    if result.outcome is Outcome.SUCCEEDED:
        return ""
    if result.outcome is Outcome.TIMED_OUT:
        return "/124"
    if result.outcome is Outcome.LOCK_LOST:
        return "/125"
    if result.exit_code:
        return f"/{result.exit_code}"
    return "/fail"


def _uuid4() -> str:
    """A random (version 4) UUID, as healthchecks.io wants a run id; `uuid` costs an import."""
    data = bytearray(os.urandom(16))
    data[6] = data[6] & 0x0F | 0x40
    data[8] = data[8] & 0x3F | 0x80
    h = data.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def address(url: str, suffix: str, rid: str) -> str:
    """The ping URL with `suffix` on its path and the run id in its query."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, f"rid={rid}") if q)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix, query=query))


def post(url: str, body: bytes, deadline: float) -> tuple[bool, str, int]:
    """POST with retries on network errors, 5xx and 429, until the deadline: whether it
    was taken, its status or error, how many requests were sent."""
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers={
        "User-Agent": f"pglock/{__version__}", "Content-Type": "text/plain; charset=utf-8"})
    detail = "not sent: no time left"
    attempts = 0
    for attempt in range(1 + PING_RETRIES):
        remaining = deadline - clock.now()
        if remaining <= 0:
            break
        if attempt:
            time.sleep(min(remaining, 0.5 * 2 ** (attempt - 1)))
            remaining = deadline - clock.now()
            if remaining <= 0:
                break
        attempts += 1
        try:
            with urllib.request.urlopen(request, timeout=min(PING_TIMEOUT, remaining)) as reply:
                reply.read(4096)
                return True, f"HTTP {reply.status}", attempts
        except urllib.error.HTTPError as error:
            detail = f"HTTP {error.code}"
            if error.code < 500 and error.code != 429:
                break
        except urllib.error.URLError as error:
            detail = f"failed: {error.reason}"
        except (OSError, ValueError, http.client.HTTPException) as error:
            detail = f"failed: {error!r}" if not str(error) else f"failed: {error}"
    return False, detail, attempts
