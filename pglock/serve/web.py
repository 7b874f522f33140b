"""The dashboard as a Starlette application: its routes, and the guard every request
passes (who asks, strict headers, one line for a failure).

Each page reads through reports/ (the job model judges; a page only renders), and its
JSON has the fields of `status --json` and `history --json` (cli/screens.py makes both).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pglock.errors import NothingDone, PglockError, UnknownJob, UsageError
from pglock.serve import actions, pages
from pglock.serve.site import HEADERS, HERE, Denied, Site, as_json, page

LOG = logging.getLogger("pglock.serve")


# scrypt checks at once (each takes ~100 ms of one core and 32 MiB), in threads of their
# own: the pages' threads and the event loop never wait behind them.
VERIFYING = anyio.CapacityLimiter(2)
# Checks waiting for a turn beyond which a request is refused at once (429).
MOST_WAITING = 8


async def identify(request: Request) -> str | None:
    """The user asking, when auth is configured; refused when it is and fails."""
    site: Site = request.app.state.site
    auth = site.auth
    if not auth.configured:
        return None
    if auth.users is None:
        user, why = auth.from_header(request.headers, _peer(request))
        if user is None:
            raise Denied(403, f"no user: {why}")
        return user
    authorization = request.headers.get("authorization")
    user = auth.remembered(authorization)
    if user is not None:
        return user
    if authorization and authorization.lower().startswith("basic "):
        client = _peer(request) or ""
        if auth.attempts.refused(client) or VERIFYING.statistics().tasks_waiting >= MOST_WAITING:
            raise Denied(429, "too many wrong passwords: try again in a minute")
        user = await anyio.to_thread.run_sync(auth.basic, authorization, client,
                                              limiter=VERIFYING)
    if user is None:
        raise Denied(401, "log in: this dashboard asks for a user and password")
    return user


def _peer(request: Request) -> str | None:
    return request.client.host if request.client else None


_STATUS = {UnknownJob: 404, UsageError: 400, NothingDone: 409}


Handler = Callable[[Request], Response | Awaitable[Response]]


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint behind the guard: the user identified, and any failure one line on the
    page (or in the JSON) and one in the log, never a traceback. A plain function runs in
    a worker thread (its database calls block)."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        json = request.url.path.startswith("/api/")
        try:
            request.scope["pglock.user"] = await identify(request)
            if inspect.iscoroutinefunction(handler):
                return await handler(request)  # type: ignore[no-any-return]
            return await run_in_threadpool(handler, request)  # type: ignore[arg-type]
        except Denied as refused:
            return failure(request, json, refused.status, str(refused))
        except ClientDisconnect:
            # The client went away mid-request: nobody to answer, nothing gone wrong here.
            LOG.debug("%s %s: the client broke off the request", request.method,
                      request.url.path)
            return Response(status_code=400)
        except PglockError as error:
            LOG.warning("%s %s: %s", request.method, request.url.path, error)
            status = next((s for kind, s in _STATUS.items() if isinstance(error, kind)), 503)
            return failure(request, json, status, str(error))
        except psycopg.Error as error:
            line = str(error).strip().splitlines()[0] if str(error).strip() else "error"
            LOG.warning("%s %s: database error: %s", request.method, request.url.path, line)
            return failure(request, json, 503, f"database error: {line}")
        except Exception as error:  # the boundary: one line, no traceback (but with -v)
            LOG.error("%s %s: internal error: %s: %s", request.method, request.url.path,
                      type(error).__name__, error, exc_info=LOG.isEnabledFor(logging.DEBUG))
            return failure(request, json, 500, f"internal error ({type(error).__name__}); "
                                               "see the server's log")

    return endpoint


def failure(request: Request, json: bool, status: int, message: str) -> Response:
    response: Response = as_json({"error": message}, status) if json else page(
        request, "error.html", status, message=message)
    if status == 429:
        response.headers["Retry-After"] = "60"
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Basic realm="pglock", charset="UTF-8"'
    return response


def build(site: Site) -> Starlette:
    """The application: every page with its JSON, the actions, the static files."""
    routes = [
        Route("/", guarded(pages.fleet)),
        Route("/api/fleet", guarded(pages.fleet_json)),
        Route("/job", guarded(pages.job)),
        Route("/api/job", guarded(pages.job_json)),
        Route("/run", guarded(pages.run)),
        Route("/api/run", guarded(pages.run_json)),
        Route("/timeline", guarded(pages.timeline)),
        Route("/api/timeline", guarded(pages.timeline_json)),
        Route("/calendar", guarded(pages.calendar)),
        Route("/api/calendar", guarded(pages.calendar_json)),
        Route("/hosts", guarded(pages.hosts_page)),
        Route("/api/hosts", guarded(pages.hosts_json)),
        Route("/audit", guarded(pages.audit)),
        Route("/api/audit", guarded(pages.audit_json)),
        Route("/action", guarded(actions.act), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    # A redirect would take its host from the request's Host header: /job/ is a 404.
    app.router.redirect_slashes = False
    app.state.site = site
    app.add_middleware(_Strict, hosts=site.hosts)
    return app


def host_allowed(host: str | None, hosts: frozenset[str] | None) -> bool:
    """Whether a request's Host header names this dashboard (its port aside)."""
    if hosts is None:
        return True
    name = (host or "").strip().lower()
    if name.startswith("["):
        name, bracket, _ = name[1:].partition("]")
        if not bracket:
            return False
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return name in hosts


class _Strict:
    """Every request for one of the names of this dashboard (a page of another site that
    resolved its own name to this address is refused: DNS rebinding), and the strict
    headers on every response, the static files' and the 404s' too."""

    def __init__(self, app: Any, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
        if not host_allowed(host, self.hosts):
            refused = PlainTextResponse(
                "refused: this dashboard does not answer to that Host (pglock serve "
                "--allowed-host)\n", status_code=421, headers=HEADERS)
            await refused(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()
                         if k.lower().encode() not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, sending)
