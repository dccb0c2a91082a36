"""The PRIORITY policy: admission order, victim choice, refunds, self-preemption (§3.1, §4, §8 T17-T30, §8b P1)."""

from __future__ import annotations

import pytest

from helpers import (
    add,
    assert_consistent,
    cached_ids,
    config,
    make_request,
    new_ids,
    new_state,
    sched_dict,
    step,
    update,
)

from schedspec.reference_impl import abort, schedule
from schedspec.spec.request import RequestStatus


def prio_config(**kw):
    return config(policy="priority", **kw)


def prio_requests(priorities, arrivals=None, num_tokens=10):
    arrivals = arrivals if arrivals is not None else list(range(len(priorities)))
    return [
        make_request(i, num_tokens, priority=p, arrival_time=float(a))
        for i, (p, a) in enumerate(zip(priorities, arrivals))
    ]


# ---- Admission order (T22-T30) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario,priorities,arrivals,expected",
    [
        ("T22 basic ordering", [2, 0, 1], [1, 2, 3], ["1", "2", "0"]),
        ("T23 arrival tie-break", [1, 1, 1], [3, 1, 2], ["1", "2", "0"]),
        ("T24 mixed", [2, 1, 1, 0], [1, 3, 2, 4], ["3", "2", "1", "0"]),
        ("T28 FCFS fallback", [1, 1, 1, 1], [4, 1, 3, 2], ["1", "3", "2", "0"]),
    ],
)
def test_T22_T23_T24_T28_admission_order(scenario, priorities, arrivals, expected):
    """T22/T23/T24/T28: new requests are admitted in (priority, arrival_time) order."""
    state = new_state(prio_config(), *prio_requests(priorities, arrivals))
    output, _ = schedule(state)
    assert new_ids(output) == expected, scenario


@pytest.mark.parametrize(
    "scenario,priorities,arrivals,admitted,waiting",
    [
        ("T25 victim selection / waiting order", [3, 2, 0], None, ["2"], ("1", "0")),
        ("T26 equal priority", [2, 2, 2], [3, 1, 2], ["1"], ("2", "0")),
        ("T27 waiting queue order", [3, 1, 2, 0], None, ["3"], ("1", "2", "0")),
    ],
)
def test_T25_T26_T27_one_slot(scenario, priorities, arrivals, admitted, waiting):
    """T25/T26/T27: max_num_seqs=1 admits the heap minimum; the rest wait in heap order."""
    state = new_state(prio_config(max_num_seqs=1), *prio_requests(priorities, arrivals))
    output, state = schedule(state)
    assert new_ids(output) == admitted, scenario
    assert state.waiting == waiting, scenario


def test_T29_limited_slots():
    """T29: max_num_seqs=2, budget 1000, priorities [3,1,2,0] -> {"3","1"} admitted; waiting ["2","0"]."""
    state = new_state(prio_config(max_num_seqs=2, max_num_batched_tokens=1000), *prio_requests([3, 1, 2, 0]))
    output, state = schedule(state)
    assert set(new_ids(output)) == {"3", "1"}
    assert state.waiting == ("2", "0")


def test_T30_heap_property():
    """T30: max_num_seqs=1, priorities [5,1,8,3,2,7,4,6], one admission per step (schedule, update, finish) -> sorted."""
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    state = new_state(prio_config(max_num_seqs=1), *prio_requests(priorities))
    admitted = []
    for _ in priorities:
        output, state, _ = step(state)
        (rid,) = new_ids(output)
        admitted.append(priorities[int(rid)])
        state = abort(state, [rid])
    assert admitted == sorted(priorities)


# ---- Preemption (T17-T19, T21, P1) -----------------------------------------------------------


