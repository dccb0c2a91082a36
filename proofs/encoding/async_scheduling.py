"""Async scheduling in the step encoding: one engine step of vLLM's `step_with_batch_queue` with a queue of 2.

Between engine steps the loop leaves at most one step in flight
(`spec/engine.py` `_batch_queue_steps`): whenever it schedules a second one, the
queue is full and it absorbs the older one in the same engine step. So the
state carries, per request, that one step's record: whether it scheduled the
request, with n tokens of which d drafts (or padding), and the c
placeholders it added (0 for a prefill chunk, else 1 + d). The engine step
is `schedule()` (in the passes of `step.py`: P in what a request is owed, the skip
rule `rules.async_max_tokens_reached`, P and the record's output turned
stale on preemption, the stale skip in the waiting pass), then, per slot,
`after_schedule` below: the AsyncScheduler increment and the absorption of
the older record. With no step in flight (the loop's first step) no record
is set, and the absorption does nothing, which is the schedule-only step.

Why records and not the catalogue's sums: `placeholders-match-in-flight`
over I, P and stale is not inductive over the update (an oldest step that
was a prefill chunk of n = 2 gives I' = 0, P' = 1 from I = 2, P = 1;
`async_request.aggregate_counterexample`). `record_holds` is the per-request
`J` of `runs/async_request.py` over the one record; the feature run assumes it of
the pre-state and proves it of the post-state with every invariant, so the
assumption is discharged, not trusted.

What the older step's model returned is free, as in sync spec decode
(`spec_decode.py`): 0 <= accepted <= d drafts, and the stop token's
position among the 1 + accepted tokens. The placeholder drafts `-1` never
match in a real run, so accepted > 0 over-approximates; sound for proofs.
"""

from __future__ import annotations

from typing import Any

from ...reference_impl import rules
from ...spec.arith import and_, implies, ite, not_, or_
from ...spec.versions import DEFAULT_RELEASE
from .spec_decode import first_stop, kind_at
from .state import Bool, Int, Slot


def record_holds(running: Bool, C: Int, P: Int, f: Bool, n1: Int, d1: Int, c1: Int, k: Int) -> Bool:
    """The one step in flight, tied to the counters (`async_request.J`, less what the catalogue states)."""
    in_flight = and_(
        running, n1 >= 1, n1 <= C, d1 >= 0, d1 <= k, P == c1, c1 <= n1, or_(and_(c1 == 0, d1 == 0), c1 == 1 + d1)
    )
    return ite(f, in_flight, and_(P == 0, n1 == 0, d1 == 0, c1 == 0))


def after_schedule(
    s: Slot,
    C: Int,
    P: Int,
    S: Int,
    scheduled: Bool,
    n: Int,
    drafts: Int,
    stale: Bool,
    L: Int,
    k: Int,
    spec: bool,
    release: str = DEFAULT_RELEASE,
) -> dict[str, Any]:
    """One slot after `_update_after_schedule` and the absorption of the older step's record.

    `C` is already advanced by this step's grant `n`, `drafts` of them
    scheduled drafts; `stale` says the request was preempted in this
    step's schedule() while the older step was in flight with it, so its
    output is stale (`_preempt_request`: stale = in flight, and vLLM never
    drops it: `drop_stale_output` stays False).
    """
    # AsyncScheduler._update_after_schedule: a request not mid-prefill is owed its sampled token and drafts.
    decode = and_(scheduled, not_(C < s.num_tokens + P))  # is_prefill_chunk: C < T + P
    c2 = ite(decode, 1 + drafts, 0)
    P = P + c2
    if spec:  # [-1] * k placeholder drafts, which the worker fills in
        S = ite(decode, k, S)
    # update_from_output of the older step (update.py): tokens only for a step that was not a prefill chunk.
    d1 = s.in_flight_num_drafts
    sampled = and_(s.in_flight, s.in_flight_placeholders > 0)
    fresh = and_(sampled, not_(stale))
    m = 1 + s.num_accepted
    rejected = rules.num_rejected_drafts(d1, m)
    C = ite(and_(fresh, d1 > 0, C > 0), C - rejected, C)  # both sides of "owed" move together
    P = ite(and_(fresh, d1 > 0, P > 0), P - rejected, P)
    p = first_stop(s, m, L, release)  # stale output is appended and checked too, only C and P stay
    done = and_(sampled, p <= m)
    appended = ite(done, p, m)
    C = C - ite(and_(done, not_(stale)), m - p, 0)
    P = ite(and_(fresh, P > 0), P - m, P)  # every returned token resolves a placeholder, trimmed ones too
    return dict(
        C=C,
        P=P,
        S=S,
        T=s.num_tokens + ite(sampled, appended, 0),
        done=done,
        kind=kind_at(s, p, L, release),
        stop_seen=and_(sampled, or_(s.samples_eos, s.samples_stop), s.stop_at <= appended),
        in_flight=and_(scheduled, not_(done)),
        in_flight_num_scheduled=ite(scheduled, n, 0),
        in_flight_num_drafts=ite(scheduled, drafts, 0),
        in_flight_placeholders=c2,
        inputs=[
            s.num_accepted >= 0,
            s.num_accepted <= d1,
            s.stop_at >= 1,
            s.stop_at <= m,
            implies(not_(sampled), and_(s.num_accepted == 0, s.stop_at == 1)),
        ],
    )
