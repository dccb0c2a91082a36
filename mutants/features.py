"""Mutants of the three features: the bug-zoo entries the features make live, and classic ones.

Written like the core ones (one canonical snippet found exactly once in one
function, replaced; see `planting.py`). Each names the families whose
workloads exercise it: a hunt searches those, so the core mutants keep the
core families and their pinned results.

Z6 moves code rather than changing a line: its snippet is the stretch from
the free-block count to the touch, rewritten with the touch first and no
undo on failure, as vLLM had it before PR #11565.
"""

from __future__ import annotations

from .planting import Mutant

_Z6_FIND = """num_free_blocks = self.block_pool.get_num_free_blocks()
if full_sequence_must_fit:
    full_num_tokens = min(request.num_tokens, L)
    required = rules.num_blocks_to_allocate(full_num_tokens, num_held_blocks, bs) + num_evictable_blocks
    if not rules.allocation_fits(required, watermark_blocks, num_free_blocks):
        return None
num_tokens_need_slot = rules.num_tokens_need_slot(num_local_computed_tokens, num_new_tokens, num_lookahead_tokens, L)
num_new_blocks = rules.num_blocks_to_allocate(num_tokens_need_slot, num_held_blocks, bs)
if not rules.allocation_fits(num_new_blocks + num_evictable_blocks, watermark_blocks, num_free_blocks):
    return None
if new_computed_blocks:
    self.block_pool.touch(new_computed_blocks)"""
# The touch moves first and is never undone; the capacity checks, without the evictable hit blocks, follow.
_Z6_REPLACE = """if new_computed_blocks:
    self.block_pool.touch(new_computed_blocks)
num_free_blocks = self.block_pool.get_num_free_blocks()
if full_sequence_must_fit:
    full_num_tokens = min(request.num_tokens, L)
    required = rules.num_blocks_to_allocate(full_num_tokens, num_held_blocks, bs)
    if not rules.allocation_fits(required, watermark_blocks, num_free_blocks):
        return None
num_tokens_need_slot = rules.num_tokens_need_slot(num_local_computed_tokens, num_new_tokens, num_lookahead_tokens, L)
num_new_blocks = rules.num_blocks_to_allocate(num_tokens_need_slot, num_held_blocks, bs)
if not rules.allocation_fits(num_new_blocks, watermark_blocks, num_free_blocks):
    return None
if new_computed_blocks:"""

_Z7_LOOP = """
for block_hash in request.block_hashes[:max_hit_blocks]:
    block = self.block_pool.get_cached_block(block_hash)
    if block is None:
        break
    hit_blocks.append(block)
"""

CACHING, SPEC, ASYNC = ("prefix-caching",), ("spec-decode",), ("async",)
GRAMMARS = ("structured-output",)

