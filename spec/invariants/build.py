"""Concrete `StepView`s: from full scheduler states, or from any engine's trace.

From states (the reference, CrossHair, the Hypothesis state machine) every
field is read directly. From a trace, which holds only what every engine can
expose, two things are reconstructed:

* the state `schedule()` started from: the previous step's summary with this
  step's arrivals added (behind everyone under FCFS, in `Request.__lt__`
  order under PRIORITY) and its aborts removed;
* each request's block table, replayed from the block ids in the outputs
  (new requests list all their blocks, running ones only the new ones,
  preemption and finishing free them all).
"""

from __future__ import annotations

from typing import Iterator, Mapping

from ..config import SchedulerConfig
from ..output import ModelRunnerOutput, SchedulerOutput
from ..request import Request, RequestStatus
from ..state import SchedulerState
from ..trace import FinishedRequest, StateSummary, Trace
from .views import Row, StepView


def _ranks(requests: Mapping[str, Request]) -> dict[str, int]:
    times = sorted({r.arrival_time for r in requests.values()})
    rank = {t: i for i, t in enumerate(times)}
    return {rid: rank[r.arrival_time] for rid, r in requests.items()}


def _pos(queue: tuple[str, ...]) -> dict[str, int]:
    return {rid: i for i, rid in enumerate(queue)}


def _view(config: SchedulerConfig, requests: Mapping[str, Request], pre: Mapping[str, tuple], post: Mapping[str, tuple],
          pre_queues: tuple[tuple[str, ...], tuple[str, ...]], post_queues: tuple[tuple[str, ...], tuple[str, ...]],
          out: SchedulerOutput, pre_free: int, post_free: int, ids_problem: str = "",
          model_output: ModelRunnerOutput | None = None, finished: Mapping[str, FinishedRequest] | None = None) -> StepView:
    """`pre`/`post` map a live request id to (status, num_computed_tokens, num_tokens, num_blocks)."""
    ranks = _ranks(requests)
    pre_run, pre_wait = (_pos(q) for q in pre_queues)
    post_run, post_wait = (_pos(q) for q in post_queues)
    admitted = {n.req_id for n in out.scheduled_new_reqs}
    rows = []
    for rid in dict.fromkeys([*pre, *post]):
        q = requests[rid]
        s0 = pre.get(rid, (None, 0, q.num_prompt_tokens, 0))
        s1 = post.get(rid, (None, 0, 0, 0))
        rows.append(Row(
            request_id=rid, num_prompt_tokens=q.num_prompt_tokens, max_tokens=q.max_tokens, priority=q.priority,
            arrival=ranks[rid],
            pre_live=rid in pre, pre_running=rid in pre_run, pre_waiting=rid in pre_wait,
            pre_preempted=s0[0] == RequestStatus.PREEMPTED, pre_run_pos=pre_run.get(rid, -1), pre_wait_pos=pre_wait.get(rid, -1),
            pre_num_computed_tokens=s0[1], pre_num_tokens=s0[2], pre_num_blocks=s0[3],
            scheduled=rid in out.num_scheduled_tokens, num_scheduled=out.num_scheduled_tokens.get(rid, 0),
            admitted=rid in admitted, preempted=rid in out.preempted_req_ids,
            post_live=rid in post, post_running=rid in post_run, post_waiting=rid in post_wait,
            post_run_pos=post_run.get(rid, -1), post_wait_pos=post_wait.get(rid, -1),
            post_num_computed_tokens=s1[1], post_num_tokens=s1[2], post_num_blocks=s1[3],
            sampled_stop=_sampled_stop(q, model_output, rid),
            finished_stopped=finished is not None and rid in finished and finished[rid].status == RequestStatus.FINISHED_STOPPED,
        ))
    return StepView(
        rows=tuple(rows), token_budget=config.token_budget, max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len, block_size=config.block_size, num_usable_blocks=config.num_usable_blocks,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        threshold_adaptive=config.long_prefill_token_threshold_adaptive, fcfs=config.policy == "fcfs",
        pre_num_free_blocks=pre_free, post_num_free_blocks=post_free,
        ids_consistent=not ids_problem, ids_problem=ids_problem,
    )


