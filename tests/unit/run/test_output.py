"""The tail of the command's output kept for history: a ring of the last N bytes."""

from __future__ import annotations

import random

import pytest

from pglock.errors import UsageError
from pglock.run import output


@pytest.mark.parametrize(("size", "chunks", "kept"), [
    (4, [], b""),
    (4, [b""], b""),
    (4, [b"ab"], b"ab"),
    (4, [b"abcd"], b"abcd"),
    (4, [b"abcde"], b"bcde"),
    (4, [b"ab", b"cd"], b"abcd"),
    (4, [b"ab", b"cde"], b"bcde"),
    (4, [b"abc", b"", b"d", b"e"], b"bcde"),
    (4, [b"abcdefghij"], b"ghij"),
    (4, [b"a", b"bcdefghij", b"k"], b"hijk"),
    (1, [b"a", b"b", b"c"], b"c"),
    (3, [b"ab", b"cd", b"ef", b"g"], b"efg"),
])
def test_the_tail_keeps_the_last_bytes(size: int, chunks: list[bytes], kept: bytes) -> None:
    tail = output.Tail(size)
    for chunk in chunks:
        tail.add(chunk)
    assert tail.value() == kept


@pytest.mark.parametrize("size", [1, 7, 100, 4096])
def test_the_tail_ring_keeps_exactly_the_last_bytes(size: int) -> None:
    rand = random.Random(size)
    for _ in range(100):
        tail, seen = output.Tail(size), b""
        for _ in range(rand.randint(0, 12)):
            chunk = rand.randbytes(rand.randint(1, 3 * size))
            tail.add(chunk)
            seen += chunk
        assert tail.value() == seen[-size:]


def test_the_ring_never_reallocates() -> None:
    tail = output.Tail(8)
    ring = tail.ring
    for _ in range(50):
        tail.add(b"0123456789abc")
    assert tail.ring is ring and len(ring) == 8


@pytest.mark.parametrize("size", [0, 1, output.DEFAULT_TAIL, output.MAX_TAIL])
def test_tails_up_to_a_mebibyte(size: int) -> None:
    assert output.check_tail_size(size) == size


def test_a_bigger_tail_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as raised:
        output.check_tail_size(output.MAX_TAIL + 1)
    assert str(raised.value) == "--output-tail: at most 1MiB is kept in history"


def test_held_back_output_always_captures() -> None:
    assert output.should_capture(0, hold_back=True)
    assert not output.should_capture(0, hold_back=False)


def test_held_back_output_passes_through_when_tmpdir_is_full(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    import errno
    import os
    import tempfile

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output, "SPOOL", 100)
    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    capture = output.Capture(64, True)
    out_w, _ = capture.child_fds()
    writer = os.dup(out_w)
    capture.start()
    for letter in b"abcdef":
        os.write(writer, bytes([letter]) * 40)
    os.close(writer)
    assert capture.finish() is not None
    capture.release(failed=False)
    assert capfd.readouterr().out == "".join(c * 40 for c in "abcdef")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["--output-on-failure: the output cannot be held back (No space left "
                        "on device in the temporary directory); it is passed through"]


def test_held_back_output_spills_to_a_file_and_replays_in_order(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(output, "SPOOL", 100)
    held = output.HeldBack()
    for number in range(20):
        held.add(1 + number % 2, f"{number:02d}".encode() * 10)
    held.replay()
    held.close()
    captured = capfd.readouterr()
    assert captured.out == "".join(f"{n:02d}" * 10 for n in range(0, 20, 2))
    assert captured.err == "".join(f"{n:02d}" * 10 for n in range(1, 20, 2))
