"""`allocate_slots` and `free`: the KV side of every scheduling decision.

The simple case of vLLM 0.33.0's `KVCacheManager` (`kv_cache_manager.py:380-637`):
one full-attention group, no connector, no sliding window, prefix caching off.
The arithmetic is in `rules.py`, shared with the Z3 encoding; this file is
the order of operations around it:

1. The full-sequence admission gate (waiting requests, on by default): the
   whole current sequence, `min(T, L)` tokens, must fit, plus the watermark.
2. The slot check: `min(computed + n + lookahead, L)` slots, plus the
   watermark. No slot is reserved for the token about to be sampled.
3. Only then are blocks taken from the free queue, so a failed allocation
   changes nothing (ATOMIC; bug-zoo Z6).

The watermark applies only to WAITING or PREEMPTED requests and only when
something is running (`has_scheduled_reqs`); a lone admission ignores it (D7).
"""

from __future__ import annotations

from ..spec.config import SchedulerConfig
from ..spec.request import RequestStatus
from . import rules
from .block_pool import BlockPool
from .live_request import LiveRequest


class KVCacheManager:
    def __init__(self, config: SchedulerConfig, block_pool: BlockPool) -> None:
        self.block_size = config.block_size
        self.max_model_len = config.max_model_len
        self.watermark_blocks = config.watermark_blocks
        self.block_pool = block_pool

    def get_computed_blocks(self, request: LiveRequest) -> tuple[list[int], int]:
        """Prefix-cache hit blocks and tokens: none while prefix caching is off."""
        return [], 0

    def allocate_slots(
        self,
        request: LiveRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
    ) -> list[int] | None:
        """Give `request` slots for `num_new_tokens` more tokens; the new block ids, or None if they do not fit."""
        bs, L = self.block_size, self.max_model_len
        num_held_blocks = len(request.block_ids)
        watermark_blocks = 0
        if has_scheduled_reqs and request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            watermark_blocks = self.watermark_blocks
        num_free_blocks = self.block_pool.get_num_free_blocks()

        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, L)
            required = rules.num_blocks_to_allocate(full_num_tokens, num_held_blocks, bs)
            if not rules.allocation_fits(required, watermark_blocks, num_free_blocks):
                return None

        num_tokens_need_slot = rules.num_tokens_need_slot(
            request.num_computed_tokens + num_new_computed_tokens, num_new_tokens, num_lookahead_tokens, L)
        required = rules.num_blocks_to_allocate(num_tokens_need_slot, num_held_blocks, bs)
        if not rules.allocation_fits(required, watermark_blocks, num_free_blocks):
            return None

        new_blocks = self.block_pool.get_new_blocks(required)
        request.block_ids.extend(new_blocks)
        return new_blocks

    def free(self, request: LiveRequest) -> None:
        """Free in reverse, so the tail blocks are reused (or, with caching, evicted) first."""
        self.block_pool.free_blocks(reversed(request.block_ids))
        request.block_ids = []
