"""Hooks, pings and the event log without a database: bad input, ping addresses, outcomes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pglock.cli import app as cli
from pglock.lock.ledger import Outcome, RunResult
from pglock.run.pings import HIDDEN, Pinger, _final_suffix, address, check_url, shown

from ..inprocess import invoke


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
    (["--hook-timeout", "0"], "--hook-timeout: 0 is out of range (more than 0 to 1d)"),
    (["--on-failure", "  "], "--on-failure: the hook command is empty"),
    (["--event-log", ""], "--event-log: give a file path, 'syslog' or"),
    (["--event-log", "  "], "--event-log: give a file path, 'syslog' or"),
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
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    from pglock.run.events import EventLog

    caplog.set_level(logging.INFO, logger="pglock.run.events")
    log = EventLog(str(tmp_path / "events"), job="j", holder="h")

    def broken(data: bytes) -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr(log, "_write", broken)
    log.emit("acquired")  # no exception: the run goes on
    log.close()
    assert "acquired event not written: broken" in caplog.text


# Ping URLs (issue 21, item 4): read at parse time, never shown past scheme://host --------


@pytest.mark.parametrize(("url", "message"), [
    ("http://[::1/secret", "--ping-url: not a URL (Invalid IPv6 URL)"),  # N14
    ("http://example.com/secret ", "--ping-url: a space, control or non-ASCII character at "
                                   "position 26 (percent-encode it)"),  # N6
    ("http://example.com/se cret", "--ping-url: a space, control or non-ASCII character"),
    ("http://example.com/secret\x1b[2J", "--ping-url: a space, control"),
    ("http://example.com/s\u00e9cret", "--ping-url: a space, control or non-ASCII character"),
    ("http://example.com:99999/secret", "--ping-url: not a URL (Port out of range 0-65535)"),
    ("http://example.com:x/secret", "--ping-url: not a URL (Port could not be cast"),
    ("http:///secret", "--ping-url: no host after the scheme's //"),
    ("http:secret", "--ping-url: no host after the scheme's //"),
    ("file:///secret", "--ping-url must be an http:// or https:// URL"),
    ("javascript:secret", "--ping-url must be an http:// or https:// URL"),
])
def test_a_bad_ping_url_is_refused_at_parse_time_without_its_text(url: str,
                                                                  message: str) -> None:
    called = invoke("run", "--job", "j", "--dsn", "host=/nonexistent", "--ping-url", url,
                    "--", "true")
    assert (called.code, called.stdout) == (2, "")
    assert called.stderr.startswith(f"pglock: {message}") and called.stderr.count("\n") == 1
    assert "secret" not in called.stderr and "Traceback" not in called.stderr


@pytest.mark.parametrize(("url", "seen"), [
    ("HTTPS://hc-ping.com/abc", "https://hc-ping.com"),
    ("Http://user:pw@Example.COM:8080/k?x=1", "http://example.com"),
    ("http://[::1]:9/k", "http://[::1]"),
])
def test_any_case_of_the_scheme_is_taken_and_shown_as_scheme_and_host(url: str,
                                                                       seen: str) -> None:
    check_url(url)
    assert shown(url) == seen
    assert address(url, "/start", "R").startswith(seen.split("://")[0] + "://")


def test_a_ping_that_cannot_be_sent_is_a_note_without_the_url_never_a_traceback() -> None:
    # Past the parse-time check (a caller in Python): the send itself must not raise in
    # its thread, nor put the URL's text in the note, the event or -v.
    events: list[dict[str, object]] = []
    for url in ("http://[::1/secret-key", "http://127.0.0.1:1/secret-key "):
        pinger = Pinger(url)
        pinger._send(lambda name, **fields: events.append(fields), "/start", b"")
        [told] = pinger.told
        assert not told.ok and "secret-key" not in told.note(), told
    assert events and all("secret-key" not in str(fields) for fields in events)
    assert HIDDEN in pinger.told[0].detail


def test_a_redirect_to_another_scheme_is_not_followed() -> None:
    from endpoints import Quiet, serving

    asked: list[str] = []

    class Redirecting(Quiet):
        def do_POST(self) -> None:
            asked.append(self.path)
            self.send_response(307)
            self.send_header("Location", "ftp://127.0.0.1:1/secret-key/start")
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(Redirecting) as url:
        pinger = Pinger(f"{url}/secret-key")
        pinger._send(lambda name, **fields: None, "/start", b"")
    [told] = pinger.told
    assert told == ("ping /start", False, "HTTP 307 refused: a redirect to another scheme")
    assert len(asked) == 1


def test_events_lost_on_a_full_disk_are_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """/dev/full takes the open and refuses every write (ENOSPC), as a full disk does."""
    from pglock.run.events import EventLog

    caplog.set_level(logging.INFO, logger="pglock.run.events")
    log = EventLog("/dev/full", job="j", holder="h")
    for event in ("acquired", "started", "finished"):
        log.emit(event)
    log.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["--event-log /dev/full: an event could not be written (No space left "
                        "on device); events of this run may be missing"]
    assert caplog.text.count("event not written: [Errno 28]") == 2
