"""The scheduler's arithmetic rules as elementwise tensor functions: the tensor twins of the rules.

These are the same lines of vLLM (0.28.0 to 0.33.0) that `reference_impl/rules.py`
and `spec/rules.py` write for ints and Z3 terms, rewritten for tensors,
because this engine must not borrow the oracle's code (an engine that
reuses the oracle certifies nothing). A twin has its rule's name, or says
in its first line which rule it twins. `tests/unit/gpu_impl/test_rule_twins.py`
checks each twin against its rule on random inputs, at random releases, and
`docs/architecture.md` maps them. Every function broadcasts: per-instance
knobs come in as `[B, 1]` columns, per-request values as `[B, R]`.

Where a rule takes a `release`, its twin takes instead the bool column of
each variant the rule asks about (`BatchState`'s release columns, True where
`spec.versions.holds(variant, vllm_version)`), so instances of different
releases share one tensor call.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def cdiv(a: Tensor, b: Tensor) -> Tensor:
    """vLLM's `cdiv` for a >= 0, b > 0."""
    return torch.div(a + b - 1, b, rounding_mode="floor")


def effective_threshold(
    threshold: Tensor, num_eligible: Tensor, adaptive: Tensor, input_budget: Tensor, lone_request_threshold_off: Tensor
) -> Tensor:
    """Tensor twin of `reference_impl.rules.effective_threshold`.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (754-769), §9.A.4: fixed once per step.

    A lone request (running + waiting <= 1) is never capped; the adaptive
    variant floors a positive threshold by the fair share of the batch,
    `max_num_batched_tokens // count` (T10). Before 0.31.0
    (`lone_request_threshold_off` False) the threshold caps every chunk, unchanged.
    """
    off = lone_request_threshold_off
    thr = torch.where((num_eligible > 1) | ~off, threshold, torch.zeros_like(threshold))
    fair = torch.div(input_budget, num_eligible.clamp(min=1), rounding_mode="floor")
    return torch.where(adaptive & off & (thr > 0), torch.maximum(thr, fair), thr)


def clamp_to_threshold(n: Tensor, threshold: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.clamp_to_threshold`: min(n, thr) when thr > 0, i.e.
    `if 0 < long_prefill_token_threshold < num_new_tokens`
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (844-845, 1332-1333))."""
    return torch.where(threshold > 0, torch.minimum(n, threshold), n)


def grants(asks: Tensor, budget: Tensor) -> Tensor:
    """Budget grants in queue order by prefix sums: grant_i = min(cum_i, B) - min(cum_{i-1}, B).

    Tensor twin of the budget clamp of `reference_impl.rules.running_num_new_tokens`
    (`min_(n, token_budget)`), applied request after request down a queue.

    Sequentially each request gets `min(ask, budget left)`, and the budget
    left is `B - sum of earlier grants`; with non-negative asks that is
    exactly the clipped prefix-sum difference. `asks` must be >= 0 (a
    request that is skipped with `continue` asks 0).
    """
    cum = asks.cumsum(1)
    return torch.minimum(cum, budget) - torch.minimum(cum - asks, budget)


def blocks_for(num_tokens: Tensor, max_model_len: Tensor, block_size: Tensor) -> Tensor:
    """Blocks that hold `num_tokens` slots, capped at the model length
    (vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (550-553), §9.A.2).

    Tensor twin of `reference_impl.rules.num_tokens_need_slot` followed by
    `reference_impl.rules.num_blocks_to_allocate`: called with min(C, L) + n, the
    callers subtract the held blocks and clamp at 0."""
    return cdiv(torch.minimum(num_tokens, max_model_len), block_size)


def first_index(mask: Tensor, cols: Tensor, default: int) -> Tensor:
    """Per row, the first column where `mask` holds, else `default` (no reliance on argmax tie rules).
    `cols` holds the column positions, broadcastable to `mask`."""
    return torch.where(mask, cols, default).min(1).values


def num_owed_tokens(num_tokens_with_spec: Tensor, P: Tensor, C: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.num_owed_tokens`: what a request is owed before any clamp
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-843))."""
    return num_tokens_with_spec + P - C


# ---- The three features: prefix caching, speculative decoding, async scheduling. ----


def max_prefix_hit_blocks(num_tokens: Tensor, block_size: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.max_prefix_hit_blocks`.

    vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks (301-302): a hit never covers the
    last token, which is recomputed for its logits."""
    return torch.div(num_tokens - 1, block_size, rounding_mode="floor")


def pads_spec_decode(
    k: Tensor,
    num_new_tokens: Tensor,
    prefill_scheduled: Tensor,
    any_running_scheduled: Tensor,
    num_computed_tokens: Tensor,
    max_model_len: Tensor,
    padding_after_prefix_hit: Tensor,
    padding_needs_room_to_sample: Tensor,
) -> Tensor:
    """Tensor twin of `reference_impl.rules.pads_spec_decode`.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1311-1330): a decode-like admission (one token left, no
    prefill chunk in the running pass, and a running request already scheduled or a prefix hit) is padded
    to 1 + k tokens when 1 + k + 1 positions fit under L. Before 0.30.0 a prefix hit alone does not count
    (`padding_after_prefix_hit` False); before 0.29.0 there is no room test (`padding_needs_room_to_sample`
    False), `padded_admission_breaks` decides instead."""
    hit = padding_after_prefix_hit & (num_computed_tokens > 0)
    room = ~padding_needs_room_to_sample | (num_computed_tokens + 1 + k + 1 <= max_model_len)
    return (k > 0) & (num_new_tokens == 1) & ~prefill_scheduled & (any_running_scheduled | hit) & room


