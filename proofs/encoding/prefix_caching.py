"""Prefix caching in the step encoding: the hit as a free input, and block sharing as a count.

Which blocks are cached depends on every earlier step's block ids and token
hashes, which the encoding abstracts to counts. So the hit is a free input
of each waiting slot, bounded as the reference bounds it:

* `hit_blocks` in 0 .. `rules.max_prefix_hit_blocks(T, bs)`: the lookup
  never covers the last token
  (vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks (301-302); a mutant of the
  rule, Z7, moves this bound in the reference and here alike);
* `evictable` in 0 .. hit_blocks, and at most the free blocks: those hit
  blocks have ref count 0 and sit in the free queue, so taking them costs a
  free block each (`_get_num_evictable_blocks`).

Sharing breaks "free + sum of held blocks = usable": a hit on a block that
another request holds adds a table entry, not a block. The encoding keeps
the number of such extra entries, `shared` (the catalogue's
`post_num_shared_block_refs`), and block conservation reads
free + sum(held) - shared = usable. When a request frees its blocks (a
preemption, a finish), `shared_freed` of them, a free input in
0 .. its blocks with `shared` staying >= 0, are still held by someone else
and do not return to the free queue; the rest do.

This over-approximates: any hit and any sharing pattern the counts allow is
in the formula, including some no real cache can produce. That is sound
for proofs; a counterexample that relies on an impossible pattern fails to
replay and reads `unconfirmed`. Which block ids, ref counts and hashes are
right is checked concretely (refcounts-match-tables,
cached-blocks-match-tokens; the monitors, the state machine, the diff).
"""

from __future__ import annotations

from typing import Any

from ...reference_impl import rules
from ...spec.arith import implies, ite

Int = Any


def lookup_bounds(
    present: Any, num_tokens: Int, hit_blocks: Int, evictable: Int, num_free_blocks: Int, block_size: int
) -> list[Any]:
    """The bounds of the hit of the request at one position of the waiting pass (`present`: there is one)."""
    return [
        implies(present, f)
        for f in (
            hit_blocks >= 0,
            hit_blocks <= rules.max_prefix_hit_blocks(num_tokens, block_size),
            evictable >= 0,
            evictable <= hit_blocks,
            evictable <= num_free_blocks,
        )
    ]


def release(
    free: Int, shared: Int, when: Any, num_blocks: Int, shared_freed: Int, inputs: list[Any]
) -> tuple[Int, Int]:
    """`free(request)` under `when`: the blocks nobody else holds go back to the free queue."""
    inputs += [
        implies(when, shared_freed >= 0),
        implies(when, shared_freed <= num_blocks),
        implies(when, shared_freed <= shared),
    ]
    return free + ite(when, num_blocks - shared_freed, 0), shared - ite(when, shared_freed, 0)
