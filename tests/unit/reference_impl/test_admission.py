"""Adding requests and admitting them: queue growth, the sequence caps, head-of-line blocking (§3.2, §8)."""

from __future__ import annotations

from helpers import add, cached_ids, config, make_request, new_ids, new_state, sched_dict, step

from schedspec.reference_impl import initial_state, schedule
from schedspec.spec.request import RequestStatus


def test_T1_add_requests_grows_waiting():
    """T1 test_add_requests: each added request joins `waiting` (1..10) and `requests`."""
    state = initial_state(config())
    for i in range(10):
        state = add(state, make_request(i))
        assert len(state.waiting) == i + 1
        assert str(i) in state.requests
        assert state.requests[str(i)].status == RequestStatus.WAITING
    assert state.waiting == tuple(str(i) for i in range(10))
    assert state.running == ()


def test_T4_max_num_active_seqs_caps_admission():
    """T4: max_num_seqs=16, max_num_active_seqs=3, 10 requests -> 3 new, running 3, waiting 7, cap still 16."""
    cfg = config(max_num_seqs=16, max_num_active_seqs=3)
    state = new_state(cfg, *(make_request(i) for i in range(10)))
    output, state = schedule(state)
    assert len(output.scheduled_new_reqs) == 3
    assert len(state.running) == 3
    assert len(state.waiting) == 7
    assert cfg.max_num_running_reqs == 16
    assert cfg.max_num_active_reqs == 3


def test_T5_schedule_ten_short_requests():
    """T5 test_schedule (APC off): 10x10-token requests -> 10 new, 0 cached, 0 finished, 10 tokens each, in order."""
    state = new_state(config(), *(make_request(i, 10) for i in range(10)))
    output, state = schedule(state)
    assert len(output.scheduled_new_reqs) == 10
    assert len(output.scheduled_cached_reqs) == 0
    assert len(output.finished_req_ids) == 0
    assert sched_dict(output) == {str(i): 10 for i in range(10)}
    assert output.total_num_scheduled_tokens == 100
    assert len(state.waiting) == 0
    assert state.running == tuple(str(i) for i in range(10))
    for i in range(10):
        assert state.requests[str(i)].status == RequestStatus.RUNNING


def test_T12_schedule_order_chunked_prefill_on():
    """T12 (chunked prefill on): budget 1024, max_num_seqs 3, prompts 800,800,10,10 -> 2 new: 800 and a 224 chunk."""
    cfg = config(max_num_batched_tokens=1024, max_num_seqs=3, enable_chunked_prefill=True)
    state = new_state(cfg, *(make_request(i, n) for i, n in enumerate([800, 800, 10, 10])))
    output, state = schedule(state)
    assert new_ids(output) == ["0", "1"]
    assert sched_dict(output) == {"0": 800, "1": 224}
    assert state.waiting == ("2", "3")


def test_T12_schedule_order_chunked_prefill_off_blocks_head_of_line():
    """T12 (chunked prefill off): the second 800 does not fit -> break; the 10-token ones behind it are not tried."""
    cfg = config(max_num_batched_tokens=1024, max_num_seqs=3, enable_chunked_prefill=False)
    state = new_state(cfg, *(make_request(i, n) for i, n in enumerate([800, 800, 10, 10])))
    output, state = schedule(state)
    assert new_ids(output) == ["0"]
    assert sched_dict(output) == {"0": 800}
    assert state.waiting == ("1", "2", "3")


def test_exp2_threshold_chunks_even_with_chunked_prefill_off():
    """exp2 [observed]: chunked prefill off, thr 4, budget 64, 2x20-token requests -> {1: 4, 2: 4} (§9.A.4)."""
    cfg = config(max_num_batched_tokens=64, enable_chunked_prefill=False, long_prefill_token_threshold=4)
    state = new_state(cfg, make_request(1, 20), make_request(2, 20))
    output, state = schedule(state)
    assert sched_dict(output) == {"1": 4, "2": 4}
    assert new_ids(output) == ["1", "2"]


def test_scheduled_new_then_cached_on_next_step():
    """§3.3 output data: an admitted request is listed once as new, then as cached with C before the advance."""
    state = new_state(config(), make_request(0, 10))
    out1, state, _ = step(state)
    assert new_ids(out1) == ["0"] and cached_ids(out1) == []
    assert out1.scheduled_new_reqs[0].num_computed_tokens == 0  # the prefix hit: 0 without caching
    out2, state, _ = step(state)
    assert new_ids(out2) == [] and cached_ids(out2) == ["0"]
    assert out2.scheduled_cached_reqs[0].num_computed_tokens == 10  # C before this step's advance
    assert sched_dict(out2) == {"0": 1}


def test_max_num_seqs_caps_running():
    """I-3: with max_num_seqs=2, a third waiting request is not admitted while two run."""
    state = new_state(config(max_num_seqs=2), *(make_request(i, 10) for i in range(3)))
    output, state = schedule(state)
    assert new_ids(output) == ["0", "1"]
    assert state.waiting == ("2",)
    output, state = schedule(state)
    assert "2" not in sched_dict(output)
