"""`pglock serve`, registered on the command line's app (cli/app.py's full_app loads this
module by name, as it loads every command module). The web stack is imported only when
the command runs: `pglock --help` and `pglock run` never load it."""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Annotated

import typer

from pglock.cli.app import ConnectTimeout, Dsn, Quiet, Schema, Verbose, _configure_output, app
from pglock.cli.render import write
from pglock.errors import PglockError, UsageError
from pglock.settings.config import shown, undecodable
from pglock.settings.durations import parse_duration

DEFAULT_LISTEN = "127.0.0.1:8434"
# As auth.PROXY_SECRET_HEADER (auth.py is loaded only when serve runs).
PROXY_SECRET_HEADER = "X-Pglock-Proxy-Secret"


class MissingExtra(PglockError):
    """pglock serve's stack is not installed."""


UNIX = "unix:"


def listen_address(text: str) -> tuple[str, int]:
    """HOST:PORT ([::1]:PORT for IPv6) as a host and a port; the port in ASCII digits."""
    host, colon, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if (not colon or not host or not port.isascii() or not port.isdigit() or len(port) > 5
            or not 0 < int(port) < 65536):
        raise UsageError(f"--listen: {shown(text)!r} is not HOST:PORT or unix:PATH (e.g. "
                         f"{DEFAULT_LISTEN})")
    return host, int(port)


