"""Preemption by recompute under FCFS (§3.1, §4, §8 T16, §8b D1 and exp3, §9.A.6, §9.A.7, §9.A.9, §9.A.10)."""

from __future__ import annotations

from helpers import add, assert_consistent, config, make_request, new_state, sched_dict, step, update

from schedspec.reference_impl import schedule, simulate
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.workload import Workload, WorkloadRequest


def _t16_setup():
    cfg = config(max_num_batched_tokens=100, block_size=16, num_gpu_blocks=11)
    state = new_state(cfg, make_request(0, 80))
    s0, state = schedule(state)
    state = add(state, make_request(1, 80))
    s1, state = schedule(state)
    return state, s0, s1


def test_T16_preempt_during_execution():
    """T16: 10 usable blocks, 2x80 tokens, two schedules in flight; r0's 6th block preempts r1 (running[-1]).

    Pins [observed] block ids r0 [1..5], r1 [6..10]; s2 = {r0: 1} with new block 10 (LIFO reuse of r1's
    freed tail); running == [r0]; r1 PREEMPTED; r1's stale output [42] is delivered (T=81, C=0, stale 0);
    r1 is not readmitted at s3 (needs 6 blocks, 4 free).
    """
    state, s0, s1 = _t16_setup()
    assert sched_dict(s0) == {"0": 80}
    assert s0.scheduled_new_reqs[0].block_ids == (1, 2, 3, 4, 5)
    assert sched_dict(s1) == {"1": 80}  # r0 owes 0 and is skipped
    assert s1.scheduled_new_reqs[0].block_ids == (6, 7, 8, 9, 10)
    assert state.num_free_blocks == 0

    state, _ = update(state, s0, {"0": [0]})
    s2, state = schedule(state)
    assert sched_dict(s2) == {"0": 1}
    assert s2.preempted_req_ids == {"1"}
    assert s2.scheduled_cached_reqs[0].new_block_ids == (10,)
    assert state.running == ("0",)
    r1 = state.requests["1"]
    assert r1.status == RequestStatus.PREEMPTED
    assert r1.num_stale_output_tokens == 80  # = its in-flight tokens at preemption (§4)

    state, _ = update(state, s1, {"1": [42]})
    r1 = state.requests["1"]
    assert r1.output_token_ids == (42,)
    assert (r1.num_tokens, r1.num_computed_tokens, r1.num_stale_output_tokens) == (81, 0, 0)
    assert r1.status == RequestStatus.PREEMPTED

    state, _ = update(state, s2, {"0": [0]})
    assert state.num_free_blocks == 4
    s3, state = schedule(state)
    assert sched_dict(s3) == {"0": 1}
    assert state.waiting == ("1",)
    assert_consistent(state)


def test_T16_stale_output_blocks_resume_until_delivered():
    """§6/§9.A.9: a PREEMPTED request whose pre-preemption output is still in flight is skipped by the waiting pass.

    In T16 after s2, free blocks are made available by aborting r0; r1 still waits (stale 80) until s1's output lands.
    """
    from schedspec.reference_impl import abort

    state, s0, s1 = _t16_setup()
    state, _ = update(state, s0, {"0": [0]})
    s2, state = schedule(state)
    assert s2.preempted_req_ids == {"1"}
    state = abort(state, ["0"])
    s3, state = schedule(state)
    assert sched_dict(s3) == {}  # r1: stale output not yet delivered -> skipped, not admitted
    assert state.waiting == ("1",)
    state, _ = update(state, s1, {"1": [42]})
    s4, state = schedule(state)
    assert sched_dict(s4) == {"1": 81}  # recomputes prompt + the delivered output
    assert s4.scheduled_new_reqs[0].resumed


def test_D1_self_preemption_livelock():
    """D1 [observed]: 2 usable blocks, one 32-token request: s1 {0:32}; s2 {} preempting itself; s3, s4... {} forever."""
    cfg = config(block_size=16, num_gpu_blocks=3)
    state = new_state(cfg, make_request(0, 32))
    s1, state, _ = step(state)
    assert sched_dict(s1) == {"0": 32}
    assert len(s1.scheduled_new_reqs[0].block_ids) == 2
    assert state.requests["0"].num_tokens == 33

    s2, state, _ = step(state)
    assert sched_dict(s2) == {}
    assert s2.preempted_req_ids == {"0"}
    assert state.running == () and state.waiting == ("0",)
    assert state.requests["0"].status == RequestStatus.PREEMPTED

    for _ in range(5):  # the full-sequence gate needs 3 blocks; only 2 exist
        s, state, finished = step(state)
        assert sched_dict(s) == {} and not s.preempted_req_ids and not finished
        assert state.waiting == ("0",)


