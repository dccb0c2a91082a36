"""The invariant monitors catch every core-scope mutant of the reference, and shrink it to this.

For each mutant, the seeded families are searched in order until the
monitors flag the mutated reference's trace; the workload is then shrunk
with the same monitor as predicate. The table pins what is found (the
invariant, or one of vLLM's own end-of-step assertions, which the reference
keeps) and the size of the shrunk workload: (requests, aborts, prompt
tokens, max_tokens, arrival steps, max_steps).

`priority-self-preempt-breaks` is the control: it changes a decision without
breaking any stated invariant, so only the differential checker sees it.

The mutants of prefix caching, spec decode and async scheduling are hunted
on their own families (`Mutant.families`). Three of them the monitors
cannot see: `hashed-freed-to-front` and `cache-wrong-hash` change only which
blocks are reused or hit (block hashes are not in a trace), so the
differential checker catches them; `Z5-skipped-reversed` needs a deeper
pipeline than the engine loop's (mutants.EQUIVALENT["Z5"]), and only the
state machine reaches it.
"""

import pytest

from schedspec.conformance.hunt import hunt
from schedspec.mutants import BY_NAME

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
    # The three features: prefix caching, spec decode, async scheduling.
    "Z2-no-async-max-tokens-skip": ("no-decode-past-max-tokens", (1, 0, 1, 1, 0, 2)),
    "Z6-touch-before-check": ("block-conservation", (2, 0, 5, 10, 15, 13)),
    "Z7-full-hit-lookup": ("assertion", (2, 0, 16, 2, 0, 1)),  # vLLM's `assert num_new_tokens > 0`
    "Z7-recompute-one-token": ("prefix-hit-below-last-token", (2, 0, 16, 2, 0, 1)),
    "no-touch-on-hit": ("assertion", (6, 0, 59, 30, 0, 19)),
    "no-evict-on-reuse": ("assertion", (3, 0, 70, 14, 0, 12)),
    "no-rejection-rollback": ("assertion", (1, 0, 1, 3, 0, 3)),
    "spec-tokens-off-by-one": ("drafts-within-held", (1, 0, 5, 10, 0, 8)),
    "padding-ignores-L": ("chunk-bounds", (2, 0, 33, 2, 0, 1)),
    "rejection-ignores-placeholder-guard": ("assertion", (1, 0, 1, 4, 0, 4)),
    "placeholders-kept-on-preempt": ("computed-behind-known-tokens", (2, 0, 14, 6, 2, 6)),
}

DIFF_ONLY = {
    "hashed-freed-to-front": ("output.scheduled_new_reqs", (3, 0, 15, 6, 6, 5)),
    "cache-wrong-hash": ("output.num_scheduled_tokens", (2, 0, 9, 2, 0, 1)),
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


@pytest.mark.parametrize("name", list(DIFF_ONLY))
def test_block_reuse_mutants_escape_the_monitors_but_not_the_differ(name):
    """Which block is reused or hit is invisible in a trace's numbers; the block ids are not."""
    mutant = BY_NAME[name]
    assert hunt(mutant, "monitors", budget_s=5) is None
    finding = hunt(mutant, "diff", budget_s=60, shrink_budget_s=600)
    assert finding is not None
    assert (finding.what, finding.size) == DIFF_ONLY[name]


def test_z5_needs_a_deeper_pipeline_than_the_engine_loop():
    assert hunt(BY_NAME["Z5-skipped-reversed"], "diff", budget_s=5) is None
