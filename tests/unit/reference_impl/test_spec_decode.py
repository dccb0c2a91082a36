"""Speculative-decode bookkeeping in the sync scheduler (§3.1 drafts, §5 rollback, §8 T36, §8b D3/D4, §9.A.12-§9.A.14).

The reference has no drafter and no `update_draft_token_ids`; the drafts a sync engine would set after
`update_from_output` are written into the request's state (`spec_token_ids`), which is what vLLM's
`update_draft_token_ids` does for a request that is not a prefill chunk
(vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids).
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
    """§9.A.12: a spec step trimmed by a stop token: C0+1+S, minus S-(m-1) rejected, minus m-j trimmed = C0+j = T_after-1.

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
    """§9.A.4: the threshold caps any n, spec decodes included: thr 2 with 3 drafts -> n = 2, spec [first draft]."""
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


# ---- The same scenarios on both engines, through the engine protocol (drafts via update_draft_token_ids). ----

from both_engines import new_blocks, prompt  # noqa: E402

from schedspec.spec.config import SchedulerConfig  # noqa: E402
from schedspec.spec.request import Request  # noqa: E402


def _req(rid: str, tokens: tuple[int, ...], max_tokens: int = 16) -> Request:
    return Request(request_id=rid, prompt_token_ids=tokens, max_tokens=max_tokens, ignore_eos=True)


def test_D3_on_both_engines(make):
    """D3: k=3, 10-token prompt, C=10 T=11; drafts [1,2,3] -> {0:4} with spec [1,2,3], C=14;
    sampled [1,5] -> C=12, T=13, outputs [100,1,5]."""
    e = make(SchedulerConfig(num_speculative_tokens=3))
    e.add(_req("0", prompt((1, 10))))
    e.step(default=100)
    assert e.ct("0") == (10, 11)
    e.draft({"0": [1, 2, 3]})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 4}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2, 3)}
    assert e.ct("0") == (14, 11)
    e.update({"0": [1, 5]})
    assert e.ct("0") == (12, 13)
    assert e.abort("0").output_token_ids == (100, 1, 5)


def test_D4_on_both_engines(make):
    """D4: L=16, k=4, 12-token prompt, C=12 T=13; drafts [1,2,3,4] -> n = min(5, 16-12-1) = 3, spec [1,2];
    sampled [1,2,9] -> T=16 -> FINISHED_LENGTH_CAPPED."""
    e = make(SchedulerConfig(max_num_batched_tokens=64, max_model_len=16, num_speculative_tokens=4))
    e.add(_req("0", prompt((1, 12))))
    e.step(default=100)
    assert e.ct("0") == (12, 13)
    e.draft({"0": [1, 2, 3, 4]})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 3}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2)}
    finished = e.update({"0": [1, 2, 9]})
    assert finished["0"].status == RequestStatus.FINISHED_LENGTH_CAPPED
    assert finished["0"].output_token_ids == (100, 1, 2, 9)


def test_T39_no_drafts_for_prefill_chunks(make):
    """T39: k=3, budget 50, an 80-token prompt. Step 1: 50, sampled []; drafts [1,2,3] are dropped (a prefill
    chunk). Step 2: exactly 30, no spec entry; sampled [42]; drafts [1,2,3] kept. Step 3: 4 tokens, 3 spec."""
    e = make(SchedulerConfig(max_num_batched_tokens=50, max_model_len=128, num_speculative_tokens=3))
    e.add(_req("0", prompt((1, 80))))
    out, _ = e.step({"0": []})
    assert dict(out.num_scheduled_tokens) == {"0": 50}
    e.draft({"0": [1, 2, 3]})
    out, _ = e.step({"0": [42]})
    assert dict(out.num_scheduled_tokens) == {"0": 30}
    assert out.scheduled_spec_decode_tokens == {}
    e.draft({"0": [1, 2, 3]})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 4}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2, 3)}


def test_T40_padding_of_a_full_hit(make):
    """T40 (`test_spec_decode_padding_first_decode_step`): k=3, APC, two identical 33-token prompts. r1 gets 33,
    sampled [100], drafts [1,2,3]. r2 hits 32 tokens, so n=1, padded to 4 with [-1,-1,-1]; r1's spec is [1,2,3]."""
    e = make(SchedulerConfig(enable_prefix_caching=True, num_speculative_tokens=3))
    same = tuple(range(200, 233))
    e.add(_req("r1", same))
    out, _ = e.step(default=100)
    assert dict(out.num_scheduled_tokens) == {"r1": 33}
    e.draft({"r1": [1, 2, 3]})
    e.add(_req("r2", same))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"r1": 4, "r2": 4}
    assert out.scheduled_spec_decode_tokens == {"r1": (1, 2, 3), "r2": (-1, -1, -1)}
    assert new_blocks(out)["r2"][1] == 32


