"""The state machine catches every core-scope mutant of the reference, and shrinks it to this.

For each mutant, `hunt_state_machine` runs the Hypothesis machine (seed 0,
up to 3000 runs of up to 25 rules, default bounds) on the mutated reference
until one of the mutant's expected invariants trips, or one of vLLM's own
asserts that the reference keeps ("assertion"). Only those count: a mutant
may break several rules, and Hypothesis shrinks towards whichever breaks in
the smallest run. (Today the hunt without that filter finds the very same
table; an earlier draw design shrank `blocks-off-by-one` to
`progress-when-idle` and `Z10` to `no-starvation-after-prepend`, true
violations both.)

The table pins what is found and the size of Hypothesis's shrunk example,
(requests, steps). The seconds to the first counterexample, on two cores,
were at most 16 (Z1, which needs a less important request admitted ahead of
a more important one under PRIORITY); the whole file runs in about 85 s.
The budget is generous on purpose: a run is found by example count, not by
time, so a slower machine finds the same example, later.

`priority-self-preempt-breaks` is the control: it makes a legal but wrong
decision, which no invariant states, so the machine must not catch it.
"""

import pytest

from schedspec.conformance.mutants import BY_NAME
from schedspec.conformance.state_machine import hunt_state_machine

PINNED = {
    "Z1-no-refund": ("assertion", (3, 2)),
    "Z4-min-tokens-first": ("token-bounds", (1, 2)),
    "Z10-admit-after-preemption": ("no-admission-after-preemption", (3, 3)),
    "Z12-leak-on-preempt": ("block-conservation", (2, 5)),
    "Z13-length-before-stop": ("stop-token-finishes", (1, 3)),
    "Z14-double-free": ("block-conservation", (1, 1)),
    "stop-at-L-off-by-one": ("token-bounds", (1, 2)),
    "threshold-off-by-one": ("chunk-bounds", (2, 1)),
    "budget-off-by-one": ("assertion", (3, 2)),
    "blocks-off-by-one": ("blocks-match-tokens", (1, 1)),
    "wrong-victim": ("fcfs-victim-is-latest", (2, 2)),
    "append-not-prepend": ("no-starvation-after-prepend", (3, 2)),
    "missing-free": ("waiting-holds-nothing", (2, 5)),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_state_machine_catches_and_shrinks(name):
    mutant = BY_NAME[name]
    finding = hunt_state_machine(mutant, budget_s=600, expect=mutant.expect)
    assert finding is not None, f"{name} survived the state machine"
    what, size = PINNED[name]
    assert finding.what in mutant.expect + ("assertion",)
    assert (finding.what, finding.size) == (what, size), finding.original


def test_state_machine_misses_a_legal_but_wrong_decision():
    finding = hunt_state_machine(BY_NAME["priority-self-preempt-breaks"], budget_s=60, max_examples=500)
    assert finding is None, finding.original
