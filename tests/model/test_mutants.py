"""Each protection of the protocol removed (docs/model.md, "What the mutants show") yields
a counterexample, printed as a timeline; so do the older rules schema version 9 replaced."""

from __future__ import annotations

import pytest

from tests.model import spin
from tests.model.test_model import check


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in spin.MUTANTS])
def test_each_protection_removed_yields_a_counterexample(case: spin.Case) -> None:
    result = check(case)
    print(f"{case.name}: errors {result.errors} after {result.states} states")
    print("\n".join(result.timeline))
    assert result.errors > 0, result.output
    assert any("assertion violated" in line for line in result.timeline), result.timeline
