"""The vLLM releases the spec models, and the rules that differ between them.

The spec is one set of rules with named switches, not one copy per release.
A `Variant` is a rule whose behaviour changed at a release: `since` is the
first release with the new behaviour, and `holds(variant, version)` says
which side a config's `vllm_version` is on. The rule itself keeps its one
home (`spec/rules.py`, or the reference's decision method); it asks
`holds(...)` at the point where the releases part, so one switch moves the
reference and the monitors that call it together.

The list was found by reading every pairwise diff of vLLM's scheduler,
KV-cache and config sources from 0.28.0 to 0.33.0 (`docs/versions.md` has one
row per variant, with a workload that shows it). Changes that touch nothing
the spec models (KV connectors, LoRA, encoders, Mamba, stats, hash seeds, the
fields of `SchedulerOutput` that no engine here reads) are listed there too,
as not modelled, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

RELEASES: tuple[str, ...] = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
DEFAULT_RELEASE = "0.33.0"


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class Variant:
    name: str
    since: str  # the first release with the newer behaviour
    before: str  # the behaviour of the releases before `since`
    after: str  # the behaviour from `since` on
    vllm: str  # where it lives in vLLM, file.py:function
    workload: str  # a built-in workload that shows the difference (`schedspec.conformance.workloads.builtin.BUILTIN`)

    @property
    def config_only(self) -> bool:
        """A knob or combination the older releases refuse: it changes which configs exist, not a decision."""
        return not self.workload


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "min-tokens-gates-every-stop",
        "0.29.0",
        "below min_tokens no stop applies: EOS, stop tokens and the length caps are all ignored",
        "EOS, stop tokens and the length caps apply first; min_tokens gates only repetition detection",
        "vllm/v1/core/sched/utils.py:check_stop",
        "version-min-tokens",
    ),
    Variant(
        "padding-needs-room-to-sample",
        "0.29.0",
        "a one-token admission is padded to 1 + k if C + 1 + k <= L, else the waiting pass stops",
        "it is padded only if C + 1 + k + 1 <= L, else admitted with its one token unpadded",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-padding-room",
    ),
    Variant(
        "padding-after-prefix-hit",
        "0.30.0",
        "a one-token admission is padded only in a step that scheduled a running request and no prefill",
        "it is also padded, with no prefill scheduled, when its prefix hit left it one token (C > 0)",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-padding-hit",
    ),
    Variant(
        "lone-request-threshold-off",
        "0.31.0",
        "long_prefill_token_threshold caps every chunk",
        "it is off in a step that starts with at most one request running or waiting",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-lone-threshold",
    ),
    Variant(
        "paused-new-runs-waiting-pass",
        "0.32.0",
        "under PAUSED_NEW the waiting pass does not run, so a release step leaves the prefill cadence's capacity "
        "bound as it was",
        "it runs and takes nobody (only requests holding KV blocks may pass), and a release step records whether the "
        "waiting queue could drain",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-paused-waiting-pass",
    ),
    Variant(
        "pooling-samples-no-token",
        "0.32.0",
        "a pooling model reserves a slot for a sampled token as a generative one does: a running chunk stops at "
        "L - C - 1, so a prompt of max_model_len never finishes, and async scheduling adds a placeholder after the "
        "last chunk, so the request is scheduled one more token before its pooled output is back",
        "a pooling model samples nothing (num_sampled_tokens_per_step 0): a chunk may reach L, and no placeholder "
        "is added",
        "vllm/v1/core/sched/scheduler.py:Scheduler.__init__",
        "version-pooling-no-sample",
    ),
    Variant(
        "active-seqs-and-adaptive-threshold",
        "0.31.0",
        "SchedulerConfig has no max_num_active_seqs and no long_prefill_token_threshold_adaptive",
        "both exist (admission capped at max_num_active_seqs; the threshold raised to budget / eligible)",
        "vllm/config/scheduler.py:SchedulerConfig",
        "",
    ),
    Variant(
        "release-kv-cache-memory",
        "0.31.0",
        "EngineCore has no release_kv_cache_memory: a workload that calls it is refused",
        "a paused engine core with no work may release its KV cache memory, resetting the cache with the running "
        "requests first",
        "vllm/v1/engine/core.py:EngineCore.release_kv_cache_memory",
        "",
    ),
    Variant(
        "priority-self-preemption-continues",
        "0.33.0",
        "under PRIORITY a request that preempts itself ends the running pass (break)",
        "the running pass goes on to the next running request (continue)",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-self-preemption",
    ),
    Variant(
        "sync-spec-decode-caches-on-update",
        "0.33.0",
        "only the async scheduler caches the blocks its output filled, in update_from_output",
        "the sync scheduler with spec decode does too, so blocks filled by accepted drafts are cached at once",
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output",
        "version-spec-caching",
    ),
    Variant(
        "one-waiting-queue",
        "0.31.0",
        "a request that arrives blocked (waiting for its grammar) and a request the waiting pass skips wait in a "
        "second queue, skipped_waiting, which FCFS serves first; a preempted request goes to the front of the "
        "waiting queue, behind them",
        "both join the one waiting queue: an arrival at its back, a skipped request at its front, ahead of a "
        "preempted one",
        "vllm/v1/core/sched/scheduler.py:Scheduler._enqueue_waiting_request",
        "version-grammar-queue",
    ),
    Variant(
        "loras-counted-over-all-running",
        "0.33.0",
        "the adapters that count against max_loras are those of the running requests scheduled in this step",
        "they are those of every running request, scheduled in this step or not (one the async skip rule or the "
        "length bound passed over still holds its adapter)",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-lora-count",
    ),
    Variant(
        "local-prefill-cadence",
        "0.33.0",
        "prefill_schedule_interval does nothing on an engine outside data parallel (data_parallel_size 1): only a "
        "DP engine core throttles prefills",
        "such an engine holds prefills locally until the interval since the last prefill-carrying step has passed "
        "(unless the last release step could not drain the waiting queue)",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule",
        "version-prefill-cadence",
    ),
    Variant(
        "async-with-ngram-spec-decode",
        "0.33.0",
        "async scheduling with the CPU ngram drafter is refused (VllmConfig.__post_init__); ngram_gpu is accepted",
        "both are accepted (the V2 model runner takes the CPU ngram drafter too)",
        "vllm/config/vllm.py:VllmConfig.__post_init__",
        "",
    ),
)

BY_NAME: dict[str, Variant] = {v.name: v for v in VARIANTS}


def parse(version: str) -> tuple[str, frozenset[str]]:
    """A release, and the variants it takes early: "0.32.0+priority-self-preemption-continues" is 0.32.0 with
    that one rule as 0.33.0 has it. `schedspec changelog` builds these to name the rule behind a difference."""
    base, *early = version.split("+")
    return base, frozenset(early)


def problem(version: object) -> str | None:
    """Why `version` is not a release the spec models, or None."""
    if not isinstance(version, str):
        return f"must be one of {', '.join(RELEASES)}"
    base, early = parse(version)
    if base not in RELEASES:
        return f"must be one of {', '.join(RELEASES)}, optionally +VARIANT"
    for name in sorted(early):
        if name not in BY_NAME:
            return f"+{name} is not a variant ({', '.join(BY_NAME)})"
        if release_key(base) >= release_key(BY_NAME[name].since):
            return f"+{name}: {base} already has it (since {BY_NAME[name].since})"
    return None


@cache
def holds(variant: str, version: str) -> bool:
    """Whether `version` has the newer behaviour of `variant` (raises KeyError on an unknown variant).

    Cached: the rules ask it per request per step (about 3,000 times a step at 1,000 running requests, a
    fifth of a monitored step before), and its answer depends on the two strings alone.
    """
    base, early = parse(version)
    return variant in early or release_key(base) >= release_key(BY_NAME[variant].since)


@dataclass(frozen=True)
class KnownViolation:
    """An invariant an older release breaks, and a later one keeps: the invariant stays (it is a property vLLM
    fixed), and the monitors, `certify` and `prove` report the break as that release's known violation."""

    invariant: str
    fixed_in: str  # the first release that keeps it
    why: str
    runner: str | None = None  # the model runner it needs ("pooling"); None: any


