"""vLLM's block pool and prefix cache, rebuilt from a trace's block ids: what the decision walk decides against.

A trace shows every block an engine hands out (`scheduled_new_reqs[].block_ids`,
`scheduled_cached_reqs[].new_block_ids`), every preemption and every finish.
Replayed in the order vLLM 0.33.0 takes them, those events fix the whole pool
(`vllm/v1/core/block_pool.py:BlockPool`):

* the free queue: blocks 1..N-1 at the start (block 0 is the null block).
  An allocation pops from the front; a freed request gives its blocks back
  tail first, the unhashed ones to the front (reused first, in that order)
  and, under prefix caching, the hashed ones to the back (evicted last);
  a prefix hit on a block nobody holds takes it out of the queue (`touch`);
* ref counts: the number of block tables holding a block;
* the prefix cache: a block is registered under the hash of its holder's
  tokens once `cache_blocks` counts it full (at allocation, up to
  `min(C + n, T)` tokens; under async scheduling or spec decode also after an
  update, up to `C - in_flight`), and it forgets that hash when it is popped
  again. A lookup walks the request's block hashes and takes the first block
  cached under each, stopping at the first miss and at `(T - 1) // bs` blocks.

The shadow is monitor-only and concrete: it is how the decision invariants
(`decisions.py`) know, at each request's turn, how many blocks are free,
which blocks a hit returns, and which block an allocation must take. It
never reads an engine's state, only the trace's events, so it holds the
engine to the rules, not to itself.

One exception, made on purpose: a sampled live monitor (`live/online.py`,
`sample=N`) cannot afford to replay every step, so before each step it
judges it seeds a shadow from the engine's own pool (`seeded`), and reads
the prefix-cache keys the engine computed (`hash_source`). A hash is an
opaque key here: the shadow only asks which blocks are cached under the
key of each prefix, so the engine's sha256 keys serve as well as the spec's
(`spec/block_hash.py`). What a seeded shadow gives up is named in
docs/live.md: the rules are checked from the engine's pool at each judged
step, not the pool's whole history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence

from ..block_hash import block_hashes, chain_seed
from ..config import SchedulerConfig
from ..request import Request
from ..rules import max_prefix_hit_blocks, prefix_cache_lookup_enabled


class PoolShadow:
    def __init__(
        self,
        config: SchedulerConfig,
        requests: Mapping[str, Request],
        hash_source: Callable[[str], Sequence[Hashable]] | None = None,
    ) -> None:
        self.block_size = config.block_size
        self.caching = config.enable_prefix_caching
        self.requests = requests
        self.hash_source = hash_source  # None: the spec's hashes of the tokens the trace shows
        self.queue: deque[int] = deque(range(1, config.num_gpu_blocks))
        self.refs: dict[int, int] = {}
        self.tables: dict[str, list[int]] = {}
        self.hash_of: dict[int, Hashable] = {}  # block -> the hash it is cached under
        self.cached: dict[Hashable, list[int]] = {}  # hash -> its blocks, first registered first
        self.num_cached: dict[str, int] = {}  # leading blocks of a table already registered
        self.outputs: dict[str, list[int]] = {}  # prefix caching only: each live request's output tokens
        self._hashes: dict[str, tuple[int, ...]] = {}

    @classmethod
    def seeded(
        cls,
        config: SchedulerConfig,
        requests: Mapping[str, Request],
        hash_source: Callable[[str], Sequence[Hashable]],
        free_queue: Sequence[int],
        tables: Mapping[str, Sequence[int]],
        cached: Mapping[Hashable, Sequence[int]],
        num_cached: Mapping[str, int],
    ) -> PoolShadow:
        """A shadow holding an engine's pool as it stands: the free queue in order, the block tables, the cache
        (each hash's blocks, first registered first) and how many leading blocks of each table are registered."""
        shadow = cls(config, requests, hash_source)
        shadow.queue = deque(free_queue)
        shadow.tables = {rid: list(t) for rid, t in tables.items() if t}
        for table in shadow.tables.values():
            for b in table:
                shadow.refs[b] = shadow.refs.get(b, 0) + 1
        shadow.cached = {h: list(blocks) for h, blocks in cached.items() if blocks}
        shadow.hash_of = {b: h for h, blocks in shadow.cached.items() for b in blocks}
        shadow.num_cached = {rid: n for rid, n in num_cached.items() if rid in shadow.tables}
        return shadow

    @property
    def num_free(self) -> int:
        return len(self.queue)

    def held(self, rid: str) -> list[int]:
        return self.tables.get(rid, [])

    # ---- tokens and the prefix cache ----

    def append_outputs(self, rid: str, tokens: Sequence[int]) -> None:
        if self.caching and tokens:
            self.outputs.setdefault(rid, []).extend(tokens)

    def hashes(self, rid: str) -> tuple[Hashable, ...]:
        """The hashes of every full block of the request's tokens, extended as outputs arrive."""
        if self.hash_source is not None:
            return tuple(self.hash_source(rid))
        known = self._hashes.get(rid, ())
        outputs = self.outputs.get(rid, [])
        prompt = self.requests[rid].prompt_token_ids
        if (len(known) + 1) * self.block_size <= len(prompt) + len(outputs):
            seed = chain_seed(self.requests[rid].lora_int_id)
            known = block_hashes(prompt + tuple(outputs), self.block_size, known, seed)
            self._hashes[rid] = known
        return known

    def lookup(self, rid: str, num_tokens: int) -> list[int]:
        """The blocks a prefix-cache lookup returns for a request with C = 0
        (vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks); none for one that skips reading."""
        if not prefix_cache_lookup_enabled(self.caching, self.requests[rid].skip_reading_prefix_cache):
            return []
        hits = []
        for h in self.hashes(rid)[: max_prefix_hit_blocks(num_tokens, self.block_size)]:
            blocks = self.cached.get(h)
            if not blocks:
                break
            hits.append(blocks[0])
        return hits

    def register(self, rid: str, num_tokens: int) -> None:
        """`cache_blocks`: the full blocks among the first `num_tokens` tokens join the cache under their hashes
        (vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks)."""
        if not self.caching:
            return
        hashes = self.hashes(rid)
        table = self.tables.get(rid, [])
        num_full = min(num_tokens, len(hashes) * self.block_size) // self.block_size
        num_full = min(num_full, len(table))
        start = self.num_cached.get(rid, 0)
        if start >= num_full:
            return
        for i in range(start, num_full):
            block, h = table[i], hashes[i]
            if self.hash_of.get(block) == h:
                continue
            self._evict(block)
            self.hash_of[block] = h
            self.cached.setdefault(h, []).append(block)
        self.num_cached[rid] = num_full

    def _evict(self, block: int) -> None:
        h = self.hash_of.pop(block, None)
        if h is None:
            return
        blocks = self.cached[h]
        blocks.remove(block)
        if not blocks:
            del self.cached[h]

    # ---- the free queue and the ref counts ----

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """Hit blocks nobody holds sit in the free queue: taking them costs free blocks too."""
        return sum(1 for b in blocks if self.refs.get(b, 0) == 0)

    def take(self, rid: str, hit: Sequence[int], new: Sequence[int]) -> str:
        """allocate_slots' effects: touch the hit blocks, pop the new ones. The first new block that is not the
        queue's front, as a problem ("" if none)."""
        problem = ""
        for b in hit:
            if self.refs.get(b, 0) == 0 and b in self.queue:
                self.queue.remove(b)
            self.refs[b] = self.refs.get(b, 0) + 1
        table = self.tables.setdefault(rid, [])
        table.extend(hit)
        if hit:
            self.num_cached[rid] = len(table)  # add_local_computed_blocks: the hit joins as already cached
        for b in new:
            front = self.queue[0] if self.queue else None
            if b != front and not problem:
                problem = f"{rid} is given block {b}, but the free queue's front is {front}"
            if b == front:
                self.queue.popleft()
            elif b in self.queue:
                self.queue.remove(b)
            self._evict(b)
            self.refs[b] = self.refs.get(b, 0) + 1
        table.extend(new)
        return problem

    def take_front(self, rid: str, num_blocks: int) -> None:
        """An allocation the trace does not show (a PRIORITY victim whose grant was withdrawn): the rule's blocks."""
        self.take(rid, [], list(self.queue)[: min(num_blocks, len(self.queue))])

    def free(self, rid: str) -> None:
        """vllm/v1/core/block_pool.py:BlockPool.free_blocks over the table reversed, tail block first."""
        front: list[int] = []
        back: list[int] = []
        for b in reversed(self.tables.pop(rid, [])):
            self.refs[b] = self.refs.get(b, 0) - 1
            if self.refs[b] <= 0:
                del self.refs[b]
                (back if self.caching and b in self.hash_of else front).append(b)
        self.queue.extendleft(reversed(front))
        self.queue.extend(back)
        self.num_cached.pop(rid, None)

    def reset_cache(self) -> bool:
        """vllm/v1/core/block_pool.py:BlockPool.reset_prefix_cache: every hash forgotten if every block is free (the
        queue keeps its order); whether it was."""
        if self.refs:
            return False
        self.hash_of.clear()
        self.cached.clear()
        return True

    def forget(self, rid: str) -> None:
        """A finished request: its blocks back to the pool, its tokens gone."""
        self.free(rid)
        self.outputs.pop(rid, None)
        self._hashes.pop(rid, None)
