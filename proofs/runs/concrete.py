"""From a Z3 model back to a concrete scheduler state, and the replay that confirms it.

A counterexample to induction is a symbolic pre-state; to be reported it
must become a real `SchedulerState` that the reference can step, and the
reference's step must break the same invariant. Block counts become block
ids (running requests take ids from 1 upward in running order; the rest form
the free queue), the abstract "samples EOS / a stop token" flags become the
EOS id 2 and the stop token 5, and request ids are chosen so that their
string order is the model's `id_rank` order.

With spec decode a request holds `S` drafts (token 13), keeps the model's
`is_prefill_chunk` flag, and what it samples is a list: 1 + accepted
tokens, the EOS or stop token at `stop_at` if the model put one there;
`drafts` is the drafter's next proposal, applied after the update as
`update_draft_token_ids` does. Such a `sampled` entry is a dict.

With prefix caching every request gets its own prompt token (100 + its
id rank), so no two hash chains meet, and a waiting request's modelled hit
of h blocks becomes h blocks at the tail of the free queue (ref count 0,
evictable), cached under the hashes of its own first h blocks: the
reference's lookup then finds exactly those. A hit on blocks that another
request holds, or shared blocks in the pre-state, would need twins with a
common prefix; `features.py` asks Z3 first for a counterexample without
them, and one that needs them is built without the sharing, so its replay
may not confirm it (`unconfirmed`, never `violated` unchecked).

Under async scheduling a request also holds its placeholders and the tokens
of the step in flight, and its `sampled` entry is that step's record
(`in_flight: [tokens, drafts]`, or None) with the tokens its model returns
(none for a prefill chunk). `replay` then runs the engine loop's step:
schedule, then absorb the record as the `SchedulerOutput` it was scheduled
with and its `ModelRunnerOutput`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ...reference_impl import api
from ...spec.block_hash import block_hashes, chain_seed
from ...spec.config import SchedulerConfig
from ...spec.invariants import Invariant
from ...spec.invariants.build import view_from_states
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.state import RequestState, SchedulerState
from ..encoding.state import Pre

EOS, STOP, PLAIN, DRAFT = 2, 5, 7, 13


# Per request id: the token it samples; under spec decode or async scheduling a dict, the tokens the model
# returns and the drafter's proposal, or the step in flight (`to_state`).
Sampled = dict[str, int | dict[str, Any]]


def _val(model: z3.ModelRef, term: Any) -> Any:
    if isinstance(term, (bool, int)):
        return term
    v = model.eval(term, model_completion=True)
    return z3.is_true(v) if z3.is_bool(v) else v.as_long()


def to_state(model: z3.ModelRef, pre: Pre) -> tuple[SchedulerState, Sampled]:
    """The concrete pre-state, and the token each request samples if it completes its prefill (a dict under spec
    decode or async scheduling: the tokens the model returns, and the drafter's proposal or the step in flight)."""
    c = pre.config
    v = lambda t: _val(model, t)  # noqa: E731
    usable, wm = v(c.num_usable_blocks), v(c.watermark_blocks)
    config = SchedulerConfig(
        max_num_batched_tokens=v(c.token_budget),
        max_num_seqs=v(c.max_num_seqs),
        max_model_len=v(c.max_model_len),
        block_size=c.block_size,
        num_gpu_blocks=usable + 1,
        long_prefill_token_threshold=v(c.long_prefill_token_threshold),
        long_prefill_token_threshold_adaptive=v(c.adaptive),
        enable_chunked_prefill=v(c.enable_chunked_prefill),
        policy="fcfs" if c.fcfs else "priority",
        watermark=(wm + 0.5) / (usable + 1),
        scheduler_reserve_full_isl=v(c.scheduler_reserve_full_isl),
        num_speculative_tokens=v(c.num_speculative_tokens),
        enable_prefix_caching=c.prefix_caching,
        async_scheduling=c.async_scheduling,
        vllm_version=c.release,
    )
    num_running = v(pre.num_running)
    requests: dict[str, RequestState] = {}
    sampled: Sampled = {}
    order, next_block = [], 1
    for i, s in enumerate(pre.slots):
        rid = f"r{v(s.id_rank):02d}"
        running = i < num_running
        blocks = tuple(range(next_block, next_block + v(s.num_blocks)))
        next_block += len(blocks)
        request = Request(
            rid,
            (100 + v(s.id_rank) if c.prefix_caching else 10,) * v(s.num_prompt_tokens),
            max_tokens=v(s.max_tokens),
            min_tokens=v(s.min_tokens),
            eos_token_id=EOS,
            stop_token_ids=(STOP,),
            priority=v(s.priority),
            arrival_time=float(v(s.arrival)),
        )
        status = (
            RequestStatus.RUNNING if running else (RequestStatus.PREEMPTED if v(s.preempted) else RequestStatus.WAITING)
        )
        requests[rid] = RequestState(
            request,
            status,
            output_token_ids=(11,) * v(s.num_output_tokens),
            num_computed_tokens=v(s.num_computed_tokens),
            block_ids=blocks,
            spec_token_ids=(DRAFT,) * v(s.num_spec_tokens),
            is_prefill_chunk=v(s.is_prefill_chunk),
            num_output_placeholders=v(s.num_output_placeholders),
            num_in_flight_tokens=v(s.in_flight_num_scheduled) if v(s.in_flight) else 0,
        )
        token = EOS if v(s.samples_eos) else STOP if v(s.samples_stop) else PLAIN
        sampled[rid] = token
        if c.spec_decode or c.async_scheduling:
            tokens = [PLAIN] * (1 + v(s.num_accepted))
            if token != PLAIN and 1 <= v(s.stop_at) <= len(tokens):
                tokens[v(s.stop_at) - 1] = token
            sampled[rid] = {"tokens": tokens, "drafts": v(s.num_new_drafts)}
        if c.async_scheduling:  # what the step in flight scheduled; it returns tokens unless it was a prefill chunk
            flight = v(s.in_flight)
            sampled[rid] = {
                "tokens": tokens if flight and v(s.in_flight_placeholders) > 0 else [],
                "in_flight": [v(s.in_flight_num_scheduled), v(s.in_flight_num_drafts)] if flight else None,
            }
        order.append(rid)
    free = tuple(range(next_block, usable + 1))
    state = SchedulerState(
        config=config,
        requests=requests,
        running=tuple(order[:num_running]),
        waiting=tuple(order[num_running:]),
        free_block_queue=free,
    )
    if c.prefix_caching:
        state = _with_cache(state, [v(s.hit_blocks) for s in pre.slots], order)
    return state, sampled


def _with_cache(state: SchedulerState, hits: list[int], order: list[str]) -> SchedulerState:
    """Each waiting request's hit as evictable cached blocks at the tail of the free queue."""
    free, cached, bs = list(state.free_block_queue), {}, state.config.block_size
    tail: list[int] = []
    for rid, h in zip(order, hits):
        r = state.requests[rid]
        if rid in state.running or h <= 0:
            continue
        tokens = r.request.prompt_token_ids + r.output_token_ids
        for block_hash in block_hashes(tokens, bs, seed=chain_seed(r.request.lora_int_id))[:h]:
            if free:
                tail.insert(0, free.pop())
                cached[block_hash] = (tail[0],)
    ref_cnt = {b: 1 for r in state.requests.values() for b in r.block_ids}
    return replace(state, free_block_queue=tuple(free + tail), block_ref_cnt=ref_cnt, cached_block_hash_to_block=cached)


def _draft(
    post: SchedulerState, output: SchedulerOutput, model_output: ModelRunnerOutput, sampled: dict[str, Any]
) -> SchedulerState:
    """The sync drafter: a proposal for each request that sampled and still runs (spec/engine.py `Drafter`)."""
    proposals = {
        rid: (DRAFT,) * sampled[rid]["drafts"]
        for rid in output.num_scheduled_tokens
        if isinstance(sampled[rid], dict)
        and model_output.sampled_token_ids.get(rid)
        and rid in post.requests
        and post.requests[rid].status == RequestStatus.RUNNING
        and sampled[rid]["drafts"] > 0
    }
    if not proposals:
        return post
    scheduler = api.thaw(post)
    scheduler.update_draft_token_ids(proposals)
    return api.freeze(scheduler)


def _in_flight(state: SchedulerState, sampled: dict[str, Any]) -> tuple[SchedulerOutput, ModelRunnerOutput]:
    """Async: the older step, still in flight, as the output it was scheduled with and what its model returned."""
    flight = {rid: sampled[rid]["in_flight"] for rid in state.running if sampled[rid].get("in_flight")}
    output = SchedulerOutput(
        num_scheduled_tokens={rid: n for rid, (n, _) in flight.items()},
        scheduled_spec_decode_tokens={rid: (-1,) * d for rid, (_, d) in flight.items() if d > 0},
    )
    return output, ModelRunnerOutput({rid: tuple(sampled[rid]["tokens"]) for rid in flight})


def replay(state: SchedulerState, sampled: dict[str, Any], invariant: Invariant) -> tuple[bool, dict[str, Any]]:
    """Step the reference from `state`; True if it breaks `invariant`. Also returns what happened, for the report.

    Under async the step is the engine loop's with a queue of 2: schedule, then absorb the older step in flight.
    """
    try:
        output, after_schedule = api.schedule(state)
    except AssertionError as e:
        return True, {"error": f"the reference's own assertion failed: {e}"}
    if state.config.async_scheduling:
        absorbed, model_output = _in_flight(state, sampled)
        post, finished = api.update_from_output(after_schedule, absorbed, model_output)
    else:
        tokens = {}
        for rid in output.num_scheduled_tokens:
            r = after_schedule.requests[rid]
            planted = sampled[rid]
            tokens[rid] = (
                ()
                if r.num_computed_tokens < r.num_tokens
                else (tuple(planted["tokens"]) if isinstance(planted, dict) else (planted,))
            )
        model_output = ModelRunnerOutput(tokens)
        post, finished = api.update_from_output(after_schedule, output, model_output)
        post = _draft(post, output, model_output, sampled)
    broken = not invariant.holds(view_from_states(state, output, post, model_output, finished))
    if invariant.state:
        broken = broken or not invariant.holds(view_from_states(post, SchedulerOutput(), post))
    return broken, {"output": output, "model_output": model_output, "post": post, "finished": finished}
