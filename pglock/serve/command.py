"""`pglock serve`, registered on the command line's app (cli/app.py's full_app loads this
module by name, as it loads every command module). The web stack is imported only when
the command runs: `pglock --help` and `pglock run` never load it."""

from __future__ import annotations

import getpass
import ipaddress
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from pglock.cli.app import ConnectTimeout, Dsn, Quiet, Schema, Verbose, _configure_output, app
from pglock.errors import PglockError, UsageError
from pglock.settings.durations import parse_duration

DEFAULT_LISTEN = "127.0.0.1:8434"


class MissingExtra(PglockError):
    """pglock serve's stack is not installed."""


def listen_address(text: str) -> tuple[str, int]:
    """HOST:PORT ([::1]:PORT for IPv6) as a host and a port."""
    host, colon, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen: {text!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
    return host, int(port)


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
    except OSError as error:
        raise UsageError(f"--listen: cannot listen on {host}:{port}: "
                         f"{error.strerror or error}") from None
    return sock


def _hash_line(name: str) -> str:
    from pglock.serve.auth import hash_password

    if not name or ":" in name or not name.isprintable():
        raise UsageError(f"--hash-password: {name!r} is not a user name (no ':')")
    password = getpass.getpass("password: ") if sys.stdin.isatty() else \
        sys.stdin.readline().rstrip("\n")
    if not password:
        raise UsageError("--hash-password: the password is empty")
    return f"{name}:{hash_password(password)}"


@app.command()
def serve(
    listen: Annotated[str, typer.Option(
        envvar="PGLOCK_LISTEN", metavar="HOST:PORT",
        help="Where to listen; another host than the loopback makes every job readable "
             "from the network (put a proxy with auth in front: docs/serve.md).")
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
             "reverse proxy that authenticates, from --trusted-proxy addresses only.")] = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option(
        "--trusted-proxy", metavar="ADDRESS", show_default=False,
        help="An address whose --auth-header is believed (repeatable) "
             "[default: 127.0.0.1, ::1].")] = None,
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
        print(_hash_line(hash_password))
        return 0
    from pglock.settings import config

    if users is not None and auth_header is not None:
        raise UsageError("--users and --auth-header: one source of users at a time")
    if allow_actions and users is None and auth_header is None:
        raise UsageError("--allow-actions needs a user for the audit log: --users FILE or "
                         "--auth-header NAME (docs/serve.md)")
    if trusted_proxy and auth_header is None:
        raise UsageError("--trusted-proxy goes with --auth-header")
    host, port = listen_address(listen)
    timeout = parse_duration(connect_timeout, option="--connect-timeout")
    name = config.configured_schema(schema)
    try:
        from pglock.serve import auth, run
    except ImportError as error:
        raise MissingExtra(f"pglock serve needs its extra ({error.name} is missing): "
                           "pip install 'pglock[serve]'") from None
    source = auth.Auth(users=auth.read_users(users) if users else None, header=auth_header,
                       proxies=tuple(trusted_proxy or auth.LOOPBACK))
    sock = _bound(host, port)
    return run.serve(sock, run.Options(config.resolve_target(dsn), name, timeout, source,
                                       allow_actions, quiet, loopback(host)))
