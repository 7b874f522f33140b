"""How a run's end is recorded and what pglock exits with (Supervision.result)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from pglock.errors import ExitStatus
from pglock.lock.ledger import Outcome
from pglock.run.supervise import SignalGate, Supervision


@pytest.fixture
def gate() -> Iterator[SignalGate]:
    """A gate that is never installed: only its record of a stop signal is read."""
    made = SignalGate()
    yield made
    os.close(made.wake_r)
    os.close(made.wake_w)


TERM, KILL, INT = int(signal.SIGTERM), int(signal.SIGKILL), int(signal.SIGINT)

# returncode, lock lost, timed out, stop signal received ->
# outcome, recorded exit code, recorded signal, error, pglock's exit code
RESULTS = [
    pytest.param(0, None, False, None, Outcome.SUCCEEDED, 0, None, None, 0, id="success"),
    pytest.param(3, None, False, None, Outcome.FAILED, 3, None, None, 3, id="failure"),
    pytest.param(255, None, False, None, Outcome.FAILED, 255, None, None, 255, id="exit-255"),
    pytest.param(-KILL, None, False, None, Outcome.KILLED, 137, KILL, None, 137,
                 id="killed-by-signal"),
    pytest.param(-TERM, None, False, TERM, Outcome.KILLED, 143, TERM, None, 143,
                 id="stopped-by-forwarded-sigterm"),
    pytest.param(0, None, False, TERM, Outcome.KILLED, 0, TERM, None, 0,
                 id="caught-sigterm-and-exited-0"),
    pytest.param(130, None, False, INT, Outcome.KILLED, 130, INT, None, 130,
                 id="shell-exit-after-sigint"),
    pytest.param(-TERM, None, True, None, Outcome.TIMED_OUT, 143, TERM,
                 "stopped by --max-runtime", ExitStatus.TIMED_OUT, id="max-runtime"),
    pytest.param(0, None, True, None, Outcome.TIMED_OUT, 0, None, "stopped by --max-runtime",
                 ExitStatus.TIMED_OUT, id="max-runtime-but-exited-0"),
    pytest.param(-TERM, "the lock was taken over or cleared", False, None, Outcome.LOCK_LOST,
                 143, TERM, "lock lost: the lock was taken over or cleared",
                 ExitStatus.INTERNAL, id="lock-lost"),
    pytest.param(0, "no renewal succeeded in time", False, None, Outcome.LOCK_LOST, 0, None,
                 "lock lost: no renewal succeeded in time", ExitStatus.INTERNAL,
                 id="lock-lost-on-continue-exited-0"),
    pytest.param(-KILL, "no renewal succeeded in time", True, TERM, Outcome.LOCK_LOST, 137,
                 KILL, "lock lost: no renewal succeeded in time", ExitStatus.INTERNAL,
                 id="lock-lost-wins-over-all"),
]


@pytest.mark.parametrize(("returncode", "lost", "timed_out", "stop_signal", "outcome",
                          "exit_code", "signum", "error", "exit_status"), RESULTS)
def test_result(gate: SignalGate, returncode: int, lost: str | None, timed_out: bool,
                stop_signal: int | None, outcome: Outcome, exit_code: int, signum: int | None,
                error: str | None, exit_status: int) -> None:
    gate.stop_signal = stop_signal
    # The command and the heartbeat are not consulted once the command has exited.
    supervision = Supervision(child=None, heartbeat=None, gate=gate,  # type: ignore[arg-type]
                              max_runtime=None, kill_after=10, on_lost="kill",
                              lost=lost, timed_out=timed_out)
    recorded, code = supervision.result(returncode)
    assert (recorded.outcome, recorded.exit_code, recorded.signal, recorded.error) == (
        outcome, exit_code, signum, error)
    assert code == exit_status
    assert recorded.duration >= 0 and recorded.output_tail is None
