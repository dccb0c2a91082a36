"""Longer proof runs: every invariant for N up to 6, and the cheap ones further. Run with -m slow."""

import pytest

from schedspec.proofs.prove import check
from schedspec.spec.invariants import BY_NAME, INVARIANTS


@pytest.mark.parametrize("fcfs", [True, False], ids=["fcfs", "priority"])
def test_every_invariant_up_to_six_requests(fcfs):
    verdicts = {(inv.name, n): check(inv, n, fcfs, timeout_s=300).verdict for n in range(3, 7) for inv in INVARIANTS}
    assert "violated" not in verdicts.values() and "unconfirmed" not in verdicts.values(), verdicts
    assert all(v == "proved" for v in verdicts.values()), {k: v for k, v in verdicts.items() if v != "proved"}


@pytest.mark.parametrize("name", ["no-admission-after-preemption", "seqs-limit", "budget-conservation"])
def test_cheap_invariants_up_to_twelve_requests(name):
    for n in range(7, 13):
        assert check(BY_NAME[name], n, True, timeout_s=600).verdict == "proved", n
