"""KV block accounting without prefix caching: ids, free order, the gates, the watermark, leaks (§3.4, §8 T34, §8b D5/D7)."""

from __future__ import annotations

import pytest

from helpers import add, assert_consistent, config, make_request, mock_output, new_state, sched_dict, step

from schedspec.reference_impl import abort, initial_state, schedule, update_from_output


def test_initial_pool_excludes_null_block():
    """§3.4: block 0 is the null block; the free queue starts as 1..N-1 in id order ("num_blocks=11 -> 10 usable")."""
    state = initial_state(config(num_gpu_blocks=11))
    assert state.free_block_queue == tuple(range(1, 11))
    assert state.num_free_blocks == 10


def test_D5_free_order_lifo_caching_off():
    """D5 [observed] (caching off): bs 4, 11 blocks. A (12 tokens) -> [1,2,3]; B (8) -> [4,5]; both finish (max_tokens 1).

    Free queue becomes [5,4,3,2,1,6,...,10] (each request freed in reverse, prepended); the next 12-token request gets [5,4,3].
    """
    cfg = config(block_size=4, num_gpu_blocks=11)
    state = new_state(cfg, make_request("A", 12, max_tokens=1), make_request("B", 8, max_tokens=1))
    out, state, finished = step(state)
    assert {r.req_id: r.block_ids for r in out.scheduled_new_reqs} == {"A": (1, 2, 3), "B": (4, 5)}
    assert set(finished) == {"A", "B"}
    assert state.free_block_queue == (5, 4, 3, 2, 1, 6, 7, 8, 9, 10)

    state = add(state, make_request("C", 12))
    out, state = schedule(state)
    assert out.scheduled_new_reqs[0].block_ids == (5, 4, 3)


def test_block_ids_new_vs_cached_request_data():
    """§9.A.21: NewRequestData lists all blocks; CachedRequestData.new_block_ids only new ones, None if none.

    bs 4: a 6-token prompt gets (1, 2); decoding at C=6 needs 7 slots (no new block -> None); at C=7, 8 slots
    (None); at C=8, 9 slots -> a 3rd block (3,). No slot is reserved for the token about to be sampled.
    """
    state = new_state(config(block_size=4, num_gpu_blocks=11), make_request(0, 6))
    out, state, _ = step(state)
    assert out.scheduled_new_reqs[0].block_ids == (1, 2)
    new_blocks = []
    for _ in range(3):
        out, state, _ = step(state)
        new_blocks.append(out.scheduled_cached_reqs[0].new_block_ids)
    assert new_blocks == [None, None, (3,)]


def test_full_sequence_gate_blocks_a_long_prompt():
    """§3.2/§3.4: with scheduler_reserve_full_isl (default) a prompt is admitted only if its whole sequence fits.

    5 usable blocks of 4, budget 8: a 24-token prompt (6 blocks) is refused although its first 8-token chunk
    needs 2 blocks; with the gate off it is admitted with that chunk and blocks [1, 2].
    """
    common = dict(block_size=4, num_gpu_blocks=6, max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64)
    state = new_state(config(**common), make_request(0, 24))
    out, state = schedule(state)
    assert sched_dict(out) == {}
    assert state.waiting == ("0",)

    state = new_state(config(scheduler_reserve_full_isl=False, **common), make_request(0, 24))
    out, state = schedule(state)
    assert sched_dict(out) == {"0": 8}
    assert out.scheduled_new_reqs[0].block_ids == (1, 2)


def test_head_of_line_blocking_on_allocation_failure():
    """§3.2/§9.A.5: a waiting request that cannot get blocks stops the pass; a smaller one behind it is not tried."""
    cfg = config(block_size=4, num_gpu_blocks=6)  # 5 usable
    state = new_state(cfg, make_request("big", 24), make_request("small", 4))
    out, state = schedule(state)
    assert sched_dict(out) == {}
    assert state.waiting == ("big", "small")


