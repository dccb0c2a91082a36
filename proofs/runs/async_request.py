"""The async strengthening proved inductive for one request over the engine loop's step (batch queue of 2).

This is a lemma: it proves that one request's async counters stay tied
together, whatever the rest of the batch does, over an abstract step of that
request alone. The feature run (`schedspec prove --feature async`) assumes
the same record of every request
(`encoding/async_scheduling.py:record_holds`) and proves it again, with
every invariant of the catalogue, over the encoding's whole step; this lemma is the short argument for why the record is the right one.

The catalogue's `placeholders-match-in-flight` sums over the steps in flight,
and that sum is not inductive on its own: an oldest step with n = 2 that was a
prefill chunk leaves I' = 0 and P' = 1 if all the catalogue knows is I = 2 and
P = 1 (`aggregate_counterexample` shows this). So the state here carries the
one step in flight that the loop leaves between engine steps (spec/engine.py
`_batch_queue_steps`: the queue of 2 absorbs the older step whenever it schedules a
second one). `J` ties that step to the counters:

* with no step in flight for the request: I = P = stale = 0;
* with one: I = n1 <= C and stale = 0, and P = c1, its placeholders: 0 for a
  prefill chunk, else 1 + d1 <= n1, with d1 the drafts it scheduled;
* a running request with P > 0 has T + P - C = 1; a running one has C <= T + P - 1;
* a waiting one has C = P = 0 and no step in flight.

The step is the engine loop's: schedule (the request is skipped, scheduled
n >= 1 tokens, or preempted; an admission for a waiting one), then absorb the
older step. Every choice the rest of the batch makes is free, bounded only as
the reference bounds it (n <= owed, the drafts `rules.num_scheduled_spec_tokens`
leaves, the accepted drafts, the stop position), so this over-approximates and
is sound. The arithmetic is `reference_impl.rules`' (and `spec.rules`' for the
owed count and the preemption's resets), and the update follows
`update.py` line by line: the rollback of C and P by the rejected drafts, P
down by every returned token, stale output appended without touching C or P.
A stop finishes the request, after which nothing is claimed of it.

`prove()` returns unsat for (1) `J` implies the catalogue's
`placeholder-counters`, `placeholders-match-in-flight` and
`computed-behind-known-tokens` (`CATALOGUE`; so the
lemma is about the catalogue's statement), and (2) `J` and the step imply `J`
after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from ...reference_impl import rules
from ...spec.arith import and_, implies, ite, not_, or_
from ...spec.invariants import BY_NAME
from ...spec.invariants.views import Row, StepView
from ...spec.rules import num_owed_tokens, preempted_counters


@dataclass
class Request:
    running: Any
    T: Any  # num_tokens
    C: Any
    P: Any  # num_output_placeholders
    S: Any  # drafts held (placeholder drafts under async)
    I: Any  # num_in_flight_tokens
    stale: Any
    f: Any  # one step in flight that scheduled this request
    n1: Any
    d1: Any
    c1: Any  # placeholders that step added


def fresh(tag: str) -> Request:
    I_, B = (lambda n: z3.Int(f"{n}_{tag}")), (lambda n: z3.Bool(f"{n}_{tag}"))
    return Request(
        B("running"), I_("T"), I_("C"), I_("P"), I_("S"), I_("I"), I_("stale"), B("f"), I_("n1"), I_("d1"), I_("c1")
    )


def J(r: Request, k: Any) -> Any:
    in_flight = and_(
        r.I == r.n1,
        r.n1 >= 1,
        r.n1 <= r.C,
        r.stale == 0,
        r.P == r.c1,
        r.d1 >= 0,
        or_(r.c1 == 0, and_(r.c1 == 1 + r.d1, r.c1 <= r.n1)),
    )
    return and_(
        r.T >= 1,
        r.C >= 0,
        r.S >= 0,
        r.S <= k,
        ite(r.f, in_flight, and_(r.I == 0, r.P == 0, r.stale == 0)),
        implies(r.running, and_(r.C + 1 <= r.T + r.P, implies(r.P > 0, r.T + r.P - r.C == 1))),
        implies(not_(r.running), and_(r.C == 0, r.P == 0, not_(r.f))),
    )


def view(r: Request, k: Any) -> StepView:
    """The request as the catalogue's one-row view of a state (a live request; nothing scheduled)."""
    common = dict(num_computed_tokens=r.C, num_tokens=r.T, num_blocks=0)
    row = Row(
        request_id="r",
        num_prompt_tokens=1,
        max_tokens=1,
        priority=0,
        arrival=0,
        pre_live=True,
        pre_running=r.running,
        pre_waiting=not_(r.running),
        pre_preempted=False,
        pre_run_pos=0,
        pre_wait_pos=0,
        scheduled=False,
        num_scheduled=0,
        admitted=False,
        preempted=False,
        post_live=True,
        post_running=r.running,
        post_waiting=not_(r.running),
        post_run_pos=0,
        post_wait_pos=0,
        **{f"pre_{x}": v for x, v in common.items()},
        **{f"post_{x}": v for x, v in common.items()},
        post_num_spec_tokens=r.S,
        post_num_output_placeholders=r.P,
        pre_num_output_placeholders=r.P,
        post_num_in_flight_tokens=r.I,
        post_num_stale_output_tokens=r.stale,
    )
    return StepView(
        rows=(row,),
        token_budget=1,
        max_num_seqs=1,
        max_model_len=2,
        block_size=16,
        num_usable_blocks=0,
        long_prefill_token_threshold=0,
        threshold_adaptive=False,
        fcfs=True,
        pre_num_free_blocks=0,
        post_num_free_blocks=0,
        num_speculative_tokens=k,
        async_scheduling=True,
    )


