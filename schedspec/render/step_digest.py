"""What a person wants to see of a step: tokens split into decodes and prefill chunks.

A scheduled request is *decoding* when it got exactly one token besides its
drafts and its prompt was already computed (at most its last token left);
anything else is a prefill chunk, including a resumed request recomputing
prompt and outputs. The rule reads only the output, so it holds under async
scheduling too, where `num_tokens` lags one step behind.
The table and the plot both read steps through this one classification.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.trace import StepRecord, Trace
from ..spec.workload import Workload


@dataclass(frozen=True)
class StepDigest:
    step: int
    total: int
    decode_reqs: int
    decode_tokens: int
    prefill_chunks: tuple[tuple[str, int], ...]  # (request id, tokens), in schedule order
    new: tuple[str, ...]
    resumed: tuple[str, ...]
    preempted: tuple[str, ...]
    finished: tuple[str, ...]  # in this step (not finished_req_ids, which lags a step)
    running: int
    waiting: int
    free_blocks: int
    decodes: tuple[str, ...] = ()  # the decoding requests, in schedule order (the timeline's lanes)
    waiting_ids: tuple[str, ...] = ()  # the waiting queue after the step, in order


def views(trace: Trace) -> list[StepDigest]:
    return [step_digest(record, trace.workload) for record in trace.steps]


def step_digest(record: StepRecord, workload: Workload) -> StepDigest:
    """One step on its own: a run being streamed is viewed a step at a time, never kept whole."""
    o = record.output
    computed_before = {r.req_id: r.num_computed_tokens for r in o.scheduled_new_reqs}
    computed_before.update({r.req_id: r.num_computed_tokens for r in o.scheduled_cached_reqs})
    decode_tokens = 0
    chunks, decodes = [], []
    for rid, n in o.num_scheduled_tokens.items():
        num_drafts = len(o.scheduled_spec_decode_tokens.get(rid, ()))
        if n - num_drafts == 1 and computed_before[rid] >= workload.request(rid).request.num_prompt_tokens - 1:
            decodes.append(rid)
            decode_tokens += n
        else:
            chunks.append((rid, n))
    return StepDigest(
        step=record.step,
        total=o.total_num_scheduled_tokens,
        decode_reqs=len(decodes),
        decode_tokens=decode_tokens,
        prefill_chunks=tuple(chunks),
        new=tuple(r.req_id for r in o.scheduled_new_reqs if not r.resumed),
        resumed=tuple(r.req_id for r in o.scheduled_new_reqs if r.resumed),
        preempted=tuple(sorted(o.preempted_req_ids)),
        # The requests that finished in this step (its update, or an abort before it), beside the queues and free
        # blocks they left; the output's finished_req_ids reports the same ids a step later (I-18).
        finished=tuple(sorted(record.finished)),
        running=len(record.state.running),
        waiting=len(record.state.waiting),
        free_blocks=record.state.num_free_blocks,
        decodes=tuple(decodes),
        waiting_ids=tuple(record.state.waiting),
    )
