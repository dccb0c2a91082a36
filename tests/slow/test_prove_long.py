"""Longer proof runs: every invariant for N up to 8 (the default run), and N = 12 where the structure reaches.

At N = 12 the induction over the running pass (proofs/runs/cuts.py) proves the
case that preempts for block and budget conservation and the PRIORITY
victim rule, and, through the per-row loop invariant, for the per-request
invariants; the cheap invariants (budget conservation among them, under FCFS) are
proved whole. What does not
reach N = 12 yet is the monolithic case that preempts nobody (its waiting
pass is not cut), which is why those three are not checked whole there;
nor, under PRIORITY, do the own lemmas of budget conservation and the victim rule, reliably.
Run with -m slow.
"""

import time

import pytest

from schedspec.proofs.runs.cuts import LOOP_INVARIANTS
from schedspec.proofs.runs.prove import PRIORITY_ONLY, by_cuts, check, encoded_step
from schedspec.spec.invariants import BY_NAME, INVARIANTS


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_up_to_eight_requests(fcfs):
    verdicts = {
        (inv.name, n): check(inv, n, fcfs, timeout_s=300, reuse=True).verdict for n in range(3, 9) for inv in INVARIANTS
    }
    assert "violated" not in verdicts.values() and "unconfirmed" not in verdicts.values(), verdicts
    assert all(v == "proved" for v in verdicts.values()), {k: v for k, v in verdicts.items() if v != "proved"}


# Under PRIORITY at N = 12 the own lemmas of budget conservation and of the victim rule do not finish in
# 600 s (with either solver setting; the victim rule's first lemma is unknown at 120 s). Not reached, so not
# claimed here (benchmarks/RESULTS.md); block conservation (about 12 s) and the per-row lemmas (about 9 s) are.
NOT_REACHED_AT_TWELVE_PRIORITY = ("budget-conservation", "priority-victim-is-least-important")


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_the_running_pass_induction_at_twelve_requests(fcfs):
    pre, context, _ = encoded_step(12, fcfs, True, reuse=False)
    for name in LOOP_INVARIANTS:
        if not (fcfs and name in PRIORITY_ONLY) and (fcfs or name not in NOT_REACHED_AT_TWELVE_PRIORITY):
            assert by_cuts(BY_NAME[name], pre, context, time.perf_counter() + 600), name
    proofs: dict = {}  # the per-row lemmas, solved once for the four
    for name in ("blocks-match-tokens", "owed-nonnegative", "running-owes-tokens", "computed-behind-known-tokens"):
        assert by_cuts(BY_NAME[name], pre, context, time.perf_counter() + 600, proofs), name


@pytest.mark.parametrize("name", ["no-admission-after-preemption", "seqs-limit", "budget-conservation"])
def test_cheap_invariants_up_to_twelve_requests(name):
    for n in range(9, 13):
        assert check(BY_NAME[name], n, True, timeout_s=600).verdict == "proved", n


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_is_inductive_with_all_three_features_for_two_requests(fcfs):
    """Moved from tests/unit/proofs/test_prove_async.py, which keeps N = 1 of it."""
    from schedspec.proofs.runs.features import CONCRETE_ONLY, FEATURES, check as check_features

    for inv in INVARIANTS:
        verdict = check_features(inv, 2, fcfs, timeout_s=60, features=FEATURES).verdict
        assert verdict == ("n/a" if inv.name in CONCRETE_ONLY else "proved"), inv.name


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_with_all_three_features_up_to_four_requests(fcfs):
    """The feature run's default bound, with async, spec decode and prefix caching in one step."""
    from schedspec.proofs.runs.features import CONCRETE_ONLY, FEATURES, check as check_features

    verdicts = {
        (inv.name, n): check_features(inv, n, fcfs, timeout_s=300, features=FEATURES).verdict
        for n in range(3, 5)
        for inv in INVARIANTS
    }
    assert all(v == ("n/a" if name in CONCRETE_ONLY else "proved") for (name, _), v in verdicts.items()), {
        k: v for k, v in verdicts.items() if v not in ("proved", "n/a")
    }
