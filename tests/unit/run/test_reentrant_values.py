"""What a nested run makes of the variables it inherited: a claim is believed only as a
lock row could hold it (a bigint token), and a depth of any length is a depth."""

from __future__ import annotations

import pytest

from pglock.errors import UsageError
from pglock.lock import clock
from pglock.run import reentrant

HUGE = "9" * 5000


@pytest.mark.parametrize(("token", "claimed"), [
    ("42", 42),
    (" 7 ", 7),
    ("0", 0),
    (str(2**63 - 1), 2**63 - 1),
    (str(2**63), None),
    ("99999999999999999999999", None),
    ("0" * 30 + "1", None),
    (HUGE, None),
    ("-1", None),
    ("\u0661\u0662", None),
    ("", None),
    ("1e5", None),
])
def test_only_a_bigint_token_is_a_claim(token: str, claimed: int | None) -> None:
    environ = {"PGLOCK_JOB": "j", "PGLOCK_HOLDER_ID": "h", "PGLOCK_FENCING_TOKEN": token}
    assert reentrant.inherited("j", environ) == reentrant.Inherited("h", claimed)


@pytest.mark.parametrize("depth", ["9", "10", "123", HUGE])
def test_a_depth_of_any_length_is_too_deep_in_one_line(depth: str) -> None:
    with pytest.raises(UsageError) as raised:
        reentrant.run_directly("j", ["true"], {reentrant.DEPTH_VARIABLE: depth},
                               confirmed_at=clock.now())
    message = str(raised.value)
    assert "\n" not in message and len(message) < 300
    assert message.startswith("job 'j': nested ")
