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
