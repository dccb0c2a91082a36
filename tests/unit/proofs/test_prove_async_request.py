"""The per-request async lemma (proofs/runs/async_request.py): proved, not vacuous, and needed in its per-step form."""

from __future__ import annotations

import z3

from schedspec.mutants import BY_NAME as MUTANTS, applied
from schedspec.proofs.runs import async_request as lemma


def test_the_strengthening_is_inductive_for_one_request_under_the_queue_of_two():
    assert lemma.prove() == {
        "J implies the catalogue's statement": True,
        "J is inductive over the engine loop's step": True,
    }


def _possible(extra) -> bool:
    a, b, k = lemma.fresh("pre"), lemma.fresh("post"), z3.Int("k")
    facts, alive = lemma.step(a, b, k)
    s = z3.Solver()
    s.add(lemma.J(a, k), facts, alive, *extra(a, b, k))
    return s.check() == z3.sat


def test_the_assumptions_leave_every_async_behaviour_possible():
    """A proof is vacuous if J and the step rule out what async scheduling does."""
    acc, scheduled, preempted = z3.Int("accepted_step"), z3.Bool("scheduled_step"), z3.Bool("preempted_step")
    # a decode with drafts in flight, one rejected, while the next decode is scheduled
    assert _possible(lambda a, b, k: [a.f, a.c1 > 1, acc < a.d1, scheduled, b.c1 > 0])
    # a preemption with that request's output in flight: it turns stale and is delivered
    assert _possible(lambda a, b, k: [preempted, a.f, a.c1 > 0, b.T > a.T])
    # a prefill chunk in flight, then the final chunk: the first placeholder
    assert _possible(lambda a, b, k: [a.f, a.c1 == 0, scheduled, b.c1 > 0])
    # an admission that completes the prompt at once
    assert _possible(lambda a, b, k: [z3.Not(a.running), scheduled, b.P > 0])


def test_the_aggregate_statement_alone_is_not_inductive():
    assert lemma.aggregate_counterexample() is not None


def test_a_planted_rule_bug_breaks_the_induction():
    """The lemma calls reference_impl.rules, so a rule mutant reaches it: one draft too many scheduled."""
    with applied(MUTANTS["spec-tokens-off-by-one"]):
        assert not lemma.prove()["J is inductive over the engine loop's step"]
    assert lemma.prove()["J is inductive over the engine loop's step"]
