"""vLLM's `BlockPool` allocation with exact ids: `pop_alloc` and `push_free`, over a ring of free block ids.

`pop_alloc` is `get_new_blocks` (and the block-table write of `allocate_slots`), `push_free` is
`free_blocks`; without prefix caching anywhere in the batch the free queue they pop and push is a
ring buffer (`ring`, `head`, `free` of `BatchState`), described here. With caching they use the LRU
free queue of `lru_free_queue.py` instead.

Block ids are observable (the model runner writes KV into them), so the order
of vLLM's free queue is semantics, not detail (§9.A.16, T43-T45,
D5). With prefix caching off, vLLM's `BlockPool` only ever does two things to
it (vllm/v1/core/block_pool.py:BlockPool.get_new_blocks, vllm/v1/core/block_pool.py:BlockPool.free_blocks,
vllm/v1/core/kv_cache_utils.py:FreeKVCacheBlockQueue.prepend_n):

* `get_new_blocks(k)`: pop k ids from the **front**;
* `free_blocks(reversed(table))`: put a request's blocks at the **front**,
  in reverse table order, so `free([1, 2, 3])` on `[x, ...]` gives
  `[3, 2, 1, x, ...]`.

Both touch only the front, and the queue never holds more than
`num_gpu_blocks - 1` ids, so a ring of exactly that capacity with a moving
head is an exact model: a pop reads `ring[head : head + k]` and advances the
head; a prepend of m ids moves the head back by m and writes them there. It
never overwrites a queued id, because the queue length plus m stays within
the capacity.

Both operations take a batch of requests *in order* (per instance, an
ordered list of slots) and do all of their ids in one gather or scatter:

* `pop_alloc`: request j of the list gets the ids at offsets
  `[K_{j-1}, K_j)` from the head, where K is the prefix sum of the asks: the
  same ids as popping one request after another.
* `push_free`: several frees in a row (update_from_output frees in
  `num_scheduled_tokens` order; aborts one id at a time, in the given order;
  victims in preemption order) leave the queue as
  `reversed(concat(tables in free order)) + old queue`, so id z of that
  concatenation goes to `head - 1 - z`.

The sizes of the flattened index lists are data-dependent, so each call
reads one scalar back from the device (one synchronisation).

With prefix caching the queue also takes tail appends and removals from
the middle, which a ring cannot do: a batch where any instance caches uses
the keyed LRU queue of `lru_free_queue.py` instead, behind the same two calls.
"""

from __future__ import annotations

import torch

from .lru_free_queue import keyed_free, keyed_pop
from .state import BatchState

Tensor = torch.Tensor


def expand_counts(counts: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """For a flat count vector, the owner index of each of the `total` items and the item's rank in its owner."""
    dev = counts.device
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), counts, output_size=total)
    start = (counts.cumsum(0) - counts)[owner]
    return owner, torch.arange(total, device=dev) - start


def pop_alloc(st: BatchState, slots: Tensor, asks: Tensor, also: Tensor | None = None) -> int | None:
    """Give each listed request `asks` new blocks from the front of its instance's free queue, in list order.

    `slots` [B, N] lists slots in order; `asks` [B, N] >= 0 (0: nothing for this entry). The caller has
    already checked that the asks fit (allocate_slots checks capacity before popping,
    vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (582-588)).
    `also`, a 0-d tensor, is read back in the same synchronisation and returned as an int.
    """
    B, N = slots.shape
    held = st.held.gather(1, slots)
    per_inst = asks.sum(1)
    extra = [] if also is None else [also.long()]
    values = torch.stack([per_inst.sum(), (held + asks).max(), per_inst.max(), *extra]).tolist()
    total, widest, most = values[0], values[1], values[2]
    result = values[3] if also is not None else None
    if total == 0:
        return result
    st.grow_width(widest)
    owner, q = expand_counts(asks.reshape(-1), total)
    b = torch.div(owner, N, rounding_mode="floor")
    offset = (asks.cumsum(1) - asks).reshape(-1)[owner] + q
    slot = slots.reshape(-1)[owner]
    if st.keyed:  # prefix caching somewhere in the batch: the keyed queue (lru_free_queue.py)
        ids = keyed_pop(st, b, offset, most).to(st.table.dtype)
    else:
        ids = st.ring[b, (st.head[b] + offset) % st.capsafe[b]]
        st.head = (st.head + per_inst) % st.capsafe
    st.table[b, slot, held.reshape(-1)[owner] + q] = ids
    st.held.scatter_add_(1, slots, asks)
    st.free = st.free - per_inst
    return result


def push_free(st: BatchState, slots: Tensor, mask: Tensor) -> None:
    """Free every block of the masked requests, request by request in list order
    (vllm/v1/core/sched/scheduler.py:Scheduler._free_blocks;
    vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.free frees in reverse)."""
    B, N = slots.shape
    if N == 0:
        return
    counts = torch.where(mask, st.held.gather(1, slots), torch.zeros_like(slots))
    per_inst = counts.sum(1)
    total = int(per_inst.sum())
    if total and st.keyed:
        owner, q = expand_counts(counts.reshape(-1), total)
        keyed_free(st, slots, mask, owner, q, counts)
    elif total:
        owner, q = expand_counts(counts.reshape(-1), total)
        b = torch.div(owner, N, rounding_mode="floor")
        z = (counts.cumsum(1) - counts).reshape(-1)[owner] + q
        slot = slots.reshape(-1)[owner]
        st.ring[b, (st.head[b] - 1 - z) % st.capsafe[b]] = st.table[b, slot, q]
        st.head = (st.head - per_inst) % st.capsafe
        st.free = st.free + per_inst
    bi, ji = mask.nonzero(as_tuple=True)
    st.held[bi, slots[bi, ji]] = 0
    st.ncached[bi, slots[bi, ji]] = 0