def _sampled_stop(request: Request, model_output: ModelRunnerOutput | None, rid: str) -> bool:
    tokens = model_output.sampled_token_ids.get(rid, ()) if model_output is not None else ()
    return any(t == request.effective_eos_token_id or t in request.stop_token_ids for t in tokens)


def _state_rows(s: SchedulerState) -> dict[str, tuple]:
    return {rid: (r.status, r.num_computed_tokens, r.num_tokens, len(r.block_ids)) for rid, r in s.requests.items()}


def _ids_problem(held: Mapping[str, tuple[int, ...]], free: tuple[int, ...] | None, num_gpu_blocks: int) -> str:
    owner: dict[int, str] = {}
    for rid, blocks in held.items():
        for b in blocks:
            if not 0 < b < num_gpu_blocks:
                return f"request {rid} holds block {b}, outside 1..{num_gpu_blocks - 1}"
            if b in owner:
                return f"block {b} is held by both {owner[b]} and {rid}"
            owner[b] = rid
    if free is not None:
        if len(set(free)) != len(free):
            return "the free queue holds a block twice"
        both = set(free) & set(owner)
        if both:
            b = min(both)
            return f"block {b} is free and held by {owner[b]}"
    return ""


def view_from_states(pre: SchedulerState, out: SchedulerOutput, post: SchedulerState,
                     model_output: ModelRunnerOutput | None = None,
                     finished: Mapping[str, FinishedRequest] | None = None) -> StepView:
    """`post` is the state after update_from_output with `model_output`, in which `finished` ended."""
    requests = {rid: r.request for rid, r in {**pre.requests, **post.requests}.items()}
    held = {rid: r.block_ids for rid, r in post.requests.items()}
    problem = _ids_problem(held, post.free_block_queue, post.config.num_gpu_blocks)
    return _view(pre.config, requests, _state_rows(pre), _state_rows(post), (pre.running, pre.waiting),
                 (post.running, post.waiting), out, pre.num_free_blocks, post.num_free_blocks, problem,
                 model_output, finished)


def _arrive(config: SchedulerConfig, waiting: tuple[str, ...], added: tuple[str, ...], requests: Mapping[str, Request]) -> tuple[str, ...]:
    if config.policy == "fcfs":
        return waiting + added
    return tuple(sorted(waiting + added, key=lambda rid: (requests[rid].priority, requests[rid].arrival_time, rid)))


def views_from_trace(trace: Trace) -> Iterator[StepView]:
    config = trace.workload.config
    requests = {r.request_id: r.request for r in trace.workload.requests}
    last = StateSummary(num_free_blocks=config.num_usable_blocks)
    blocks: dict[str, tuple[int, ...]] = {}
    for rec in trace.steps:
        gone = set(rec.aborted)
        added = tuple(rid for rid in rec.added if rid not in gone)
        pre_rows = {rid: (r.status, r.num_computed_tokens, r.num_tokens, len(blocks.get(rid, ())))
                    for rid, r in last.requests.items() if rid not in gone}
        for rid in added:
            pre_rows[rid] = (RequestStatus.WAITING, 0, requests[rid].num_prompt_tokens, 0)
        pre_running = tuple(r for r in last.running if r not in gone)
        pre_waiting = _arrive(config, tuple(r for r in last.waiting if r not in gone), added, requests)
        # Aborted requests free their blocks before schedule(); the trace shows only the count after the step.
        pre_free = last.num_free_blocks + sum(len(blocks.pop(rid, ())) for rid in rec.aborted)
        for n in rec.output.scheduled_new_reqs:
            blocks[n.req_id] = tuple(n.block_ids)
        for c in rec.output.scheduled_cached_reqs:
            blocks[c.req_id] = blocks.get(c.req_id, ()) + tuple(c.new_block_ids or ())
        for rid in rec.output.preempted_req_ids:
            blocks.pop(rid, None)
        for rid in rec.finished:
            blocks.pop(rid, None)
        post_rows = {rid: (r.status, r.num_computed_tokens, r.num_tokens, len(blocks.get(rid, ())))
                     for rid, r in rec.state.requests.items()}
        problem = _ids_problem(blocks, None, config.num_gpu_blocks)
        yield _view(config, requests, pre_rows, post_rows, (pre_running, pre_waiting), (rec.state.running, rec.state.waiting),
                    rec.output, pre_free, rec.state.num_free_blocks, problem, rec.model_output, rec.finished)
        last = rec.state
