"""Token budget, chunked prefill and `long_prefill_token_threshold` (§3.0, §3.1, §9.A.4; T7-T11)."""

from __future__ import annotations

import pytest

from helpers import add, cached_ids, config, make_request, new_ids, new_state, sched_dict, update

from schedspec.reference_impl import schedule


def test_T7_concurrent_partial_requests():
    """T7: budget 1024, thr 400, 3x800 -> {400,400,224} new; {400,400,224} cached; then {0:1, 1:1, 2:352}."""
    cfg = config(max_num_batched_tokens=1024, long_prefill_token_threshold=400)
    state = new_state(cfg, *(make_request(i, 800) for i in range(3)))

    out1, state = schedule(state)
    assert sched_dict(out1) == {"0": 400, "1": 400, "2": 224}
    assert new_ids(out1) == ["0", "1", "2"]
    assert cached_ids(out1) == []
    state, _ = update(state, out1, {"0": [], "1": [], "2": []})

    out2, state = schedule(state)
    assert sched_dict(out2) == {"0": 400, "1": 400, "2": 224}
    assert new_ids(out2) == []
    assert cached_ids(out2) == ["0", "1", "2"]
    # Only 0 and 1 completed their prefill; 2 is at 448 of 800.
    state, _ = update(state, out2, {"0": [0], "1": [0], "2": []})

    out3, state = schedule(state)
    assert sched_dict(out3) == {"0": 1, "1": 1, "2": 352}


def test_T8_threshold_ignored_when_alone():
    """T8: budget 1024, thr 400, one 2000-token request alone -> 1024 (a lone request is never capped)."""
    cfg = config(max_num_batched_tokens=1024, long_prefill_token_threshold=400, max_model_len=4096)
    state = new_state(cfg, make_request("long", 2000))
    output, _ = schedule(state)
    assert sched_dict(output) == {"long": 1024}


def test_T9_threshold_applies_with_other_requests():
    """T9: the same long request plus a 10-token short one -> {long: 400, short: 10}."""
    cfg = config(max_num_batched_tokens=1024, long_prefill_token_threshold=400, max_model_len=4096)
    state = new_state(cfg, make_request("long", 2000), make_request("short", 10))
    output, _ = schedule(state)
    assert sched_dict(output) == {"long": 400, "short": 10}


def test_T10_threshold_floored_by_fair_share():
    """T10: thr 100, adaptive, long 2000 + short 10 -> {long: 512 (= 1024 // 2), short: 10}."""
    cfg = config(
        max_num_batched_tokens=1024,
        long_prefill_token_threshold=100,
        long_prefill_token_threshold_adaptive=True,
        max_model_len=4096,
    )
    state = new_state(cfg, make_request("long", 2000), make_request("short", 10))
    output, _ = schedule(state)
    assert sched_dict(output) == {"long": 512, "short": 10}


def test_T11_schedule_concurrent_batches():
    """T11: budget 1024, max_num_seqs 2, 2x512, two schedules before r0's output.

    s0 = {r0: 512}; r1 added; s1 = {r1: 512} with r1 new and r0 (owing 0) skipped;
    after s0's output [0] for r0, s2 = {r0: 1}.
    """
    cfg = config(max_num_batched_tokens=1024, max_num_seqs=2)
    state = new_state(cfg, make_request(0, 512))
    s0, state = schedule(state)
    assert sched_dict(s0) == {"0": 512}

    state = add(state, make_request(1, 512))
    s1, state = schedule(state)
    assert sched_dict(s1) == {"1": 512}
    assert new_ids(s1) == ["1"]
    assert state.requests["0"].num_owed_tokens == 0

    state, _ = update(state, s0, {"0": [0]})
    s2, state = schedule(state)
    assert sched_dict(s2) == {"0": 1}


@pytest.mark.parametrize("budget,expected", [(1024, {"0": 400, "1": 400, "2": 224}), (500, {"0": 400, "1": 100})])
def test_budget_is_shared_in_running_then_admission_order(budget, expected):
    """I-1: Σ n <= budget; each n is min(owed, thr, remaining budget), in queue order (T7 variant)."""
    cfg = config(max_num_batched_tokens=budget, long_prefill_token_threshold=400, max_model_len=1024)
    state = new_state(cfg, *(make_request(i, 800) for i in range(3)))
    output, _ = schedule(state)
    assert sched_dict(output) == expected
    assert output.total_num_scheduled_tokens <= budget


def test_max_num_scheduled_tokens_overrides_budget():
    """§2.2: max_num_scheduled_tokens, when set, is the token budget (here 300 of 8192 batched)."""
    cfg = config(max_num_scheduled_tokens=300)
    state = new_state(cfg, make_request(0, 200), make_request(1, 200))
    output, _ = schedule(state)
    assert sched_dict(output) == {"0": 200, "1": 100}
