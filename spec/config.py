"""Scheduler configuration: every knob the core semantics read.

The defaults are those of vLLM's own scheduler test harness
(`tests/v1/core/utils.py`), because that is where the scenarios we pin come
from; `max_model_len` defaults to `max_num_batched_tokens` there as here.

Validation follows vLLM 0.33.0 (`vllm/config/scheduler.py`: pydantic field
bounds and `verify_max_model_len`), so a config that vLLM refuses is refused
here too, with one line naming the field. Anything vLLM merely warns about is
accepted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import SpecError
from .rules import sampled_tokens_per_step
from .versions import BY_NAME as VARIANTS, DEFAULT_RELEASE, holds, parse, problem as version_problem

Policy = Literal["fcfs", "priority"]
# vllm/config/model.py:ModelConfig (`runner_type`): a generative model samples a token per decode; a pooling model
# (embedding, classification, reward) pools the prompt's hidden states once and samples nothing.
Runner = Literal["generate", "pooling"]
SpeculativeMethod = Literal["ngram", "ngram_gpu"]
# vllm/config/speculative.py: `ngram` drafts on the CPU; `ngram_gpu` (NgramGPUTypes) on the device, inside the
# model runner. The drafters with lookahead slots (EAGLE, MTP, draft models, DFlash, DSpark) are outside the spec.
SPECULATIVE_METHODS: tuple[str, ...] = ("ngram", "ngram_gpu")


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 16
    # None (the default, or null in a config file) means max_num_batched_tokens and is replaced in
    # __post_init__, before anything can read it: so every reader sees an int, and the type says so.
    max_model_len: int = None  # type: ignore[assignment]
    block_size: int = 16
    num_gpu_blocks: int = 10000  # includes the null block (block 0)
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    enable_chunked_prefill: bool = True
    policy: Policy = "fcfs"
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    max_num_scheduled_tokens: int | None = None  # None: max_num_batched_tokens
    max_num_active_seqs: int | None = None  # None: max_num_seqs
    # The three features (prefix caching, spec decode, async scheduling). Each is off by default,
    # as in vLLM's test harness.
    enable_prefix_caching: bool = False  # CacheConfig.enable_prefix_caching
    num_speculative_tokens: int = 0  # k of an ngram-like drafter: no lookahead slots, no draft slots
    # The drafter as vLLM names it (SpeculativeConfig.method). Both draft from the tokens alone, with no
    # lookahead and no draft slots, so the scheduler treats them alike; they differ in where they run,
    # which decides whether a release lets them under async scheduling (_validate_release).
    speculative_method: SpeculativeMethod = "ngram"
    async_scheduling: bool = False  # AsyncScheduler, with one step in flight (batch queue of 2)
    # The prefill cadence (SchedulerConfig.prefill_schedule_interval): prefills only every N steps. A data-parallel
    # engine (ParallelConfig.data_parallel_size > 1, an MoE DP rank) has its DP engine core decide the steps
    # (`Workload.throttle_prefills`); one outside DP keeps the cadence itself from 0.33.0 (`local_prefill_interval`).
    prefill_schedule_interval: int = 1
    data_parallel_size: int = 1
    # Pipeline parallel (ParallelConfig.pipeline_parallel_size): the engine core keeps this many batches in flight
    # (one more under async scheduling), and async scheduling spaces a request's decodes this many steps apart.
    pipeline_parallel_size: int = 1
    # LoRA (LoRAConfig.max_loras): at most this many adapters among the running requests; None: no LoRA config,
    # and no request may name an adapter (vLLM refuses one).
    max_loras: int | None = None
    # The model's runner (ModelConfig.runner_type). Under "pooling" every request is a pooling request
    # (PoolingParams; max_tokens 1, no sampled token), finished by the step that pools its whole prompt.
    runner: Runner = "generate"
    # The release whose semantics apply (spec/versions.py): one switch for the reference and the monitors.
    vllm_version: str = DEFAULT_RELEASE

    def __post_init__(self) -> None:
        if self.max_model_len is None and _is_int(self.max_num_batched_tokens):
            object.__setattr__(self, "max_model_len", self.max_num_batched_tokens)
        _validate(self)

    # Derived limits, named as in vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (131-143).
    @property
    def max_num_running_reqs(self) -> int:
        return self.max_num_seqs

    @property
    def max_num_active_reqs(self) -> int:
        return self.max_num_active_seqs if self.max_num_active_seqs is not None else self.max_num_seqs

    @property
    def token_budget(self) -> int:
        """`max_num_scheduled_tokens`: the per-step token budget."""
        if self.max_num_scheduled_tokens is not None:
            return self.max_num_scheduled_tokens
        return self.max_num_batched_tokens

    @property
    def max_concurrent_batches(self) -> int:
        """The engine core's batch queue size (vllm/config/vllm.py:VllmConfig.max_concurrent_batches).

        The spec's output layout is the V2 model runner's, which takes async scheduling with PP: pp + 1 under
        async, pp otherwise. 1 means no batch queue: `EngineCore.step`, each update right after its schedule.
        """
        pp = self.pipeline_parallel_size
        return pp + 1 if self.async_scheduling else pp

    @property
    def local_prefill_interval(self) -> int:
        """The cadence the scheduler keeps itself (vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (403-408)):
        the interval outside data parallel from 0.33.0 (`local-prefill-cadence`), else 1 (none)."""
        if self.data_parallel_size == 1 and holds("local-prefill-cadence", self.vllm_version):
            return self.prefill_schedule_interval
        return 1

    @property
    def decode_stagger(self) -> int:
        """Steps between two decodes of one request under async scheduling
        (vllm/v1/core/sched/async_scheduler.py:AsyncScheduler.__init__: `pp_size` off XPU)."""
        return self.pipeline_parallel_size

    @property
    def num_sampled_tokens_per_step(self) -> int:
        """vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (152-161), by `spec.rules.sampled_tokens_per_step`."""
        return sampled_tokens_per_step(self.runner == "pooling", self.vllm_version)

    @property
    def watermark_blocks(self) -> int:
        # vllm/v1/core/kv_cache_manager.py:KVCacheManager.__init__ (210) counts the null block too.
        return int(self.watermark * self.num_gpu_blocks)

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config") -> SchedulerConfig:
        if not isinstance(data, Mapping):
            raise SpecError(where, data, "must be an object")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise SpecError(f"{where}.{key}", data[key], "is not a scheduler config field")
        try:
            return cls(**dict(data))
        except SpecError as e:
            raise SpecError(f"{where}.{e.where.removeprefix('config.')}", e.value, e.why) from None


# The pool is held block by block (free queue, ref counts, hashes): about this many bytes a block in the reference,
# measured with tracemalloc at 10**6 blocks. 2**24 blocks (0.6 GiB) is far past any GPU's pool at block size 16.
BYTES_PER_BLOCK = 40
MAX_GPU_BLOCKS = 2**24
# Not vLLM's bound (it has none but the GPUs): each stage is a batch in flight, held by every engine.
MAX_PIPELINE_PARALLEL_SIZE = 16
# The scheduler reads only whether the size is 1; a bound keeps a typo from reading as a deployment.
MAX_DATA_PARALLEL_SIZE = 1024


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _validate(c: SchedulerConfig) -> None:
    def need(name: str, ok: bool, why: str) -> None:
        if not ok:
            raise SpecError(f"config.{name}", getattr(c, name), why)

    for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "block_size", "num_gpu_blocks"):
        v = getattr(c, name)
        need(name, _is_int(v), "must be an integer")
        need(name, v >= 1, "must be >= 1")
    gib = c.num_gpu_blocks * BYTES_PER_BLOCK / 2**30
    need("num_gpu_blocks", c.num_gpu_blocks <= MAX_GPU_BLOCKS,
         f"must be at most {MAX_GPU_BLOCKS}: every engine holds the pool block by block, about {gib:,.0f} GiB here")  # fmt: skip
    for name in ("max_num_scheduled_tokens", "max_num_active_seqs"):
        v = getattr(c, name)
        need(name, v is None or _is_int(v), "must be an integer or null")
        need(name, v is None or v >= 1, "must be >= 1")  # Z11: no negative budget slips through
    for name in ("prefill_schedule_interval", "data_parallel_size"):
        v = getattr(c, name)
        need(name, _is_int(v), "must be an integer")
        need(name, v >= 1, "must be >= 1 (vllm/config/scheduler.py, vllm/config/parallel.py)")
    need(
        "data_parallel_size",
        c.data_parallel_size <= MAX_DATA_PARALLEL_SIZE,
        f"must be at most {MAX_DATA_PARALLEL_SIZE}",
    )
    v = c.pipeline_parallel_size
    need("pipeline_parallel_size", _is_int(v), "must be an integer")
    need(
        "pipeline_parallel_size", 1 <= v <= MAX_PIPELINE_PARALLEL_SIZE, f"must be in [1, {MAX_PIPELINE_PARALLEL_SIZE}]"
    )
    v = c.max_loras
    need("max_loras", v is None or _is_int(v), "must be an integer or null")
    need("max_loras", v is None or v >= 1, "must be >= 1 (vllm/config/lora.py:LoRAConfig)")
    v = c.long_prefill_token_threshold
    need("long_prefill_token_threshold", _is_int(v), "must be an integer")
    need("long_prefill_token_threshold", v >= 0, "must be >= 0")
    v = c.num_speculative_tokens
    need("num_speculative_tokens", _is_int(v), "must be an integer")
    need("num_speculative_tokens", v >= 0, "must be >= 0")
    for name in (
        "enable_chunked_prefill",
        "scheduler_reserve_full_isl",
        "long_prefill_token_threshold_adaptive",
        "enable_prefix_caching",
        "async_scheduling",
    ):
        need(name, isinstance(getattr(c, name), bool), "must be true or false")
    need("policy", c.policy in ("fcfs", "priority"), "must be 'fcfs' or 'priority'")
    need("runner", c.runner in ("generate", "pooling"), "must be 'generate' or 'pooling'")
    # Not a vLLM check: the spec's drafters propose from sampled tokens, which a pooling model never has.
    need(
        "runner",
        c.runner == "generate" or c.num_speculative_tokens == 0,
        "must be 'generate' with spec decode (num_speculative_tokens > 0): a pooling model samples no token to draft "
        "from",
    )
    need(
        "speculative_method",
        c.speculative_method in SPECULATIVE_METHODS,
        f"must be one of {', '.join(SPECULATIVE_METHODS)} (drafters with lookahead or draft slots are not modelled)",
    )
    why = version_problem(c.vllm_version)
    need("vllm_version", why is None, why or "")
    w = c.watermark
    need("watermark", isinstance(w, (int, float)) and not isinstance(w, bool), "must be a number")
    need("watermark", 0.0 <= w < 1.0, "must be in [0, 1)")

    # vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len, in vLLM's order.
    need(
        "max_num_batched_tokens",
        c.enable_chunked_prefill or c.max_num_batched_tokens >= c.max_model_len,
        f"must be >= max_model_len ({c.max_model_len}) when chunked prefill is off",
    )
    need(
        "max_num_batched_tokens",
        c.max_num_batched_tokens >= c.max_num_seqs,
        f"must be >= max_num_seqs ({c.max_num_seqs})",
    )
    need(
        "max_num_active_seqs",
        c.max_num_active_seqs is None or c.max_num_active_seqs <= c.max_num_seqs,
        f"must be <= max_num_seqs ({c.max_num_seqs})",
    )
    need(
        "long_prefill_token_threshold",
        c.long_prefill_token_threshold <= c.max_model_len,
        f"must be <= max_model_len ({c.max_model_len})",
    )
    # Not a vLLM check: vLLM 0.33.0 accepts this config and then crashes. The threshold is
    # applied after spec-decode padding, so a padded admission is clipped below 1 + k and
    # `assert num_new_tokens == 1 + k` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1579)) fails (§9.A.4, exp1).
    # The reference refuses the config instead of reproducing the crash; the harness pins
    # vLLM's crash as a known divergence (tests/unit/conformance/engines/test_vllm_known_bugs.py).
    k = c.num_speculative_tokens
    need(
        "long_prefill_token_threshold",
        not (k > 0 and 1 <= c.long_prefill_token_threshold < 1 + k),
        f"must be 0 or >= 1 + num_speculative_tokens ({1 + k}): vLLM 0.33.0 crashes on a padded "
        "spec-decode admission (assert at vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1579))",
    )
    # Not a vLLM check either: synchronous spec decode under PP takes the drafts whenever the worker has them
    # (vllm/v1/engine/core.py:EngineCore.post_step after every step_with_batch_queue call), a timing the spec
    # does not model. Under async scheduling the drafts never leave the worker, so PP with spec decode is modelled.
    need(
        "pipeline_parallel_size",
        c.pipeline_parallel_size == 1 or k == 0 or c.async_scheduling,
        "must be 1 with synchronous spec decode (num_speculative_tokens > 0): when the drafts of a batch in "
        "flight reach the scheduler is timing, not modelled; turn async_scheduling on",
    )
    _validate_release(c, need)


def _validate_release(c: SchedulerConfig, need: Any) -> None:
    """Knobs a release does not have, and combinations it refuses (spec/versions.py)."""
    v = parse(c.vllm_version)[0]
    if not holds("active-seqs-and-adaptive-threshold", v):
        why = f"is not a knob of vLLM {v} (added in {VARIANTS['active-seqs-and-adaptive-threshold'].since})"
        need("max_num_active_seqs", c.max_num_active_seqs is None, why)
        need("long_prefill_token_threshold_adaptive", not c.long_prefill_token_threshold_adaptive, why)
    if not holds("async-with-ngram-spec-decode", c.vllm_version):
        # vllm/config/vllm.py:VllmConfig.__post_init__ accepts async scheduling only with a drafter that runs
        # on the device (EAGLE/MTP, draft models, ngram_gpu) before 0.33.0, whose V2 model runner takes ngram too.
        need(
            "async_scheduling",
            not (c.async_scheduling and c.num_speculative_tokens > 0 and c.speculative_method == "ngram"),
            f"vLLM {v} refuses async scheduling with the CPU ngram drafter (num_speculative_tokens > 0); "
            f"accepted with speculative_method 'ngram_gpu', or with 'ngram' from "
            f"{VARIANTS['async-with-ngram-spec-decode'].since}",
        )
        # Spec decode runs on the V1 model runner there (it refuses the drafters on V2), and the V1 runner "does
        # not fully support async scheduling with PP" (vllm/config/vllm.py:VllmConfig.max_concurrent_batches:
        # pp batches in flight, and no decode cadence, which only the V2 runner keeps).
        need(
            "pipeline_parallel_size",
            c.pipeline_parallel_size == 1 or c.num_speculative_tokens == 0,
            f"must be 1 with spec decode at vLLM {v}, whose V1 model runner does not fully support async "
            f"scheduling with pipeline parallel (V2 from {VARIANTS['async-with-ngram-spec-decode'].since})",
        )