FEATURE_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "Z2-no-async-max-tokens-skip",
        "Z2",
        "drop the async skip of a request whose in-flight step already reaches max_tokens",
        "spec.rules:async_max_tokens_reached",
        "return and_(num_output_placeholders > 0,"
        " num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens)",
        "return False",
        ("no-decode-past-max-tokens",),
        ASYNC,
    ),
    Mutant(
        "Z5-skipped-reversed",
        "Z5",
        "waiting requests skipped in a step go back to the head in reverse order",
        "reference_impl.scheduler:Scheduler.schedule",
        "step_skipped_waiting.appendleft(self.waiting.pop_request())",
        "step_skipped_waiting.append(self.waiting.pop_request())",
        # Only a two-stage pipeline reaches it (a victim's output still in flight at the next schedule),
        # and two such victims must be skipped in one step: the state machine's 1197th example.
        ("skipped-keep-order",),
        ASYNC,
        min_examples=2000,
    ),
    Mutant(
        "Z6-touch-before-check",
        "Z6",
        "touch the prefix-hit blocks before the capacity check, and leave them touched when it fails",
        "reference_impl.kv_cache_manager:KVCacheManager.allocate_slots",
        _Z6_FIND,
        _Z6_REPLACE,
        ("refcounts-match-tables", "block-conservation"),
        CACHING,
    ),
    Mutant(
        "Z7-full-hit-lookup",
        "Z7",
        "look up prefix hits up to num_tokens instead of num_tokens - 1",
        "spec.rules:max_prefix_hit_blocks",
        "return fdiv(num_tokens - 1, block_size)",
        "return fdiv(num_tokens, block_size)",
        ("prefix-hit-below-last-token",),
        CACHING,
    ),
    Mutant(
        "Z7-recompute-one-token",
        "Z7",
        "a full hit recomputes only the last token, not the last block (before PR #17999)",
        "reference_impl.kv_cache_manager:KVCacheManager.get_computed_blocks",
        "max_hit_blocks = rules.max_prefix_hit_blocks(request.num_tokens, self.block_size)"
        + _Z7_LOOP
        + "return (hit_blocks, len(hit_blocks) * self.block_size)",
        "max_hit_blocks = request.num_tokens // self.block_size"
        + _Z7_LOOP
        + "return (hit_blocks, min(len(hit_blocks) * self.block_size, request.num_tokens - 1))",
        ("prefix-hit-below-last-token",),
        CACHING,
    ),
    Mutant(
        "async-skip-breaks",
        "classic",
        "the async max-tokens skip ends the running pass (`break`) instead of passing over the request",
        "reference_impl.scheduler:Scheduler.schedule",
        "request.max_tokens):\n    req_index += 1\n    continue",
        "request.max_tokens):\n    break",
        ("running-work-conserving",),
        ASYNC,
    ),
    Mutant(
        "hashed-freed-to-front",
        "classic",
        "freed blocks that carry a hash go to the front of the free queue, not the LRU tail",
        "reference_impl.block_pool:BlockPool.frees_to_front",
        "return block not in self.block_hash or not self.enable_caching",
        "return True",
        ("block-choice-exact",),
        CACHING,
    ),
    Mutant(
        "no-touch-on-hit",
        "classic",
        "prefix-hit blocks join the block table without being touched",
        "reference_impl.kv_cache_manager:KVCacheManager.allocate_slots",
        "self.block_pool.touch(new_computed_blocks)",
        "pass",
        ("refcounts-match-tables", "block-conservation"),
        CACHING,
    ),
    Mutant(
        "no-evict-on-reuse",
        "classic",
        "a reused block keeps the stale hash of its earlier prefix in the cache",
        "reference_impl.block_pool:BlockPool._maybe_evict_cached_block",
        "block_hash = self.block_hash.pop(block, None)",
        "block_hash = None",
        ("cached-blocks-match-tokens",),
        CACHING,
    ),
    Mutant(
        "cache-wrong-hash",
        "classic",
        "newly full blocks are all cached under the hash of the first of them",
        "reference_impl.block_pool:BlockPool.cache_full_blocks",
        "block, block_hash = (blocks[i], block_hashes[i])",
        "block, block_hash = (blocks[i], block_hashes[num_cached_blocks])",
        ("cached-blocks-match-tokens", "prefix-hit-exact"),
        CACHING,
    ),
    Mutant(
        "no-rejection-rollback",
        "classic",
        "rejected drafts do not roll num_computed_tokens back",
        "reference_impl.update:SchedulerUpdates.update_from_output",
        "request.num_computed_tokens -= num_rejected",
        "pass",
        ("computed-behind-known-tokens", "owed-nonnegative"),
        SPEC,
    ),
    Mutant(
        "rollback-one-too-many",
        "classic",
        "rejected drafts roll num_computed_tokens back one token too far",
        "reference_impl.update:SchedulerUpdates.update_from_output",
        "request.num_computed_tokens -= num_rejected",
        "request.num_computed_tokens -= num_rejected + 1",
        ("rollback-exact",),
        SPEC,
    ),
    Mutant(
        "spec-tokens-off-by-one",
        "classic",
        "one draft more is reported scheduled than the clamps left",
        "spec.rules:num_scheduled_spec_tokens",
        "- num_tokens - num_output_placeholders",
        "- num_tokens - num_output_placeholders + 1",
        ("drafts-within-held",),
        SPEC,
    ),
    Mutant(
        "padding-ignores-L",
        "classic",
        "spec-decode padding of an admission ignores the max_model_len guard",
        "spec.rules:pads_spec_decode",
        "room = num_computed_tokens + 1 + num_speculative_tokens + 1 <= max_model_len if",
        "room = True if",
        ("chunk-bounds",),
        SPEC,
    ),
    Mutant(
        "rejection-ignores-placeholder-guard",
        "classic",
        "rejected drafts are taken off the placeholders even when there are none (sync)",
        "reference_impl.update:SchedulerUpdates.update_from_output",
        "if request.num_output_placeholders > 0:\n    request.num_output_placeholders -= num_rejected",
        "request.num_output_placeholders -= num_rejected",
        ("placeholder-counters", "running-served-while-budget-lasts"),
        SPEC,
    ),
    Mutant(
        "placeholders-kept-on-preempt",
        "classic",
        "preemption keeps the victim's output placeholders",
        "reference_impl.scheduler:Scheduler._preempt_request",
        "request.num_output_placeholders = after.num_output_placeholders",
        "pass",
        ("waiting-holds-nothing", "computed-behind-known-tokens", "grant-exact"),
        ASYNC,
    ),
    # Structured output's grammar wait (deployment feature 1 of issue #36).
    Mutant(
        "grammar-not-awaited",
        "classic",
        "a request whose grammar is still compiling is promoted and admitted as if it had compiled",
        "reference_impl.scheduler:Scheduler._handle_blocked_waiting_request",
        "rules.waits_for_grammar(waiting_for_grammar, request.grammar == GRAMMAR_COMPILED)",
        "rules.waits_for_grammar(waiting_for_grammar, request.grammar != GRAMMAR_FAILED)",
        ("grammar-wait-exact",),
        GRAMMARS,
    ),
    Mutant(
        "lora-limit-ignored",
        "classic",
        "the waiting pass admits a request whatever max_loras says",
        "spec.rules:lora_limit_skips",
        "return and_(lora_int_id > 0, num_adapters_running == max_loras, not_(adapter_running))",
        "return False",
        ("lora-limit-exact",),
        ("lora",),
    ),
    Mutant(
        "decode-cadence-ignored",
        "classic",
        "async scheduling with pipeline parallel decodes a request at every schedule(), not every pp-th",
        "spec.rules:decode_cadence_waits",
        "return current_step < next_decode_eligible_step",
        "return False",
        ("decode-cadence-exact",),
        ("pipeline-parallel",),
    ),
    Mutant(
        "prefill-cadence-ignored",
        "classic",
        "the prefill cadence never defers: a throttled or off-cadence step schedules prefills like any other",
        "spec.rules:defers_prefills",
        "return and_(or_(throttle_prefills, local), not_(prefill_capacity_bound), any_decode_running)",
        "return False",
        ("prefill-cadence-exact",),
        ("prefill-cadence",),
    ),
    Mutant(
        "pause-admits-waiting",
        "classic",
        "a pause holds nothing back in the waiting pass: PAUSED_NEW admits new requests as if unpaused",
        "spec.rules:pause_admits_waiting",
        "return pause_state == 0",
        "return True",
        ("controls-exact",),
        ("pause-and-reset",),
    ),
    Mutant(
        "grammar-error-dropped",
        "classic",
        "the update forgets the failed grammars the pass found: the request waits for its grammar for good",
        "reference_impl.update:SchedulerUpdates.update_from_output",
        "error_req_ids, self.grammar_compile_error_reqs = (self.grammar_compile_error_reqs, set())",
        "error_req_ids, self.grammar_compile_error_reqs = (set(), set())",
        ("grammar-wait-exact",),
        GRAMMARS,
    ),
    Mutant(
        "pooling-finishes-every-chunk",
        "classic",
        "a pooling model's request finishes in the update of any step that scheduled it, pooled output or not: a "
        "chunked prompt ends after its first chunk",
        "reference_impl.update:SchedulerUpdates.update_from_output",
        "elif self.config.runner == 'pooling' and req_id in model_runner_output.pooler_output:",
        "elif self.config.runner == 'pooling':",
        ("pooling-exact",),
        ("pooling",),
    ),
)
