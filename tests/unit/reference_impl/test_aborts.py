"""Aborts: `finish_requests(..., FINISHED_ABORTED)` (§5 "Abort" and "Free", §8 T2/T3, I-17, I-18)."""

from __future__ import annotations

from helpers import assert_consistent, config, make_request, mock_output, new_state, sched_dict, step, update

from schedspec.reference_impl import ReferenceEngine, abort, schedule
from schedspec.spec.request import RequestStatus


def test_T2_finish_request_one_by_one():
    """T2 test_finish_request: 10 waiting; abort them one by one -> gone from requests, len(waiting) == 9 - i."""
    state = new_state(config(), *(make_request(i) for i in range(10)))
    for i in range(10):
        state = abort(state, [str(i)])
        assert str(i) not in state.requests
        assert len(state.waiting) == 9 - i
        assert str(i) in state.finished_req_ids


def test_T3_num_unfinished_requests():
    """T3 test_get_num_unfinished_requests: 10 waiting; finish i+1 of them -> 10 - i - 1 unfinished."""
    state = new_state(config(), *(make_request(i) for i in range(10)))
    for i in range(10):
        state = abort(state, [str(i)])
        assert len(state.running) + len(state.waiting) == 10 - i - 1
        assert len(state.requests) == 10 - i - 1
    assert not state.unfinished()


def test_abort_running_frees_blocks_in_reverse_and_reports_next_step():
    """§5 Abort/Free + §3.4 free order + I-18: a RUNNING request's blocks go to the free-queue front reversed;
    its id is in the next SchedulerOutput.finished_req_ids, once."""
    cfg = config(block_size=4, num_gpu_blocks=11)
    state = new_state(cfg, make_request("a", 12), make_request("b", 4))
    out, state, _ = step(state)
    assert {r.req_id: r.block_ids for r in out.scheduled_new_reqs} == {"a": (1, 2, 3), "b": (4,)}
    state = abort(state, ["a"])
    assert state.running == ("b",)
    assert state.free_block_queue[:3] == (3, 2, 1)
    out, state, _ = step(state)
    assert out.finished_req_ids == {"a"}
    assert sched_dict(out) == {"b": 1}
    out, state, _ = step(state)
    assert out.finished_req_ids == frozenset()
    assert_consistent(state)


def test_abort_returns_aborted_status_through_engine():
    """§5: aborting through the engine returns FINISHED_ABORTED with the outputs so far; a second abort returns None."""
    engine = ReferenceEngine(config())
    engine.add_request(make_request(0, 10))
    out = engine.schedule()
    engine.update_from_output(out, mock_output(out, engine.state(), default_token=5))
    f = engine.abort_request("0")
    assert f is not None and f.status == RequestStatus.FINISHED_ABORTED and f.output_token_ids == (5,)
    assert engine.abort_request("0") is None


def test_output_of_request_aborted_in_flight_is_ignored():
    """§5: output for a request aborted while its step is in flight is ignored (`request is None`)."""
    state = new_state(config(), make_request(0, 10), make_request(1, 10))
    out, state = schedule(state)
    state = abort(state, ["0"])
    state, finished = update(state, out, {"0": [7], "1": [8]})
    assert finished == {}
    assert "0" not in state.requests
    assert state.requests["1"].output_token_ids == (8,)
    assert_consistent(state)


def test_abort_unknown_or_finished_id_is_a_no_op():
    """§5: finish_requests skips ids that are unknown or already finished; the state is unchanged."""
    state = new_state(config(), make_request(0, 10))
    assert abort(state, ["nope"]) == state
    gone = abort(state, ["0"])
    assert abort(gone, ["0"]) == gone


def test_abort_duplicate_ids_once():
    """§5: an id named twice is aborted, freed and reported once, because vLLM turns the ids into a set
    (vllm/v1/core/sched/scheduler.py:Scheduler.finish_requests (2983))."""
    state = new_state(config(block_size=4, num_gpu_blocks=11), make_request(0, 12))
    out, state, _ = step(state)
    once = abort(state, ["0"])
    assert abort(state, ["0", "0"]) == once


def test_abort_preempted_request_removes_it_from_waiting():
    """§5: a non-RUNNING request is removed from the waiting queue; a PREEMPTED one holds no blocks to free."""
    cfg = config(block_size=4, num_gpu_blocks=9)
    state = new_state(cfg, *(make_request(i, 8) for i in range(4)))
    _, state, _ = step(state)
    out, state, _ = step(state)
    assert out.preempted_req_ids == {"2", "3"}
    free_before = state.free_block_queue
    state = abort(state, ["3"])
    assert state.waiting == ("2",)
    assert state.free_block_queue == free_before
    assert state.finished_req_ids == {"3"}
    assert_consistent(state)
