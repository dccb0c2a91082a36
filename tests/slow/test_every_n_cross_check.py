"""The proofs for every N against the bounded proofs (`schedspec prove`), cell for cell.

* Unmutated: each invariant proved for every N is proved by the bounded run at N = 1..8 too.
* Under each mutant of a shared rule: wherever the bounded proof refutes an invariant at N <= 3, the proof for
  every N does not say `proved` (it says `violated`, with that counterexample replayed); and wherever the proof
  for every N says `proved`, the bounded proof finds nothing. A mutant that breaks the loop invariant for reasons
  of its own (Z10, budget-off-by-one) leaves the other invariants `unknown`: a counterexample to induction with
  no real counterexample behind it, never `proved`.
"""

import pytest

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.mutants import BY_NAME, applied
from schedspec.proofs.runs.every_n import EVERY_N, POLICY_ONLY, prove_every_n
from schedspec.proofs.runs.prove import check
from schedspec.spec.invariants.catalogue import BY_NAME as INVARIANTS

# Z3 work units per query (`rlimit`), not seconds, decide every verdict here: the same on a loaded machine. The
# timeouts are only a safety cap; a query at either limit is `unknown`, which fails the assertions. The bounded
# run up to N = 8 needs more units per query than the mutant searches up to N = 3.
UP_TO_EIGHT_RLIMIT = 100 * DEFAULT_Z3_RLIMIT


RULE_MUTANTS = [
    "Z4-min-tokens-first",
    "Z10-admit-after-preemption",
    "Z13-length-before-stop",
    "stop-at-L-off-by-one",
    "threshold-off-by-one",
    "budget-off-by-one",
    "blocks-off-by-one",
    "wrong-victim",
]


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_the_bounded_proof_agrees_up_to_eight(fcfs):
    with z3_rlimit(UP_TO_EIGHT_RLIMIT):
        _agrees_up_to_eight(fcfs)


def _agrees_up_to_eight(fcfs):
    for name in EVERY_N:
        own_policy = POLICY_ONLY.get(name, "fcfs" if fcfs else "priority") == ("fcfs" if fcfs else "priority")
        assert prove_every_n(name, fcfs).verdict == ("proved" if own_policy else "n/a")
        for n in range(1, 9):
            assert check(INVARIANTS[name], n, fcfs, 600, reuse=True).verdict == "proved", (name, n)


@pytest.mark.parametrize("mutant", RULE_MUTANTS)
def test_under_each_rule_mutant_the_two_proofs_agree(mutant):
    refuted = 0
    with z3_rlimit(DEFAULT_Z3_RLIMIT), applied(BY_NAME[mutant]):
        for fcfs in (True, False):
            for name in EVERY_N:
                bounded = next(
                    (r for n in (1, 2, 3) if (r := check(INVARIANTS[name], n, fcfs, 600)).verdict != "proved"), None
                )
                every = prove_every_n(name, fcfs, 600)
                if bounded is not None:
                    refuted += 1
                    assert bounded.verdict == "violated", (mutant, name, bounded)
                    assert every.verdict == "violated" and every.counterexample is not None, (mutant, name, every)
                else:
                    assert every.verdict in ("proved", "unknown", "n/a"), (mutant, name, every)
    # Each of these mutants breaks at least one invariant that has a proof for every N (tests/quality pins which).
    assert refuted >= 1 or mutant in ("threshold-off-by-one",), mutant