@pytest.mark.parametrize("watermark,admitted", [(0.3, False), (0.0, True)])
def test_D7_watermark(watermark, admitted):
    """D7 [observed]: watermark 0.3, 11 blocks -> 3 watermark blocks; bs 4.

    A 28-token request (7 blocks) is admitted alone. Next step A's decode takes an 8th block (the running
    pass ignores the watermark), leaving 2 free; a 4-token request needing 1 block is refused (1 + 3 > 2).
    Control: with watermark 0 the same request is admitted.
    """
    cfg = config(block_size=4, num_gpu_blocks=11, watermark=watermark)
    assert cfg.watermark_blocks == int(watermark * 11)
    state = new_state(cfg, make_request("A", 28))
    out, state, _ = step(state)
    assert sched_dict(out) == {"A": 28}
    assert state.num_free_blocks == 3

    state = add(state, make_request("B", 4))
    out, state = schedule(state)
    if admitted:
        assert sched_dict(out) == {"A": 1, "B": 4}
    else:
        assert sched_dict(out) == {"A": 1}
        assert state.waiting == ("B",)
        assert state.num_free_blocks == 2


def test_D7_watermark_ignored_for_a_lone_admission():
    """§3.4/§9.A.17: with running empty the watermark is not applied: a 32-token request (8 blocks + 3 > 10 free) is admitted."""
    cfg = config(block_size=4, num_gpu_blocks=11, watermark=0.3)
    state = new_state(cfg, make_request("A", 32))
    out, state = schedule(state)
    assert sched_dict(out) == {"A": 32}
    assert state.num_free_blocks == 2


@pytest.mark.parametrize("watermark,resumed", [(0.25, False), (0.0, True)])
def test_watermark_applies_to_preempted_requests_when_something_runs(watermark, resumed):
    """§3.4: the watermark counts for PREEMPTED requests too (status WAITING or PREEMPTED, running non-empty).

    bs 4, 7 usable blocks (8 total), watermark 0.25 -> 2 blocks. c (4 tokens), a (4), b (8) are admitted
    (1+1+2 blocks). They decode; when c and a need a 3rd block (C=8), c's allocation preempts b (the tail),
    b has T=13. Aborting a leaves 4 free blocks: b needs ceil(13/4) = 4, which fits without the watermark
    and is refused with it (4 + 2 > 4) while c runs. Control: watermark 0 resumes b with 13 tokens.
    """
    cfg = config(block_size=4, num_gpu_blocks=8, watermark=watermark)
    assert cfg.watermark_blocks == int(watermark * 8)
    state = new_state(
        cfg,
        make_request("c", 4, max_tokens=50),
        make_request("a", 4, max_tokens=50),
        make_request("b", 8, max_tokens=50),
    )
    out, state, _ = step(state)
    assert sched_dict(out) == {"c": 4, "a": 4, "b": 8}
    for _ in range(4):
        out, state, _ = step(state)
        assert sched_dict(out) == {"c": 1, "a": 1, "b": 1}
    out, state, _ = step(state)
    assert sched_dict(out) == {"c": 1, "a": 1}
    assert out.preempted_req_ids == {"b"}
    assert state.requests["b"].num_tokens == 13

    state = abort(state, ["a"])
    assert state.num_free_blocks == 4
    out, state = schedule(state)
    if resumed:
        assert sched_dict(out) == {"c": 1, "b": 13}
    else:
        assert sched_dict(out) == {"c": 1}
        assert state.waiting == ("b",)


def test_T34_no_leak_after_draining():
    """T34-like leak check (caching off): 5x10-token requests, max_tokens 10, added and stepped one by one, output [1000].

    When running is empty: requests, waiting, running and finished_req_ids are empty; all num_gpu_blocks - 1
    blocks are free; no request holds a block.
    """
    cfg = config()
    state = initial_state(cfg)
    for i in range(5):
        state = add(state, make_request(i, 10, max_tokens=10))
        _, state, _ = step(state, default_token=1000)
        assert_consistent(state)
    while True:
        output, state = schedule(state)
        if not state.running:
            break
        state, _ = update_from_output(state, output, mock_output(output, state, default_token=1000))
        assert_consistent(state)
    assert state.requests == {} and state.waiting == () and state.running == ()
    assert state.finished_req_ids == frozenset()
    assert state.num_free_blocks == cfg.num_gpu_blocks - 1
    assert sorted(state.free_block_queue) == list(range(1, cfg.num_gpu_blocks))
    assert list(state.held_blocks()) == []
