"""vLLM's LRU free-block queue (`FreeKVCacheBlockQueue`) under prefix caching, as an order key per block.

The "keyed queue": exact ids for pops, frees and touches, and the blocks' ref counts. Without caching
anywhere in the batch, `block_pool.py`'s ring serves instead.

With caching on, vLLM's free queue (vllm/v1/core/block_pool.py:BlockPool, §3.4)
is touched in three places, not one: freed blocks without a hash are
prepended in reverse table order (`prepend_n`), freed blocks with a hash are
appended at the tail (`append_n`, LRU eviction), and a prefix hit takes a
ref-0 block out of the *middle* (`touch`). A ring buffer cannot do the last
two, so here every block carries an int64 order key `fkey` [B, N]:

* the queue is the blocks with a key below BIG, in key order; block 0 (the
  null block) and held blocks have key BIG;
* a front push takes keys below every queued key (`front_ctr` counts down),
  a tail append keys above them (`tail_ctr` counts up), so relative order is
  exactly that of the deque; a touch just sets the key to BIG;
* a pop of k blocks takes the k smallest keys, by one sort per call; a
  popped block that still carries a hash leaves the cache (eviction).

Ref counts `ref` are stored: hit blocks are shared, and a block goes back to
the queue only when its last holder frees it. Several requests freed in one
call (update_from_output's stops, aborts, preemption victims) are freed
request by request in list order, each table reversed; a block shared
among them is released by its last holder in that order. The keyed queue
serves the whole batch when any instance caches; instances that do not
cache never hash a block, so every release goes to the front, as in the ring.
"""

from __future__ import annotations

import torch

from .state import BIG, BatchState

Tensor = torch.Tensor


def keyed_pop(st: BatchState, b: Tensor, offset: Tensor, widest: int) -> Tensor:
    """The ids at queue offsets `offset` of instances `b` (flat), taken out of the queue (get_new_blocks)."""
    width = min(widest, st.fkey.shape[1])
    front = torch.topk(st.fkey, width, dim=1, largest=False, sorted=True).indices if width else st.fkey[:, :0]
    ids = front[b, offset]
    st.fkey[b, ids] = BIG
    st.ref[b, ids] = 1
    st.blk_hash[b, ids] = -1  # _maybe_evict_cached_block: a reused block forgets its prefix
    return ids


def keyed_free(st: BatchState, slots: Tensor, mask: Tensor, owner: Tensor, q: Tensor, counts: Tensor) -> None:
    """Release the blocks of the masked requests, in list order, each table in reverse (free_blocks).

    `owner`/`q` enumerate the (entry, table index) pairs in list order, table order within an entry;
    `counts` [B, N] is blocks per entry.
    """
    B, N = slots.shape
    total = int(owner.numel())
    b = torch.div(owner, N, rounding_mode="floor")
    slot = slots.reshape(-1)[owner]
    block = st.table[b, slot, q].long()
    start = (counts.cumsum(1) - counts).reshape(-1)[owner]
    z = start + q  # list order, table order within an entry
    zr = start + counts.reshape(-1)[owner] - 1 - q  # the order of the decrements: each table reversed
    NB = st.fkey.shape[1]
    flat = b * NB + block
    occ = torch.zeros(B * NB, dtype=torch.int64, device=st.device).scatter_add_(0, flat, torch.ones_like(flat))
    last = torch.full((B * NB,), -1, dtype=torch.int64, device=st.device).scatter_reduce_(0, flat, zr, reduce="amax")
    ref = st.ref.reshape(-1)
    releasing = (zr == last[flat]) & (occ[flat] >= ref[flat])  # the last holder lets it go
    st.ref = (ref - occ).clamp(min=0).reshape(B, NB)
    hashed = st.blk_hash.reshape(-1)[flat] >= 0
    front, tail = releasing & ~hashed, releasing & hashed
    # Front: the deque ends as [last entry's reversed table, ..., first entry's, old front]: descending z.
    rank_f = _rank_in_instance(b, z, front, B, total)
    # Tail: appended in decrement order.
    rank_t = _rank_in_instance(b, zr, tail, B, total)
    n_front = torch.zeros(B, dtype=torch.int64, device=st.device).scatter_add_(0, b, front.long())
    n_tail = torch.zeros(B, dtype=torch.int64, device=st.device).scatter_add_(0, b, tail.long())
    key = torch.where(front, st.front_ctr[b] - 1 - rank_f, st.tail_ctr[b] + rank_t)
    keep = front | tail
    st.fkey.reshape(-1)[flat[keep]] = key[keep]
    st.front_ctr = st.front_ctr - n_front
    st.tail_ctr = st.tail_ctr + n_tail
    st.free = st.free + n_front + n_tail


def _rank_in_instance(b: Tensor, order: Tensor, mask: Tensor, B: int, total: int) -> Tensor:
    """Each masked entry's rank among its instance's masked entries by `order` (unique per instance)."""
    key = b * (total + 1) + order
    perm = torch.argsort(torch.where(mask, key, torch.full_like(key, BIG)))
    m = mask[perm].long()
    cum = m.cumsum(0) - m
    before = torch.zeros(B + 1, dtype=torch.int64, device=b.device)
    before[1:] = torch.zeros(B, dtype=torch.int64, device=b.device).scatter_add_(0, b, mask.long()).cumsum(0)
    rank = torch.empty_like(cum)
    rank[perm] = cum
    return rank - before[b]


def touch(st: BatchState, blocks: Tensor, valid: Tensor) -> None:
    """Take hit blocks [B, H] (distinct within a row): ref + 1; a ref-0 block leaves the queue."""
    bi, hi = valid.nonzero(as_tuple=True)
    blk = blocks[bi, hi]
    was_free = st.ref[bi, blk] == 0
    st.ref[bi, blk] += 1
    st.fkey[bi[was_free], blk[was_free]] = BIG
    st.free = st.free - torch.zeros_like(st.free).scatter_add_(0, bi, was_free.long())