def test_T17_priority_preemption_refunds_scheduled_victim():
    """T17: 5 usable blocks; lo1 (prio 5) already scheduled this step is the victim of hi1's 3rd block and is refunded.

    Pins [observed]: phase 2 {lo1: 1, hi1: 32}, 0 free; phase 3 {hi1: 1}, total 1, preempted {lo1},
    lo1 C = 0, T = 34, free 2.
    """
    cfg = prio_config(max_num_seqs=3, max_num_batched_tokens=200, block_size=16, num_gpu_blocks=6)
    state = new_state(cfg, make_request("lo1", 32, priority=5, arrival_time=1.0))
    out1, state = schedule(state)
    assert len(out1.scheduled_new_reqs[0].block_ids) == 2
    state, _ = update(state, out1, {"lo1": [100]})
    assert state.requests["lo1"].num_tokens == 33

    state = add(state, make_request("hi1", 32, priority=0, arrival_time=2.0))
    out2, state = schedule(state)
    assert sched_dict(out2) == {"lo1": 1, "hi1": 32}
    assert new_ids(out2) == ["hi1"]
    assert len(state.running) == 2
    assert state.num_free_blocks == 0
    state, _ = update(state, out2, {"lo1": [100], "hi1": [100]})
    assert state.requests["lo1"].num_tokens == 34 and state.requests["hi1"].num_tokens == 33

    out3, state = schedule(state)
    assert sched_dict(out3) == {"hi1": 1}
    assert out3.total_num_scheduled_tokens == 1
    assert out3.preempted_req_ids == {"lo1"}
    assert cached_ids(out3) == ["hi1"]
    lo1 = state.requests["lo1"]
    assert lo1.status == RequestStatus.PREEMPTED
    assert (lo1.num_computed_tokens, lo1.num_tokens) == (0, 34)
    assert state.running == ("hi1",)
    assert state.num_free_blocks == 2
    assert_consistent(state)


def test_T18_no_preemption_when_space_available():
    """T18: max_num_seqs 3, budget 200; lo1, lo2 (prio 5, 30 tokens) decoding; hi1 (prio 0) -> 1 new, running 3, waiting 0."""
    cfg = prio_config(max_num_seqs=3, max_num_batched_tokens=200)
    state = new_state(
        cfg,
        make_request("lo1", 30, priority=5, arrival_time=1.0),
        make_request("lo2", 30, priority=5, arrival_time=2.0),
    )
    _, state, _ = step(state)
    _, state, _ = step(state)
    state = add(state, make_request("hi1", 30, priority=0, arrival_time=3.0))
    output, state = schedule(state)
    assert new_ids(output) == ["hi1"]
    assert len(output.scheduled_new_reqs) == 1
    assert not output.preempted_req_ids
    assert len(state.running) == 3 and len(state.waiting) == 0


def test_T19_preemption_and_resumption_when_out_of_kv():
    """T19 (without the connector): 4 usable blocks; low (prio 1, 30) is preempted by high (prio 0, 32), resumes with 32 tokens.

    Pins: high's admission leaves 0 free, 1 new + 1 cached, running 2; next step only high is scheduled
    (cached req_ids == [high]), waiting 1, running 1; after high finishes, low resumes as a new (V2) request
    with 32 tokens whose index 31 is 100.
    """
    cfg = prio_config(max_num_seqs=2, max_num_batched_tokens=200, num_gpu_blocks=5, block_size=16)
    state = new_state(cfg, make_request("low", 30, priority=1, arrival_time=1.0))
    out, state = schedule(state)
    state, _ = update(state, out, {"low": [100]})

    state = add(state, make_request("high", 32, priority=0, arrival_time=2.0))
    out, state = schedule(state)
    assert state.num_free_blocks == 0
    assert new_ids(out) == ["high"] and cached_ids(out) == ["low"]
    assert len(state.running) == 2
    state, _ = update(state, out, {"low": [100], "high": [100]})

    out, state = schedule(state)
    assert state.requests["low"].status == RequestStatus.PREEMPTED
    assert out.preempted_req_ids == {"low"}
    assert sched_dict(out) == {"high": 1}
    assert cached_ids(out) == ["high"]
    assert len(state.waiting) == 1 and len(state.running) == 1
    state, _ = update(state, out, {"high": [100]})

    state = abort(state, ["high"])
    out, state = schedule(state)
    assert new_ids(out) == ["low"]
    assert out.scheduled_new_reqs[0].resumed
    assert sched_dict(out) == {"low": 32}
    low = state.requests["low"]
    all_tokens = low.request.prompt_token_ids + low.output_token_ids
    assert len(all_tokens) == 32 and all_tokens[31] == 100


def _t21_state():
    cfg = prio_config(
        max_num_seqs=5,
        max_num_batched_tokens=200,
        max_model_len=1000,
        long_prefill_token_threshold=15,
        block_size=16,
        num_gpu_blocks=6,
        scheduler_reserve_full_isl=False,
    )

    def req(rid, n, prio, t):
        return make_request(rid, n, max_tokens=50, ignore_eos=True, priority=prio, arrival_time=t)

    return cfg, req


