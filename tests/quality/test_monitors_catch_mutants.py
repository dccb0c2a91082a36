"""The invariant monitors catch every core-scope mutant of the reference, and shrink it to this.

For each mutant, the seeded families are searched in order (the first
1000 workloads, round-robin: a count, never seconds) until the monitors flag
the mutated reference's trace; the workload is then shrunk with the same
monitor as predicate. The table pins what is found (the
invariant, or one of vLLM's own end-of-step assertions, which the reference
keeps) and the size of the shrunk workload: (requests, aborts, prompt
tokens, max_tokens, arrival steps, max_steps).

`priority-self-preempt-breaks` was the control: it changes a decision without
breaking any bound of the catalogue, and only the differential checker saw
it. The decision invariants (spec/invariants/decisions.py) now see it, on the
very workload the differ shrinks to, and so they see `hashed-freed-to-front`
(which block is reused) and `cache-wrong-hash` (which prefix a block is
cached under): tests/quality/test_decision_invariants_catch_mutants.py pins
each decision invariant with the bugs only it catches. `threshold-off-by-one`
mutates a rule the decision invariants read; the hunt judges the trace with
the rule restored, so `grant-exact` sees the extra token at step 0, before
`chunk-bounds` would.

The mutants of prefix caching, spec decode and async scheduling are hunted
on their own families (`Mutant.families`). `Z5-skipped-reversed` needs a
deeper pipeline than the engine loop's queue of 2 (mutants.EQUIVALENT["Z5"]):
on its own families neither the monitors nor the differ reach it; under
pipeline parallel (a queue of pp + 1) both kill it at the first workload.
"""

import pytest

from schedspec.conformance.search.kill_campaign import kill_by_campaign
from schedspec.mutants import BY_NAME

PINNED = {
    "Z1-no-refund": ("assertion", (2, 0, 13, 11, 9, 10)),
    "Z4-min-tokens-first": ("token-bounds", (1, 0, 1, 31, 0, 30)),
    "Z10-admit-after-preemption": ("no-admission-after-preemption", (4, 0, 44, 16, 5, 12)),
    "Z12-leak-on-preempt": ("block-conservation", (2, 0, 15, 17, 7, 12)),
    "Z13-length-before-stop": ("stop-token-finishes", (1, 0, 1, 1, 0, 1)),
    "Z14-double-free": ("block-conservation", (1, 0, 1, 1, 0, 1)),
    "stop-at-L-off-by-one": ("token-bounds", (1, 0, 1, 31, 0, 30)),
    "threshold-off-by-one": ("grant-exact", (2, 0, 22, 2, 0, 1)),
    "budget-off-by-one": ("assertion", (1, 0, 45, 1, 0, 2)),
    "blocks-off-by-one": ("blocks-match-tokens", (1, 0, 1, 2, 0, 1)),
    "wrong-victim": ("fcfs-victim-is-latest", (3, 0, 11, 69, 6, 25)),
    "append-not-prepend": ("no-starvation-after-prepend", (2, 0, 14, 10, 4, 9)),
    "missing-free": ("block-conservation", (2, 0, 15, 17, 7, 12)),
    # The three features: prefix caching, spec decode, async scheduling.
    "Z2-no-async-max-tokens-skip": ("no-decode-past-max-tokens", (1, 0, 1, 1, 0, 2)),
    "Z6-touch-before-check": ("block-conservation", (2, 0, 5, 10, 15, 13)),
    "Z7-full-hit-lookup": ("assertion", (2, 0, 16, 2, 0, 1)),  # vLLM's `assert num_new_tokens > 0`
    "Z7-recompute-one-token": ("prefix-hit-below-last-token", (2, 0, 16, 2, 0, 1)),
    "no-touch-on-hit": ("assertion", (6, 0, 59, 30, 0, 19)),
    "no-evict-on-reuse": ("assertion", (3, 0, 70, 14, 0, 12)),
    "no-rejection-rollback": ("owed-nonnegative", (1, 0, 1, 3, 0, 2)),
    "spec-tokens-off-by-one": ("drafts-within-held", (1, 0, 5, 10, 0, 8)),
    "padding-ignores-L": ("chunk-bounds", (2, 0, 9, 2, 0, 1)),
    "rejection-ignores-placeholder-guard": ("running-served-while-budget-lasts", (1, 0, 1, 3, 0, 3)),
    "placeholders-kept-on-preempt": ("grant-exact", (2, 0, 13, 7, 2, 6)),
}

# Once the differ's alone: (the differ's field and size, the monitors' invariant and size).
DECISIONS_ONLY = {
    "priority-self-preempt-breaks": (
        ("output.num_scheduled_tokens", (2, 0, 15, 18, 8, 13)),
        ("running-work-conserving", (2, 0, 15, 18, 8, 13)),
    ),
    "hashed-freed-to-front": (
        ("output.scheduled_new_reqs", (3, 0, 15, 6, 6, 5)),
        ("block-choice-exact", (2, 0, 10, 9, 0, 5)),
    ),
    "cache-wrong-hash": (
        ("output.num_scheduled_tokens", (2, 0, 9, 2, 0, 1)),
        ("prefix-hit-exact", (2, 0, 9, 2, 0, 1)),
    ),
}


# Over 10 s on two cores, and kept: the monitors' hunt is the fastest checker that kills Z1 (tests/README.md).
SLOW_OK = {"Z1-no-refund": "the monitors' Z1 hunt", "no-touch-on-hit": "the monitors' prefix-cache refcount hunt"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow_ok(SLOW_OK[n])) if n in SLOW_OK else n for n in PINNED]
)
def test_monitors_catch_and_shrink(name):
    mutant = BY_NAME[name]
    finding = kill_by_campaign(mutant, "monitors")
    assert finding is not None, f"{name} survived the monitors"
    what, shrunk = PINNED[name]
    assert finding.what == what
    assert finding.what in mutant.expect + ("assertion",)
    assert finding.size == shrunk


@pytest.mark.parametrize("name", list(DECISIONS_ONLY))
def test_a_decision_the_differ_sees_the_monitors_see_too(name):
    """A decision changed within every bound: the differ sees it, and so do the decision invariants."""
    mutant = BY_NAME[name]
    (field, diff_size), (invariant, size) = DECISIONS_ONLY[name]
    finding = kill_by_campaign(mutant, "diff")
    assert finding is not None and (finding.what, finding.size) == (field, diff_size)
    finding = kill_by_campaign(mutant, "monitors")
    assert finding is not None and (finding.what, finding.size) == (invariant, size)
    assert finding.what in mutant.expect


def test_z5_needs_a_deeper_pipeline_than_the_engine_loop():
    assert kill_by_campaign(BY_NAME["Z5-skipped-reversed"], "diff", examples=200) is None


@pytest.mark.parametrize(("checker", "what"), [("monitors", "skipped-keep-order"), ("diff", "state.waiting")])
def test_z5_is_killed_by_the_engine_loop_under_pipeline_parallel(checker, what):
    """A pipeline keeps a victim's output in flight at the next schedule(): the mutant is live in the loop."""
    finding = kill_by_campaign(
        BY_NAME["Z5-skipped-reversed"], checker, examples=20, families=["pipeline-parallel"], shrink_calls=0
    )  # unshrunk: 300 shrink calls take it to 33 steps, at 8 s a checker
    assert finding is not None and (finding.what, finding.examples, finding.size) == (what, 1, (3, 0, 23, 20, 4, 160))
