"""Symbolic pre-states, and the views through which the catalogue's invariants read a step.

`fresh(n, fcfs, block_size)` makes a canonical state of n live requests with
every length, counter, budget and pool size an unbounded Z3 integer, plus
the constraints any real state satisfies before the invariants are assumed
(`well_formed`): vLLM's config validation, SamplingParams' bounds, the
heap order of a PRIORITY waiting queue, and distinct request ids.

`step_view` and `state_view` turn the encoding's slots into the
`spec.invariants.views.StepView` the catalogue reads; the invariants are not
restated here. A state invariant is a catalogue predicate on the degenerate
view of one state, where nothing is scheduled.
"""

from __future__ import annotations

from typing import Any

import z3

from ...spec.arith import and_, implies, ite, not_
from ...spec.invariants.views import Row, StepView
from ...spec.versions import DEFAULT_RELEASE, holds
from .async_scheduling import record_holds
from .order import heap_before
from .state import Config, Post, Pre, Slot


def fresh(
    n: int,
    fcfs: bool,
    block_size: int,
    num_running: int | None = None,
    prefix: str = "",
    spec_decode: bool = False,
    prefix_caching: bool = False,
    async_scheduling: bool = False,
    release: str = DEFAULT_RELEASE,
) -> Pre:
    """Fresh symbols for an N-request pre-state at `release` (a concrete release: each variant rule is fixed)."""
    I, B = (lambda name: z3.Int(prefix + name)), (lambda name: z3.Bool(prefix + name))
    config = Config(
        token_budget=I("token_budget"),
        max_num_seqs=I("max_num_seqs"),
        max_model_len=I("max_model_len"),
        block_size=block_size,
        num_usable_blocks=I("num_usable_blocks"),
        long_prefill_token_threshold=I("long_prefill_token_threshold"),
        watermark_blocks=I("watermark_blocks"),
        enable_chunked_prefill=B("enable_chunked_prefill"),
        scheduler_reserve_full_isl=B("scheduler_reserve_full_isl"),
        # The adaptive threshold is no knob before 0.31.0 (the config refuses it), so it is off there.
        adaptive=B("long_prefill_token_threshold_adaptive")
        if holds("active-seqs-and-adaptive-threshold", release)
        else False,
        fcfs=fcfs,
        release=release,
    )
    slots = [
        Slot(
            num_prompt_tokens=I(f"prompt_{i}"),
            num_output_tokens=I(f"outputs_{i}"),
            num_computed_tokens=I(f"computed_{i}"),
            num_blocks=I(f"blocks_{i}"),
            max_tokens=I(f"max_tokens_{i}"),
            min_tokens=I(f"min_tokens_{i}"),
            priority=I(f"priority_{i}"),
            arrival=I(f"arrival_{i}"),
            id_rank=I(f"id_rank_{i}"),
            preempted=B(f"preempted_{i}"),
            samples_eos=B(f"samples_eos_{i}"),
            samples_stop=B(f"samples_stop_{i}"),
        )
        for i in range(n)
    ]
    if spec_decode:  # k, each slot's drafts and prefill flag, and what its model and drafter return: all free
        config.spec_decode, config.num_speculative_tokens = True, I("num_speculative_tokens")
        for i, s in enumerate(slots):
            s.num_spec_tokens, s.is_prefill_chunk = I(f"spec_tokens_{i}"), B(f"is_prefill_chunk_{i}")
            s.num_accepted, s.stop_at, s.num_new_drafts = I(f"accepted_{i}"), I(f"stop_at_{i}"), I(f"new_drafts_{i}")
    pre = Pre(config, slots, I("num_running") if num_running is None else num_running, I("num_free_blocks"))
    if prefix_caching:  # each slot's hit and sharing, and the shared table entries: free (prefix_caching.py)
        config.prefix_caching, pre.num_shared_refs = True, I("num_shared_refs")
        for i, s in enumerate(slots):
            s.hit_blocks, s.evictable, s.shared_freed = (
                I(f"hit_blocks_{i}"),
                I(f"evictable_{i}"),
                I(f"shared_freed_{i}"),
            )
    if async_scheduling:  # P and the one step in flight; what its model returned (async_scheduling.py)
        config.async_scheduling = True
        for i, s in enumerate(slots):
            s.num_output_placeholders, s.in_flight = I(f"placeholders_{i}"), B(f"in_flight_{i}")
            s.in_flight_num_scheduled, s.in_flight_placeholders = (
                I(f"in_flight_n_{i}"),
                I(f"in_flight_placeholders_{i}"),
            )
            if spec_decode:  # without drafts the model returns one token: accepted 0, stop_at 1
                s.in_flight_num_drafts = I(f"in_flight_drafts_{i}")
    return pre