def padded_admission_breaks(
    pad: Tensor,
    k: Tensor,
    request_token_budget: Tensor,
    num_computed_tokens: Tensor,
    max_model_len: Tensor,
    padding_needs_room_to_sample: Tensor,
) -> Tensor:
    """Tensor twin of `reference_impl.rules.padded_admission_breaks`: a padded admission that does not fit ends
    the waiting pass, "prefer to not schedule than schedule un-padded"
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1320-1322)). Before 0.29.0 a padding past L breaks too."""
    over = 1 + k > request_token_budget
    past_L = ~padding_needs_room_to_sample & (num_computed_tokens + 1 + k > max_model_len)
    return pad & (over | past_L)


def num_scheduled_spec_tokens(
    num_new_tokens: Tensor, num_computed_tokens: Tensor, num_tokens: Tensor, num_output_placeholders: Tensor
) -> Tensor:
    """Tensor twin of `reference_impl.rules.num_scheduled_spec_tokens`, clamped at 0 (the reference
    schedules drafts only when the rule's count is positive).

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025): the scheduled tokens beyond T + P are drafts
    (what the clamps left of them)."""
    return (num_new_tokens + num_computed_tokens - num_tokens - num_output_placeholders).clamp(min=0)


def num_rejected_drafts(num_scheduled_drafts: Tensor, num_generated: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.num_rejected_drafts` for one sampled token per step.

    vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2352-2355): each sampled token past the first
    confirms one draft."""
    return num_scheduled_drafts - (num_generated - 1).clamp(min=0)


def async_max_tokens_reached(P: Tensor, C: Tensor, num_prompt_tokens: Tensor, max_tokens: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.async_max_tokens_reached`.

    vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814) (async): even if every in-flight draft is
    rejected, the step in flight reaches max_tokens, so no further step is scheduled."""
    return (P > 0) & (C + 2 - P >= num_prompt_tokens + max_tokens)


# ---- Decisions that changed between releases (spec/versions.py). ----


def self_preemption_continues(prio_policy: Tensor, priority_self_preemption_continues: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.self_preemption_continues`: after a running request preempted itself,
    the pass goes on only under PRIORITY from 0.33.0 (`continue`); FCFS, and PRIORITY before, `break`
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (982-994))."""
    return prio_policy & priority_self_preemption_continues


def caches_on_update(had_output_placeholders: Tensor, k: Tensor, sync_spec_decode_caches_on_update: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.caches_on_update`: whether `update_from_output` registers a running
    request's processed full blocks (vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2407-2415)):
    with output in flight (async), or with spec decode from 0.33.0."""
    return had_output_placeholders | (sync_spec_decode_caches_on_update & (k > 0))


def waits_for_grammar(waiting_for_grammar: Tensor, grammar_compiled: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.waits_for_grammar`: the waiting pass passes over a request waiting for
    a grammar that has not compiled (vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request)."""
    return waiting_for_grammar & ~grammar_compiled


def lora_limit_skips(
    lora_int_id: Tensor, adapter_running: Tensor, num_adapters_running: Tensor, max_loras: Tensor
) -> Tensor:
    """Tensor twin of `reference_impl.rules.lora_limit_skips` (`max_loras` 0: no LoRA config): a request whose adapter
    no running request uses waits while max_loras adapters run (vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (1091-1101))."""
    return (max_loras > 0) & (lora_int_id > 0) & (num_adapters_running == max_loras) & ~adapter_running


def decode_cadence_waits(current_step: Tensor, next_decode_eligible_step: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.decode_cadence_waits`: the PP decode cadence passes a running request over
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (816-820))."""
    return current_step < next_decode_eligible_step


def next_decode_eligible_step(current_step: Tensor, decode_stagger: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.next_decode_eligible_step`
    (vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule (51-56))."""
    return current_step + decode_stagger


def defers_prefills(
    throttle: Tensor, capacity_bound: Tensor, any_decode_running: Tensor, local_interval: Tensor, since_last: Tensor
) -> Tensor:
    """Tensor twin of `spec.rules.defers_prefills` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (750-791))."""
    local = (local_interval > 1) & (since_last < local_interval)
    return (throttle | local) & ~capacity_bound & any_decode_running


def prefill_capacity_bound(num_waiting: Tensor, num_deferred_waiting: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.prefill_capacity_bound` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (1612-1616))."""
    return num_waiting > num_deferred_waiting


def admits_a_prefill(num_computed_tokens: Tensor, num_tokens: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.admits_a_prefill` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1290-1293))."""
    return num_computed_tokens < num_tokens - 1


def paused_token_budget(pause: Tensor, token_budget: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.paused_token_budget` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (723-725))."""
    return torch.where(pause == 2, torch.zeros_like(token_budget), token_budget)


def pause_admits_waiting(pause: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.pause_admits_waiting` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (1050-1067))."""
    return pause == 0


def pause_runs_waiting_pass(pause: Tensor, paused_new_runs_waiting_pass: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.pause_runs_waiting_pass`, the release column for its `release`
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050))."""
    return torch.where(paused_new_runs_waiting_pass, pause != 2, pause == 0)


# ---- Deployment features (issue #36): pooling models. ----


def sampled_tokens_per_step(pooling: Tensor, pooling_samples_no_token: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.sampled_tokens_per_step`: 0 for a pooling model at a release with
    `pooling-samples-no-token`, else 1 (vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (152-161))."""
    return torch.where(pooling & pooling_samples_no_token, 0, 1)


def prefix_cache_lookup_enabled(caching: Tensor, skip_reading_prefix_cache: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.prefix_cache_lookup_enabled`
    (vllm/v1/core/kv_cache_manager.py:KVCacheManager.prefix_cache_lookup_enabled (251-253))."""
    return caching & ~skip_reading_prefix_cache