def test_T40_no_padding_with_a_prefill_in_the_batch(make):
    """T40 (`..._skipped_with_prefill_in_batch`): budget 64, k=3, APC. r_warm (33 tokens, max_tokens=1) finishes;
    r_long (100 tokens) leaves a chunk running; r_candidate (a full hit) gets exactly 1 token and no spec entry."""
    e = make(
        SchedulerConfig(
            max_num_batched_tokens=64, max_model_len=256, enable_prefix_caching=True, num_speculative_tokens=3
        )
    )
    warm = tuple(range(200, 233))
    e.add(_req("r_warm", warm, 1))
    _, finished = e.step()
    assert set(finished) == {"r_warm"}
    e.add(_req("r_long", tuple(range(500, 600))))
    out, _ = e.step()
    assert dict(out.num_scheduled_tokens) == {"r_long": 64}
    e.add(_req("r_candidate", warm))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens)["r_candidate"] == 1
    assert "r_candidate" not in out.scheduled_spec_decode_tokens


def test_T35_each_request_gets_one_plus_its_drafts(make):
    """T35 row [[1,2],[3]] / [[1,2,5],[3,4]]: 1-token prompts, step 1 gives each 1 token and no drafts (nothing
    running, C=0: no padding); with drafts [1,2] and [3], step 2 gives 3 and 2 with those spec lists; every
    draft is accepted (C=4, T=5 and C=3, T=4)."""
    e = make(SchedulerConfig(num_speculative_tokens=2))
    e.add(_req("0", (1,)), _req("1", (2,)))
    out, _ = e.step()
    assert dict(out.num_scheduled_tokens) == {"0": 1, "1": 1}
    assert out.scheduled_spec_decode_tokens == {}
    e.draft({"0": [1, 2], "1": [3]})
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"0": 3, "1": 2}
    assert out.scheduled_spec_decode_tokens == {"0": (1, 2), "1": (3,)}
    e.update({"0": [1, 2, 5], "1": [3, 4]})
    assert (e.ct("0"), e.ct("1")) == ((4, 5), (3, 4))


def test_T48_no_padding_up_to_max_model_len(make):
    """T48 (`test_no_spec_decode_padding_up_to_max_model_len`): L=32, k=1. A 31-token request admitted with
    C=30 next to a running decode gets 1 token, unpadded (30 + 1 + k + 1 = 33 > 32), no spec entry, C=31 < 32;
    its one output makes T=32=L -> FINISHED_LENGTH_CAPPED.
    vLLM's test injects C=30 into the request; here it is a prefix hit instead: bs=10, and a filler with the
    first 30 tokens runs one step first, so its 3 full blocks are cached and it is decoding (no prefill in the
    batch, a running request scheduled: padding is considered). Control, same steps with L=33 (§9.A.15:
    30 + 3 <= 33): padded to 2 tokens with spec [-1], so the L=32 case cannot pass on an engine that never pads."""
    cand = tuple(range(200, 231))
    for max_model_len, n, spec in ((32, 1, None), (33, 2, (-1,))):
        e = make(
            SchedulerConfig(
                block_size=10, max_model_len=max_model_len, enable_prefix_caching=True, num_speculative_tokens=1
            )
        )
        e.add(_req("filler", cand[:30]))
        out, _ = e.step()
        assert dict(out.num_scheduled_tokens) == {"filler": 30}
        e.add(_req("cand", cand))
        out = e.schedule()
        assert dict(out.num_scheduled_tokens) == {"filler": 1, "cand": n}
        assert new_blocks(out)["cand"][1] == 30
        assert out.scheduled_spec_decode_tokens.get("cand") == spec
        assert e.ct("cand") == (30 + n, 31)
        if max_model_len == 32:
            finished = e.update({"cand": [7]}, default=0)
            assert finished["cand"].status == RequestStatus.FINISHED_LENGTH_CAPPED
            assert finished["cand"].output_token_ids == (7,)
        e.close()  # give the vLLM driver back before the next config
