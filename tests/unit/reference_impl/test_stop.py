"""Stop checking and trimming (§5 check_stop and append_and_check, §8 T31-T33, §9.A.11-§9.A.12)."""

from __future__ import annotations

import pytest

from helpers import EOS, config, inject_running, make_request, new_state, step, update_live

from schedspec.reference_impl import initial_state
from schedspec.reference_impl.live_request import LiveRequest
from schedspec.reference_impl.stop import check_stop
from schedspec.spec.output import SchedulerOutput
from schedspec.spec.request import RequestStatus


def _t31_state(requests):
    """vLLM's test injects RUNNING requests with C = T (= 10) and builds the SchedulerOutput by hand."""
    state = initial_state(config())
    for r in requests:
        state = inject_running(state, r, num_computed_tokens=r.num_prompt_tokens)
    return state


def test_T31a_eos_stops_and_drafts_are_kept():
    """T31(a), k=1: {0:1, 1:2}, spec {1:[10]}; sampled [[EOS],[10,11]] -> r0 STOPPED [EOS] and reported; r1 runs with [10,11]."""
    state = _t31_state([make_request(0, 10), make_request(1, 10)])
    output = SchedulerOutput(num_scheduled_tokens={"0": 1, "1": 2}, scheduled_spec_decode_tokens={"0": (), "1": (10,)})
    state, finished, live = update_live(state, output, {"0": [EOS], "1": [10, 11]})
    assert finished["0"].status == RequestStatus.FINISHED_STOPPED
    assert finished["0"].output_token_ids == (EOS,)
    assert "0" in state.finished_req_ids
    assert "0" not in state.requests and state.running == ("1",)
    assert state.requests["1"].status == RequestStatus.RUNNING
    assert state.requests["1"].output_token_ids == (10, 11)


def test_T31b_stop_token_trims_following_tokens():
    """T31(b), k=2, stop_token_ids [42,43]: sampled [[10,42,12],[13,14]] -> r0 STOPPED, stop_reason 42, outputs [10,42]."""
    state = _t31_state([make_request(0, 10, stop_token_ids=[42, 43]), make_request(1, 10, stop_token_ids=[42, 43])])
    output = SchedulerOutput(
        num_scheduled_tokens={"0": 3, "1": 2}, scheduled_spec_decode_tokens={"0": (10, 42), "1": (13,)}
    )
    state, finished, live = update_live(state, output, {"0": [10, 42, 12], "1": [13, 14]})
    assert finished["0"].status == RequestStatus.FINISHED_STOPPED
    assert live["0"].stop_reason == 42
    assert finished["0"].output_token_ids == (10, 42)
    assert state.requests["1"].output_token_ids == (13, 14)
    assert state.requests["1"].status == RequestStatus.RUNNING


