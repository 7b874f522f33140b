"""Every operator screen on a real pseudo-terminal, as a person sees it: the rich path
(table fitting, column dropping, Live for --watch) runs only when standard output is a
terminal, so pipes alone never exercise it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from conftest import Env
from operating import on_terminal
from rich.cells import cell_len

WIDTHS = (60, 80, 160, 200)
WIDE = "漢字ジョブ"
# Escape sequences a terminal acts on without printing: CSI (colours, cursor moves),
# OSC (titles, links), and the two-byte ones.
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


@dataclass
class Shown:
    returncode: int
    drawn: str

    @property
    def text(self) -> str:
        """What the terminal showed, without escape sequences or carriage returns."""
        return CONTROL.sub("", self.drawn).replace("\r", "")

    def first_frame(self, heading: str) -> str:
        """The text of the first screen of a Live display (its redraws start again with
        the screen's heading)."""
        text = self.text
        second = text.find(heading, text.find(heading) + 1)
        return text if second < 0 else text[:second]


def shown(env: Env, columns: int, *args: str, until: str | None = None) -> Shown:
    """pglock on a pseudo-terminal `columns` wide, as a person's terminal (TERM) draws it."""
    return Shown(*on_terminal(env, *args, until=until, columns=columns, timeout=60,
                              extra_env={"TERM": "xterm-256color"}))


SCREENS = [
    pytest.param(("status",), "ok-job", id="status"),
    pytest.param(("status", "--all"), WIDE, id="status-all"),
    pytest.param(("status", "--job", "ok-job"), "recent runs of ok-job", id="status-job"),
    pytest.param(("status", "--job", "sched-job"), "sched-job", id="status-job-scheduled"),
    pytest.param(("status", "--job", WIDE), WIDE, id="status-job-wide"),
    pytest.param(("history",), "fail-job", id="history"),
    pytest.param(("history", "--job", "ok-job"), "ok-job", id="history-job"),
    pytest.param(("history", "--output"), "a-line-of-output", id="history-output"),
    pytest.param(("jobs",), "sched-job", id="jobs"),
    pytest.param(("hosts",), "web-one", id="hosts"),
    pytest.param(("hosts", "--job", "ok-job"), "ホスト", id="hosts-job"),
    pytest.param(("check",), "PGLOCK", id="check"),
    pytest.param(("doctor",), "schema", id="doctor"),
]


# check: CRITICAL for the failed jobs; doctor: WARN for a server without a standby.
CODES = {"check": (2,), "doctor": (0, 1)}


def _jobs(env: Env) -> None:
    assert env.run("run", "--job", "ok-job", "--", "true").returncode == 0
    assert env.run("run", "--job", "fail-job", "--", "sh", "-c",
                   "echo a-line-of-output; exit 3").returncode == 3
    assert env.run("run", "--job", "sched-job", "--schedule", "*/5 * * * *", "--",
                   "true").returncode == 0
    assert env.run("run", "--job", WIDE, "--", "true").returncode == 0
    assert env.run("run", "--job", "a-job-whose-name-is-rather-long-for-a-narrow-screen",
                   "--", "false").returncode == 1
    # The census: more hosts (PGLOCK_HOST), one wide, one long; they lose to the first.
    for host in ("web-one", "ホスト-二号", "a-host-whose-name-is-rather-long-for-a-narrow-screen"):
        assert env.run("run", "--job", "ok-job", "--", "true",
                       env={"PGLOCK_HOST": host}).returncode in (0, 75)


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_every_screen_fits_a_real_terminal(env: Env, columns: int) -> None:
    _jobs(env)
    problems = []
    for param in SCREENS:
        args, expected = param.values
        problems.extend(_judged(param.id, shown(env, columns, *args), expected, columns,
                                codes=CODES.get(args[0], (0,))))
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_the_watch_screen_fits_a_real_terminal(env: Env, columns: int) -> None:
    _jobs(env)
    for args in (("status", "--watch", "--interval", "1s"),
                 ("status", "--watch", "--interval", "1s", "--job", "ok-job")):
        watched = shown(env, columns, *args, until="ok-job")
        problems = _judged(" ".join(args), watched, "ok-job", columns, codes=(0,),
                           text=watched.first_frame("pglock status:"))
        assert not problems, "\n".join(problems)


def _judged(what: str, screen: Shown, expected: str, columns: int,
            codes: tuple[int, ...], text: str | None = None) -> list[str]:
    problems = []
    text = screen.text if text is None else text
    if screen.returncode not in codes:
        problems.append(f"{what} at {columns}: exit {screen.returncode}")
    if "internal error" in screen.text or "Traceback" in screen.text:
        problems.append(f"{what} at {columns}: an error: {screen.text!r}")
    if expected not in text:
        problems.append(f"{what} at {columns}: {expected!r} not shown: {text!r}")
    # check's first line is a monitoring plugin's answer, one line by its protocol: the
    # terminal breaks it as it must.
    for line in text.splitlines() if not what.startswith("check") else ():
        if cell_len(line) > columns:
            problems.append(f"{what} at {columns}: a line of {cell_len(line)} cells: {line!r}")
    return problems
