"""What a deployment uses that the spec does not model, read from vLLM's configs and from each request.

Design notes
------------
* The monitors judge vLLM against the spec's rules; where a deployment uses
  a feature outside them (KV connectors, multimodal encoder budgets,
  context parallelism, a drafter with
  lookahead or draft slots, a hybrid KV cache, queue limits, an unmodelled
  release), vLLM's decisions legitimately differ from the spec's, and a
  monitor that fired there would be a false alarm. So a scheduler that sees
  one logs ONE line naming it and switches the monitors off; the capture goes
  on (it is still a faithful record, marked `out_of_scope` in its header).
* All monitors, not some: the decision invariants read the whole pass (a
  encoder budget cuts a chunk short, which moves every later grant, victim
  and block), so no monitor can be said to be untouched by any of these features.
  `monitors_off` in the header lists them all.
* What the spec does model is not out of scope: chunked prefill on or off,
  FCFS and PRIORITY, the watermark, the thresholds, prefix caching, spec
  decode with `ngram` or `ngram_gpu` (no lookahead, no draft slots),
  structured output's grammar wait, LoRA's `max_loras`, async scheduling, pipeline parallel (its batch queue and
  decode cadence), the prefill cadence, the calls outside schedule() (cache resets, pauses), and pooling
  models (spec/config.py).
* Pure: reads vLLM's objects by attribute (`getattr` with the spec's
  assumption as the default), so the unit tests feed it stand-ins and a
  release that lacks a knob reads as the spec's assumption.
"""

from __future__ import annotations

from typing import Any

from ..spec.config import SPECULATIVE_METHODS
from ..spec.versions import RELEASES


def config_features(
    vllm_config: Any, kv_cache_config: Any = None, scheduler: Any = None, async_scheduling: bool = False
) -> list[str]:
    """The unmodelled features a VllmConfig (and the built scheduler, async if `async_scheduling`: its class) turns
    on, each as `name (what)`."""
    found: list[str] = []
    g = getattr
    model, parallel = g(vllm_config, "model_config", None), g(vllm_config, "parallel_config", None)
    sched, spec = g(vllm_config, "scheduler_config", None), g(vllm_config, "speculative_config", None)
    if g(vllm_config, "kv_transfer_config", None) is not None:
        found.append("kv-connector (kv_transfer_config)")
    if g(vllm_config, "ec_transfer_config", None) is not None:
        found.append("encoder-cache-connector (ec_transfer_config)")
    if g(g(vllm_config, "diffusion_config", None), "canvas_length", None) is not None:
        found.append("diffusion (diffusion_config.canvas_length)")
    if model is not None:
        if g(model, "is_multimodal_model", False):
            found.append("multimodal (encoder budget)")
        if g(model, "is_encoder_decoder", False):
            found.append("encoder-decoder model")
        if g(model, "runner_type", "generate") not in ("generate", "pooling"):
            found.append(f"runner_type {g(model, 'runner_type')} (modelled: generate, pooling)")
    if parallel is not None:
        for knob, name in (
            ("decode_context_parallel_size", "decode-context-parallel"),
            ("prefill_context_parallel_size", "prefill-context-parallel"),
        ):
            if (g(parallel, knob, 1) or 1) > 1:
                found.append(f"{name} ({knob}={g(parallel, knob)})")
    if sched is not None:
        for knob, assumed in (
            ("max_num_queued_reqs", None),
            ("max_num_queued_tokens", None),
        ):
            if g(sched, knob, assumed) != assumed:
                found.append(f"scheduler knob {knob}={g(sched, knob)}")
    if spec is not None:
        method = g(spec, "method", None)
        if method not in SPECULATIVE_METHODS:
            found.append(f"spec-decode method {method} (modelled: {', '.join(SPECULATIVE_METHODS)})")
        elif g(spec, "max_num_new_slots_for_drafting", 0) or (
            scheduler is not None and g(scheduler, "num_lookahead_tokens", 0)
        ):
            found.append(f"spec-decode with lookahead or draft slots (method={method})")
    pp = (g(parallel, "pipeline_parallel_size", 1) or 1) if parallel is not None else 1
    if pp > 1 and async_scheduling and scheduler is not None and g(scheduler, "use_v2_model_runner", True) is False:
        # vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule stamps the PP decode cadence
        # only for the V2 model runner, whose layout the spec models (spec/config.py).
        found.append("async pipeline parallel on the V1 model runner (no decode cadence)")
    if kv_cache_config is not None:
        groups = g(kv_cache_config, "kv_cache_groups", ())
        kinds = {type(g(grp, "kv_cache_spec", None)).__name__ for grp in groups}
        if len(groups) != 1 or kinds != {"FullAttentionSpec"}:
            found.append(f"hybrid kv cache ({len(groups)} groups: {', '.join(sorted(kinds))})")
    return found


def scheduler_features(scheduler: Any) -> list[str]:
    """Unmodelled features a caller can turn on in a built scheduler, between its calls (vLLM's tests do)."""
    found: list[str] = []
    if getattr(scheduler, "defer_block_free", False):
        found.append("deferred block frees (defer_block_free: blocks freed only after the step in flight)")
    if getattr(scheduler, "connector", None) is not None:
        found.append("kv-connector (a connector bound to the scheduler)")
    for owner, label in ((scheduler, "scheduler"), (getattr(scheduler, "kv_cache_manager", None), "kv_cache_manager")):
        patched = sorted(
            name
            for name, value in (vars(owner).items() if hasattr(owner, "__dict__") else ())
            if callable(value) and not name.startswith("__") and callable(getattr(type(owner), name, None))
        )
        if patched:  # a method replaced on the instance (a test's spy or stub): vLLM's rules no longer run there
            found.append(f"{label}.{patched[0]} replaced on the instance")
    return found


def release_feature(version: str) -> str | None:
    """An installed vLLM the spec does not model (a dev build, a newer release) is out of scope as a whole."""
    return None if version in RELEASES else f"vllm release {version} (modelled: {', '.join(RELEASES)})"


def request_features(request: Any) -> list[str]:
    """The unmodelled features one vLLM `Request` uses."""
    found: list[str] = []
    g = getattr
    if (g(request, "pooling_params", None) is not None) != (g(request, "sampling_params", None) is None):
        found.append("a request with both or neither of sampling_params and pooling_params")
    if g(request, "mm_features", None):
        found.append("multimodal (a request with multimodal inputs)")
    if g(request, "kv_transfer_params", None):
        found.append("kv-connector (a request with kv_transfer_params)")
    if g(request, "prompt_token_ids", ()) is None:
        found.append("prompt embeddings (a request without prompt token ids)")
    if g(request, "resumable", False):
        found.append("streaming input (a resumable request)")
    return found
