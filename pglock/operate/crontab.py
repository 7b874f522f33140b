"""`pglock crontab`: the cron lines that start the jobs of the jobs file.

Each line carries the job's schedule for cron, and runs `pglock run --job NAME` with
PGLOCK_CONFIG naming the file it came from, so that pglock reads the same table (the same
schedule, for its slots) whatever the cron user's own config search would find. A job
with `tz` gets a CRON_TZ line before it: cronie reads its fire times in that zone (and
passes CRON_TZ on; the table's `tz` wins over it in pglock). The jobs with a zone come
last, grouped by zone, so that the lines without one keep the crontab's own zone.
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

# A user name as /etc/cron.d takes it: one word, no control characters.
_USER = re.compile(r"[^\s\x00-\x1f\x7f]+")


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


def _cron_text(text: str, what: str) -> str:
    """`text` as a crontab line carries it: no line break or other control character (a
    newline would end the line and start another entry), and UTF-8 (an escape would name
    another file)."""
    if undecodable(text) or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text) \
            or "\u2028" in text or "\u2029" in text:
        raise UsageError(f"{what} {shown(text)!r} has a control character or bytes that are "
                         "not UTF-8: a cron line cannot name it (move the file)")
    return text


def fragment(path: Path, jobs: Sequence[ConfiguredJob], pglock: str,
             user: str | None = None) -> str:
    """The crontab lines (with `user`, an /etc/cron.d file's) for `jobs` of `path`."""
    if user is not None and not _USER.fullmatch(user):
        raise UsageError(f"--user: {user!r} is not a user name")
    config = _cron_text(str(path.absolute()), "the config file's path")
    pglock = _cron_text(pglock, "pglock's path")
    lines = [f"# pglock crontab: the jobs of {config}; edit that file, then run",
             "# `pglock crontab` again. The schedules are read from it by cron and pglock alike."]
    zoned = sorted((job for job in jobs if job.tz is not None and job.schedule is not None),
                   key=lambda job: str(job.tz))
    zone: str | None = None
    for job in [j for j in jobs if j.tz is None] + zoned:
        if job.schedule is None:
            lines.append(f"# {table_name(job.name)} has no schedule: cron does not start it")
            continue
        if job.tz != zone:
            lines.append(f"CRON_TZ={job.tz}")
            zone = job.tz
        command = " ".join((f"PGLOCK_CONFIG={shlex.quote(config)}", shlex.quote(pglock),
                            "run", "--job", shlex.quote(job.name)))
        # cron turns an unescaped % into a newline.
        fields = [job.schedule, *([user] if user else []), command.replace("%", "\\%")]
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"
