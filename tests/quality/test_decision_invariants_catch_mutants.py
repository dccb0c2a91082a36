"""Each decision invariant catches a planted decision that every bound of the catalogue lets through.

The catalogue (`spec/invariants/catalogue.py`) states bounds; the decision
invariants (`spec/invariants/decisions.py`) state the decisions themselves,
turn by turn. For each decision invariant, a mutant that changes one
decision and stays within every bound: the monitors hunt it on its families
(a fixed seed, at most `EXAMPLES` workloads, round-robin) and flag it as
that invariant at the pinned example; the workload is shrunk with the same
predicate (at most `SHRINK_CALLS` candidates) to the pinned size
(requests, aborts, prompt tokens, max_tokens, arrival steps, max_steps); and
on the shrunk workload the catalogue alone, with the trace-level checks,
sees nothing. In the core scope the invariant's row form, its twin for Z3
(`decision_rows.py`), flags the same step. Counts, never seconds: the same search finds the same
workload on any machine.

Block choice. `hashed-freed-to-front` and `free-not-reversed` change only
which block ids are handed out (and so, under prefix caching, which
prefixes stay cached): every count, grant and queue is legal. They were the
differ's alone; `block-choice-exact`, which rebuilds the free queue from the
trace's own block ids, now catches both, so no mutant the differ kills is
excepted from the monitors. What remains out of the monitors' reach is what
the differ misses too: `Z5-skipped-reversed`, live only with a deeper
pipeline than the engine loop's (`mutants.EQUIVALENT["Z5"]`).

Three of the pins take 10-12 s each and run in the slow tier (`-m slow`);
every decision invariant keeps a pin in the default tier.
"""

from __future__ import annotations

import pytest

from schedspec.conformance.search.kill_campaign import kill_by_campaign
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.mutants import BY_NAME, applied
from schedspec.reference_impl import simulate
from schedspec.spec.invariants import DECISION_ROWS_BY_NAME, DECISIONS, INVARIANTS, check_trace

EXAMPLES = 400
SHRINK_CALLS = 300

# mutant: (the decision invariant that catches it, examples searched, shrunk size)
PINNED = {
    "priority-victim-tie-last": ("victims-exact", 55, (2, 0, 20, 2, 4, 60)),
    "priority-self-preempt-breaks": ("running-work-conserving", 5, (2, 0, 15, 18, 8, 13)),
    "async-skip-breaks": ("running-work-conserving", 5, (2, 0, 2, 6, 9, 8)),
    # PRIORITY preempts a request the pass has already passed, and the pass must step back (an escaped bug's shape).
    "victim-index-not-adjusted": ("running-work-conserving", 45, (3, 0, 23, 8, 5, 6)),
    "running-threshold-when-alone": ("grant-exact", 1, (1, 0, 43, 1, 0, 2)),
    "watermark-ignored": ("admission-exact", 4, (3, 0, 30, 4, 14, 6)),
    "no-chunking-chunks": ("admission-exact", 2, (2, 0, 103, 2, 0, 1)),
    "cache-wrong-hash": ("prefix-hit-exact", 3, (2, 0, 9, 2, 0, 1)),
    "hashed-freed-to-front": ("block-choice-exact", 1, (2, 0, 10, 9, 0, 5)),
    "free-not-reversed": ("block-choice-exact", 4, (2, 0, 2, 4, 3, 4)),
    "length-cap-one-early": ("stop-exact", 1, (1, 0, 1, 2, 0, 1)),
    "rollback-one-too-many": ("rollback-exact", 2, (1, 0, 1, 3, 0, 2)),
    # Structured output (#36): admitted while the grammar compiles; a failed grammar never finished.
    "grammar-not-awaited": ("grammar-wait-exact", 1, (1, 0, 1, 1, 0, 1)),
    "grammar-error-dropped": ("grammar-wait-exact", 2, (1, 0, 1, 1, 0, 19)),
    # Pipeline parallel (#36): async decodes at every schedule(), past the PP cadence.
    "decode-cadence-ignored": ("decode-cadence-exact", 2, (1, 0, 1, 2, 0, 2)),
    # The prefill cadence (#36): a deferring step schedules a prompt chunk all the same.
    "prefill-cadence-ignored": ("prefill-cadence-exact", 1, (2, 0, 8, 3, 24, 14)),
    # Preemption outside schedule() (#36): a pause that holds nothing back.
    "pause-admits-waiting": ("controls-exact", 1, (1, 0, 1, 1, 12, 13)),
    # Pooling (#36): a chunked prompt finished by its first chunk's update.
    "pooling-finishes-every-chunk": ("pooling-exact", 1, (1, 0, 21, 1, 0, 1)),
}
SLOW = {"watermark-ignored", "async-skip-breaks", "victim-index-not-adjusted"}


