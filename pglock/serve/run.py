"""The server's life: the database reached once before listening (a bad DSN is one line at
start, not one on every page), the line that says where it listens, then uvicorn until
SIGINT or SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import NamedTuple

import uvicorn

from pglock.db import database
from pglock.serve import web
from pglock.serve.auth import Auth
from pglock.serve.pool import Pool
from pglock.serve.site import Site
from pglock.settings.config import Target


class Options(NamedTuple):
    target: Target
    schema: str
    timeout: float
    auth: Auth
    allow_actions: bool
    quiet: bool
    local: bool
    hosts: frozenset[str] | None = None
    origins: frozenset[str] = frozenset()


def serve(sock: socket.socket, options: Options) -> int:
    """Serve until stopped; 0."""
    with database.opened(options.target) as conninfo:
        pool = Pool(conninfo, timeout=options.timeout)
        with pool.connection() as conn:
            place = database.EMBEDDED_PLACE if options.target.embedded else database.place(conn)
        site = Site(pool, options.schema, place, options.auth, options.allow_actions,
                    options.hosts, options.origins)
        if not options.quiet:
            print(announcement(sock, site, options.local), file=sys.stderr, flush=True)
        config = uvicorn.Config(web.build(site), log_config=None, access_log=False,
                                server_header=False, proxy_headers=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        try:
            _Server(config).run(sockets=[sock])
        finally:
            pool.close()
    return 0


def announcement(sock: socket.socket, site: Site, local: bool) -> str:
    if sock.family == socket.AF_UNIX:
        where = f"unix:{sock.getsockname()}"
    else:
        host, port = sock.getsockname()[:2]
        where = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    if not site.allow_actions:
        mode = "read-only"
    elif site.auth.users is not None:
        mode = f"actions on, for the {len(site.auth.users)} users of --users"
    else:
        mode = f"actions on, for the user a trusted proxy names in {site.auth.header}"
    reach = ("this host only" if local else
             "reachable from the network: every job is readable by whoever reaches it")
    return (f"pglock serve: listening on {where} ({reach}; {mode}); "
            f"reading {site.place}, schema {site.schema!r}")


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGTERM or SIGINT ends it as a finished command: after its
    graceful shutdown, pglock returns (leaving the embedded server, closing connections)
    instead of uvicorn raising the signal again, which would kill it on the spot."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        kept = {sig: signal.signal(sig, self.handle_exit)
                for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in kept.items():
                signal.signal(sig, handler)