# All three are one bug of 0.28.0's check_stop: min_tokens held back the length cap, so a request with
# prompt + min_tokens > max_model_len stays live past L - 1 (vllm/v1/core/sched/utils.py:check_stop).
_HELD_PAST_L = "before 0.29.0 min_tokens holds back the max_model_len cap, so a request stays live past L - 1"
_POOLED_AT_L = (
    "before 0.32.0 a pooling model keeps a slot for a sampled token, so a chunked prompt of max_model_len, which "
    "vLLM accepts, stalls one token short of its end"
)
KNOWN_VIOLATIONS: tuple[KnownViolation, ...] = (
    KnownViolation("token-bounds", "0.29.0", _HELD_PAST_L),
    KnownViolation(
        "running-served-while-budget-lasts",
        "0.29.0",
        _HELD_PAST_L + ", where the position bound grants it nothing however much budget is left",
    ),
    KnownViolation(
        "progress-when-idle",
        "0.29.0",
        _HELD_PAST_L + "; preempted there, it owes more than a budget without chunking and never gets back in",
    ),
    # One bug of a pooling model before 0.32.0 (`pooling-samples-no-token`): vLLM accepts a pooling prompt of
    # max_model_len (vllm/v1/engine/input_processor.py:InputProcessor._validate_prompt_len), while the running
    # pass keeps a slot for a token it never samples, so a chunked prompt of L stalls at L - 1 forever.
    *(
        KnownViolation(name, "0.32.0", _POOLED_AT_L, runner="pooling")
        for name in ("token-bounds", "running-served-while-budget-lasts", "progress-when-idle")
    ),
)


def known_violation(invariant: str, version: str, runner: str = "generate") -> KnownViolation | None:
    """The known violation of `invariant` at `version` with a model of `runner`, if that release breaks it."""
    base = parse(version)[0]
    for k in KNOWN_VIOLATIONS:
        if k.invariant != invariant or k.runner not in (None, runner):
            continue
        if release_key(base) < release_key(k.fixed_in):
            return k
    return None
