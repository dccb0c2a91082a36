"""The reference's pure interface: frozen state in, output and new frozen state out.

These are the functions Hypothesis, CrossHair and the proofs drive. Each one
thaws the state into a fresh mutable `Scheduler`, runs vLLM's algorithm on
it, and freezes the result, so no call mutates its input, and no call depends
on anything but its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..spec.config import SchedulerConfig
from ..spec.controls import PauseState
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import Request, RequestStatus
from ..spec.state import PrefillCadence, SchedulerState
from ..spec.trace import FinishedRequest
from .async_scheduler import AsyncScheduler
from .block_pool import BlockPool
from .live_request import LiveRequest
from .request_queue import create_request_queue
from .scheduler import Scheduler


def initial_state(config: SchedulerConfig) -> SchedulerState:
    return SchedulerState.initial(config)


def scheduler_class_for(config: SchedulerConfig, base: type[Scheduler] = Scheduler) -> type[Scheduler]:
    """`base` for this config: under async scheduling, `base` with `AsyncScheduler`'s placeholders on top."""
    if not config.async_scheduling or issubclass(base, AsyncScheduler):
        return base
    if base is Scheduler:
        return AsyncScheduler
    if base not in _ASYNC:  # AsyncScheduler's one override first, then everything `base` overrides
        _ASYNC[base] = type(f"Async{base.__name__}", (AsyncScheduler, base), {"__module__": base.__module__})
    return _ASYNC[base]


_ASYNC: dict[type[Scheduler], type[Scheduler]] = {}  # a derived scheduler made async, built once


def thaw(state: SchedulerState, scheduler_class: type[Scheduler] = Scheduler) -> Scheduler:
    bs = state.config.block_size
    requests = {rid: LiveRequest.thaw(r, bs) for rid, r in state.requests.items()}
    scheduler_class = scheduler_class_for(state.config, scheduler_class)
    return scheduler_class(
        config=state.config,
        requests=requests,
        running=[requests[rid] for rid in state.running],
        waiting=create_request_queue(
            state.config.policy,
            (requests[rid] for rid in state.waiting),
            state.config.vllm_version,
            state.num_skipped_waiting,
        ),
        block_pool=BlockPool(
            state.free_block_queue,
            state.config.enable_prefix_caching,
            state.ref_cnt(),
            state.cached_block_hash_to_block,
        ),
        finished_req_ids=set(state.finished_req_ids),
        current_step=state.current_step,
        grammar_compile_error_reqs=set(state.grammar_compile_error_reqs),
        prefill_cadence=state.prefill_cadence,
        pause_state=PauseState(state.pause_state),
        reset_preempted_req_ids=set(state.reset_preempted_req_ids),
    )


def freeze(scheduler: Scheduler) -> SchedulerState:
    pool = scheduler.block_pool
    return SchedulerState(
        config=scheduler.config,
        requests={rid: r.freeze() for rid, r in scheduler.requests.items()},
        running=tuple(r.request_id for r in scheduler.running),
        waiting=tuple(r.request_id for r in scheduler.waiting),
        free_block_queue=tuple(scheduler.block_pool.free_block_queue),
        finished_req_ids=frozenset(scheduler.finished_req_ids),
        current_step=scheduler.current_step,
        # Without caching a block has one holder, so its ref count is derived, not stored.
        block_ref_cnt=dict(sorted(pool.ref_cnt.items())) if pool.enable_caching else None,
        cached_block_hash_to_block={h: tuple(bs) for h, bs in pool.cached_block_hash_to_block.items()},
        grammar_compile_error_reqs=frozenset(scheduler.grammar_compile_error_reqs),
        num_skipped_waiting=getattr(scheduler.waiting, "num_skipped", 0),
        prefill_cadence=PrefillCadence(
            scheduler.prefill_capacity_bound,
            frozenset(scheduler.deferred_waiting),
            scheduler.num_executed_steps,
            None if scheduler.last_prefill_step < 0 else scheduler.last_prefill_step,  # the initial one interval back
        ),
        pause_state=int(scheduler.pause_state),
        reset_preempted_req_ids=frozenset(scheduler.reset_preempted_req_ids),
    )


def add_request(state: SchedulerState, request: Request) -> SchedulerState:
    scheduler = thaw(state)
    scheduler.add_request(request)
    return freeze(scheduler)


def abort(state: SchedulerState, request_ids: Iterable[str]) -> SchedulerState:
    scheduler = thaw(state)
    scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)
    return freeze(scheduler)


def schedule(state: SchedulerState) -> tuple[SchedulerOutput, SchedulerState]:
    scheduler = thaw(state)
    output = scheduler.schedule()
    return output, freeze(scheduler)


def update_from_output(
    state: SchedulerState, output: SchedulerOutput, model_output: ModelRunnerOutput
) -> tuple[SchedulerState, dict[str, FinishedRequest]]:
    scheduler = thaw(state)
    finished = scheduler.update_from_output(output, model_output)
    return freeze(scheduler), finished


def update_draft_token_ids(state: SchedulerState, draft_token_ids: Mapping[str, tuple[int, ...]]) -> SchedulerState:
    scheduler = thaw(state)
    scheduler.update_draft_token_ids(draft_token_ids)
    return freeze(scheduler)
