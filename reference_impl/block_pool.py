"""The KV block pool: which block ids are free, in which order (`vllm/v1/core/block_pool.py`).

Block ids are observable (the model runner writes KV into them), so the
order of the free queue is part of the semantics, not an implementation
detail:

* Block 0 is the null block, taken at start and never freed (:191).
* `get_new_blocks` pops from the front (:706-740).
* `free_blocks` receives a request's blocks already reversed and, with
  prefix caching off, puts them all at the front in that order (:816-849):
  the tail block of the last freed request is reused first (LIFO).
"""

from __future__ import annotations

from collections import deque
from typing import Iterable


class BlockPool:
    def __init__(self, free_block_queue: Iterable[int]) -> None:
        self.free_block_queue: deque[int] = deque(free_block_queue)

    def get_num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        # allocate_slots checks capacity first, so this never fails from the scheduler (I-10).
        assert num_blocks <= len(self.free_block_queue), "cannot get more blocks than are free"
        return [self.free_block_queue.popleft() for _ in range(num_blocks)]

    def free_blocks(self, ordered_blocks: Iterable[int]) -> None:
        """`prepend_n`: the blocks go to the front, keeping the given order."""
        self.free_block_queue.extendleft(reversed(list(ordered_blocks)))
