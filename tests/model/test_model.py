"""The protocol, model-checked (docs/model.md): SPIN explores every state of each model
with no error, and each probed state is reached in its model's run (a `reach:` case: a
model change that makes one unreachable fails here). The mutants are test_mutants.py, so
that the suite's two workers take one file each. spin and a C compiler missing is a
failure: .ci/run installs them."""

from __future__ import annotations

import pytest

from tests.model import spin


def check(case: spin.Case) -> spin.Result:
    try:
        return spin.check(case)
    except spin.Missing as missing:
        pytest.fail(str(missing))


# The protocol's exhaustive runs take from 6 to 32 s of CPU each; on a loaded machine the
# advisory one took 229 s, near the suite's 300 s per test: these may take 900.
@pytest.mark.parametrize("case", [
    pytest.param(case, id=case.name,
                 marks=([pytest.mark.slow, pytest.mark.timeout(900)]
                        if case.model == "protocol.pml" else []))
    for case in spin.MODELS])
def test_the_protocol_keeps_its_promises(case: spin.Case) -> None:
    result = check(case)
    print(f"{case.name}: {result.states} states, depth {result.depth}, "
          f"{result.seconds:.1f} s, {result.megabytes:.0f} MB")
    assert result.errors == 0, "\n".join(result.timeline) or result.output
    assert result.states > 0


@pytest.mark.slow
@pytest.mark.parametrize("reach", [pytest.param(reach, id=reach.name)
                                   for reach in spin.REACHES])
def test_each_probed_state_is_reached(reach: spin.Reach) -> None:
    result = check(reach.model)
    assert result.errors == 0, "\n".join(result.timeline) or result.output
    assert reach.probe in result.reached, (
        f"{reach.name}: not reached in {result.states} states (reached: "
        f"{sorted(result.reached)})")