def well_formed(pre: Pre) -> list[Any]:
    c, slots, n = pre.config, pre.slots, len(pre.slots)
    facts = [
        c.max_num_seqs >= 1,
        c.token_budget >= c.max_num_seqs,
        c.max_model_len >= 2,
        c.long_prefill_token_threshold >= 0,
        c.long_prefill_token_threshold <= c.max_model_len,
        c.watermark_blocks >= 0,
        c.watermark_blocks <= c.num_usable_blocks,  # watermark < 1
        c.num_usable_blocks >= 0,
        pre.num_free_blocks >= 0,
        implies(not_(c.enable_chunked_prefill), c.token_budget >= c.max_model_len),
        pre.num_running >= 0,
        pre.num_running <= n,
    ]
    for i, s in enumerate(slots):
        facts += [
            s.num_prompt_tokens >= 1,
            s.num_output_tokens >= 0,
            s.max_tokens >= 1,
            s.min_tokens >= 0,
            s.min_tokens <= s.max_tokens,
            s.arrival >= 0,
            s.id_rank >= 0,
            s.id_rank < n,
            implies(pre.running(i), not_(s.preempted)),
        ]
        facts += [s.id_rank != t.id_rank for t in slots[i + 1 :]]
        if not c.fcfs and i + 1 < n:  # the heap pops in Request.__lt__ order
            facts.append(implies(not_(pre.running(i)), heap_before(s, slots[i + 1])))
    if c.spec_decode:  # spec/config.py: k >= 1 here, and exp1's threshold (1 <= thr < 1 + k) is refused
        k = c.num_speculative_tokens
        facts += [k >= 1, z3.Or(c.long_prefill_token_threshold == 0, c.long_prefill_token_threshold >= 1 + k)]
        facts += [z3.And(s.num_spec_tokens >= 0, s.num_spec_tokens <= k) for s in slots]
    if c.prefix_caching:  # an extra table entry is an entry of some held block
        facts += [pre.num_shared_refs >= 0, pre.num_shared_refs <= sum(s.num_blocks for s in slots)]
    if c.async_scheduling:  # assumed here, proved of the post-state with every invariant (runs/features.py)
        facts += [in_flight_record(pre, i) for i in range(n)]
    return facts


def in_flight_record(pre: Pre, i: int) -> Any:
    s = pre.slots[i]
    return record_holds(
        pre.running(i),
        s.num_computed_tokens,
        s.num_output_placeholders,
        s.in_flight,
        s.in_flight_num_scheduled,
        s.in_flight_num_drafts,
        s.in_flight_placeholders,
        pre.config.num_speculative_tokens,
    )


def post_in_flight_record(pre: Pre, post: Post) -> Any:
    """The record of the step now in flight, for every request still live after the step."""
    return and_(
        *[
            implies(
                not_(post.finished[i]),
                record_holds(
                    post.running[i],
                    post.num_computed_tokens[i],
                    post.num_output_placeholders[i],
                    post.in_flight[i],
                    post.in_flight_num_scheduled[i],
                    post.in_flight_num_drafts[i],
                    post.in_flight_placeholders[i],
                    pre.config.num_speculative_tokens,
                ),
            )
            for i in range(len(pre.slots))
        ]
    )


def _spec(pre: Pre, pre_s: list[Any], scheduled: list[Any], post_s: list[Any]) -> list[dict[str, Any]]:
    """The spec-decode fields of each row (none in the core scope, so its views are what they were)."""
    rows: list[dict[str, Any]] = [{} for _ in pre.slots]
    if pre.config.spec_decode:
        for row, a, b, c in zip(rows, pre_s, scheduled, post_s):
            row.update(pre_num_spec_tokens=a, num_scheduled_spec=b, post_num_spec_tokens=c)
    return rows