def test_D1_livelock_trace_ends_at_max_steps():
    """D1 through the workload loop: the trace cannot drain, so it ends with end == "max_steps" (§9.A.10)."""
    cfg = config(block_size=16, num_gpu_blocks=3)
    w = Workload(cfg, (WorkloadRequest(Request("0", (0,) * 32, max_tokens=16, ignore_eos=True)),), max_steps=12)
    trace = simulate(w)
    assert trace.end == "max_steps"
    assert len(trace.steps) == 12
    assert dict(trace.steps[0].output.num_scheduled_tokens) == {"0": 32}
    assert trace.steps[1].output.preempted_req_ids == {"0"}
    assert all(dict(s.output.num_scheduled_tokens) == {} for s in trace.steps[1:])
    assert trace.steps[-1].state.waiting == ("0",)
    # No status for oversize requests: FINISHED_IGNORED is never produced.
    assert all(not s.finished for s in trace.steps)


def test_exp3_fcfs_multi_preemption_order():
    """exp3 [observed]: bs 4, 8 usable blocks, 4x8 tokens -> {all: 8}; then {0:1, 1:1}, waiting ['2','3'], preemptions [0,0,1,1]."""
    cfg = config(block_size=4, num_gpu_blocks=9)
    state = new_state(cfg, *(make_request(i, 8) for i in range(4)))
    s1, state, _ = step(state)
    assert sched_dict(s1) == {str(i): 8 for i in range(4)}
    assert state.num_free_blocks == 0

    s2, state, _ = step(state)
    assert sched_dict(s2) == {"0": 1, "1": 1}
    assert s2.preempted_req_ids == {"2", "3"}
    assert state.waiting == ("2", "3")  # victims popped from the tail, so the former running order (§4)
    assert [state.requests[str(i)].num_preemptions for i in range(4)] == [0, 0, 1, 1]
    assert_consistent(state)


def test_I7_preempted_state_and_no_admission_in_preempting_step():
    """I-7 and I-6 (exp3 setup): a victim has C=0, no blocks, no drafts, is at the waiting head; no admission that step."""
    cfg = config(block_size=4, num_gpu_blocks=9)
    state = new_state(cfg, *(make_request(i, 8) for i in range(4)))
    _, state, _ = step(state)
    state = add(state, make_request(9, 1))  # would fit in any freed block, but a preempting step admits nothing
    s2, state = schedule(state)
    assert s2.preempted_req_ids == {"2", "3"}
    assert s2.scheduled_new_reqs == ()
    assert state.waiting == ("2", "3", "9")
    for rid in ("2", "3"):
        r = state.requests[rid]
        assert r.status == RequestStatus.PREEMPTED
        assert r.num_computed_tokens == 0 and r.block_ids == () and r.spec_token_ids == ()
        assert r.num_output_placeholders == 0
        assert r.output_token_ids == (0,)  # outputs survive preemption (§4)
    assert_consistent(state)


def test_fcfs_self_preemption_then_resume_at_end_of_running():
    """§3.1/§9.A.7: FCFS preempts the tail (here the request itself, ending the pass); a resume appends to `running`.

    bs 4, 5 usable blocks; a (8 tokens) and b (8 tokens) prefill (4 blocks); both decode; the 3rd block
    preempts b; a finishes (max_tokens 2), b resumes at the end of running.
    """
    cfg = config(block_size=4, num_gpu_blocks=6)
    state = new_state(
        cfg, make_request("a", 8, max_tokens=2, prompt=[1] * 8), make_request("b", 8, max_tokens=8, prompt=[2] * 8)
    )
    s1, state, _ = step(state)
    assert sched_dict(s1) == {"a": 8, "b": 8}
    # a: C=8 T=9 needs a 3rd block (1 free) -> ok; b needs one too, 0 free -> b preempts itself.
    s2, state, finished = step(state)
    assert sched_dict(s2) == {"a": 1}
    assert s2.preempted_req_ids == {"b"}
    assert set(finished) == {"a"}  # a reached max_tokens=2
    s3, state, _ = step(state)
    assert sched_dict(s3) == {"b": 9}
    assert s3.scheduled_new_reqs[0].resumed and s3.scheduled_new_reqs[0].req_id == "b"
    assert state.running == ("b",)


def test_stale_output_can_finish_a_preempted_request():
    """§6/§9.A.9: stale output is delivered to the PREEMPTED request and may finish it (the stopped_preempted path).

    T16 with r1 at max_tokens 1: s1's [42] reaches max_tokens while r1 is PREEMPTED -> FINISHED_LENGTH_CAPPED,
    removed from `waiting` and `requests`, reported by the next schedule().
    """
    cfg = config(max_num_batched_tokens=100, block_size=16, num_gpu_blocks=11)
    state = new_state(cfg, make_request(0, 80))
    s0, state = schedule(state)
    state = add(state, make_request(1, 80, max_tokens=1))
    s1, state = schedule(state)
    state, _ = update(state, s0, {"0": [0]})
    s2, state = schedule(state)
    assert s2.preempted_req_ids == {"1"}
    state, finished = update(state, s1, {"1": [42]})
    assert finished["1"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["1"].output_token_ids == (42,)
    assert state.waiting == () and "1" not in state.requests
    state, _ = update(state, s2, {"0": [0]})
    s3, state = schedule(state)
    assert s3.finished_req_ids == {"1"}
    assert_consistent(state)
