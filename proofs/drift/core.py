"""The encoding must not drift from the reference: both take the same concrete step, compared through the abstraction.

`compare(state, sampled)` evaluates `encoding.step` on Python ints built from
a concrete `SchedulerState` (canonical slot order: running, then waiting),
steps the reference from the same state with the same sampled tokens, and
returns every field where the two differ, seen through the encoding's
abstraction: block counts instead of ids, queue positions, the free count.
The test drives it over thousands of states reached by the reference on
generated workloads.
"""

from __future__ import annotations

from typing import Any

from ...reference_impl import api
from ...spec.output import ModelRunnerOutput
from ...spec.request import RequestStatus
from ...spec.state import SchedulerState
from ..encoding.state import Config, Pre, Slot
from ..encoding.step import step


def from_state(state: SchedulerState, sampled: dict[str, int]) -> tuple[Pre, list[str]]:
    c = state.config
    times = sorted({r.request.arrival_time for r in state.requests.values()})
    ids = sorted(state.requests)
    order = list(state.running) + list(state.waiting)
    slots = []
    for rid in order:
        r = state.requests[rid]
        q = r.request
        token = sampled.get(rid)
        slots.append(
            Slot(
                num_prompt_tokens=q.num_prompt_tokens,
                num_output_tokens=r.num_output_tokens,
                num_computed_tokens=r.num_computed_tokens,
                num_blocks=len(r.block_ids),
                max_tokens=q.max_tokens,
                min_tokens=q.min_tokens,
                priority=q.priority,
                arrival=times.index(q.arrival_time),
                id_rank=ids.index(rid),
                preempted=r.status == RequestStatus.PREEMPTED,
                samples_eos=token is not None and token == q.effective_eos_token_id,
                samples_stop=token is not None and token in q.stop_token_ids,
            )
        )
    config = Config(
        token_budget=c.token_budget,
        max_num_seqs=c.max_num_seqs,
        max_model_len=c.max_model_len,
        block_size=c.block_size,
        num_usable_blocks=c.num_usable_blocks,
        long_prefill_token_threshold=c.long_prefill_token_threshold,
        watermark_blocks=c.watermark_blocks,
        enable_chunked_prefill=c.enable_chunked_prefill,
        scheduler_reserve_full_isl=c.scheduler_reserve_full_isl,
        adaptive=c.long_prefill_token_threshold_adaptive,
        fcfs=c.policy == "fcfs",
        release=c.vllm_version,
    )
    return Pre(config, slots, len(state.running), state.num_free_blocks), order


def compare(state: SchedulerState, sampled: dict[str, int]) -> list[tuple[str, Any, Any]]:
    """(field, encoding's value, reference's value) for every disagreement; empty when they agree."""
    pre, order = from_state(state, sampled)
    enc = step(pre)
    output, after = api.schedule(state)
    tokens = {
        rid: () if after.requests[rid].num_computed_tokens < after.requests[rid].num_tokens else (sampled[rid],)
        for rid in output.num_scheduled_tokens
    }
    post, finished = api.update_from_output(after, output, ModelRunnerOutput(tokens))
    return diff_through_abstraction(enc, order, output, post, finished)


def diff_through_abstraction(
    enc: Any, order: list[str], output: Any, post: SchedulerState, finished: Any, spec_decode: bool = False
) -> list[tuple[str, Any, Any]]:
    """The encoding's step against the reference's, field by field through the abstraction (counts, positions).

    Shared by the core and the feature drift checks, so both compare the same fields; `spec_decode` adds the
    drafts scheduled and held.
    """
    admitted = {n.req_id for n in output.scheduled_new_reqs}
    diffs: list[tuple[str, Any, Any]] = []

    def same(field: str, a: Any, b: Any) -> None:
        if a != b:
            diffs.append((field, a, b))

    same("num_free_blocks", enc.num_free_blocks, post.num_free_blocks)
    for j, rid in enumerate(order):
        live = post.requests.get(rid)
        same(f"{rid}.num_scheduled", enc.num_scheduled[j], output.num_scheduled_tokens.get(rid, 0))
        if spec_decode:
            same(
                f"{rid}.num_scheduled_spec",
                enc.num_scheduled_spec[j],
                len(output.scheduled_spec_decode_tokens.get(rid, ())),
            )
        same(f"{rid}.admitted", enc.admitted[j], rid in admitted)
        same(f"{rid}.preempted", enc.preempted[j], rid in output.preempted_req_ids)
        same(f"{rid}.finished", enc.finished[j], rid in finished)
        same(f"{rid}.run_pos", enc.run_pos[j], post.running.index(rid) if rid in post.running else -1)
        same(f"{rid}.wait_pos", enc.wait_pos[j], post.waiting.index(rid) if rid in post.waiting else -1)
        if live is not None:
            same(f"{rid}.num_computed_tokens", enc.num_computed_tokens[j], live.num_computed_tokens)
            same(f"{rid}.num_tokens", enc.num_tokens[j], live.num_tokens)
            same(f"{rid}.num_blocks", enc.num_blocks[j], len(live.block_ids))
            if spec_decode:
                same(f"{rid}.num_spec_tokens", enc.num_spec_tokens[j], len(live.spec_token_ids))
    return diffs