def _async(pre: Pre, P0: list[Any], P1: list[Any], in_flight: list[Any]) -> list[dict[str, Any]]:
    """The async fields of each row (none outside async): P before and after, and the tokens now in flight.

    Between engine steps no output is stale: the queue of 2 absorbs a stale step in the step that made it stale.
    """
    if not pre.config.async_scheduling:
        return [{} for _ in pre.slots]
    return [
        dict(pre_num_output_placeholders=a, post_num_output_placeholders=b, post_num_in_flight_tokens=c)
        for a, b, c in zip(P0, P1, in_flight)
    ]


def _pre_async(pre: Pre) -> list[dict[str, Any]]:
    P = [s.num_output_placeholders for s in pre.slots]
    return _async(pre, P, P, [ite(s.in_flight, s.in_flight_num_scheduled, 0) for s in pre.slots])


def _post_async(pre: Pre, post: Post, P0: list[Any]) -> list[dict[str, Any]]:
    if not pre.config.async_scheduling:
        return [{} for _ in pre.slots]
    return _async(
        pre,
        P0,
        post.num_output_placeholders,
        [ite(f, n, 0) for f, n in zip(post.in_flight, post.in_flight_num_scheduled)],
    )


def caching_terms(pre: Pre, shared: Any) -> dict[str, Any]:
    """The prefix-caching globals of a view (none in the core scope)."""
    return dict(enable_prefix_caching=True, post_num_shared_block_refs=shared) if pre.config.prefix_caching else {}


def global_terms(pre: Pre) -> dict[str, Any]:
    c = pre.config
    return dict(
        token_budget=c.token_budget,
        max_num_seqs=c.max_num_seqs,
        max_model_len=c.max_model_len,
        block_size=c.block_size,
        num_usable_blocks=c.num_usable_blocks,
        long_prefill_token_threshold=c.long_prefill_token_threshold,
        threshold_adaptive=c.adaptive,
        fcfs=c.fcfs,
        vllm_version=c.release,
        watermark_blocks=c.watermark_blocks,
        enable_chunked_prefill=c.enable_chunked_prefill,
        scheduler_reserve_full_isl=c.scheduler_reserve_full_isl,
        **({"num_speculative_tokens": c.num_speculative_tokens} if c.spec_decode else {}),
        **({"async_scheduling": True} if c.async_scheduling else {}),
    )


def step_view(pre: Pre, post: Post) -> StepView:
    rows = []
    spec = _spec(pre, [s.num_spec_tokens for s in pre.slots], post.num_scheduled_spec, post.num_spec_tokens)
    asy = _post_async(pre, post, [s.num_output_placeholders for s in pre.slots])
    for i, row in enumerate(spec):
        if pre.config.prefix_caching:
            row["num_hit_tokens"] = post.num_hit_tokens[i]
    for i, s in enumerate(pre.slots):
        run = pre.running(i)
        rows.append(
            Row(
                request_id=f"s{i}",
                num_prompt_tokens=s.num_prompt_tokens,
                max_tokens=s.max_tokens,
                min_tokens=s.min_tokens,
                priority=s.priority,
                arrival=s.arrival,
                pre_live=True,
                pre_running=run,
                pre_waiting=not_(run),
                pre_preempted=and_(not_(run), s.preempted),
                pre_run_pos=ite(run, i, -1),
                pre_wait_pos=ite(run, -1, i - pre.num_running),
                pre_num_computed_tokens=s.num_computed_tokens,
                pre_num_tokens=s.num_tokens,
                pre_num_blocks=s.num_blocks,
                scheduled=post.scheduled[i],
                num_scheduled=post.num_scheduled[i],
                admitted=post.admitted[i],
                preempted=post.preempted[i],
                post_live=not_(post.finished[i]),
                post_running=post.running[i],
                post_waiting=post.waiting[i],
                post_run_pos=post.run_pos[i],
                post_wait_pos=post.wait_pos[i],
                post_num_computed_tokens=post.num_computed_tokens[i],
                post_num_tokens=post.num_tokens[i],
                post_num_blocks=post.num_blocks[i],
                sampled_stop=post.sampled_stop[i],
                finished_stopped=post.finished_stopped[i],
                **spec[i],
                **asy[i],
            )
        )
    return StepView(
        rows=tuple(rows),
        pre_num_free_blocks=pre.num_free_blocks,
        post_num_free_blocks=post.num_free_blocks,
        **global_terms(pre),
        **caching_terms(pre, post.num_shared_refs),
    )