def _t21_through_r3():
    """T21 [observed]: R1 {} (A alone: thr off, 13 blocks > 5); R2 {B:15, A:15}; R3 {B:1, A:15, C:1}.

    The mock gives every scheduled request a token, prefill chunks included. R4 in vLLM is
    `schedule(throttle_prefills=True)`, which the reference does not model (DP prefill cadence is out
    of scope); see test_T21_R4_without_throttle for what the core rules give there.
    """
    cfg, req = _t21_state()
    state = new_state(cfg, req("A", 200, 9, 1.0))
    r1, state, _ = step(state, every_scheduled=True)
    assert sched_dict(r1) == {}

    state = add(state, req("B", 15, 0, 2.0))
    r2, state, _ = step(state, every_scheduled=True)
    assert sched_dict(r2) == {"B": 15, "A": 15}
    assert not r2.preempted_req_ids

    state = add(state, req("C", 1, 1, 3.0))
    r3, state, _ = step(state, every_scheduled=True)
    assert sched_dict(r3) == {"B": 1, "A": 15, "C": 1}
    assert not r3.preempted_req_ids
    assert state.running == ("B", "A", "C")
    assert state.num_free_blocks == 1
    return state


def test_T21_priority_preemption_bug_observed_trace():
    """T21 [observed] R1-R3 of test_priority_preemption_bug.py (thr 15, 5 usable blocks, full-ISL gate off)."""
    _t21_through_r3()


def test_T21_R4_without_throttle():
    """T21 R4, core rules only (no throttle): A (prio 9) cannot get a 3rd block, is the max victim, preempts itself
    and the pass continues (§3.1 PRIORITY), so C is still scheduled and RUNNING: {B: 1, C: 1}, preempted {A}.

    The test's own assertion ("C is scheduled and RUNNING") holds; §9.A.22 notes vLLM's R4 reaches it
    without preempting because throttling defers A.
    """
    state = _t21_through_r3()
    r4, state = schedule(state)
    assert sched_dict(r4) == {"B": 1, "C": 1}
    assert r4.preempted_req_ids == {"A"}
    assert state.requests["C"].status == RequestStatus.RUNNING
    assert state.requests["A"].status == RequestStatus.PREEMPTED


def test_priority_victim_skipped_at_lower_index_adjusts_req_index():
    """§9.A.22 / I-9: a running request skipped earlier in the pass (owes 0), at a lower index, is the PRIORITY victim;
    `req_index` is decremented (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (945-948)) so the request after the
    current one is still scheduled.

    bs 4, 5 usable blocks. X (prio 9, 4 tokens) runs alone; Y (prio 0, 4 tokens) and Z (prio 1, 6 tokens)
    join: running [X, Y, Z], 0 free. X's last output does not come back (owes 0). Next step: X skipped,
    Y needs a 2nd block -> victim X (index 0 < 1) -> Y and Z scheduled: {Y: 1, Z: 1}, preempted {X}.
    """
    cfg = prio_config(block_size=4, num_gpu_blocks=6)
    state = new_state(cfg, make_request("X", 4, priority=9, arrival_time=0.0))
    _, state, _ = step(state)
    state = add(
        state, make_request("Y", 4, priority=0, arrival_time=1.0), make_request("Z", 6, priority=1, arrival_time=2.0)
    )
    out, state, _ = step(state, tokens_for={"X": []})
    assert sched_dict(out) == {"X": 1, "Y": 4, "Z": 6}
    assert state.running == ("X", "Y", "Z")
    assert state.num_free_blocks == 0
    assert state.requests["X"].num_owed_tokens == 0

    out, state = schedule(state)
    assert sched_dict(out) == {"Y": 1, "Z": 1}
    assert out.preempted_req_ids == {"X"}
    assert state.running == ("Y", "Z")
    assert state.waiting == ("X",)


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
def test_P1_priority_self_preempt_continues_fcfs_preempts_tail(policy):
    """P1 [observed]: 5 usable blocks, bs 4; running [B (prio 9, 7 tok), A (prio 0, 4), C (prio 1, 6)], 0 free.

    B needs a block: PRIORITY -> B preempts itself and the pass continues: {A: 1, C: 1};
    FCFS -> C (the tail) is preempted: {B: 1, A: 1}, waiting [C].
    """
    cfg = config(policy=policy, block_size=4, num_gpu_blocks=6)
    state = new_state(cfg, make_request("B", 7, priority=9, arrival_time=0.0))
    out, state, _ = step(state)
    assert sched_dict(out) == {"B": 7}
    state = add(
        state, make_request("A", 4, priority=0, arrival_time=1.0), make_request("C", 6, priority=1, arrival_time=2.0)
    )
    out, state, _ = step(state)
    assert state.running == ("B", "A", "C")
    assert state.num_free_blocks == 0

    out, state = schedule(state)
    if policy == "priority":
        assert sched_dict(out) == {"A": 1, "C": 1}
        assert out.preempted_req_ids == {"B"}
        assert state.waiting == ("B",)
    else:
        assert sched_dict(out) == {"B": 1, "A": 1}
        assert out.preempted_req_ids == {"C"}
        assert state.waiting == ("C",)
    assert_consistent(state)


