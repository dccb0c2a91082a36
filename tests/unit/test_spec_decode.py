"""Speculative-decode bookkeeping in the sync scheduler (doc §3.1 drafts, §5 rollback, §8 T36, §8b D3/D4, §9 items 12-14).

The reference has no drafter and no `update_draft_token_ids`; the drafts a sync engine would set after
`update_from_output` are written into the request's state (`spec_token_ids`), which is what vLLM's
`update_draft_token_ids` does for a request that is not a prefill chunk (scheduler.py:2862-2881).
"""

from __future__ import annotations

from helpers import config, make_request, new_state, sched_dict, set_request, step, update, update_live

from schedspec.reference_impl import schedule
from schedspec.spec.request import RequestStatus


def _after_prefill(cfg, prompt_len, first_token=100, **kw):
    state = new_state(cfg, make_request(0, prompt_len, **kw))
    _, state, _ = step(state, default_token=first_token)
    return state


def test_D3_sync_spec_rollback():
    """D3 [observed]: k=3, 10-token prompt, C=10 T=11; drafts [1,2,3] -> {0:4}, spec [1,2,3], C=14;
    sampled [1,5] -> C=12, T=13, outputs [100,1,5]; owed is 1 again."""
    state = _after_prefill(config(), 10)
    r = state.requests["0"]
    assert (r.num_computed_tokens, r.num_tokens) == (10, 11)

    state = set_request(state, "0", spec_token_ids=(1, 2, 3))
    out, state = schedule(state)
    assert sched_dict(out) == {"0": 4}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2, 3)}
    assert state.requests["0"].num_computed_tokens == 14
    assert state.requests["0"].spec_token_ids == ()  # consumed when scheduled (I-19)

    state, _ = update(state, out, {"0": [1, 5]})
    r = state.requests["0"]
    assert (r.num_computed_tokens, r.num_tokens) == (12, 13)
    assert r.output_token_ids == (100, 1, 5)
    assert r.num_owed_tokens == 1


def test_D4_max_model_len_clamp_cuts_drafts():
    """D4 [observed]: L=16, k=4, 12-token prompt, C=12 T=13; drafts [1,2,3,4] -> n = min(5, 16-12-1) = 3, spec [1,2];
    sampled [1,2,9] -> T=16 -> FINISHED_LENGTH_CAPPED."""
    state = _after_prefill(config(max_num_batched_tokens=64, max_model_len=16), 12)
    r = state.requests["0"]
    assert (r.num_computed_tokens, r.num_tokens) == (12, 13)

    state = set_request(state, "0", spec_token_ids=(1, 2, 3, 4))
    out, state = schedule(state)
    assert sched_dict(out) == {"0": 3}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2)}

    state, finished = update(state, out, {"0": [1, 2, 9]})
    assert finished["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["0"].output_token_ids == (100, 1, 2, 9)


def test_T36_empty_sample_means_no_rollback():
    """T36: k=3, drafts [1,2,3] scheduled, sampled [] -> no crash and no rollback (accepted = max(0-1, 0); block skipped)."""
    state = _after_prefill(config(), 10)
    state = set_request(state, "0", spec_token_ids=(1, 2, 3))
    out, state = schedule(state)
    assert state.requests["0"].num_computed_tokens == 14
    state, finished = update(state, out, {"0": []})
    assert finished == {}
    r = state.requests["0"]
    assert r.num_computed_tokens == 14
    assert r.output_token_ids == (100,)


def test_all_drafts_accepted():
    """§5 counters: a spec step with all S drafts accepted: C += 1+S, nothing rolled back, T += S+1, owed 1."""
    state = _after_prefill(config(), 10)
    state = set_request(state, "0", spec_token_ids=(1, 2, 3))
    out, state = schedule(state)
    state, _ = update(state, out, {"0": [1, 2, 3, 4]})
    r = state.requests["0"]
    assert (r.num_computed_tokens, r.num_tokens) == (14, 15)
    assert r.num_owed_tokens == 1


def test_trim_after_stop_keeps_C_one_short_of_T():
    """§9 item 12: a spec step trimmed by a stop token: C0+1+S, minus S-(m-1) rejected, minus m-j trimmed = C0+j = T_after-1.

    C0 = 10, T = 11, S = 3, sampled [1, 42, 3, 4] (m = 4, stop token 42 at j = 2) -> C = 12, T = 13, outputs [100, 1, 42].
    """
    state = _after_prefill(config(), 10, stop_token_ids=[42])
    state = set_request(state, "0", spec_token_ids=(1, 42, 3))
    out, state = schedule(state)
    assert out.scheduled_spec_decode_tokens == {"0": (1, 42, 3)}
    state, finished, live = update_live(state, out, {"0": [1, 42, 3, 4]})
    assert finished["0"].status == RequestStatus.FINISHED_STOPPED
    assert finished["0"].output_token_ids == (100, 1, 42)
    assert live["0"].num_computed_tokens == 12
    assert live["0"].num_tokens == 13
    assert live["0"].stop_reason == 42


def test_threshold_trims_drafts():
    """§9 item 4.3: the threshold caps any n, spec decodes included: thr 2 with 3 drafts -> n = 2, spec [first draft]."""
    cfg = config(long_prefill_token_threshold=2)
    state = new_state(cfg, make_request(0, 10), make_request(1, 10))  # two requests: thr is in force
    for _ in range(5):  # the prompts are chunked by 2 as well
        out, state, _ = step(state, default_token=100)
        assert sched_dict(out) == {"0": 2, "1": 2}
    assert all(r.num_owed_tokens == 1 for r in state.requests.values())
    state = set_request(state, "0", spec_token_ids=(1, 2, 3))
    out, state = schedule(state)
    assert sched_dict(out) == {"0": 2, "1": 1}
    assert out.scheduled_spec_decode_tokens == {"0": (1,)}
