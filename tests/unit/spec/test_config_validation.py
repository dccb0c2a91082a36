"""SchedulerConfig validation: every bad field is a one-line SpecError naming `config.<field>` and the value.

The bounds follow vLLM 0.33.0's `SchedulerConfig` (field bounds and
vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len; §2.3 "Validation").
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.spec.config import MAX_GPU_BLOCKS, SchedulerConfig
from schedspec.spec.errors import SpecError


def assert_one_line_error(err: SpecError, field: str, value) -> None:
    text = str(err)
    assert "\n" not in text
    assert f"config.{field}" in text, text
    assert repr(value) in text, text
    assert err.where == f"config.{field}"


INVALID = [
    # (field, kwargs)
    ("max_num_batched_tokens", {"max_num_batched_tokens": 0}),
    ("max_num_batched_tokens", {"max_num_batched_tokens": "8192"}),
    ("max_num_batched_tokens", {"max_num_batched_tokens": 8192.0}),
    ("max_num_seqs", {"max_num_seqs": 0}),
    ("max_num_seqs", {"max_num_seqs": True}),
    ("max_model_len", {"max_model_len": 0}),
    ("max_model_len", {"max_model_len": -5}),
    ("block_size", {"block_size": 0}),
    ("block_size", {"block_size": None}),
    ("num_gpu_blocks", {"num_gpu_blocks": 0}),
    ("num_gpu_blocks", {"num_gpu_blocks": 1.5}),
    ("max_num_scheduled_tokens", {"max_num_scheduled_tokens": 0}),
    ("max_num_scheduled_tokens", {"max_num_scheduled_tokens": -1}),
    ("max_num_scheduled_tokens", {"max_num_scheduled_tokens": "x"}),
    ("max_num_active_seqs", {"max_num_active_seqs": 0}),
    # > max_num_seqs (16): vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len (338-345)
    ("max_num_active_seqs", {"max_num_active_seqs": 17}),
    ("long_prefill_token_threshold", {"long_prefill_token_threshold": -1}),
    # > max_model_len 8192: vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len (355-360)
    ("long_prefill_token_threshold", {"long_prefill_token_threshold": 9000}),
    ("long_prefill_token_threshold", {"long_prefill_token_threshold": 1.0}),
    ("long_prefill_token_threshold_adaptive", {"long_prefill_token_threshold_adaptive": 1}),
    ("enable_chunked_prefill", {"enable_chunked_prefill": "yes"}),
    ("scheduler_reserve_full_isl", {"scheduler_reserve_full_isl": None}),
    ("policy", {"policy": "lifo"}),
    ("policy", {"policy": "FCFS"}),
    ("watermark", {"watermark": 1.0}),
    ("watermark", {"watermark": -0.1}),
    ("watermark", {"watermark": "0.1"}),
    ("watermark", {"watermark": True}),
]


@pytest.mark.parametrize("field,kwargs", INVALID, ids=[f"{f}={v!r}" for f, kw in INVALID for v in kw.values()])
def test_invalid_field_is_a_one_line_spec_error(field, kwargs):
    """Each invalid SchedulerConfig field -> SpecError, one line, naming config.<field> and the value."""
    with pytest.raises(SpecError) as exc:
        SchedulerConfig(**kwargs)
    assert_one_line_error(exc.value, field, kwargs[field])


def test_budget_below_max_num_seqs():
    """§2.3 Validation: max_num_batched_tokens >= max_num_seqs."""
    with pytest.raises(SpecError) as exc:
        SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=16)
    assert_one_line_error(exc.value, "max_num_batched_tokens", 8)


def test_chunked_prefill_off_needs_budget_at_least_L():
    """§2.3 Validation: with chunked prefill off, max_num_batched_tokens >= max_model_len."""
    with pytest.raises(SpecError) as exc:
        SchedulerConfig(max_num_batched_tokens=1024, max_model_len=2048, enable_chunked_prefill=False)
    assert_one_line_error(exc.value, "max_num_batched_tokens", 1024)
    # Chunked prefill on: the same numbers are fine.
    SchedulerConfig(max_num_batched_tokens=1024, max_model_len=2048, enable_chunked_prefill=True)


def test_warned_not_refused_budget_above_seqs_times_L():
    """§2.3: max_num_batched_tokens > max_num_seqs * L is only a warning in vLLM, so it is accepted."""
    SchedulerConfig(max_num_batched_tokens=1000, max_num_seqs=2, max_model_len=100)


def test_defaults_are_the_test_harness_ones():
    """§8 harness defaults: max_num_seqs 16, budget 8192, L = budget, 10000 blocks of 16, thr 0, watermark 0, FCFS, gate on."""
    c = SchedulerConfig()
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.max_model_len) == (16, 8192, 8192)
    assert (c.num_gpu_blocks, c.block_size, c.long_prefill_token_threshold, c.watermark) == (10000, 16, 0, 0.0)
    assert c.policy == "fcfs" and c.scheduler_reserve_full_isl and c.enable_chunked_prefill
    assert c.token_budget == 8192 and c.max_num_active_reqs == 16 and c.num_usable_blocks == 9999
    assert SchedulerConfig(max_num_batched_tokens=1024).max_model_len == 1024


def test_watermark_blocks_count_the_null_block():
    """§3.4: watermark_blocks = int(watermark * num_gpu_blocks), null block included (D7: 0.3 * 11 -> 3).

    0.25 * 8 = 2, whereas counting only the 7 usable blocks would give int(1.75) = 1.
    """
    assert SchedulerConfig(watermark=0.3, num_gpu_blocks=11).watermark_blocks == 3
    assert SchedulerConfig(watermark=0.25, num_gpu_blocks=8).watermark_blocks == 2


def test_from_dict_unknown_field_and_nested_path():
    """from_dict: an unknown key names its path; a bad value is reported under the caller's path."""
    with pytest.raises(SpecError) as exc:
        SchedulerConfig.from_dict({"max_num_seq": 4})
    assert exc.value.where == "config.max_num_seq" and "\n" not in str(exc.value)
    with pytest.raises(SpecError) as exc:
        SchedulerConfig.from_dict({"max_num_seqs": 0}, where="workload.config")
    assert exc.value.where == "workload.config.max_num_seqs"
    assert "0" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        SchedulerConfig.from_dict([1, 2])
    assert exc.value.where == "config"


def test_config_dict_round_trip():
    """to_dict / from_dict is lossless."""
    c = SchedulerConfig(
        max_num_batched_tokens=512,
        max_num_seqs=4,
        max_model_len=300,
        block_size=8,
        num_gpu_blocks=77,
        long_prefill_token_threshold=64,
        long_prefill_token_threshold_adaptive=True,
        policy="priority",
        watermark=0.25,
        scheduler_reserve_full_isl=False,
        max_num_scheduled_tokens=256,
        max_num_active_seqs=3,
    )
    assert SchedulerConfig.from_dict(c.to_dict()) == c


@settings(max_examples=40, derandomize=True, deadline=None)
@given(st.integers(min_value=MAX_GPU_BLOCKS + 1, max_value=10**18))
def test_a_pool_that_would_not_fit_is_refused_up_front_with_its_size(blocks):
    """`num_gpu_blocks: 10**12` once ended in a MemoryError traceback; now one line, with the estimate."""
    with pytest.raises(SpecError, match=r"config\.num_gpu_blocks: must be at most 16777216: .* GiB here"):
        SchedulerConfig(num_gpu_blocks=blocks)
    SchedulerConfig(num_gpu_blocks=MAX_GPU_BLOCKS)  # the bound itself is fine
