"""Hooks, pings and the event log without a database: bad input, ping addresses, outcomes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pglock.cli import app as cli
from pglock.lock.ledger import Outcome, RunResult
from pglock.run.pings import _final_suffix, address


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """cli.main adds a stderr handler per call: drop it, its stream is this test's."""
    yield
    for name in ("", "pglock"):
        logger = logging.getLogger(name)
        for handler in logger.handlers[:]:
            if handler.formatter is not None and handler.formatter._fmt == "pglock: %(message)s":
                logger.removeHandler(handler)


@pytest.mark.parametrize(("args", "message"), [
    (["--ping-url", "ftp://example.com/x"], "--ping-url must be an http:// or https:// URL"),
    (["--hook-timeout", "0"], "--hook-timeout must be more than 0 and at most 1d"),
    (["--on-failure", "  "], "--on-failure: the hook command is empty"),
    (["--event-log", ""], "--event-log: give a file path, 'syslog' or"),
    (["--event-log", "syslog:"], "--event-log: 'syslog:' needs a socket path after the colon"),
])
def test_bad_notify_options_are_one_line_and_exit_2(args: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--job", "j", "--dsn", "host=/nonexistent", *args, "--", "true"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith(f"pglock: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize(("url", "suffix", "expected"), [
    ("https://hc-ping.com/abc", "/start", "https://hc-ping.com/abc/start?rid=R"),
    ("https://hc-ping.com/abc/", "", "https://hc-ping.com/abc?rid=R"),
    ("https://hc-ping.com/key/slug?create=1", "/3",
     "https://hc-ping.com/key/slug/3?create=1&rid=R"),
])
def test_ping_addresses(url: str, suffix: str, expected: str) -> None:
    assert address(url, suffix, "R") == expected


@pytest.mark.parametrize(("result", "suffix"), [
    (RunResult(Outcome.SUCCEEDED, 0, 1.0), ""),
    (RunResult(Outcome.FAILED, 3, 1.0), "/3"),
    (RunResult(Outcome.TIMED_OUT, 143, 1.0), "/124"),
    (RunResult(Outcome.LOCK_LOST, 0, 1.0), "/125"),
    (RunResult(Outcome.KILLED, 137, 1.0, signal=9), "/137"),
    (RunResult(Outcome.FAILED, None, 1.0), "/fail"),
])
def test_the_final_ping_says_the_exit_code_pglock_gives(result: RunResult, suffix: str) -> None:
    assert _final_suffix(result) == suffix


def test_an_event_with_text_not_utf8_is_written_escaped(tmp_path: Path) -> None:
    from pglock.run.events import EventLog

    target = tmp_path / "events"
    log = EventLog(str(target), job="j", holder="h")
    log.emit("started", command="/opt/caf\udce9")
    log.emit("odd", value=object())
    log.close()
    lines = target.read_bytes().decode().splitlines()
    assert '"command":"/opt/caf\\udce9"' in lines[0]
    assert len(lines) == 2


def test_an_event_log_that_fails_never_stops_the_run(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pglock.run.events import EventLog

    log = EventLog(str(tmp_path / "events"), job="j", holder="h")

    def broken(data: bytes) -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr(log, "_write", broken)
    log.emit("acquired")
    log.close()
