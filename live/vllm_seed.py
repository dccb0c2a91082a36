"""vLLM 0.33.0's pool and requests as a `ReplaySeed`: the state a sampled monitor judges its next step from.

Design notes
------------
* Read only when the next record will be judged (`sample=N`), as the record
  before it closes, so the cost (a walk of the free list: one entry per free
  block) is paid once in N steps.
* What is read, and where vLLM keeps it: the block tables and how many of each
  table's blocks are cached (`SingleTypeKVCacheManager.req_to_blocks`,
  `num_cached_block`), the free queue front first
  (`FreeKVCacheBlockQueue.get_all_free_blocks`), the prefix cache
  (`BlockHashToBlockMap._cache`: one block or a dict of them per key, in
  insertion order), and per request its drafts (`spec_token_ids`, placeholders
  under async scheduling) and `is_prefill_chunk`. Only the first KV cache
  group: a model with several is out of scope (`scope.py`).
* The cache's keys are `BlockHashWithGroupId`s; a request's `block_hashes` are
  plain `BlockHash`es, the key less its 4-byte group id
  (`vllm/v1/core/kv_cache_utils.py:get_block_hash`). The seed strips the group,
  so both speak the same keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..spec.invariants.replay import ReplaySeed

GROUP_ID_BYTES = 4  # vllm/v1/core/kv_cache_utils.py:make_block_hash_with_group_id packs the group id in 4 bytes


def replay_seed(scheduler: Any, hash_source: Callable[[str], Sequence[Hashable]]) -> ReplaySeed:
    kv = scheduler.kv_cache_manager
    pool = kv.block_pool
    manager = kv.coordinator.single_type_managers[0]
    blocks = {rid: tuple(b.block_id for b in t) for rid, t in manager.req_to_blocks.items() if t}
    cached: dict[Hashable, tuple[int, ...]] = {}
    for key, held in pool.cached_block_hash_to_block._cache.items():
        cached[key[:-GROUP_ID_BYTES]] = (held.block_id,) if hasattr(held, "block_id") else tuple(held)
    requests = scheduler.requests.values()
    return ReplaySeed(
        blocks=blocks,
        drafts={r.request_id: len(r.spec_token_ids) for r in requests if r.spec_token_ids},
        prefill_chunk={r.request_id: True for r in requests if r.is_prefill_chunk},
        free_queue=tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks()),
        cached=cached,
        num_cached={rid: n for rid, n in manager.num_cached_block.items() if rid in blocks},
        hash_source=hash_source,
        decode_eligible={r.request_id: r.next_decode_eligible_step for r in requests if r.next_decode_eligible_step},
        prefill_capacity_bound=bool(getattr(scheduler, "prefill_capacity_bound", False)),
        deferred_waiting=frozenset(r.request_id for r in _deferred(scheduler)),
        num_executed_steps=int(getattr(scheduler, "num_executed_steps", 0)),
        last_prefill_step=_last_prefill(scheduler),
        pause_state=int(getattr(scheduler, "_pause_state", 0)),
        dropping=frozenset(
            r.request_id
            for r in requests
            if getattr(r, "drop_stale_output", False) and getattr(r, "num_stale_output_tokens", 0) > 0
        ),
    )


def _deferred(scheduler: Any) -> Any:
    """vLLM's `deferred_waiting` (0.31.0 on); before, the same requests sit in `skipped_waiting`."""
    deferred = getattr(scheduler, "deferred_waiting", None)
    return deferred if deferred is not None else list(getattr(scheduler, "skipped_waiting", ()) or ())


def _last_prefill(scheduler: Any) -> int | None:
    """`last_prefill_step` (0.33.0), None while it is still the initial one interval back."""
    last = getattr(scheduler, "last_prefill_step", None)
    return None if last is None or last < 0 else int(last)
