"""Z3 finds each mutant of a shared rule: a confirmed counterexample, pinned by invariant, N and policy.

The search goes N = 1, 2, 3, FCFS then PRIORITY, invariants in catalogue
order; the first `violated` is pinned. Every counterexample is a concrete
state that the mutated reference, stepped once, really breaks.

Mutants of bookkeeping that the encoding abstracts away (block id lists,
the refund bookkeeping, queue operations) are out of Z3's reach by design;
the monitors, the state machine and the differ catch those, and this file
pins that Z3 proves the invariants despite them.
"""

import pytest

from schedspec.conformance.search.budget import DEFAULT_Z3_RLIMIT, z3_rlimit
from schedspec.mutants import BY_NAME
from schedspec.proofs.runs.prove import Job, run_job
from schedspec.spec.invariants import INVARIANTS


@pytest.fixture(autouse=True)
def _counted():
    """Every query gets a fixed count of Z3 work units (`rlimit`), not seconds: the pins hold on a loaded machine.
    The 600 s job timeouts are only a safety cap; a query at either limit is `unknown`, which fails the pin."""
    with z3_rlimit(DEFAULT_Z3_RLIMIT):
        yield


PINNED = {
    "Z4-min-tokens-first": ("token-bounds", 1, "fcfs"),
    "Z10-admit-after-preemption": ("no-starvation-after-prepend", 1, "fcfs"),
    "Z13-length-before-stop": ("stop-token-finishes", 1, "fcfs"),
    "stop-at-L-off-by-one": ("token-bounds", 1, "fcfs"),
    "threshold-off-by-one": ("chunk-bounds", 2, "fcfs"),
    "budget-off-by-one": ("budget-conservation", 1, "fcfs"),
    "blocks-off-by-one": ("blocks-match-tokens", 1, "fcfs"),
    "wrong-victim": ("scheduled-subset-running", 2, "fcfs"),
}
OUT_OF_REACH = ["Z1-no-refund", "Z12-leak-on-preempt", "Z14-double-free", "append-not-prepend", "missing-free"]


def first_violation(mutant: str):
    for n in (1, 2, 3):
        for fcfs in (True, False):
            for inv in INVARIANTS:
                r = run_job(Job(inv.name, n, fcfs, 600, mutant))
                if r.verdict != "proved":
                    return r
    return None


@pytest.mark.parametrize("mutant", list(PINNED))
def test_z3_finds_a_confirmed_counterexample(mutant):
    r = first_violation(mutant)
    assert r is not None and r.verdict == "violated"
    assert (r.invariant, r.n, r.policy) == PINNED[mutant]


@pytest.mark.parametrize("mutant", OUT_OF_REACH)
def test_bookkeeping_mutants_are_out_of_the_encodings_reach(mutant):
    assert BY_NAME[mutant].target.startswith(("reference_impl.scheduler:", "reference_impl.kv_cache_manager:"))
    for inv in INVARIANTS:
        assert run_job(Job(inv.name, 2, True, 600, mutant)).verdict == "proved"
