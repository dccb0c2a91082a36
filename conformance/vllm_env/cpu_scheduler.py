"""Build a vLLM release's V1 scheduler on a CPU from the spec's config dict (runs inside the vLLM venv).

Design notes
------------
* Why it is separate from `driver.py`: the driver is the pipe protocol, one
  op per line; this is the one thing that needs to know how vLLM wires its
  configs together, and what the spec assumes of the result. A vLLM upgrade
  that moves a knob changes this file, not the protocol.
* Like the driver, it runs with the interpreter of `.venv-vllm-ref` and must
  not import `schedspec`. The driver imports it as a plain sibling module,
  after it has set vLLM's environment and the protocol channel up; it is
  not meant to be imported first.
* The scheduler is built as in vllm-0.33-on-cpu.md section 7: a stub
  `config.json` model, `DeviceConfig("cpu")` (no platform is detected with the
  CUDA wheel), a paper KV cache of one full-attention group, every scheduler
  knob passed explicitly so no platform hook can pick a default for us.
* The features map onto vLLM's own knobs (pipeline parallel onto
  `ParallelConfig.pipeline_parallel_size`, checked with the batch queue size
  it gives, `max_concurrent_batches`):
  `enable_prefix_caching` onto `CacheConfig`; `num_speculative_tokens = k`
  onto a `SpeculativeConfig` of `speculative_method` (`ngram` or
  `ngram_gpu`), the methods with no lookahead slots and no draft slots (`num_lookahead_tokens == 0`,
  `max_num_new_slots_for_drafting == 0`), which the build checks, since the
  spec assumes both; `async_scheduling` onto `AsyncScheduler`.
* One file for every release 0.28.0-0.33.0: a knob is passed only if the
  installed `vllm/config/scheduler.py:SchedulerConfig` has it (feature
  detection, not a version table). `max_num_active_seqs` and
  `long_prefill_token_threshold_adaptive` exist from 0.31.0 and
  `max_num_queued_reqs` / `max_num_queued_tokens` from 0.29.0; a spec knob
  set away from its default on a release without it refuses the init, the
  pinned knobs are simply left out (their absence is their old behaviour).
* 0.28.0-0.32.0 refuse the V2 model runner on a host without Triton
  (vllm/config/vllm.py:VllmConfig._validate_v2_model_runner), and this CPU
  host has none, while the spec's output layout is the V2 runner's. No model
  runner is ever built here: the scheduler only reads `use_v2_model_runner`
  to lay out its output. So `allow_v2_model_runner` tells `vllm.config.vllm`
  that Triton is there, as it is on the GPU hosts those releases serve. In
  0.33.0 the check is gone and VLLM_USE_V2_MODEL_RUNNER=1 decides before
  HAS_TRITON is read, so the patch changes nothing there.
* 0.28.0-0.32.0 also refuse ngram spec decode on the V2 model runner
  (`_validate_v2_model_runner`), so on a GPU they run it on the V1 runner,
  and so does this build: VllmConfig is retried with
  VLLM_USE_V2_MODEL_RUNNER=0. The runner changes only the layout of the
  output in the scheduler (resumed requests among the cached ones, with
  `resumed_req_ids`; vllm/v1/core/sched/scheduler.py:Scheduler.schedule and
  `_make_cached_request_data`), which the driver lays out as the V2 runner
  would. The grants, blocks and finishes are the same.
* $SCHEDSPEC_VLLM_SCHEDULER_CLS=dotted.path.Class (or unset) is set as
  vLLM's own `SchedulerConfig.scheduler_cls`, and the scheduler is built
  from `vllm_config.scheduler_config.get_scheduler_cls()`, as
  vllm/v1/engine/core.py builds it: so a test of `schedspec.live`'s monitored
  classes goes through vLLM's resolution, not around it. Unset, vLLM's
  default applies (`Scheduler`, or `AsyncScheduler` under async scheduling).
* The checks do not raise: `build_scheduler` returns the scheduler together
  with what about it breaks the spec's assumptions, and the driver refuses
  the init. So a refused init still leaves the new scheduler in place.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator

import torch
import vllm
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    LoRAConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.structured_output import StructuredOutputManager

# A tiny Llama described by its config.json alone: no weights, no tokenizer, no Hub.
STUB_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
}


def stub_model_dir() -> str:
    """A stable folder in the venv, so vLLM's model-info cache (keyed by model) stays warm across runs."""
    path = os.path.join(sys.prefix, "vllm-ref-stub-model")
    os.makedirs(path, exist_ok=True)
    text = json.dumps(STUB_MODEL, indent=1, sort_keys=True)
    cfg = os.path.join(path, "config.json")
    if not os.path.exists(cfg) or open(cfg, encoding="utf-8").read() != text:
        with open(cfg, "w", encoding="utf-8") as f:
            f.write(text)
    return path