def test_T31c_max_tokens_trims():
    """T31(c), k=2, max_tokens 2: {0:3, 1:1}; sampled [[10,11,12],[13]] -> r0 LENGTH_CAPPED [10,11]; r1 [13]."""
    state = _t31_state([make_request(0, 10, max_tokens=2), make_request(1, 10, max_tokens=2)])
    output = SchedulerOutput(num_scheduled_tokens={"0": 3, "1": 1}, scheduled_spec_decode_tokens={"0": (10, 11)})
    state, finished, _ = update_live(state, output, {"0": [10, 11, 12], "1": [13]})
    assert finished["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["0"].output_token_ids == (10, 11)
    assert state.requests["1"].output_token_ids == (13,)
    assert state.requests["1"].status == RequestStatus.RUNNING


def test_T31d_ignore_eos_keeps_running():
    """T31(d), ignore_eos, k=2: sampled [[EOS,10,11]] -> still RUNNING with outputs [EOS,10,11]."""
    state = _t31_state([make_request(0, 10, ignore_eos=True)])
    output = SchedulerOutput(num_scheduled_tokens={"0": 3}, scheduled_spec_decode_tokens={"0": (EOS, 10)})
    state, finished, _ = update_live(state, output, {"0": [EOS, 10, 11]})
    assert finished == {}
    assert state.requests["0"].status == RequestStatus.RUNNING
    assert state.requests["0"].output_token_ids == (EOS, 10, 11)


def _live(outputs, L=100, **kw):
    r = LiveRequest(make_request(0, 3, **kw))
    r.output_token_ids = list(outputs)
    return r


@pytest.mark.parametrize(
    "case,kw,outputs,stopped,status,stop_reason",
    [
        ("below min_tokens, no stop token", {}, [10, 11, 12], False, RequestStatus.WAITING, None),
        ("EOS below min_tokens still stops", {}, [10, 11, EOS], True, RequestStatus.FINISHED_STOPPED, None),
        ("ignore_eos nulls EOS", {"ignore_eos": True}, [EOS], False, RequestStatus.WAITING, None),
        ("min_tokens 0, EOS", {"min_tokens": 0}, [10, EOS], True, RequestStatus.FINISHED_STOPPED, None),
        (
            "stop token below min_tokens",
            {"stop_token_ids": [42]},
            [10, 11, 42],
            True,
            RequestStatus.FINISHED_STOPPED,
            42,
        ),
    ],
)
def test_T32_check_stop_min_tokens(case, kw, outputs, stopped, status, stop_reason):
    """T32 test_check_stop_min_tokens: max_tokens 20, min_tokens 5, L 100; EOS and stop tokens win below min_tokens."""
    params = {"max_tokens": 20, "min_tokens": 5}
    params.update(kw)
    r = _live(outputs, **params)
    assert check_stop(r, 100) is stopped, case
    assert r.status == status, case
    assert r.stop_reason == stop_reason, case


def test_T33_length_caps_apply_below_min_tokens():
    """T33: prompt 3 + 7 outputs with L=10 and min 500 -> LENGTH_CAPPED; max_tokens 3 with 3 outputs, min 500 -> LENGTH_CAPPED."""
    r = _live([1] * 7, max_tokens=100, min_tokens=500)
    assert check_stop(r, 10) is True
    assert r.status == RequestStatus.FINISHED_LENGTH_CAPPED

    r = _live([1, 2, 3], max_tokens=3, min_tokens=500)
    assert check_stop(r, 100) is True
    assert r.status == RequestStatus.FINISHED_LENGTH_CAPPED


def test_eos_wins_over_length_cap_on_same_token():
    """§5 consequence: EOS (or a stop token) on the token that also reaches max_tokens -> FINISHED_STOPPED."""
    r = _live([10, EOS], max_tokens=2)
    assert check_stop(r, 100) is True and r.status == RequestStatus.FINISHED_STOPPED
    r = _live([10, 42], max_tokens=2, ignore_eos=True, stop_token_ids=[42])
    assert check_stop(r, 100) is True and r.status == RequestStatus.FINISHED_STOPPED and r.stop_reason == 42


def test_stop_tokens_apply_under_ignore_eos():
    """§9.A.11: ignore_eos nulls eos_token_id but the request's stop tokens still apply."""
    r = _live([10, 42], max_tokens=20, ignore_eos=True, stop_token_ids=[42])
    assert check_stop(r, 100) is True
    assert r.stop_reason == 42


def test_max_tokens_through_the_engine_loop():
    """§5: a request finishes FINISHED_LENGTH_CAPPED on its max_tokens-th output, reported in the next step's finished_req_ids."""
    state = new_state(config(), make_request(0, 10, max_tokens=3))
    outs = []
    for _ in range(3):
        out, state, finished = step(state)
        outs.append((dict(out.num_scheduled_tokens), finished))
    assert [o for o, _ in outs] == [{"0": 10}, {"0": 1}, {"0": 1}]
    assert outs[2][1]["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert outs[2][1]["0"].output_token_ids == (0, 0, 0)
    assert state.requests == {} and state.running == ()
    out, state, _ = step(state)
    assert out.finished_req_ids == {"0"}  # I-18: reported once, by the next schedule()
    out, state, _ = step(state)
    assert out.finished_req_ids == frozenset()


def test_max_model_len_caps_at_L():
    """§9.A.1: check_stop stops at T >= L: prompt 6, L 8 -> exactly 2 outputs, LENGTH_CAPPED."""
    state = new_state(config(max_num_batched_tokens=64, max_model_len=8), make_request(0, 6, max_tokens=100))
    _, state, f1 = step(state)
    _, state, f2 = step(state)
    assert f1 == {}
    assert f2["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert len(f2["0"].output_token_ids) == 2
