"""vLLM 0.33.0 behaviour the spec declares a bug, pinned as documented divergences.

The spec does not copy these. Each test shows vLLM doing it (so a vLLM
release that fixes it makes the test fail, and the pin can go) and shows
what the spec does instead. The vLLM half needs the vLLM venv and is skipped
without it.

* exp1 (§8b, §9.A.4): with spec decode, the long-prefill
  threshold is applied after the padding of a decode-like admission, so
  `1 <= long_prefill_token_threshold < 1 + k` clips a padded admission below
  1 + k and `assert num_new_tokens == 1 + self.num_spec_tokens`
  (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1579)) kills the engine. The spec refuses that config
  (`spec/config.py`) rather than crash; the harness never generates it.
* Padding livelocks (found by the invariant monitors' `progress-when-idle`
  analysis of the spec-decode family). A lone waiting request whose prefix
  hit leaves exactly one token is "decode-like" (C > 0), so it is padded to
  1 + k tokens. If 1 + k exceeds the token budget the waiting pass breaks
  ("prefer to not schedule than schedule un-padded",
  vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1326-1328)),
  and if the padded slots need a block more than the pool has, the
  allocation fails; either way it breaks before anything else runs, every
  step, forever, although the request alone would fit un-padded. This is
  vLLM's behaviour and therefore the pinned semantics: the spec models it
  and the tests below show both engines stuck, like D1. A fix (schedule
  un-padded when nothing else is scheduled) would make them fail.
"""

from __future__ import annotations

import dataclasses

import pytest

from both_engines import needs_vllm

from schedspec.conformance.engines.vllm_pool import vllm_engine_factory
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.output import ModelRunnerOutput
from schedspec.spec.request import Request

K, THRESHOLD = 3, 2
EXP1 = {"enable_prefix_caching": True, "num_speculative_tokens": K, "long_prefill_token_threshold": THRESHOLD}


def _req(rid: str) -> Request:
    return Request(request_id=rid, prompt_token_ids=tuple(range(300, 333)), max_tokens=16, ignore_eos=True)


def test_exp1_config_is_refused_by_the_spec():
    with pytest.raises(SpecError) as e:
        SchedulerConfig(**EXP1)
    message = str(e.value)
    assert "long_prefill_token_threshold" in message and "\n" not in message


@needs_vllm
def test_exp1_vllm_crashes_on_a_clipped_padded_admission():
    """exp1: k=3 ngram, APC, threshold 2. A 33-token r1 runs; an identical r2 is a full hit (C=32, n=1),
    padded to 1+k=4, clipped to 2 by the threshold -> AssertionError at
    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1579)."""
    raw = {
        **dataclasses.asdict(SchedulerConfig(enable_prefix_caching=True, num_speculative_tokens=K)),
        "long_prefill_token_threshold": THRESHOLD,
    }
    factory = vllm_engine_factory()
    try:
        with factory(SchedulerConfig()) as engine:
            engine.reset_unchecked(raw)  # the spec would refuse this config
            engine.add_request(_req("r1"))
            out = engine.schedule()
            assert dict(out.num_scheduled_tokens) == {"r1": 33}  # alone: the threshold is not applied (T8)
            engine.update_from_output(out, ModelRunnerOutput({"r1": (100,)}))
            engine.add_request(_req("r2"))
            with pytest.raises(SpecError) as e:
                engine.schedule()
    finally:
        factory.close_all()
    message = str(e.value)
    assert "AssertionError" in message and "vllm/v1/core/sched/scheduler.py:1579" in message
    assert "\n" not in message


def _warm_then_twin(d, prompt_len: int) -> None:
    """Run a request to completion so its full blocks stay cached, then add its twin."""
    d.add(Request(request_id="warm", prompt_token_ids=tuple(range(40, 40 + prompt_len)), max_tokens=1, ignore_eos=True))
    for _ in range(8):
        d.step(default=1)
    assert "warm" not in d.engine.summary().requests
    d.add(Request(request_id="twin", prompt_token_ids=tuple(range(40, 40 + prompt_len)), max_tokens=4, ignore_eos=True))


def _stuck(d, steps: int = 20) -> None:
    for _ in range(steps):
        out, _ = d.step(default=1)
        assert dict(out.num_scheduled_tokens) == {}
    assert d.req("twin").status.name == "WAITING"


def test_padding_above_the_budget_livelocks(make):
    """9-token prompt, block size 4: the twin hits 8 tokens, owes 1, is padded to 1 + k = 4 > budget 3."""
    d = make(
        SchedulerConfig(
            max_num_batched_tokens=3,
            max_num_seqs=1,
            max_model_len=64,
            block_size=4,
            num_gpu_blocks=32,
            enable_prefix_caching=True,
            num_speculative_tokens=3,
        )
    )
    _warm_then_twin(d, 9)
    _stuck(d)


def test_padding_past_the_pool_livelocks(make):
    """3 usable blocks hold the whole 9-token sequence (the full-sequence gate passes), but the padded
    slots 8 + 1 + 4 = 13 need a 4th block: allocation fails every step."""
    d = make(
        SchedulerConfig(
            max_num_batched_tokens=16,
            max_num_seqs=4,
            max_model_len=64,
            block_size=4,
            num_gpu_blocks=4,
            enable_prefix_caching=True,
            num_speculative_tokens=4,
        )
    )
    _warm_then_twin(d, 9)
    _stuck(d)
