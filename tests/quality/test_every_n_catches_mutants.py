"""The proofs for every N fail where they should: a mutant that breaks an invariant breaks its proof for every N,
and the counterexample reported is a real one, found by the bounded proof and replayed on the mutated reference.

Pinned: the mutant, the invariant, the lemma that fails first, and the N of the replayed counterexample. The
full cross-check over every rule mutant is `tests/slow/test_every_n_cross_check.py`.
"""

import pytest

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.mutants import BY_NAME, applied
from schedspec.proofs.runs.every_n import prove_every_n


@pytest.fixture(autouse=True)
def _counted():
    """Z3 work units per query (`rlimit`), not seconds, decide every verdict here: the same on a loaded machine.
    The timeouts are only a safety cap; a query at either limit is `unknown`, which fails the assertions."""
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        yield


PINNED = {
    ("budget-off-by-one", "budget-conservation"): ("turn: own", 1),
    ("Z10-admit-after-preemption", "no-admission-after-preemption"): ("admit: own", 1),
    ("wrong-victim", "fcfs-victim-is-latest"): ("pop: own", 2),
}


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
@pytest.mark.parametrize("mutant, invariant", list(PINNED))
def test_the_proof_for_every_n_fails_with_a_replayed_counterexample(mutant, invariant, fcfs):
    lemma, n = PINNED[(mutant, invariant)]
    if invariant == "fcfs-victim-is-latest" and not fcfs:
        pytest.skip("an FCFS invariant")
    with applied(BY_NAME[mutant]):
        r = prove_every_n(invariant, fcfs)
    assert r.verdict == "violated", r
    assert r.detail.startswith(lemma + ";"), r.detail
    cx = r.counterexample
    assert cx is not None and cx.verdict == "violated" and cx.n == n and cx.state is not None