def step(a: Request, b: Request, k: Any) -> tuple[Any, Any]:
    """(facts, alive): the engine loop's step from `a` to `b` (the request is still live when `alive`)."""
    X = lambda n: z3.Int(f"{n}_step")  # noqa: E731
    Y = lambda n: z3.Bool(f"{n}_step")  # noqa: E731
    n, acc, S_new = X("n"), X("accepted"), X("S_new")
    scheduled, preempted, stops = Y("scheduled"), Y("preempted"), Y("stops")
    facts = [k >= 0, S_new >= 0, S_new <= k]
    # ---- schedule(): a waiting request is admitted (C = 0, no hit), a running one owes T + S + P - C.
    facts += [
        implies(preempted, a.running),
        implies(scheduled, not_(preempted)),
        implies(scheduled, and_(n >= 1, n <= num_owed_tokens(a.T + a.S, a.P, a.C))),
        implies(
            and_(a.running, scheduled),
            not_(rules.async_max_tokens_reached(a.P, a.C, z3.Int("prompt"), z3.Int("max_tokens"))),
        ),
    ]
    left = rules.num_scheduled_spec_tokens(n, a.C, a.T, a.P)
    d2 = ite(left > 0, left, 0)  # spec_token_ids[:left]: n <= owed keeps left <= S
    facts += [implies(and_(scheduled, left > 0), left <= a.S)]
    after = preempted_counters(a.I, a.stale, False, 0)  # _preempt_request: what is in flight turns stale
    C = ite(preempted, after.num_computed_tokens, a.C + ite(scheduled, n, 0))
    P = ite(preempted, after.num_output_placeholders, a.P)
    I = a.I + ite(scheduled, n, 0)
    stale = ite(preempted, after.num_stale_output_tokens, a.stale)
    chunk = C < a.T + P  # _update_after_schedule: is_prefill_chunk
    c2 = ite(and_(scheduled, not_(chunk)), 1 + d2, 0)
    P = P + c2  # AsyncScheduler: the only increment
    running = or_(and_(a.running, not_(preempted)), scheduled)
    # ---- update_from_output() of the older step, if one is in flight for the request.
    I = I - ite(a.f, a.n1, 0)
    is_stale = and_(a.f, stale > 0)
    stale = stale - ite(is_stale, a.n1, 0)
    sampled = and_(a.f, a.c1 > 0)  # the model samples for a step that was not a prefill chunk
    m = 1 + acc
    facts += [implies(sampled, and_(acc >= 0, acc <= a.d1))]
    rejected = rules.num_rejected_drafts(a.d1, m)
    fresh_out = and_(sampled, not_(is_stale))
    C = ite(and_(fresh_out, a.d1 > 0, C > 0), C - rejected, C)
    P = ite(and_(fresh_out, a.d1 > 0, P > 0), P - rejected, P)
    T = a.T + ite(sampled, m, 0)  # a stop (anywhere among the m) finishes the request: nothing is claimed then
    P = ite(and_(fresh_out, P > 0), P - m, P)
    alive = not_(and_(sampled, stops))
    S = ite(
        and_(scheduled, not_(chunk)), k, ite(preempted, after.num_spec_tokens, S_new)
    )  # placeholder drafts; else free in 0..k
    facts += [
        b.running == running,
        b.T == T,
        b.C == C,
        b.P == P,
        b.S == S,
        b.I == I,
        b.stale == stale,
        b.f == scheduled,
        implies(scheduled, and_(b.n1 == n, b.d1 == d2, b.c1 == c2)),
    ]
    return and_(*facts), alive


def _unsat(*facts: Any) -> bool:
    s = z3.Solver()
    s.add(*facts)
    return s.check() == z3.unsat


def prove() -> dict[str, bool]:
    """Each obligation is True when proved (its negation unsat)."""
    a, b, k = fresh("pre"), fresh("post"), z3.Int("k")
    facts, alive = step(a, b, k)
    return {
        "J implies the catalogue's statement": _unsat(J(a, k), k >= 0, z3.Not(_catalogue(a, k))),
        "J is inductive over the engine loop's step": _unsat(J(a, k), facts, alive, z3.Not(J(b, k))),
    }


CATALOGUE = ("placeholder-counters", "placeholders-match-in-flight", "computed-behind-known-tokens")


def _catalogue(r: Request, k: Any) -> Any:
    return z3.And(*[BY_NAME[name].holds(view(r, k)) for name in CATALOGUE])


def aggregate_counterexample() -> z3.ModelRef | None:
    """A step that breaks the catalogue's aggregate statement from a state that satisfies it, when the step in
    flight is known only through the sums (n1 <= I, its placeholders c1 <= P): why `J` keeps the step itself."""
    a, b, k = fresh("pre"), fresh("post"), z3.Int("k")
    facts, alive = step(a, b, k)
    record = and_(
        a.n1 >= 1, a.n1 <= a.I - a.stale, a.d1 >= 0, or_(a.c1 == 0, and_(a.c1 == 1 + a.d1, a.c1 <= a.n1)), a.c1 <= a.P
    )
    s = z3.Solver()
    s.add(
        _catalogue(a, k),
        a.T >= 1,
        a.S >= 0,
        a.S <= k,
        implies(not_(a.running), and_(a.C == 0, a.P == 0)),
        ite(a.f, record, a.I == 0),
        facts,
        alive,
        z3.Not(_catalogue(b, k)),
    )
    return s.model() if s.check() == z3.sat else None
