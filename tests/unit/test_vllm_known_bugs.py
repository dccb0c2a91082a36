"""vLLM 0.33.0 behaviour the spec declares a bug, pinned as documented divergences.

The spec does not copy these. Each test shows vLLM doing it (so a vLLM
release that fixes it makes the test fail, and the pin can go) and shows
what the spec does instead. The vLLM half needs the vLLM venv and is skipped
without it.

* exp1 (semantics §8b, §9 A.4.5): with spec decode, the long-prefill
  threshold is applied after the padding of a decode-like admission, so
  `1 <= long_prefill_token_threshold < 1 + k` clips a padded admission below
  1 + k and `assert num_new_tokens == 1 + self.num_spec_tokens`
  (scheduler.py:1579) kills the engine. The spec refuses that config
  (`spec/config.py`) rather than crash; the harness never generates it.
"""

from __future__ import annotations

import dataclasses

import pytest
from both_engines import needs_vllm

from schedspec.conformance.engines.vllm import vllm_engine_factory
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
    padded to 1+k=4, clipped to 2 by the threshold -> AssertionError at scheduler.py:1579."""
    raw = {**dataclasses.asdict(SchedulerConfig(enable_prefix_caching=True, num_speculative_tokens=K)),
           "long_prefill_token_threshold": THRESHOLD}
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