def state_view(pre: Pre) -> StepView:
    """The pre-state on its own: nothing scheduled, before and after the same."""
    rows = []
    held = [s.num_spec_tokens for s in pre.slots]
    spec = _spec(pre, held, [0] * len(held), held)
    asy = _pre_async(pre)
    for i, s in enumerate(pre.slots):
        run = pre.running(i)
        waiting_pos = ite(run, -1, i - pre.num_running)
        common = dict(num_computed_tokens=s.num_computed_tokens, num_tokens=s.num_tokens, num_blocks=s.num_blocks)
        rows.append(
            Row(
                request_id=f"s{i}",
                num_prompt_tokens=s.num_prompt_tokens,
                max_tokens=s.max_tokens,
                min_tokens=s.min_tokens,
                priority=s.priority,
                arrival=s.arrival,
                pre_live=True,
                pre_running=run,
                pre_waiting=not_(run),
                pre_preempted=and_(not_(run), s.preempted),
                pre_run_pos=ite(run, i, -1),
                pre_wait_pos=waiting_pos,
                scheduled=False,
                num_scheduled=0,
                admitted=False,
                preempted=False,
                post_live=True,
                post_running=run,
                post_waiting=not_(run),
                post_run_pos=ite(run, i, -1),
                post_wait_pos=waiting_pos,
                **{f"pre_{k}": v for k, v in common.items()},
                **{f"post_{k}": v for k, v in common.items()},
                **spec[i],
                **asy[i],
            )
        )
    return StepView(
        rows=tuple(rows),
        pre_num_free_blocks=pre.num_free_blocks,
        post_num_free_blocks=pre.num_free_blocks,
        **global_terms(pre),
        **caching_terms(pre, pre.num_shared_refs),
    )


def post_state_view(pre: Pre, post: Post) -> StepView:
    """The state after the step on its own, as the next step's pre-state would see it."""
    rows = []
    spec = _spec(pre, post.num_spec_tokens, [0] * len(pre.slots), post.num_spec_tokens)
    asy = _post_async(pre, post, post.num_output_placeholders)
    for i, s in enumerate(pre.slots):
        common = dict(
            num_computed_tokens=post.num_computed_tokens[i],
            num_tokens=post.num_tokens[i],
            num_blocks=post.num_blocks[i],
        )
        live, run, wait = not_(post.finished[i]), post.running[i], post.waiting[i]
        rows.append(
            Row(
                request_id=f"s{i}",
                num_prompt_tokens=s.num_prompt_tokens,
                max_tokens=s.max_tokens,
                min_tokens=s.min_tokens,
                priority=s.priority,
                arrival=s.arrival,
                pre_live=live,
                pre_running=run,
                pre_waiting=wait,
                pre_preempted=and_(wait, ite(post.preempted[i], True, s.preempted)),
                pre_run_pos=post.run_pos[i],
                pre_wait_pos=post.wait_pos[i],
                scheduled=False,
                num_scheduled=0,
                admitted=False,
                preempted=False,
                post_live=live,
                post_running=run,
                post_waiting=wait,
                post_run_pos=post.run_pos[i],
                post_wait_pos=post.wait_pos[i],
                **{f"pre_{k}": v for k, v in common.items()},
                **{f"post_{k}": v for k, v in common.items()},
                **spec[i],
                **asy[i],
            )
        )
    return StepView(
        rows=tuple(rows),
        pre_num_free_blocks=post.num_free_blocks,
        post_num_free_blocks=post.num_free_blocks,
        **global_terms(pre),
        **caching_terms(pre, post.num_shared_refs),
    )
