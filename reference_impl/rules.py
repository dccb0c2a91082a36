"""The scheduler's rules, as the reference calls them: `rules.running_num_new_tokens(...)`, read beside vLLM's lines.

Every rule is written once, in `spec/rules.py`: the monitors' decision
invariants re-derive each decision of a step from the same rules, and they
may import nothing outside `spec/`. This module only gives the reference
(and `proofs/`, which calls the very same functions on Z3 terms) the short
name `rules` it has always called them by, so the call sites keep reading
like vLLM's. A mutant names a rule by its home (`spec.rules:stop_kind`);
planting it rebinds the names here too (`mutants/planting.py`).
"""

from __future__ import annotations

from ..spec.rules import (
    LENGTH_CAPPED,
    NOT_STOPPED,
    STOPPED,
    admits_a_prefill,
    allocation_fits,
    async_max_tokens_reached,
    caches_on_update,
    clamp_to_threshold,
    decode_cadence_waits,
    defers_prefills,
    effective_threshold,
    fcfs_victim_index,
    lora_counts_every_running,
    lora_limit_skips,
    max_prefix_hit_blocks,
    next_decode_eligible_step,
    num_blocks_to_allocate,
    num_rejected_drafts,
    num_scheduled_spec_tokens,
    num_tokens_need_slot,
    padded_admission_breaks,
    pads_spec_decode,
    pause_admits_waiting,
    pause_runs_waiting_pass,
    paused_token_budget,
    prefill_capacity_bound,
    prefix_cache_lookup_enabled,
    running_num_new_tokens,
    self_preemption_continues,
    stop_kind,
    waiting_num_new_tokens,
    waiting_pass_allowed,
    waits_for_grammar,
)

__all__ = [
    "LENGTH_CAPPED",
    "NOT_STOPPED",
    "STOPPED",
    "allocation_fits",
    "async_max_tokens_reached",
    "caches_on_update",
    "admits_a_prefill",
    "clamp_to_threshold",
    "decode_cadence_waits",
    "defers_prefills",
    "effective_threshold",
    "fcfs_victim_index",
    "lora_counts_every_running",
    "lora_limit_skips",
    "max_prefix_hit_blocks",
    "next_decode_eligible_step",
    "num_blocks_to_allocate",
    "num_rejected_drafts",
    "num_scheduled_spec_tokens",
    "num_tokens_need_slot",
    "padded_admission_breaks",
    "pads_spec_decode",
    "pause_admits_waiting",
    "pause_runs_waiting_pass",
    "paused_token_budget",
    "prefill_capacity_bound",
    "prefix_cache_lookup_enabled",
    "running_num_new_tokens",
    "self_preemption_continues",
    "stop_kind",
    "waiting_num_new_tokens",
    "waiting_pass_allowed",
    "waits_for_grammar",
]