V2_UNSUPPORTED = "Model Runner V2 does not yet support"  # vllm/config/vllm.py:VllmConfig._validate_v2_model_runner


@contextlib.contextmanager
def model_runner_env(v2: str) -> Iterator[None]:
    """VLLM_USE_V2_MODEL_RUNNER=v2 while vLLM reads it (vllm.envs reads the environment lazily, uncached)."""
    old = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = v2
    try:
        yield
    finally:
        if old is None:
            del os.environ["VLLM_USE_V2_MODEL_RUNNER"]
        else:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = old


SCHEDULER_CLS_ENV = "SCHEDSPEC_VLLM_SCHEDULER_CLS"


def load_by_path(name: str, path: str):
    """A module from its file, without touching `sys.path` (the driver loads `live/vllm_json.py` so)."""
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def allow_v2_model_runner() -> None:
    """Let VllmConfig choose the V2 model runner without Triton (see the design notes); a no-op where it can."""
    import vllm.config.vllm as vllm_config_module

    if getattr(vllm_config_module, "HAS_TRITON", True) is False:
        vllm_config_module.HAS_TRITON = True


def scheduler_knobs(
    c: dict, max_model_len: int, is_encoder_decoder: bool, async_scheduling: bool
) -> tuple[dict, list[str]]:
    """SchedulerConfig's keyword arguments for this release, and the spec knobs it lacks but the config sets.

    Knobs are detected from the installed class's fields, so one file serves every release.
    """
    has = set(getattr(SchedulerConfig, "__dataclass_fields__", {}))
    spec_knobs = {
        "max_num_batched_tokens": c["max_num_batched_tokens"],
        "max_num_seqs": c["max_num_seqs"],
        "max_model_len": max_model_len,
        "is_encoder_decoder": is_encoder_decoder,
        "max_num_scheduled_tokens": c["max_num_scheduled_tokens"],
        "max_num_active_seqs": c.get("max_num_active_seqs"),
        "long_prefill_token_threshold": c["long_prefill_token_threshold"],
        "long_prefill_token_threshold_adaptive": bool(c.get("long_prefill_token_threshold_adaptive", False)),
        "enable_chunked_prefill": c["enable_chunked_prefill"],
        "policy": c["policy"],
        "watermark": c["watermark"],
        "scheduler_reserve_full_isl": c["scheduler_reserve_full_isl"],
        "async_scheduling": async_scheduling,
        "prefill_schedule_interval": int(c.get("prefill_schedule_interval", 1)),
    }
    if os.environ.get(SCHEDULER_CLS_ENV):
        spec_knobs["scheduler_cls"] = os.environ[SCHEDULER_CLS_ENV]
    # Knobs the spec does not model, pinned to the values the spec assumes (a release without one behaves so).
    pinned = {
        "max_num_queued_reqs": None,
        "max_num_queued_tokens": None,
        "stream_interval": 1,
    }
    defaults = {"max_num_active_seqs": None, "long_prefill_token_threshold_adaptive": False}
    missing = [k for k, v in spec_knobs.items() if k not in has and (k not in defaults or v != defaults[k])]
    knobs = {k: v for k, v in {**spec_knobs, **pinned}.items() if k in has}
    return knobs, missing


