"""The full state of B independent scheduler instances, in padded tensors.

Layout (§2): every instance has R request *slots*; a slot
holds one request for its whole life (it is never reused), so a request is
addressed by `(instance, slot)` and its id lives only in the Python glue.

* per instance `[B]`: the config knobs the step reads, the free-block queue
  as a ring buffer (`ring`, `head`, `free`; see `freequeue.py`), and the
  counters that give queue positions (`run_ctr`, `wait_tail`, `wait_head`).
* per slot `[B, R]`: status (vLLM's `RequestStatus` values; 0 = no request
  yet), prompt length, outputs, computed tokens (C), held blocks, the
  position keys of both queues, priority and arrival time, the stop data,
  and the block table `[B, R, W]`.

Queues are not stored as lists. `running` is the RUNNING slots ordered by
`run_pos` (an admission appends: `run_ctr` counts up). FCFS `waiting` is the
WAITING/PREEMPTED slots ordered by `wait_pos`: an arrival takes `wait_tail`
(counting up), a preempted request is prepended with `wait_head` (counting
down), exactly `deque.append` / `appendleft`
(vllm/v1/core/sched/request_queue.py:FCFSRequestQueue).
PRIORITY `waiting` is ordered by `prio_rank`, the rank of
(priority, arrival_time, request_id) (vllm/v1/request.py:Request.__lt__),
because a heap's every observable use depends only on that order.

The three features add per slot: drafts (`spec_tok` [B, R, k] and `nspec`), the
async counters (`P`, `inflight`, `stale`), `chunk` (is_prefill_chunk),
`nprop` (drafter proposals used), and for prefix caching `ncached`, the
block hashes `bhash` [B, R, W] with `nhash`, and the running hash residues
`h0`, `h1`. A batch where any instance caches also has per-block tensors
[B, num_gpu_blocks]: `fkey` (free-queue order, `freelist.py`), `ref`,
`blk_hash` and `blk_ins` (the cache map, `prefix_cache.py`).

Capacities grow by doubling: slots (`grow_slots`), block-table width
(`grow_width`), stop tokens and planted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..spec.config import SchedulerConfig
from ..spec.request import RequestStatus
from .rules import num_owed_tokens

EMPTY = 0
WAITING = int(RequestStatus.WAITING)
RUNNING = int(RequestStatus.RUNNING)
PREEMPTED = int(RequestStatus.PREEMPTED)
FINISHED_STOPPED = int(RequestStatus.FINISHED_STOPPED)
FINISHED_LENGTH_CAPPED = int(RequestStatus.FINISHED_LENGTH_CAPPED)
FINISHED_ABORTED = int(RequestStatus.FINISHED_ABORTED)
BIG = 1 << 62  # a sort key past every real position

I64, F64, BOOL, I32 = torch.int64, torch.float64, torch.bool, torch.int32

# Per-slot tensors [B, R] and the value a fresh slot holds.
SLOT_FIELDS: dict[str, tuple[torch.dtype, float | int | bool]] = {
    "status": (I64, EMPTY),
    "prompt_len": (I64, 0),
    "num_out": (I64, 0),
    "C": (I64, 0),
    "held": (I64, 0),
    "max_tokens": (I64, 0),
    "run_pos": (I64, 0),
    "wait_pos": (I64, 0),
    "prio_rank": (I64, 0),
    "prio": (I64, 0),
    "arrival": (F64, 0.0),
    "eos": (I64, 0),
    "has_eos": (BOOL, False),
    "fin_pending": (BOOL, False),
    "add_rank": (I64, 0),
    "arrival_step": (I64, -1),
    "plen": (I64, 0),
    # The three features. Spec decode: len(spec_token_ids), proposals used. Async: output placeholders (P), in-flight
    # and stale-output tokens. is_prefill_chunk as the last _update_after_schedule left it.
    "nspec": (I64, 0),
    "nprop": (I64, 0),
    "P": (I64, 0),
    "inflight": (I64, 0),
    "stale": (I64, 0),
    "chunk": (BOOL, False),
    # Prefix caching: num_cached_blocks, how many block hashes are known, and the running hash residues
    # of all tokens so far (one per field of `spec.block_hash`), extended as tokens are appended.
    "ncached": (I64, 0),
    "nhash": (I64, 0),
    "h0": (I64, 0),
    "h1": (I64, 0),
}
# Per-slot tensors with a trailing dimension [B, R, X].
WIDE_FIELDS: dict[str, tuple[torch.dtype, int | bool]] = {
    "table": (I32, 0),
    "stop_tok": (I64, 0),
    "stop_valid": (BOOL, False),
    "planted": (I64, 0),
    "spec_tok": (I64, 0),  # spec_token_ids, padded to k (-1: a placeholder draft)
    "prop_nd": (I64, 0),
    "prop_na": (I64, 0),  # the workload's spec proposals (batched runner)
    "bhash": (I64, -1),  # block_hashes, one per full block of prompt + outputs
}
# Per-instance tensors [B] (config first, then the dynamic counters).
INST_FIELDS = (
    "budget0",
    "input_budget0",
    "max_active",
    "L",
    "bs",
    "wm",
    "thr0",
    "adaptive",
    "chunked",
    "gate",
    "prio_policy",
    "cap",
    "capsafe",
    "filler",
    "head",
    "free",
    "run_ctr",
    "wait_tail",
    "wait_head",
    "k",
    "async_",
    "caching",
)
# Per-block tensors [B, num_gpu_blocks], used only when some instance caches (see `freelist.py`):
# free-queue order keys, ref counts, the hash a block is cached under (-1: none) and its insertion order.
BLOCK_FIELDS = ("fkey", "ref", "blk_hash", "blk_ins")
# Per-instance counters of the keyed free queue and the cache.
KEYED_INST_FIELDS = ("front_ctr", "tail_ctr", "ins_ctr")


class BatchState:
    def __init__(
        self,
        configs: Sequence[SchedulerConfig],
        capacity: int,
        device: torch.device | str,
        width: int = 4,
        stops: int = 0,
        planted: int = 0,
        fillers: Sequence[int] | None = None,
    ) -> None:
        dev = self.device = torch.device(device)
        B = self.B = len(configs)
        self.R = max(int(capacity), 1)

        def col(values, dtype=I64):
            return torch.tensor(list(values), dtype=dtype, device=dev)

        c = configs
        # min(token_budget, input_budget): both fall by every grant, and the passes stop when either is 0
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (795-798, 1062-1069); draft slots are 0 without a
        # drafting method).
        self.budget0 = col(min(x.token_budget, x.max_num_batched_tokens) for x in c)
        self.input_budget0 = col(x.max_num_batched_tokens for x in c)
        self.max_active = col(x.max_num_active_reqs for x in c)
        self.L = col(x.max_model_len for x in c)
        self.bs = col(x.block_size for x in c)
        self.wm = col(x.watermark_blocks for x in c)
        self.thr0 = col(x.long_prefill_token_threshold for x in c)
        self.any_threshold = any(x.long_prefill_token_threshold > 0 for x in c)
        self.adaptive = col((x.long_prefill_token_threshold_adaptive for x in c), BOOL)
        self.chunked = col((x.enable_chunked_prefill for x in c), BOOL)
        self.gate = col((x.scheduler_reserve_full_isl for x in c), BOOL)
        self.prio_policy = col((x.policy == "priority" for x in c), BOOL)
        self.any_priority = any(x.policy == "priority" for x in c)
        self.cap = col(x.num_gpu_blocks - 1 for x in c)  # block 0 is the null block, never free
        self.capsafe = self.cap.clamp(min=1)
        self.filler = col(fillers if fillers is not None else [7] * B)
        self.k = col(x.num_speculative_tokens for x in c)
        self.async_ = col((x.async_scheduling for x in c), BOOL)
        self.caching = col((x.enable_prefix_caching for x in c), BOOL)
        self.kmax = max((x.num_speculative_tokens for x in c), default=0)
        self.any_spec = self.kmax > 0
        self.any_async = any(x.async_scheduling for x in c)
        # The keyed free queue replaces the ring for the whole batch when any instance caches.
        self.keyed = any(x.enable_prefix_caching for x in c)
        cmax = max(int(self.cap.max()) if B else 1, 1)
        # The free queue starts as [1, 2, ..., num_gpu_blocks - 1]
        # (vllm/v1/core/block_pool.py:BlockPool.__init__ (191)).
        self.ring = torch.arange(1, cmax + 1, dtype=I32, device=dev).repeat(B, 1)
        self.head = torch.zeros(B, dtype=I64, device=dev)
        self.free = self.cap.clone()
        self.run_ctr = torch.zeros(B, dtype=I64, device=dev)
        self.wait_tail = torch.zeros(B, dtype=I64, device=dev)
        self.wait_head = torch.full((B,), -1, dtype=I64, device=dev)
        for name, (dtype, pad) in SLOT_FIELDS.items():
            setattr(self, name, torch.full((B, self.R), pad, dtype=dtype, device=dev))
        if self.keyed:
            nb = cmax + 1
            ids = torch.arange(nb, dtype=I64, device=dev).repeat(B, 1)
            usable = (ids >= 1) & (ids <= self.cap[:, None])
            self.fkey = torch.where(usable, ids, torch.full_like(ids, BIG))  # [1, 2, ..., N-1] in that order
            self.ref = torch.zeros((B, nb), dtype=I64, device=dev)
            self.blk_hash = torch.full((B, nb), -1, dtype=I64, device=dev)
            self.blk_ins = torch.zeros((B, nb), dtype=I64, device=dev)
            self.front_ctr = torch.zeros(B, dtype=I64, device=dev)
            self.tail_ctr = torch.full((B,), nb, dtype=I64, device=dev)
            self.ins_ctr = torch.zeros(B, dtype=I64, device=dev)
        widths = {
            "table": max(width, 1),
            "stop_tok": stops,
            "stop_valid": stops,
            "planted": planted,
            "spec_tok": self.kmax,
            "prop_nd": 0,
            "prop_na": 0,
            "bhash": 0,
        }
        for name, (dtype, pad) in WIDE_FIELDS.items():
            setattr(self, name, torch.full((B, self.R, widths[name]), pad, dtype=dtype, device=dev))

    # ---- sizes ----------------------------------------------------------------
    @property
    def W(self) -> int:
        return self.table.shape[2]

    def cols(self) -> torch.Tensor:
        """[B, R] column positions 0..R-1 (cached: on a GPU every fresh `arange` is a kernel launch)."""
        c = getattr(self, "_cols", None)
        if c is None or c.shape != (self.B, self.R):
            c = self._cols = torch.arange(self.R, device=self.device).expand(self.B, self.R)
        return c

    def num_tokens(self) -> torch.Tensor:
        """T = prompt + outputs (vllm/v1/request.py:Request.num_tokens)."""
        return self.prompt_len + self.num_out

    def num_owed_tokens(self) -> torch.Tensor:
        """num_tokens_with_spec + num_output_placeholders - num_computed_tokens
        (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-843)), by `rules.num_owed_tokens`."""
        return num_owed_tokens(self.num_tokens() + self.nspec, self.P, self.C)

    def grow_slots(self, need: int) -> None:
        """Double the slot capacity until `need` slots fit (pads with empty slots)."""
        if need <= self.R:
            return
        new = self.R
        while new < need:
            new *= 2
        extra = new - self.R
        for name, (dtype, pad) in SLOT_FIELDS.items():
            t = getattr(self, name)
            setattr(self, name, torch.cat([t, torch.full((self.B, extra), pad, dtype=dtype, device=self.device)], 1))
        for name, (dtype, pad) in WIDE_FIELDS.items():
            t = getattr(self, name)
            setattr(
                self,
                name,
                torch.cat([t, torch.full((self.B, extra, t.shape[2]), pad, dtype=dtype, device=self.device)], 1),
            )
        self.R = new

    def grow_wide(self, name: str, need: int) -> None:
        """Double a trailing dimension (block table, stop tokens, planted tokens) until `need` fits."""
        t = getattr(self, name)
        if need <= t.shape[2]:
            return
        new = max(t.shape[2], 1)
        while new < need:
            new *= 2
        dtype, pad = WIDE_FIELDS[name]
        grown = torch.full((self.B, self.R, new), pad, dtype=dtype, device=self.device)
        grown[:, :, : t.shape[2]] = t
        setattr(self, name, grown)

    def grow_width(self, need: int) -> None:
        self.grow_wide("table", need)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the instances `keep` (a 1-D index tensor), in that order: drops finished ones."""
        extra = BLOCK_FIELDS + KEYED_INST_FIELDS if self.keyed else ()
        for name in INST_FIELDS + ("ring",) + extra + tuple(SLOT_FIELDS) + tuple(WIDE_FIELDS):
            setattr(self, name, getattr(self, name).index_select(0, keep))
        self.B = int(keep.numel())

    # ---- masks ----------------------------------------------------------------
    def running_mask(self) -> torch.Tensor:
        return self.status == RUNNING

    def waiting_mask(self) -> torch.Tensor:
        return (self.status == WAITING) | (self.status == PREEMPTED)

    def live_mask(self) -> torch.Tensor:
        return (self.status >= WAITING) & (self.status <= PREEMPTED)

    def waiting_key(self) -> torch.Tensor:
        """Pop order of the waiting queue: FCFS deque position, or the PRIORITY heap's order."""
        key = torch.where(self.prio_policy[:, None], self.prio_rank, self.wait_pos)
        return torch.where(self.waiting_mask(), key, torch.full_like(key, BIG))

    def running_key(self) -> torch.Tensor:
        return torch.where(self.running_mask(), self.run_pos, torch.full_like(self.run_pos, BIG))

    # ---- arrivals ---------------------------------------------------------------
    def arrive(self, mask: torch.Tensor) -> None:
        """vllm/v1/core/sched/scheduler.py:Scheduler.add_request for the masked slots, in slot order within an instance:
        status WAITING, appended at the FCFS tail (PRIORITY orders by `prio_rank` instead)."""
        rank = mask.long().cumsum(1) - 1
        self.wait_pos = torch.where(mask, self.wait_tail[:, None] + rank, self.wait_pos)
        self.wait_tail = self.wait_tail + mask.long().sum(1)
        self.status = torch.where(mask, torch.full_like(self.status, WAITING), self.status)
