"""`pglock crontab`: the cron lines that start the jobs of the jobs file.

Each line carries the job's schedule for cron, and runs `pglock run --job NAME` with
PGLOCK_CONFIG naming the file it came from, so that pglock reads the same table (the same
schedule, for its slots) whatever the cron user's own config search would find.

A job with `tz` needs a cron that fires in its zone, and Debian's and Ubuntu's cron
ignore CRON_TZ (the job would fire in the host's zone, an hour off half the year, and
be skipped past its deadline, silently). So the operator says how (`--tz-by`): `cron`
writes a CRON_TZ line before it, which cronie reads (and passes on; the table's `tz`
wins over it in pglock); `pglock` starts it every minute on any cron, and pglock, which
reads the schedule in the job's zone, runs each slot once (the other minutes cost one
statement and exit 75). The jobs with a zone come last, grouped by zone, so that the
lines without one keep the crontab's own zone. Without `--tz-by`, a job with `tz` is
refused.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from pglock.errors import UsageError
from pglock.run.jobsfile import ConfiguredJob, table_name
from pglock.settings.config import shown, undecodable
from pglock.settings.text import has_control


def program() -> str:
    """pglock's own absolute path, the way cron (PATH=/usr/bin:/bin) must call it."""
    argv0 = sys.argv[0]
    if Path(argv0).name == "pglock" and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    # `python -m pglock`, or pglock called in-process: the script beside the interpreter.
    beside = Path(sys.executable).parent / "pglock"
    if beside.is_file():
        return str(beside)
    found = shutil.which("pglock")
    if found is None:
        raise UsageError("cannot find the pglock program (not on PATH): call pglock crontab "
                         "by the path cron should use")
    return os.path.abspath(found)


def one_line(text: str, what: str, where: str = "a cron line") -> str:
    """`text` as a crontab line (or a unit file's line) carries it: no line break or other
    control character (a newline would end the line and start another entry), and UTF-8
    (an escape would name another file)."""
    if undecodable(text) or has_control(text) or "\u2028" in text or "\u2029" in text:
        raise UsageError(f"{what} {shown(text)!r} has a control character or bytes that are "
                         f"not UTF-8: {where} cannot name it (move the file)")
    return text


# How the jobs with `tz` fire in their zone (`--tz-by`).
TZ_BY = ("cron", "pglock")
EVERY_MINUTE = "* * * * *"


# A user name as useradd and systemd's strict rule take it (a trailing `$`: a Samba machine
# account); at most 32 bytes. Anything else would be read as something else: `%n` is a
# specifier in User=, `a:b` a user and a group, quotes and `$` are a shell's or systemd's.
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
USER_RULE = "letters, digits, _ . -, starting with a letter or _, at most 32 characters"


def check_user(user: str | None, *, uid: bool = False) -> None:
    """--user, of an /etc/cron.d line or a unit's User= (`uid`: a number too, which User=
    takes and cron does not): a user name, never text either file would read otherwise."""
    if user is None or _USER_NAME.fullmatch(user) or (uid and user.isascii()
                                                        and user.isdigit()
                                                        and len(user) <= 10):
        return
    raise UsageError(f"--user: '{shown(user)}' is not a user name ({USER_RULE})")


def fragment(path: Path, jobs: Sequence[ConfiguredJob], pglock: str,
             user: str | None = None, tz_by: str | None = None) -> str:
    """The crontab lines (with `user`, an /etc/cron.d file's) for `jobs` of `path`; the
    jobs with `tz` as `tz_by` says (refused without it)."""
    check_user(user)
    if tz_by is not None and tz_by not in TZ_BY:
        raise UsageError(f"--tz-by: {tz_by!r} is not one of cron, pglock")
    config = one_line(str(path.absolute()), "the config file's path")
    pglock = one_line(pglock, "pglock's path")
    zoned = sorted((job for job in jobs if job.tz is not None and job.schedule is not None),
                   key=lambda job: str(job.tz))
    if zoned and tz_by is None:
        raise UsageError(
            f"{table_name(zoned[0].name)} has tz = {zoned[0].tz!r}, and Debian's and "
            "Ubuntu's cron ignore CRON_TZ: --tz-by pglock (started every minute, pglock "
            "runs each slot in its zone; any cron) or --tz-by cron (cronie reads CRON_TZ)")
    lines = [f"# pglock crontab: the jobs of {config}; edit that file, then run",
             "# `pglock crontab` again. The schedules are read from it by cron and pglock alike."]
    if zoned and tz_by == "cron":
        lines.append("# CRON_TZ is read by cronie; Debian's and Ubuntu's cron ignore it.")
    zone: str | None = None
    for job in [j for j in jobs if j.tz is None] + zoned:
        if job.schedule is None:
            lines.append(f"# {table_name(job.name)} has no schedule: cron does not start it")
            continue
        schedule = job.schedule
        if job.tz is not None and tz_by == "pglock":
            lines.append(f"# {table_name(job.name)}: {job.schedule} in {job.tz}; pglock "
                         "runs each slot once")
            schedule = EVERY_MINUTE
        elif job.tz != zone:
            lines.append(f"CRON_TZ={job.tz}")
            zone = job.tz
        command = " ".join((f"PGLOCK_CONFIG={shlex.quote(config)}", shlex.quote(pglock),
                            "run", "--job", shlex.quote(job.name)))
        # cron turns an unescaped % into a newline.
        fields = [schedule, *([user] if user else []), command.replace("%", "\\%")]
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"