def build_scheduler(
    c: dict, model_dir: str, model_configs: dict[tuple[int, str], ModelConfig]
) -> tuple[Scheduler, str]:
    """vLLM's scheduler for the spec's config dict `c`, and what about it breaks the spec's assumptions ('' if nothing).

    `model_configs` is the driver's cache of one `ModelConfig` per
    `max_model_len` and runner, kept across inits: building one reads the
    stub model.
    """
    max_model_len = c["max_model_len"] if c["max_model_len"] is not None else c["max_num_batched_tokens"]
    # The scheduler reads max_model_len and the runner type (a pooling model samples nothing) from the model config.
    runner = c.get("runner", "generate")
    key = (max_model_len, runner)
    if key not in model_configs:
        model_configs[key] = ModelConfig(
            model=model_dir,
            dtype="float16",
            seed=42,
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            runner=runner,
        )
    model_config = model_configs[key]
    allow_v2_model_runner()
    async_scheduling = bool(c.get("async_scheduling", False))
    knobs, missing = scheduler_knobs(c, max_model_len, model_config.is_encoder_decoder, async_scheduling)
    if missing:
        raise ValueError(f"vLLM {vllm.__version__} has no SchedulerConfig.{missing[0]}, which the config sets")
    scheduler_config = SchedulerConfig(**knobs)
    block_size = c["block_size"]
    cache_config = CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=bool(c.get("enable_prefix_caching", False)),
    )
    # Pipeline parallel: the scheduler reads the size alone (the batch queue is the spec's loop, the decode cadence
    # AsyncScheduler's); no worker is started, so one CPU process builds it.
    parallel_config = ParallelConfig(
        pipeline_parallel_size=int(c.get("pipeline_parallel_size", 1)),
        # The prefill cadence reads only whether this is 1 (no DP: the scheduler keeps it) or more (its DP engine
        # core throttles, which the spec's loop plays).
        data_parallel_size=int(c.get("data_parallel_size", 1)),
    )
    k = int(c.get("num_speculative_tokens", 0))
    # ngram / ngram_gpu: drafts come from the tokens alone, so no lookahead and no draft slots.
    # The lookup window is irrelevant here (the harness plays the drafts), but required.
    speculative_config = (
        SpeculativeConfig(
            method=c.get("speculative_method", "ngram"),
            num_speculative_tokens=k,
            prompt_lookup_min=1,
            prompt_lookup_max=k,
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        )
        if k > 0
        else None
    )
    configs = {
        "scheduler_config": scheduler_config,
        "model_config": model_config,
        "cache_config": cache_config,
        "parallel_config": parallel_config,
        "device_config": DeviceConfig(device="cpu"),
        "speculative_config": speculative_config,
    }
    if c.get("max_loras") is not None:  # LoRA: the scheduler reads max_loras alone; the rank is the smallest
        configs["lora_config"] = LoRAConfig(max_loras=c["max_loras"], max_lora_rank=8)
    runner_v2 = "1"
    try:
        vllm_config = VllmConfig(**configs)
    except ValueError as e:  # pydantic's ValidationError is one
        if V2_UNSUPPORTED not in str(e):
            raise
        runner_v2 = "0"  # ngram before 0.33.0: vLLM runs it on the V1 model runner (see the design notes)
        with model_runner_env(runner_v2):
            vllm_config = VllmConfig(**configs)
    kv_cache_config = KVCacheConfig(
        num_blocks=c["num_gpu_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
            )
        ],
    )
    cache_config.num_gpu_blocks = c["num_gpu_blocks"]
    scheduler_class = vllm_config.scheduler_config.get_scheduler_cls()  # vllm/v1/engine/core.py builds it so
    with model_runner_env(runner_v2):  # Scheduler.__init__ reads VllmConfig.use_v2_model_runner again
        s = scheduler_class(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=block_size,
            log_stats=False,
        )
    with model_runner_env(runner_v2):
        concurrent_batches = vllm_config.max_concurrent_batches
    # The spec's output layout is the V2 model runner's: resumed requests listed as new. The driver
    # translates the V1 layout only where vLLM itself falls back to V1 (ngram before 0.33.0).
    if s.use_v2_model_runner != (runner_v2 == "1"):
        chose, asked = ("V2", "V1") if s.use_v2_model_runner else ("V1", "V2")
        return s, f"vLLM chose the {chose} model runner, not the {asked} one this config runs on"
    # What the spec assumes of each feature, checked rather than trusted to the config plumbing.
    draft_slots = speculative_config.max_num_new_slots_for_drafting if speculative_config else 0
    got = {
        "num_spec_tokens": s.num_spec_tokens,
        "num_lookahead_tokens": s.num_lookahead_tokens,
        "draft_slots": draft_slots,
        "enable_caching": s.kv_cache_manager.enable_caching,
        # The engine's flag decides the loop; the async class may run in the synchronous one (vLLM's CPU
        # platform does: schedspec.live.session: engine_async_scheduling), but the batch queue needs the async class.
        "async_scheduling": bool(vllm_config.scheduler_config.async_scheduling) and isinstance(s, AsyncScheduler),
        "pipeline_parallel_size": s.parallel_config.pipeline_parallel_size,
        "prefill_schedule_interval": vllm_config.scheduler_config.prefill_schedule_interval,
        "data_parallel_size": s.parallel_config.data_parallel_size,
        # The engine core's batch queue, which the spec's loop plays (vllm/config/vllm.py:VllmConfig.max_concurrent_batches).
        "max_concurrent_batches": concurrent_batches,
    }
    want = {
        "num_spec_tokens": k,
        "num_lookahead_tokens": 0,
        "draft_slots": 0,
        "enable_caching": cache_config.enable_prefix_caching,
        "async_scheduling": async_scheduling,
        "pipeline_parallel_size": parallel_config.pipeline_parallel_size,
        "prefill_schedule_interval": int(c.get("prefill_schedule_interval", 1)),
        "data_parallel_size": parallel_config.data_parallel_size,
        "max_concurrent_batches": parallel_config.pipeline_parallel_size + async_scheduling,
    }
    if got != want:
        return s, f"vLLM built a scheduler unlike the spec's: {got} != {want}"
    return s, ""