# A decision whose every mistake trips the reference's own copy of vLLM's assertion a step later, so a hunt on
# the mutated reference finds the assertion first: its planted bug is judged on the records before the crash.
BEFORE_THE_ASSERTION = {"lora-limit-exact": "lora-limit-ignored"}


def test_every_decision_invariant_has_a_planted_bug_in_the_default_tier():
    pinned = {inv for name, (inv, _, _) in PINNED.items() if name not in SLOW}
    assert pinned | set(BEFORE_THE_ASSERTION) == {i.name for i in DECISIONS}


def test_lora_limit_exact_catches_an_ignored_limit_before_vllm_s_assertion_would():
    """`lora-limit-ignored` admits a second adapter past max_loras 1; the next schedule() fails vLLM's assertion
    `len(scheduled_loras) <= max_loras`, which the reference keeps. The records before it already break
    lora-limit-exact at the admission, and no invariant of the catalogue sees anything."""
    from schedspec.reference_impl import ReferenceEngine
    from schedspec.spec.engine import steps
    from schedspec.spec.trace import Trace

    w = generate("lora", 0, 3)  # the first of the family where the limit alone decides: max_loras 1, a burst at step 0
    records = []
    with applied(BY_NAME[BEFORE_THE_ASSERTION["lora-limit-exact"]]):
        with pytest.raises(AssertionError):
            for rec in steps(ReferenceEngine(w.config), w):
                records.append(rec)
    trace = Trace(w, tuple(records), "lora-limit-ignored", "max_steps")
    assert [(v.invariant, v.step) for v in check_trace(trace)] == [("lora-limit-exact", 0)]
    assert check_trace(trace, INVARIANTS) == []
    assert check_trace(simulate(w), DECISIONS) == []  # the control: the unmutated reference


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in PINNED])
def test_a_decision_invariant_catches_what_the_bounds_let_through(name):
    invariant, examples, shrunk = PINNED[name]
    mutant = BY_NAME[name]
    assert invariant in mutant.expect
    finding = kill_by_campaign(mutant, "monitors", examples=EXAMPLES, shrink_calls=SHRINK_CALLS)
    assert finding is not None, f"{name} survived the monitors"
    assert (finding.what, finding.examples, finding.size) == (invariant, examples, shrunk), finding.original
    with applied(mutant):
        trace = simulate(finding.workload)
    assert check_trace(trace, INVARIANTS) == [], "a bound of the catalogue sees it: not a decision-only mutant"
    first = check_trace(trace)[0]
    assert first.invariant == invariant
    c = finding.workload.config
    if invariant in DECISION_ROWS_BY_NAME and not (
        c.enable_prefix_caching or c.num_speculative_tokens or c.async_scheduling
    ):
        # The walk's twin for Z3 (decision_rows.py) sees it too, at the same step: the twins agree.
        assert [(v.invariant, v.step) for v in check_trace(trace, [DECISION_ROWS_BY_NAME[invariant]])][:1] == [
            (invariant, first.step)
        ]


def test_the_reference_takes_every_decision_the_rules_make():
    """The control: the unmutated reference, a few workloads of every family, breaks no decision invariant."""
    for family in FAMILIES:
        for i in range(6):
            w = generate(family, 7, i)
            assert check_trace(simulate(w), DECISIONS) == [], w.name
