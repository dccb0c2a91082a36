"""The async strengthening, on its own, catches a planted placeholder bug of the reference.

`placeholders-kept-on-preempt` leaves a victim's placeholders in place while
`_preempt_request` turns its in-flight tokens stale, so P > in-flight - stale:
exactly what `placeholders-match-in-flight` forbids, and the pre-states an
induction proof of async scheduling must exclude. The monitor is restricted
to that one invariant, so the catch is its own.
"""

from __future__ import annotations

from schedspec.conformance.workloads.families import generate
from schedspec.mutants import BY_NAME as MUTANTS, applied
from schedspec.reference_impl import simulate
from schedspec.spec.invariants import BY_NAME
from schedspec.spec.invariants.monitor import check_trace

STRENGTHENING = BY_NAME["placeholders-match-in-flight"]


def _first_caught(mutant: str, workloads: int = 300) -> int | None:
    with applied(MUTANTS[mutant]):
        for i in range(workloads):
            if check_trace(simulate(generate("async", 0, i)), [STRENGTHENING], history=False):
                return i
    return None


def test_placeholders_kept_on_preempt_is_caught_by_the_strengthening_alone():
    assert _first_caught("placeholders-kept-on-preempt") is not None


def test_the_unmutated_reference_is_not_flagged():
    assert not any(check_trace(simulate(generate("async", 0, i)), [STRENGTHENING], history=False) for i in range(60))
