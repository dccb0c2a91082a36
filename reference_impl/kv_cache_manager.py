"""`get_computed_blocks`, `allocate_slots`, `cache_blocks` and `free`: the KV side of every decision.

The simple case of vLLM 0.33.0's `KVCacheManager` (`vllm/v1/core/kv_cache_manager.py:KVCacheManager`):
one full-attention group, hash size equal to block size, no connector, no
sliding window. The arithmetic is in `rules.py`, shared with the Z3
encoding; this file is the order of operations around it:

1. The prefix hit (`get_computed_blocks`, waiting requests with C == 0): the
   longest run of cached blocks along the request's hash chain, at most
   `(T - 1) // bs` blocks, so the last token is always recomputed.
2. The full-sequence admission gate (waiting requests, on by default): the
   whole current sequence, `min(T, L)` tokens, must fit, plus the watermark.
3. The slot check: `min(computed + n + lookahead, L)` slots, plus the
   watermark. No slot is reserved for the token about to be sampled. A hit
   block with ref count 0 sits in the free queue, so taking it costs a free
   block too (`_get_num_evictable_blocks`).
4. Only then is anything taken: hit blocks are touched, new blocks popped,
   and the full blocks up to `min(computed + n, T)` registered in the cache,
   before they are computed. So a failed allocation changes nothing (ATOMIC;
   bug-zoo Z6), and a twin admitted later in the same step hits them (T41).

The watermark applies only to WAITING or PREEMPTED requests and only when
something is running (`has_scheduled_reqs`); a lone admission ignores it (D7).
"""

from __future__ import annotations

from ..spec.config import SchedulerConfig
from ..spec.request import RequestStatus
from . import rules
from .block_pool import BlockPool
from .live_request import LiveRequest

# The statuses the watermark applies to: a request that holds no KV yet. A module constant, because reading an
# enum member costs a slow class-attribute lookup on Python 3.11, and this check runs for every running request.
HOLDS_NO_KV = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


class KVCacheManager:
    def __init__(self, config: SchedulerConfig, block_pool: BlockPool) -> None:
        self.block_size = config.block_size
        self.max_model_len = config.max_model_len
        self.watermark_blocks = config.watermark_blocks
        self.enable_caching = config.enable_prefix_caching
        self.block_pool = block_pool

    def get_computed_blocks(self, request: LiveRequest) -> tuple[list[int], int]:
        """The prefix-cache hit: the blocks, and the tokens they cover
        (vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks); none for a request that skips reading
        the cache."""
        if not rules.prefix_cache_lookup_enabled(self.enable_caching, request.request.skip_reading_prefix_cache):
            return [], 0
        hit_blocks = []
        max_hit_blocks = rules.max_prefix_hit_blocks(request.num_tokens, self.block_size)
        for block_hash in request.block_hashes[:max_hit_blocks]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hit_blocks.append(block)
        return hit_blocks, len(hit_blocks) * self.block_size

    def allocate_slots(
        self,
        request: LiveRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[int] | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
    ) -> list[int] | None:
        """Give `request` slots for `num_new_tokens` more tokens; the new block ids, or None if they do not fit."""
        bs, L = self.block_size, self.max_model_len
        num_local_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        total_computed_tokens = min(num_local_computed_tokens, L)
        num_held_blocks = len(request.block_ids)
        num_evictable_blocks = 0
        if new_computed_blocks:  # only a waiting request's prefix hit brings blocks; a running one never does
            num_held_blocks += len(new_computed_blocks)
            num_evictable_blocks = sum(1 for b in new_computed_blocks if self.block_pool.ref_cnt.get(b, 0) == 0)
        watermark_blocks = 0
        if has_scheduled_reqs and request.status in HOLDS_NO_KV:
            watermark_blocks = self.watermark_blocks
        num_free_blocks = self.block_pool.get_num_free_blocks()

        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, L)
            required = rules.num_blocks_to_allocate(full_num_tokens, num_held_blocks, bs) + num_evictable_blocks
            if not rules.allocation_fits(required, watermark_blocks, num_free_blocks):
                return None

        num_tokens_need_slot = rules.num_tokens_need_slot(
            num_local_computed_tokens, num_new_tokens, num_lookahead_tokens, L
        )
        num_new_blocks = rules.num_blocks_to_allocate(num_tokens_need_slot, num_held_blocks, bs)
        if not rules.allocation_fits(num_new_blocks + num_evictable_blocks, watermark_blocks, num_free_blocks):
            return None

        if new_computed_blocks:
            # add_local_computed_blocks: the hit blocks join the table as already cached.
            self.block_pool.touch(new_computed_blocks)
            request.block_ids.extend(new_computed_blocks)
            request.num_cached_blocks = len(request.block_ids)
        # allocate_new_blocks: the table now holds the hit blocks, so what is missing is the count just checked
        # (vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.allocate_new_blocks returns []
        # when nothing is missing, as a decode inside its last block is).
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        request.block_ids.extend(new_blocks)
        if self.enable_caching:
            # Drafts are not final, so caching stops at T
            # (vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (621-625)).
            self.cache_blocks(request, min(total_computed_tokens + num_new_tokens, request.num_tokens))
        return new_blocks

    def cache_blocks(self, request: LiveRequest, num_tokens: int) -> None:
        """Register the request's full blocks among its first `num_tokens` tokens
        (vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks)."""
        if not self.enable_caching:
            return
        block_hashes = request.block_hashes
        num_full_blocks = min(num_tokens, len(block_hashes) * self.block_size) // self.block_size
        if request.num_cached_blocks >= num_full_blocks:
            return
        self.block_pool.cache_full_blocks(request.block_ids, block_hashes, request.num_cached_blocks, num_full_blocks)
        request.num_cached_blocks = num_full_blocks

    def free(self, request: LiveRequest) -> None:
        """Free in reverse, so the tail blocks are reused (or, with caching, evicted) first."""
        self.block_pool.free_blocks(reversed(request.block_ids))
        request.block_ids = []
        request.num_cached_blocks = 0
