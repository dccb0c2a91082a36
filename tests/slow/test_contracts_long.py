"""Long CrossHair runs (`-m slow`): the pristine reference, and the control mutant that no contract may catch.

Every contract runs the same scenarios in the same order (CrossHair's seed
is fixed and all contracts branch alike), so the long runs are of
`check_all`, which states every check at once; each single contract gets a
short run, to show that it runs clean on its own.

On the reference no contract may end in a counterexample, confirmed or
not: an unconfirmed one would mean a contract that is not deterministic.
The verdict is "unknown" (the bounded space holds about 10^15 scenarios; a
run covers thousands), and the test says so rather than asserting a proof.

`priority-self-preempt-breaks` changes a decision without breaking any
stated invariant, so no contract may catch it: one that did would be
stating more than the catalogue.
"""

import pytest

from schedspec.proofs.crosshair.contracts import CONTRACTS
from schedspec.proofs.crosshair.runner import NO_CX, UNKNOWN, run_contract, run_contracts


@pytest.mark.parametrize(
    "mutant,timeout", [(None, 600.0), ("priority-self-preempt-breaks", 300.0)], ids=["reference", "control-mutant"]
)
def test_check_all_finds_nothing(mutant, timeout):
    r = run_contract("check_all", timeout, mutant)
    assert r.verdict in (UNKNOWN, NO_CX), f"{r.verdict}: {r.message} {r.replay}"
    assert r.scenarios > 10 * timeout, f"only {r.scenarios} scenarios in {timeout} CPU-s"


def test_every_contract_runs_clean_on_the_reference():
    for r in run_contracts(list(CONTRACTS), timeout=30.0, jobs=2):
        assert r.verdict in (UNKNOWN, NO_CX), f"{r.contract}: {r.verdict}: {r.message} {r.replay}"
        assert r.scenarios > 0, f"{r.contract}: CrossHair ran no scenario ({r.message})"
