"""Async scheduling on both engines: placeholders, the max-tokens skip rule, stale output after preemption.

Scenarios and numbers from §6 (D2's table, the [observed]
stale-output run) and §8 (T47/T49, vLLM's `test_async_scheduler.py`), each
driven by hand as vLLM's tests drive `AsyncScheduler`: a second `schedule()`
before the first step's output is absorbed, outputs absorbed oldest first.
"""

from __future__ import annotations

import pytest

from schedspec.spec.config import SchedulerConfig
from schedspec.spec.request import Request, RequestStatus


def _req(rid: str, prompt_len: int, max_tokens: int) -> Request:
    return Request(
        request_id=rid, prompt_token_ids=(int(rid[-1]) + 1,) * prompt_len, max_tokens=max_tokens, ignore_eos=True
    )


def test_D2_placeholder_table(make):
    """D2 [observed] (prompt 10, max_tokens 3): the n, C and T of every row of §6's table; 3 outputs."""
    e = make(SchedulerConfig(async_scheduling=True))
    e.add(_req("r0", 10, 3))
    s1 = e.schedule()
    assert (dict(s1.num_scheduled_tokens), e.ct("r0")) == ({"r0": 10}, (10, 10))
    s2 = e.schedule()
    assert (dict(s2.num_scheduled_tokens), e.ct("r0")) == ({"r0": 1}, (11, 10))
    e.update({"r0": [101]})  # output of step 1
    assert e.ct("r0") == (11, 11)
    s3 = e.schedule()
    assert (dict(s3.num_scheduled_tokens), e.ct("r0")) == ({"r0": 1}, (12, 11))
    e.update({"r0": [102]})  # output of step 2
    assert e.ct("r0") == (12, 12)
    s4 = e.schedule()  # skip rule: C + 2 - P = 12 + 2 - 1 = 13 >= 10 + 3
    assert (dict(s4.num_scheduled_tokens), e.ct("r0")) == ({}, (12, 12))
    finished = e.update({"r0": [103]})  # output of step 3
    assert finished["r0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["r0"].output_token_ids == (101, 102, 103)


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
def test_T47_no_step_past_max_tokens(make, max_tokens):
    """T47 (`test_stop_by_max_tokens`): two 10-token requests, r1 added after r0's first schedule; the loop
    absorbs the oldest output, then schedules. Each ends with max_tokens outputs, and the tokens scheduled
    over all steps are sum(prompt + max_tokens - 1): the skip rule wastes no step (Z2)."""
    e = make(SchedulerConfig(async_scheduling=True))
    e.add(_req("r0", 10, max_tokens))
    outputs = [e.schedule()]
    e.add(_req("r1", 10, max_tokens))
    outputs.append(e.schedule())
    total, finished, pending = 0, {}, list(outputs)
    while pending:
        total += pending.pop(0).total_num_scheduled_tokens
        finished.update(e.update(default=7))
        out = e.schedule()
        if out.num_scheduled_tokens:
            pending.append(out)
        else:
            e.in_flight.pop()  # vLLM's test never absorbs a step that scheduled nothing
    assert {rid: len(f.output_token_ids) for rid, f in finished.items()} == {"r0": max_tokens, "r1": max_tokens}
    assert total == 2 * (10 + max_tokens - 1)


def test_stale_output_after_preemption_is_delivered(make):
    """§6 [observed]: two 32-token requests in 4 usable blocks (bs 16), async. Step 2 preempts '1' with its
    step-1 output in flight; it is not readmitted while that output is pending; when step 1's output comes
    back, '1' (still PREEMPTED) gets it: output [1000], T = 33, C = 0."""
    e = make(SchedulerConfig(async_scheduling=True, num_gpu_blocks=5))
    e.add(_req("r0", 32, 8), _req("r1", 32, 8))
    s1 = e.schedule()
    assert dict(s1.num_scheduled_tokens) == {"r0": 32, "r1": 32}
    s2 = e.schedule()
    assert dict(s2.num_scheduled_tokens) == {"r0": 1}
    assert s2.preempted_req_ids == {"r1"}
    s3 = e.schedule()
    assert "r1" not in s3.num_scheduled_tokens
    e.update({"r0": [999], "r1": [1000]})  # step 1's output: stale for r1
    r1 = e.req("r1")
    assert (r1.status, r1.num_computed_tokens, r1.num_tokens) == (RequestStatus.PREEMPTED, 0, 33)
    assert e.abort("r1").output_token_ids == (1000,)


def test_T49_abort_between_outputs(make):
    """T49 (`test_abort`): async, ten 10-token requests with max_tokens=20, two schedules queued. Each loop
    aborts the next request of [0,8,3,1,6,4,2,5,7,9], absorbs the oldest output, then schedules. Every request
    ends FINISHED_ABORTED with as many outputs as its place in that order: one output absorbed per loop, none
    after the abort."""
    e = make(SchedulerConfig(async_scheduling=True))
    e.add(*(_req(f"r{i}", 10, 20) for i in range(10)))
    pending = [e.schedule(), e.schedule()]
    order, aborted = [0, 8, 3, 1, 6, 4, 2, 5, 7, 9], {}
    while pending:
        if len(aborted) < len(order):
            rid = f"r{order[len(aborted)]}"
            aborted[rid] = e.abort(rid)
        pending.pop(0)
        assert e.update(default=7) == {}  # nothing reaches max_tokens
        out = e.schedule()
        if out.num_scheduled_tokens:
            pending.append(out)
        else:
            e.in_flight.pop()  # vLLM's test never absorbs a step that scheduled nothing
    assert {rid: f.status for rid, f in aborted.items()} == {f"r{i}": RequestStatus.FINISHED_ABORTED for i in order}
    assert {rid: len(f.output_token_ids) for rid, f in aborted.items()} == {f"r{i}": order.index(i) for i in range(10)}
    assert e.engine.summary().requests == {}
