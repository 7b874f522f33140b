"""The protocol, model-checked (docs/model.md): SPIN explores every state of each model
with no error, and each mutant (a protection removed) yields a counterexample, printed
as a timeline. spin and a C compiler missing is a failure: .ci/run installs them."""

from __future__ import annotations

import pytest

from tests.model import spin


def _check(case: spin.Case) -> spin.Result:
    try:
        return spin.check(case)
    except spin.Missing as missing:
        pytest.fail(str(missing))


# The two exhaustive runs of the protocol take some 10 s each.
@pytest.mark.parametrize("case", [
    pytest.param(case, id=case.name,
                 marks=[pytest.mark.slow] if case.model == "protocol.pml" else [])
    for case in spin.MODELS])
def test_the_protocol_keeps_its_promises(case: spin.Case) -> None:
    result = _check(case)
    print(f"{case.name}: {result.states} states, depth {result.depth}, "
          f"{result.seconds:.1f} s")
    assert result.errors == 0, "\n".join(result.timeline) or result.output
    assert result.states > 0
    assert "max search depth too small" not in result.output


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in spin.MUTANTS])
def test_each_protection_removed_yields_a_counterexample(case: spin.Case) -> None:
    result = _check(case)
    print(f"{case.name}: errors {result.errors} after {result.states} states")
    print("\n".join(result.timeline))
    assert result.errors > 0, result.output
    assert any("assertion violated" in line for line in result.timeline), result.timeline
