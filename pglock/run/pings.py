"""healthchecks.io-style pings (`--ping-url`): a start, and the slot's end with its exit
code and output tail, sent in the background within a budget."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pglock import __version__
from pglock.errors import UsageError
from pglock.lock import clock
from pglock.lock.ledger import Outcome, RunResult
from pglock.run.told import Told
from pglock.settings.text import escaped

# One request's limit, for the connection and for each read.
PING_TIMEOUT = 5.0
PING_RETRIES = 2
# The final ping (with a start ping still under way) keeps pglock at most this long.
PING_BUDGET = 10.0
PING_BODY = 10 * 1024
# What a refused redirect says (urllib's HTTPError message, and the ping's detail).
SCHEME_CHANGED = "refused: a redirect to another scheme"
# What stands for the URL's text (its path is the secret) where a message would hold it.
HIDDEN = "<ping URL>"

# The notifier's event emitter: event name, warning, fields.
Emit = Callable[..., Any]


class Pinger:
    """healthchecks.io's protocol as runitor speaks it: URL/start when the command starts,
    URL on success, URL/<exit code> on failure, the output tail as the body; each run's
    pings carry one run id (rid), so the service pairs a start with its end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.rid = _uuid4()
        self.starting: threading.Thread | None = None
        self.told: list[Told] = []

    def start(self, emit: Emit) -> None:
        self.starting = threading.Thread(target=self._send, args=(emit, "/start", b""),
                                         name="pglock-ping-start", daemon=True)
        self.starting.start()

    def finish(self, emit: Emit, result: RunResult, tail: bytes) -> None:
        deadline = clock.now() + PING_BUDGET
        if self.starting is not None:
            # The start should arrive first; one that is still retrying is not waited out
            # (the run id lets the service pair an end that overtook its start).
            self.starting.join(PING_TIMEOUT)
        self._send(emit, _final_suffix(result), tail[-PING_BODY:], deadline)

    def _send(self, emit: Emit, suffix: str, body: bytes,
              deadline: float | None = None) -> None:
        if deadline is None:
            deadline = clock.now() + PING_BUDGET
        target = self.url
        try:
            target = address(self.url, suffix, self.rid)
            ok, detail, attempts = post(target, body, deadline)
        except Exception as error:  # a thread of its own: no traceback, the run goes on
            ok, detail, attempts = False, f"failed: {type(error).__name__}", 0
        # The detail reaches -v, the events and the history row: never the URL's text.
        detail = escaped(hidden(detail, self.url, target))
        self.told.append(Told(f"ping {suffix or '/'}", ok, detail))
        emit("ping", warning=not ok, ping=suffix or "/", url=shown(self.url), ok=ok,
             detail=detail, attempts=attempts)


def _final_suffix(result: RunResult) -> str:
    """`` on success, `/log` for an operator's stop (no failure: healthchecks.io logs it
    without changing the check's state), else `/<code>`: the code pglock exits with (124
    timed out, 125 lock lost), or `/fail` when there is no code to tell."""
    if result.outcome is Outcome.SUCCEEDED:
        return ""
    if result.outcome is Outcome.STOPPED:
        return "/log"
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


def check_url(url: str) -> None:
    """Refuse, at parse time, a ping URL that cannot be sent as given: what urlsplit cannot
    read, a scheme other than http or https (in any case), no host, a space, a control or
    a non-ASCII character (percent-encode those). Messages never repeat the URL."""
    from urllib.parse import urlsplit

    where = next((i for i, char in enumerate(url) if not 32 < ord(char) < 127), None)
    if where is not None:
        raise UsageError(f"--ping-url: a space, control or non-ASCII character at position "
                         f"{where + 1} (percent-encode it)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its check: a port that is not one raises)
    except ValueError as error:
        raise UsageError(f"--ping-url: not a URL ({escaped(str(error))})") from None
    if parts.scheme not in ("http", "https"):
        raise UsageError("--ping-url must be an http:// or https:// URL")
    if not parts.hostname:
        raise UsageError("--ping-url: no host after the scheme's //")


def shown(url: str) -> str:
    """The ping URL as pglock may show it: scheme://host, the rest (the secret) left out."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return HIDDEN
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}"


def hidden(text: str, *urls: str) -> str:
    """`text` with any of the URLs, or what follows their host (path and query), replaced
    by HIDDEN; read without urlsplit, which a URL that is not one would make raise."""
    for url in urls:
        rest = url.partition("://")[2] or url
        starts = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
        for secret in (url, rest[min(starts):] if starts else ""):
            if len(secret) > 1:
                text = text.replace(secret, HIDDEN)
    return text


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
    opener = urllib.request.build_opener(_same_scheme())
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
            with opener.open(request, timeout=min(PING_TIMEOUT, remaining)) as reply:
                reply.read(4096)
                return True, f"HTTP {reply.status}", attempts
        except urllib.error.HTTPError as error:
            detail = f"HTTP {error.code}" + (f" {SCHEME_CHANGED}"
                                             if error.msg == SCHEME_CHANGED else "")
            if error.code < 500 and error.code != 429:
                break
        except urllib.error.URLError as error:
            detail = f"failed: {error.reason}"
        except (OSError, ValueError, http.client.HTTPException) as error:
            detail = f"failed: {error!r}" if not str(error) else f"failed: {error}"
    return False, detail, attempts


def _same_scheme() -> Any:
    """urllib's redirect handler, refusing a redirect to another scheme (https to http
    would send the URL, its secret, in clear; urllib would follow one to ftp)."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    class SameScheme(urllib.request.HTTPRedirectHandler):
        # urllib's signature (req, fp, code, msg, headers, newurl), taken whole: the run
        # path's functions take at most five parameters (tests/unit/test_layers.py).
        def redirect_request(self, req: Any, *given: Any) -> Any:
            fp, code, _, headers, newurl = given
            if urlsplit(newurl).scheme.lower() != urlsplit(req.full_url).scheme.lower():
                raise urllib.error.HTTPError(req.full_url, code, SCHEME_CHANGED, headers, fp)
            return super().redirect_request(req, *given)

    return SameScheme()
