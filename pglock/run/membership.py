"""The rosters this host keeps of its jobs run with --candidates, so that a trigger that is
not among its slot's candidates decides without connecting (docs/fleet.md, "Candidates").

One directory per database, schema and host, in `candidates/` under pglock's state
directory (settings.config.data_dir: $XDG_DATA_HOME/pglock, /var/lib/pglock for root,
else ~/.local/share/pglock), and in it one small JSON file per job, readable by its user
alone, written whole to a temporary file and renamed over the old one (a reader sees the
old file or the new one, never half of one). A file's modification time is its job's
last trigger on this host (each trigger touches it): one refresh asks for the rosters of
every job of the directory that is due and still fired here, and keeps their times. A
file that is missing, unreadable, not pglock's, for another host or job, or older than
STALE_AFTER refreshes is no roster: the host then contends (the safe side). A directory
that cannot be written makes every trigger contend, and is said at most once a day (a
marker in the temporary directory remembers when), and by `pglock doctor`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pglock.settings.config import Target, data_dir

log = logging.getLogger(__name__)

FORMAT = 1
DIRECTORY = "candidates"
# A refresh comes after a random share of --candidates-refresh between these: the hosts of
# a fleet, whose rosters were first learnt in the same storm, spread their refreshes out.
REFRESH_SPREAD = (0.5, 1.0)
# A host's first roster of a job is learnt again this soon (at most).
FIRST_REFRESH = 60.0
# The state directory's failure is said at most this often.
WARN_EVERY = 86400.0
# The file is a few dozen host names: anything larger is not one of ours.
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Roster:
    """A job's roster as this host last learnt it, and what its refresh tells the census."""

    hosts: tuple[str, ...]
    # When it was learnt, and when to learn it again (wall clock, seconds since the epoch).
    learnt_at: float
    refresh_at: float
    # The job's ttl, this host's promise to the census (seconds), the roster's size.
    ttl: float = 60.0
    promise: float = 660.0
    size: int = 64


@dataclass(frozen=True)
class Due:
    """Another job of this host's whose roster a refresh may learn too."""

    job: str
    file: Path
    roster: Roster
    # Its last trigger here (the file's modification time).
    fired_at: float


def state_dir() -> Path:
    """Where the rosters are kept."""
    return data_dir() / DIRECTORY


def path(target: Target, schema: str, host: str, job: str) -> Path:
    """The file of one job's roster: in the directory of the database (its DSN without a
    password), the schema and this host, named by a digest of the job, so that any name
    is a file name."""
    where = "\x1f".join((_database(target), schema, host)).encode("utf-8", "surrogatepass")
    name = job.encode("utf-8", "surrogatepass")
    return (state_dir() / hashlib.sha256(where).hexdigest()[:24]
            / f"{hashlib.sha256(name).hexdigest()[:32]}.json")


def _database(target: Target) -> str:
    """The database a target names, without its password (which must not reach a file
    name, even hashed)."""
    if target.conninfo is None:
        return "embedded"
    if not target.conninfo:
        names = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
        return "libpq:" + ";".join(f"{name}={os.environ.get(name, '')}" for name in names)
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(target.conninfo)
    except Exception:  # the run refuses it before any connection; the key does not matter
        return "unparsed"
    parts.pop("password", None)
    return ";".join(f"{key}={value}" for key, value in sorted(parts.items()))


def read(file: Path, *, job: str, host: str, refresh: float,
         now: float | None = None) -> Roster | None:
    """The roster in `file`, or None (said with -v) when there is none to trust: missing,
    unreadable, not this job's or host's, or stale (older than STALE_AFTER refreshes, or
    from a clock since set back by more than a refresh)."""
    from pglock.lock.candidates import STALE_AFTER

    now = time.time() if now is None else now
    found = _load(file, job, host)
    if found is None:
        return None
    age = now - found.learnt_at
    if age > STALE_AFTER * refresh or age < -refresh:
        log.info("job %r: the roster in %s is stale (learnt %.0fs ago): contending", job,
                 file, age)
        return None
    return found


