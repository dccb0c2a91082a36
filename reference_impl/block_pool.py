"""The KV block pool: which block ids are free, in which order, and which are cached (`vllm/v1/core/block_pool.py`).

Block ids are observable (the model runner writes KV into them), so the
order of the free queue is part of the semantics, not an implementation
detail:

* Block 0 is the null block, taken at start and never freed
  (vllm/v1/core/block_pool.py:BlockPool.__init__ (191)).
* `get_new_blocks` pops from the front (vllm/v1/core/block_pool.py:BlockPool.get_new_blocks). Under prefix caching a
  popped block that still carries a hash from an earlier owner is evicted
  from the cache first (vllm/v1/core/block_pool.py:BlockPool._maybe_evict_cached_block).
* `free_blocks` receives a request's blocks already reversed
  (vllm/v1/core/block_pool.py:BlockPool.free_blocks).
  Blocks whose ref count drops to 0 and that carry no hash (or all of them,
  with caching off) go to the front in that order, reused first (LIFO);
  hashed blocks go to the tail, so the cache evicts least recently used
  first, chain tails before their parents.
* `touch` (vllm/v1/core/block_pool.py:BlockPool.touch) takes a hit block: a block with ref count 0 sits in the
  free queue as an eviction candidate and leaves it.

The cache maps a hash to the blocks cached under it in insertion order
(`BlockHashToBlockMap`): vLLM does not deduplicate, so two requests that
computed the same prefix without hitting each other both register their
blocks, and a lookup returns the first (`get_one_block`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping


class BlockPool:
    def __init__(
        self,
        free_block_queue: Iterable[int],
        enable_caching: bool = False,
        ref_cnt: Mapping[int, int] | None = None,
        cached_block_hash_to_block: Mapping[int, Iterable[int]] | None = None,
    ) -> None:
        self.free_block_queue: deque[int] = deque(free_block_queue)
        self.enable_caching = enable_caching
        self.ref_cnt: dict[int, int] = dict(ref_cnt or {})  # held blocks only
        self.cached_block_hash_to_block: dict[int, list[int]] = {
            h: list(bs) for h, bs in (cached_block_hash_to_block or {}).items()
        }
        self.block_hash: dict[int, int] = {b: h for h, bs in self.cached_block_hash_to_block.items() for b in bs}
        # Where a released block goes: the scheduler's decision (`Scheduler.freed_block_to_front`), which a
        # derived engine may override; this pool's own rule when no scheduler holds it.
        self.to_front: Callable[[int], bool] | None = None

    def get_num_free_blocks(self) -> int:
        """Every block in the free queue, cached-but-unreferenced ones included
        (vllm/v1/core/block_pool.py:BlockPool.get_num_free_blocks)."""
        return len(self.free_block_queue)

    def get_cached_block(self, block_hash: int) -> int | None:
        blocks = self.cached_block_hash_to_block.get(block_hash)
        return blocks[0] if blocks else None

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        # allocate_slots checks capacity first, so this never fails from the scheduler (I-10).
        assert num_blocks <= len(self.free_block_queue), "cannot get more blocks than are free"
        blocks = [self.free_block_queue.popleft() for _ in range(num_blocks)]
        for block in blocks:
            if self.enable_caching:
                self._maybe_evict_cached_block(block)
            assert self.ref_cnt.get(block, 0) == 0
            self.ref_cnt[block] = 1
        return blocks

    def _maybe_evict_cached_block(self, block: int) -> None:
        """A reused block forgets the prefix it held: its stale hash leaves the cache."""
        block_hash = self.block_hash.pop(block, None)
        if block_hash is None:
            return
        cached = self.cached_block_hash_to_block[block_hash]
        cached.remove(block)
        if not cached:
            del self.cached_block_hash_to_block[block_hash]

    def cache_full_blocks(
        self, blocks: list[int], block_hashes: tuple[int, ...], num_cached_blocks: int, num_full_blocks: int
    ) -> None:
        """Register `blocks[num_cached_blocks:num_full_blocks]` under their hashes
        (vllm/v1/core/block_pool.py:BlockPool.cache_full_blocks)."""
        for i in range(num_cached_blocks, num_full_blocks):
            block, block_hash = blocks[i], block_hashes[i]
            if self.block_hash.get(block) == block_hash:
                continue
            # With one hash size per block size a block never changes hash (no partial promotion).
            assert block not in self.block_hash, "a newly full block already carries a hash"
            self.block_hash[block] = block_hash
            self.cached_block_hash_to_block.setdefault(block_hash, []).append(block)

    def touch(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            if self.ref_cnt.get(block, 0) == 0:
                self.free_block_queue.remove(block)  # an eviction candidate is taken back
            self.ref_cnt[block] = self.ref_cnt.get(block, 0) + 1

    def frees_to_front(self, block: int) -> bool:
        """A released block with no hash, or any block with caching off, is reused first; a hashed one waits at
        the tail, so the cache evicts least recently used first."""
        return block not in self.block_hash or not self.enable_caching

    def reset_prefix_cache(self, num_gpu_blocks: int) -> bool:
        """Forget every hash, only when every block but the null one is free (vllm/v1/core/block_pool.py:
        BlockPool.reset_prefix_cache (871-905)). The free queue keeps its order: blocks that were cached stay where
        they wait, and no longer hit."""
        if len(self.free_block_queue) != num_gpu_blocks - 1:
            return False
        self.cached_block_hash_to_block.clear()
        self.block_hash.clear()
        return True

    def free_blocks(self, ordered_blocks: Iterable[int]) -> None:
        """Drop one reference from each; the released go to the front (unhashed) or the tail (hashed)."""
        to_front = self.to_front or self.frees_to_front
        evict_first, evict_last = [], []
        for block in ordered_blocks:
            self.ref_cnt[block] = self.ref_cnt.get(block, 0) - 1
            # `<= 0` where vLLM has `== 0`: the same for every valid state, but a double free
            # (bug-zoo Z14) then puts the block in the queue twice, where block conservation
            # sees it, instead of hiding it behind a negative count.
            if self.ref_cnt[block] <= 0:
                del self.ref_cnt[block]
                if to_front(block):
                    evict_first.append(block)
                else:
                    evict_last.append(block)
        self.free_block_queue.extendleft(reversed(evict_first))  # prepend_n keeps their order
        self.free_block_queue.extend(evict_last)  # append_n