def test_priority_victim_tie_picks_first_in_running_order():
    """§4: victim key (priority, arrival_time) excludes request_id; on an exact tie Python's max takes the first in running.

    bs 4, 4 usable blocks; p (prio 1, t 0) and q (prio 1, t 0), 8 tokens each, fill the pool. Both need a
    3rd block: p is processed first, victim = max over [p, q] with equal keys = p itself -> p self-preempts,
    the pass continues, q gets p's freed block: {q: 1}.
    """
    cfg = prio_config(block_size=4, num_gpu_blocks=5)
    state = new_state(
        cfg, make_request("p", 8, priority=1, arrival_time=0.0), make_request("q", 8, priority=1, arrival_time=0.0)
    )
    out, state, _ = step(state)
    assert sched_dict(out) == {"p": 8, "q": 8}
    out, state = schedule(state)
    assert out.preempted_req_ids == {"p"}
    assert sched_dict(out) == {"q": 1}


def test_waiting_request_never_preempts():
    """§3.2: under PRIORITY a high-priority waiting request does not preempt anything; it waits for blocks."""
    cfg = prio_config(block_size=4, num_gpu_blocks=3)
    state = new_state(cfg, make_request("lo", 8, max_tokens=50, priority=9))
    _, state, _ = step(state)  # lo: 2 blocks, 0 free
    state = add(state, make_request("hi", 4, priority=0, arrival_time=1.0))
    out, state = schedule(state)
    # lo needs a 3rd block: it is the only running request, so it preempts itself; hi is not admitted that step.
    assert out.preempted_req_ids == {"lo"}
    assert new_ids(out) == []
    out, state = schedule(state)
    assert new_ids(out) == ["hi"]  # admitted next step, by heap order, not by preempting


def test_priority_refund_returns_the_victims_tokens_to_the_budget():
    """§3.1/I-9 (the T17 refund, made observable): an already-scheduled victim's tokens go back to the token budget,
    so a request later in the same pass can use them.

    PRIORITY, bs 4, 4 usable blocks, max_num_scheduled_tokens 3, full-ISL gate off. lo (prio 5, 3 tokens) runs
    alone; hi (prio 0, 1 token) and mid (prio 1, 20 tokens) join. Steps 2-5 schedule {lo:1, hi:1, mid:1}
    (budget 3; mid's prompt advances 1 per step) and fill the pool. Step 6: lo (C=7) fits its 2 blocks and is
    scheduled (budget 3 -> 2); hi (C=4) needs a 2nd block, 0 free -> victim lo, refunded (budget back to 3),
    hi takes 1 (-> 2); mid gets min(16, 2) = 2: {hi: 1, mid: 2}. Without the refund mid would get 1.
    """
    cfg = prio_config(
        block_size=4,
        num_gpu_blocks=5,
        max_num_batched_tokens=16,
        max_num_scheduled_tokens=3,
        max_num_seqs=3,
        scheduler_reserve_full_isl=False,
    )
    state = new_state(cfg, make_request("lo", 3, max_tokens=50, priority=5, arrival_time=0.0))
    out, state, _ = step(state)
    assert sched_dict(out) == {"lo": 3}
    state = add(
        state,
        make_request("hi", 1, max_tokens=50, priority=0, arrival_time=1.0),
        make_request("mid", 20, max_tokens=50, priority=1, arrival_time=2.0),
    )
    for _ in range(4):
        out, state, _ = step(state)
        assert sched_dict(out) == {"lo": 1, "hi": 1, "mid": 1}
    assert state.num_free_blocks == 0
    out, state = schedule(state)
    assert out.preempted_req_ids == {"lo"}
    assert sched_dict(out) == {"hi": 1, "mid": 2}
    assert cached_ids(out) == ["hi", "mid"]