def _load(file: Path, job: str | None, host: str) -> Roster | None:
    """The roster in `file` if it is this host's (and `job`'s, unless None)."""
    try:
        with open(file, "rb") as handle:
            data = json.loads(handle.read(MAX_BYTES + 1))
        hosts = data["hosts"]
        roster = Roster(tuple(hosts), float(data["learnt_at"]), float(data["refresh_at"]),
                        float(data["ttl"]), float(data["promise"]), int(data["size"]))
        ours = (data["format"] == FORMAT and (job is None or data["job"] == job)
                and data["host"] == host and isinstance(data["job"], str)
                and isinstance(hosts, list) and all(isinstance(h, str) for h in hosts))
    except FileNotFoundError:
        log.debug("job %r: no roster yet: contending", job)
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.info("job %r: the roster in %s cannot be read (%s): contending", job, file, error)
        return None
    if not ours:
        log.info("job %r: %s is not this job's roster: contending", job, file)
        return None
    return roster


def fired(file: Path) -> None:
    """Mark this trigger of the file's job (its modification time): a refresh learns the
    rosters of the jobs this host still fires, and of no job taken out of its crontab."""
    with contextlib.suppress(OSError):
        os.utime(file)


def others(file: Path, host: str, now: float, horizon: float) -> list[Due]:
    """The other jobs of `file`'s directory whose rosters are due within `horizon` and
    that were fired here within their promise (a job no longer fired is left to go
    stale, so that the census stops seeing this host for it)."""
    found = []
    for other in sorted(file.parent.glob("*.json")):
        if other == file:
            continue
        try:
            data = json.loads(other.read_bytes()[:MAX_BYTES])
            job, fired_at = data["job"], other.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        roster = _load(other, job, host) if isinstance(job, str) else None
        if (roster is not None and roster.refresh_at <= now + horizon
                and now - fired_at <= roster.promise):
            found.append(Due(job, other, roster, fired_at))
    return found


@contextlib.contextmanager
def refreshing(file: Path) -> Iterator[bool]:
    """Whether this trigger may refresh the rosters of `file`'s directory: one at a time
    (the triggers of a host's jobs come at once; the others decide on the rosters they
    have, due but not stale). False too when the directory cannot be used."""
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(file.parent / ".refresh.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def next_refresh(learnt_at: float, refresh: float, *, first: bool = False) -> float:
    """When a roster learnt at `learnt_at` is learnt again: a random share of `refresh`
    after (the hosts of a fleet spread their refreshes out). A `first` roster (none was
    trusted before) is learnt again at the next trigger a minute on: the hosts of a
    fleet's first storm each learnt only those that asked before them."""
    low, high = REFRESH_SPREAD
    until = min(refresh, FIRST_REFRESH) if first else refresh
    return learnt_at + until * random.uniform(low, high)


def write(file: Path, job: str, host: str, roster: Roster,
          fired_at: float | None = None) -> bool:
    """Keep a roster of `job` on `host`: whole or not at all (`fired_at`: the job's last
    trigger here, kept as the file's modification time; None: now). False when the
    state directory cannot be written (said at most once a day)."""
    data = {"format": FORMAT, "job": job, "host": host, "hosts": list(roster.hosts),
            "learnt_at": roster.learnt_at, "refresh_at": roster.refresh_at,
            "ttl": roster.ttl, "promise": roster.promise, "size": roster.size}
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=".roster-", suffix=".tmp")
        try:
            # mkstemp's mode is 0600 already: the file is this user's alone.
            with os.fdopen(fd, "wb") as handle:
                handle.write(json.dumps(data, ensure_ascii=False).encode("utf-8",
                                                                         "surrogatepass"))
            if fired_at is not None:
                os.utime(temporary, (fired_at, fired_at))
            os.replace(temporary, file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError as error:
        _unwritable(file.parent, error)
        return False
    return True


def _unwritable(directory: Path, error: OSError) -> None:
    """Say, at most once a day, that the rosters cannot be kept: every trigger of a job with
    --candidates then contends, which is safe and costs what --candidates saves."""
    marker = Path(tempfile.gettempdir()) / f"pglock-{os.getuid()}-candidates-unwritable"
    try:
        seen = os.lstat(marker)
        if seen.st_uid == os.getuid() and time.time() - seen.st_mtime < WARN_EVERY:
            log.info("the rosters cannot be kept in %s (%s)", directory, error.strerror)
            return
    except OSError:
        pass
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except OSError:
        # Nowhere to remember it either: said with -v only, `pglock doctor` says it too.
        log.info("the rosters cannot be kept in %s (%s)", directory, error.strerror)
        return
    log.warning("--candidates: cannot keep the job's roster in %s (%s): this host contends "
                "at every trigger until it can (said once a day; pglock doctor checks it)",
                directory, error.strerror or error)
