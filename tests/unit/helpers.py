"""Shared helpers for the unit tests: build states, run steps, fake the model the way vLLM's tests do.

Conventions follow vLLM 0.33.0's scheduler test harness (`tests/v1/core/utils.py`),
as §8 describes it:

* `make_request(i, num_tokens)` gives the prompt `[i] * num_tokens`, EOS 50256,
  `max_tokens=16`, like `create_requests`.
* `mock_output(...)` is the mock model runner: `[]` for a non-final prefill
  chunk, `[tok]` for a final chunk or a decode.

Nothing here knows an expected value; the tests state those, from the doc.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from schedspec.reference_impl import add_request, initial_state, schedule, update_from_output
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.state import RequestState, SchedulerState
from schedspec.spec.trace import FinishedRequest

EOS = 50256  # the harness's EOS id (create_requests)
DEFAULT_TOKEN = 0


def config(**kw) -> SchedulerConfig:
    """The harness defaults (max_num_seqs 16, budget 8192, 10000 blocks of 16), with overrides."""
    return SchedulerConfig(**kw)


def make_request(
    request_id: str | int,
    num_tokens: int = 10,
    max_tokens: int = 16,
    *,
    prompt: Iterable[int] | None = None,
    min_tokens: int = 0,
    eos_token_id: int | None = EOS,
    ignore_eos: bool = False,
    stop_token_ids: Iterable[int] = (),
    priority: int = 0,
    arrival_time: float = 0.0,
) -> Request:
    rid = str(request_id)
    if prompt is None:
        fill = int(rid) if rid.isdigit() else 1
        prompt = (fill,) * num_tokens
    return Request(
        request_id=rid,
        prompt_token_ids=tuple(prompt),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        eos_token_id=eos_token_id,
        ignore_eos=ignore_eos,
        stop_token_ids=tuple(stop_token_ids),
        priority=priority,
        arrival_time=arrival_time,
    )


def new_state(cfg: SchedulerConfig | None = None, *requests: Request) -> SchedulerState:
    state = initial_state(cfg or config())
    return add(state, *requests)


def add(state: SchedulerState, *requests: Request) -> SchedulerState:
    for r in requests:
        state = add_request(state, r)
    return state


def mock_output(
    output: SchedulerOutput,
    after_schedule: SchedulerState,
    tokens_for: Mapping[str, Iterable[int]] | None = None,
    default_token: int = DEFAULT_TOKEN,
    every_scheduled: bool = False,
) -> ModelRunnerOutput:
    """vLLM's mock runner: a request that completed its prefill (C >= T after the advance) samples one token.

    `tokens_for` overrides what a given request returns (e.g. `[]`, or drafts + bonus).
    `every_scheduled` gives every scheduled request a token, prefill chunks included
    (the mock of `test_priority_preemption_bug.py`, T21).
    """
    tokens_for = dict(tokens_for or {})
    sampled: dict[str, tuple[int, ...]] = {}
    for rid in output.num_scheduled_tokens:
        if rid in tokens_for:
            sampled[rid] = tuple(tokens_for[rid])
            continue
        r = after_schedule.requests.get(rid)
        done_prefill = r is not None and r.num_computed_tokens >= r.num_tokens
        sampled[rid] = (default_token,) if (done_prefill or every_scheduled) else ()
    return ModelRunnerOutput(sampled)


def step(
    state: SchedulerState,
    tokens_for: Mapping[str, Iterable[int]] | None = None,
    default_token: int = DEFAULT_TOKEN,
    every_scheduled: bool = False,
) -> tuple[SchedulerOutput, SchedulerState, dict[str, FinishedRequest]]:
    """One synchronous engine step: schedule, fake the model, update with that same step's output."""
    output, state = schedule(state)
    model_output = mock_output(output, state, tokens_for, default_token, every_scheduled)
    state, finished = update_from_output(state, output, model_output)
    return output, state, finished


