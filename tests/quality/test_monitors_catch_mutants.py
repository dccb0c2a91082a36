"""The invariant monitors catch every core-scope mutant of the reference, and shrink it to this.

For each mutant, the seeded families are searched in order until the
monitors flag the mutated reference's trace; the workload is then shrunk
with the same monitor as predicate. The table pins what is found (the
invariant, or one of vLLM's own end-of-step assertions, which the reference
keeps) and the size of the shrunk workload: (requests, aborts, prompt
tokens, max_tokens, arrival steps, max_steps).

`priority-self-preempt-breaks` is the control: it changes a decision without
breaking any stated invariant, so only the differential checker sees it.
"""

import pytest

from schedspec.conformance.hunt import hunt
from schedspec.conformance.mutants import BY_NAME

PINNED = {
    "Z1-no-refund": ("assertion", (2, 0, 22, 10, 1, 7)),
    "Z4-min-tokens-first": ("token-bounds", (1, 0, 1, 31, 0, 30)),
    "Z10-admit-after-preemption": ("no-admission-after-preemption", (2, 0, 8, 12, 6, 11)),
    "Z12-leak-on-preempt": ("block-conservation", (2, 0, 15, 17, 7, 12)),
    "Z13-length-before-stop": ("stop-token-finishes", (1, 0, 1, 1, 0, 1)),
    "Z14-double-free": ("block-conservation", (1, 0, 1, 1, 0, 1)),
    "stop-at-L-off-by-one": ("token-bounds", (1, 0, 1, 31, 0, 30)),
    "threshold-off-by-one": ("chunk-bounds", (2, 0, 17, 2, 6, 4)),
    "budget-off-by-one": ("assertion", (1, 0, 45, 1, 0, 2)),
    "blocks-off-by-one": ("blocks-match-tokens", (1, 0, 1, 2, 0, 1)),
    "wrong-victim": ("fcfs-victim-is-latest", (3, 0, 13, 63, 6, 23)),
    "append-not-prepend": ("no-starvation-after-prepend", (2, 0, 14, 10, 4, 9)),
    "missing-free": ("block-conservation", (2, 0, 15, 17, 7, 12)),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_monitors_catch_and_shrink(name):
    mutant = BY_NAME[name]
    finding = hunt(mutant, "monitors", budget_s=120, shrink_budget_s=600)
    assert finding is not None, f"{name} survived the monitors"
    what, shrunk = PINNED[name]
    assert finding.what == what
    assert finding.what in mutant.expect + ("assertion",)
    assert finding.size == shrunk


def test_monitors_miss_a_legal_but_wrong_decision_that_diff_catches():
    mutant = BY_NAME["priority-self-preempt-breaks"]
    assert hunt(mutant, "monitors", budget_s=3) is None
    finding = hunt(mutant, "diff", budget_s=60, shrink_budget_s=600)
    assert finding is not None and finding.what == "output.num_scheduled_tokens"
    assert finding.size == (2, 0, 15, 18, 8, 13)
