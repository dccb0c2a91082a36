"""The scheduler's state, frozen: what one `schedule()` or `update_from_output()` reads and returns.

The fields are vLLM's (`vllm/v1/request.py`, `Scheduler.__init__`,
`BlockPool`) under vLLM's names, including those only later features move
(drafts, output placeholders, in-flight and stale counters, block hashes), so
that prefix caching, speculative decoding and async scheduling extend the
same state instead of reshaping it.

Two representation choices, both observationally exact:

* The PRIORITY waiting queue is vLLM's heap, but every observable use of it
  (`peek`, `pop`, iteration, removal) depends only on its contents ordered by
  `Request.__lt__`, so it is stored as that sorted order.
* A block's reference count is not stored: without prefix caching a block is
  held by exactly one request, so `ref_cnt` is derived from the block tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

from .config import SchedulerConfig
from .request import Request, RequestStatus


@dataclass(frozen=True)
class RequestState:
    request: Request
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: tuple[int, ...] = ()
    num_computed_tokens: int = 0
    spec_token_ids: tuple[int, ...] = ()
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    drop_stale_output: bool = False
    num_preemptions: int = 0
    is_prefill_chunk: bool = False
    stop_reason: int | str | None = None
    block_ids: tuple[int, ...] = ()  # the request's block table, in position order

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        return self.request.num_prompt_tokens + len(self.output_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_owed_tokens(self) -> int:
        """The seed formula: what this request is owed before any clamp (scheduler.py:839-843)."""
        return self.num_tokens_with_spec + self.num_output_placeholders - self.num_computed_tokens


@dataclass(frozen=True)
class SchedulerState:
    config: SchedulerConfig
    # Every live request, in the order it was added (vLLM's `requests` dict).
    requests: Mapping[str, RequestState] = field(default_factory=dict)
    running: tuple[str, ...] = ()
    # FCFS: deque order, head first. PRIORITY: heap contents in pop order.
    waiting: tuple[str, ...] = ()
    # Free block ids, front (next to be allocated) first. Block 0 is the null block and never free.
    free_block_queue: tuple[int, ...] = ()
    # Finished since the previous schedule(); reported by the next one (I-18).
    finished_req_ids: frozenset[str] = frozenset()
    current_step: int = 0

    @classmethod
    def initial(cls, config: SchedulerConfig) -> "SchedulerState":
        return cls(config=config, free_block_queue=tuple(range(1, config.num_gpu_blocks)))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def held_blocks(self) -> Iterator[tuple[str, int]]:
        for rid, r in self.requests.items():
            for b in r.block_ids:
                yield rid, b

    def unfinished(self) -> bool:
        return bool(self.running or self.waiting)