def _unix_bound(text: str) -> socket.socket:
    """A Unix socket at PATH that only its owner and group may connect to (srw-rw----):
    the proxy proves itself by passing those permissions."""
    path = text[len(UNIX):]
    if not path:
        raise UsageError(f"--listen: {shown(text)!r} names no path (unix:/run/pglock/serve.sock)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise UsageError(f"--listen: {shown(path)!r} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                raise UsageError(f"--listen: {shown(path)!r} is in use by another server")
        os.unlink(path)  # a socket left by a server that is gone
    kept = os.umask(0o117)  # made srw-rw---- from the start: no moment open to others
    try:
        sock.bind(path)
        sock.listen(128)  # connections wait from the start line on, not refused
    except OSError as error:
        raise UsageError(f"--listen: cannot listen on {shown(path)!r}: "
                         f"{error.strerror or error}") from None
    finally:
        os.umask(kept)
    return sock


def _proxies(given: list[str] | None, loopback_addresses: tuple[str, ...]) -> tuple[str, ...]:
    """--trusted-proxy addresses, each an IP address (as the peer's is written)."""
    if not given:
        return loopback_addresses
    found = []
    for text in given:
        try:
            found.append(str(ipaddress.ip_address(text.strip())))
        except ValueError:
            raise UsageError(f"--trusted-proxy: {shown(text)!r} is not an IP address") from None
    return tuple(found)


def _named(given: list[str] | None) -> frozenset[str]:
    """The names --allowed-host gives the dashboard."""
    names = set()
    for text in given or []:
        name = text.strip().lower()
        if not name or not all(c.isascii() and (c.isalnum() or c in "-._:[]") for c in name):
            raise UsageError(f"--allowed-host: {shown(text)!r} is not a host name")
        bare, port = _port_aside(name)
        if port:
            # The request's port is set aside before the comparison: a name with one would
            # never match, and every request through it would be refused (421).
            raise UsageError(f"--allowed-host: {shown(text)!r} names a port; give the host "
                             f"alone ({bare}): the port a request names is not compared")
        names.add(bare)
    return frozenset(names)


def _hosts(named: frozenset[str], host: str | None) -> frozenset[str] | None:
    """The names a request's Host may give (its port aside): --allowed-host's, the address
    listened on, and the loopback's names on the loopback; None (any) on a wildcard
    address or a Unix socket without --allowed-host. A page of another site whose name
    resolves to this address (DNS rebinding) is refused by it."""
    names = set(named)
    if host is not None and host not in ("0.0.0.0", "::", ""):
        names.add(host.lower())
        if loopback(host):
            names.update(("localhost", "127.0.0.1", "::1"))
    return frozenset(names) or None


def _port_aside(name: str) -> tuple[str, str]:
    """A Host header's name and port (`[::1]:8434`, `example.com:8434`; an IPv6 address
    without brackets has no port)."""
    if name.startswith("["):
        inner, _, rest = name[1:].partition("]")
        return inner, rest.removeprefix(":")
    if name.count(":") == 1:
        bare, _, port = name.partition(":")
        return bare, port
    return name, ""


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _bound(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a refusal is one line of ours."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # connections wait from the start line on, not refused
    except OSError as error:
        raise UsageError(f"--listen: cannot listen on {host}:{port}: "
                         f"{error.strerror or error}") from None
    return sock


def _hash_line(name: str) -> str:
    from pglock.serve.auth import hash_password

    if not name or ":" in name or not name.isprintable() or undecodable(name):
        raise UsageError(f"--hash-password: {shown(name)!r} is not a user name (no ':')")
    if sys.stdin is None or sys.stdin.closed:
        raise UsageError("--hash-password: no password on standard input (it is closed)")
    try:
        password = getpass.getpass("password: ") if sys.stdin.isatty() else \
            sys.stdin.readline().rstrip("\n")
    except OSError as error:
        raise UsageError(f"--hash-password: cannot read the password: "
                         f"{error.strerror or error}") from None
    except EOFError:
        password = ""
    if undecodable(password):
        raise UsageError("--hash-password: the password is not valid UTF-8")
    if not password:
        raise UsageError("--hash-password: the password is empty")
    return f"{name}:{hash_password(password)}"


@app.command()
def serve(
    listen: Annotated[str, typer.Option(
        envvar="PGLOCK_LISTEN", metavar="HOST:PORT",
        help="Where to listen (or unix:PATH, a socket for a proxy); another host than the "
             "loopback makes every job readable from the network (put a proxy with auth in "
             "front: docs/serve.md).")
    ] = DEFAULT_LISTEN,
    allow_actions: Annotated[bool, typer.Option(
        "--allow-actions", envvar="PGLOCK_ALLOW_ACTIONS",
        help="Offer pause, resume, stop, replay and clear to identified users (needs "
             "--users or --auth-header, and a database role that may do them).")] = False,
    users: Annotated[Path | None, typer.Option(
        envvar="PGLOCK_SERVE_USERS", metavar="FILE", show_default=False,
        help="HTTP basic auth against FILE's NAME:HASH lines (--hash-password prints "
             "one); every page then asks for a user.")] = None,
    auth_header: Annotated[str | None, typer.Option(
        envvar="PGLOCK_AUTH_HEADER", metavar="NAME", show_default=False,
        help="Believe the user named in header NAME (e.g. X-Forwarded-User), set by a "
             "reverse proxy that authenticates and proves itself (--proxy-secret-file, "
             "or --listen unix:PATH).")] = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option(
        "--trusted-proxy", metavar="ADDRESS", show_default=False,
        help="An address whose --auth-header is believed (repeatable) "
             "[default: 127.0.0.1, ::1].")] = None,
    proxy_secret_file: Annotated[Path | None, typer.Option(
        envvar="PGLOCK_PROXY_SECRET_FILE", metavar="FILE", show_default=False,
        help=f"Believe --auth-header only in a request whose {PROXY_SECRET_HEADER} header "
             "holds FILE's secret (the proxy sets it, and drops a client's own).")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option(
        "--allowed-host", metavar="NAME", show_default=False,
        help="A name the dashboard answers to in a request's Host, and takes actions from "
             "in a browser's Origin: its public name behind a proxy (repeatable) [default: "
             "the --listen address, and localhost's names on the loopback].")] = None,
    hash_password: Annotated[str | None, typer.Option(
        metavar="NAME", show_default=False,
        help="Read a password on stdin, print NAME:HASH for the --users file, and exit.")
    ] = None,
    dsn: Dsn = None, schema: Schema = None, connect_timeout: ConnectTimeout = "10s",
    verbose: Verbose = False, quiet: Quiet = False,
) -> int:
    """Serve a dashboard of the jobs: fleet, job pages with duration charts, timeline,
    calendar, audit log, and JSON of each; read-only unless --allow-actions.

    It reads with the database role of the DSN (pglock_reader suffices; actions need
    pglock_operator) and listens on 127.0.0.1:8434 unless told otherwise.

    Example: pglock serve --listen 127.0.0.1:8434
    """
    _configure_output(verbose, quiet)
    if hash_password is not None:
        write(_hash_line(hash_password) + "\n")
        return 0
    from pglock.settings import config

    if users is not None and auth_header is not None:
        raise UsageError("--users and --auth-header: one source of users at a time")
    if allow_actions and users is None and auth_header is None:
        raise UsageError("--allow-actions needs a user for the audit log: --users FILE or "
                         "--auth-header NAME (docs/serve.md)")
    if trusted_proxy and auth_header is None:
        raise UsageError("--trusted-proxy goes with --auth-header")
    if proxy_secret_file is not None and auth_header is None:
        raise UsageError("--proxy-secret-file goes with --auth-header")
    unix = listen.strip().startswith(UNIX)
    if auth_header is not None and proxy_secret_file is None and not unix:
        raise UsageError("--auth-header needs the proxy to prove itself: --proxy-secret-file "
                         "FILE (a header only the proxy sends) or --listen unix:PATH (a "
                         "socket only the proxy may open); any process on this host could "
                         "send the header otherwise (docs/serve.md)")
    host, port = (None, 0) if unix else listen_address(listen)
    timeout = parse_duration(connect_timeout, option="--connect-timeout")
    name = config.configured_schema(schema)
    try:
        from pglock.serve import auth, run
    except ImportError as error:
        raise MissingExtra(f"pglock serve needs its extra ({error.name} is missing): "
                           "pip install 'pglock[serve]'") from None
    source = auth.Auth(
        users=auth.read_users(users) if users else None,
        header=auth.check_auth_header(auth_header.strip()) if auth_header is not None else None,
        proxies=_proxies(trusted_proxy, auth.LOOPBACK),
        proxy_secret=auth.read_proxy_secret(proxy_secret_file) if proxy_secret_file else None,
        unix=unix)
    named = _named(allowed_host)
    hosts = _hosts(named, host)
    sock = _unix_bound(listen.strip()) if unix else _bound(host or "", port)
    try:
        return run.serve(sock, run.Options(config.resolve_target(dsn), name, timeout, source,
                                           allow_actions, quiet,
                                           unix or loopback(host or ""), hosts, named))
    finally:
        if unix:
            with contextlib.suppress(OSError):
                os.unlink(listen.strip()[len(UNIX):])