def update(
    state: SchedulerState, output: SchedulerOutput, sampled: Mapping[str, Iterable[int]]
) -> tuple[SchedulerState, dict[str, FinishedRequest]]:
    """update_from_output with an explicit per-request sample (as hand-written in vLLM's tests)."""
    return update_from_output(state, output, ModelRunnerOutput({k: tuple(v) for k, v in sampled.items()}))


def sched_dict(output: SchedulerOutput) -> dict[str, int]:
    return dict(output.num_scheduled_tokens)


def new_ids(output: SchedulerOutput) -> list[str]:
    return [r.req_id for r in output.scheduled_new_reqs]


def cached_ids(output: SchedulerOutput) -> list[str]:
    return [r.req_id for r in output.scheduled_cached_reqs]


def set_request(state: SchedulerState, request_id: str, **changes) -> SchedulerState:
    """Replace fields of one request's state (e.g. drafts, as `update_draft_token_ids` would set them)."""
    requests = dict(state.requests)
    requests[request_id] = dataclasses.replace(requests[request_id], **changes)
    return dataclasses.replace(state, requests=requests)


def inject_running(
    state: SchedulerState, request: Request, num_computed_tokens: int, output_token_ids: Iterable[int] = ()
) -> SchedulerState:
    """Put a request straight into `running` with C set, the way vLLM's stop tests inject RUNNING requests.

    It gets the blocks its C needs from the front of the free queue.
    """
    bs = state.config.block_size
    need = -(-num_computed_tokens // bs)
    blocks, free = state.free_block_queue[:need], state.free_block_queue[need:]
    rs = RequestState(
        request=request,
        status=RequestStatus.RUNNING,
        output_token_ids=tuple(output_token_ids),
        num_computed_tokens=num_computed_tokens,
        block_ids=tuple(blocks),
    )
    requests = dict(state.requests)
    requests[request.request_id] = rs
    return dataclasses.replace(
        state, requests=requests, running=state.running + (request.request_id,), free_block_queue=free
    )


def assert_consistent(state: SchedulerState) -> None:
    """The structural invariants every state between calls must satisfy (§7, I-3, I-10, I-17)."""
    cfg = state.config
    held = [b for _, b in state.held_blocks()]
    free = list(state.free_block_queue)
    # I-10: every usable block is either held (by exactly one request, caching off) or free, never both.
    assert len(held) == len(set(held)), f"a block is held twice: {held}"
    assert len(free) == len(set(free)), f"a block is free twice: {free}"
    assert not set(held) & set(free), "a block is both held and free"
    assert sorted(held + free) == list(range(1, cfg.num_gpu_blocks)), "blocks leaked or invented"
    assert 0 not in held and 0 not in free, "the null block is never handed out"
    # I-17: each live request in exactly one queue; waiting requests hold no blocks.
    assert len(state.running) == len(set(state.running))
    assert not set(state.running) & set(state.waiting)
    assert set(state.running) | set(state.waiting) == set(state.requests)
    for rid in state.waiting:
        assert state.requests[rid].block_ids == (), f"waiting request {rid} holds blocks"
        assert state.requests[rid].status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
    for rid in state.running:
        assert state.requests[rid].status == RequestStatus.RUNNING
    # I-3
    assert len(state.running) <= cfg.max_num_seqs


def update_live(state: SchedulerState, output: SchedulerOutput, sampled: Mapping[str, Iterable[int]]):
    """update_from_output on a thawed scheduler, keeping handles on the live requests.

    A request that finishes is deleted from the state, so its final fields (`stop_reason`,
    `num_computed_tokens` after a trim) can only be read from the live object. Returns
    (new state, finished, {request_id: LiveRequest as of after the update}).
    """
    from schedspec.reference_impl import freeze, thaw

    scheduler = thaw(state)
    live = dict(scheduler.requests)
    finished = scheduler.update_from_output(output, ModelRunnerOutput({k: tuple(v) for k, v in sampled.items()}))
    return freeze(scheduler), finished, live


def possible(facts) -> bool:
    """Whether Z3 finds the facts satisfiable: a proof's assumptions must leave each behaviour it claims possible."""
    import z3

    solver = z3.Solver()
    solver.add(*facts)
    return solver.check() == z3.sat
