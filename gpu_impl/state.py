"""The full state of B independent scheduler instances, in padded tensors.

Layout (§2): every instance has R request *slots*; a slot
holds one request for its whole life (it is never reused), so a request is
addressed by `(instance, slot)` and its id lives only in the Python glue.

* per instance `[B]`: the config knobs the step reads, the release columns
  (one bool per variant of `spec/versions.py`, from `vllm_version`, so one
  batch mixes releases), the free-block queue as a ring buffer (`ring`,
  `head`, `free`; see `block_pool.py`), and the counters that give queue
  positions (`run_ctr`, `wait_tail`, `wait_head`).
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
[B, num_gpu_blocks]: `fkey` (free-queue order, `lru_free_queue.py`), `ref`,
`blk_hash` and `blk_ins` (the cache map, `prefix_cache.py`).

Capacities grow by doubling: slots (`grow_slots`), block-table width
(`grow_width`), stop tokens and planted tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, cast, get_args, get_origin, get_type_hints

import torch

from ..spec.config import SchedulerConfig
from ..spec.request import RequestStatus
from ..spec.versions import VARIANTS, holds
from .rules import num_owed_tokens, sampled_tokens_per_step

EMPTY = 0
WAITING = int(RequestStatus.WAITING)
WAITING_FOR_GRAMMAR = int(RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR)
RUNNING = int(RequestStatus.RUNNING)
PREEMPTED = int(RequestStatus.PREEMPTED)
FINISHED_STOPPED = int(RequestStatus.FINISHED_STOPPED)
FINISHED_LENGTH_CAPPED = int(RequestStatus.FINISHED_LENGTH_CAPPED)
FINISHED_ABORTED = int(RequestStatus.FINISHED_ABORTED)
FINISHED_ERROR = int(RequestStatus.FINISHED_ERROR)
BIG = 1 << 62  # a sort key past every real position
# Structured output: where a slot's grammar stands (spec.request.GRAMMAR_STATES), 0 without one.
NO_GRAMMAR, GRAMMAR_COMPILING, GRAMMAR_COMPILED, GRAMMAR_FAILED = 0, 1, 2, 3
# Before 0.31.0 (FCFS) vLLM's second queue, `skipped_waiting`, is walked first: its `wait_pos` keys lie below
# every key of `waiting` (whose preemptions count down from -1), counting up from here.
SKIPPED_QUEUE_BASE = -(1 << 40)

I64, F64, BOOL, I32 = torch.int64, torch.float64, torch.bool, torch.int32
Tensor = torch.Tensor


@dataclass(frozen=True)
class Slot:
    """Marks a per-slot tensor [B, R] of `dtype`; `fresh` is what a slot holds before its request is loaded."""

    dtype: torch.dtype
    fresh: float | int | bool


@dataclass(frozen=True)
class Wide(Slot):
    """Marks a per-slot tensor with a trailing dimension [B, R, X] that grows by doubling (`grow_wide`)."""


# Marks the tensors that exist only when some instance of the batch caches (`keyed`): the keyed free
# queue and the cache map (`lru_free_queue.py`, `prefix_cache.py`).
KEYED = "keyed"

# The names `grow_wide` takes: the `Wide` fields.
WideField = Literal["table", "stop_tok", "stop_valid", "planted", "spec_tok", "prop_nd", "prop_na", "bhash"]


class BatchState:
    """B scheduler instances of R request slots each (the module's docstring has the layout).

    Every tensor's first dimension is the instance (`select` keeps a subset of them). The `Slot`/`Wide`
    fields are per slot: `__init__`, `grow_slots` and `grow_wide` make them from their annotation's dtype
    and fresh value. The other tensors (int64 unless a comment says bool or int32) are per instance or,
    marked `KEYED`, per block, and `__init__` builds them one by one.
    """

    # ---- sizes and batch-wide flags (Python values: the step branches on them without a device read) ----
    device: torch.device
    B: int  # instances
    R: int  # request slots per instance
    kmax: int  # the largest num_speculative_tokens: spec_tok's width
    any_threshold: bool  # some instance caps long prefills (long_prefill_token_threshold > 0)
    any_priority: bool  # some instance runs the PRIORITY policy
    any_spec: bool  # some instance drafts (kmax > 0)
    any_async: bool  # some instance schedules asynchronously
    any_queue: bool  # some instance keeps steps in flight (a batch queue: async scheduling or pipeline parallel)
    any_cadence: bool  # some instance spaces its decodes (async with pipeline parallel)
    any_prefill_cadence: bool  # some instance has a prefill_schedule_interval
    keyed: bool  # some instance caches: the keyed free queue replaces the ring for the whole batch

    # ---- per instance [B]: the config knobs the step reads ------------------------------------------------
    budget0: Tensor  # min(token_budget, max_num_batched_tokens): the token budget a step starts with
    input_budget0: Tensor  # max_num_batched_tokens (the adaptive threshold's fair share divides it)
    max_active: Tensor  # max_num_active_reqs
    L: Tensor  # max_model_len
    bs: Tensor  # block_size
    wm: Tensor  # watermark_blocks, int(watermark * num_gpu_blocks)
    thr0: Tensor  # long_prefill_token_threshold (0: off), before the per-step adjustment
    adaptive: Tensor  # bool: long_prefill_token_threshold_adaptive
    chunked: Tensor  # bool: enable_chunked_prefill
    gate: Tensor  # bool: scheduler_reserve_full_isl (the full-sequence gate at admission)
    prio_policy: Tensor  # bool: policy == "priority"
    cap: Tensor  # num_gpu_blocks - 1: the usable blocks (block 0 is the null block, never free)
    capsafe: Tensor  # cap, at least 1: the ring's modulus
    filler: Tensor  # the workload's filler token: the fake model's truth past the planted tokens
    k: Tensor  # num_speculative_tokens
    async_: Tensor  # bool: async_scheduling
    caching: Tensor  # bool: enable_prefix_caching
    pooling: Tensor  # bool: runner == "pooling"
    sampled: Tensor  # num_sampled_tokens_per_step: 0 for a pooling model from 0.32.0, else 1
    max_loras: Tensor  # LoRAConfig.max_loras, 0 without LoRA
    queue_size: Tensor  # max_concurrent_batches: the batch queue's size (1: none)
    decode_stagger: Tensor  # pipeline_parallel_size: schedule() calls between two decodes (async)
    current_step: Tensor  # schedule() calls so far (vLLM's `current_step`)
    # The prefill cadence (spec.state.PrefillCadence), read only where `prefill_interval` > 1.
    prefill_interval: Tensor  # prefill_schedule_interval
    local_interval: Tensor  # the cadence the scheduler keeps itself (SchedulerConfig.local_prefill_interval)
    capacity_bound: Tensor  # bool: prefill_capacity_bound
    num_executed: Tensor  # num_executed_steps
    last_prefill: Tensor  # last_prefill_step
    pause: Tensor  # spec.controls.PauseState, as the engine core set it (`controls.py`)

    # ---- per instance [B], bool: the release (`vllm_version`, spec/versions.py), one column per variant --
    # True where the instance's release has the variant's newer behaviour (`holds(name, vllm_version)`),
    # computed once here; the column is the variant's name with `_` for `-` (`release_column`). The twins
    # take them in place of the rules' `release` argument, so one batch mixes releases.
    older: frozenset[str]  # the variants some instance lacks: the step skips a variant's work where none does
    min_tokens_gates_every_stop: Tensor  # EOS, stop tokens and caps apply below min_tokens (0.29.0)
    padding_needs_room_to_sample: Tensor  # padding needs C + 1 + k + 1 <= L, else unpadded (0.29.0)
    padding_after_prefix_hit: Tensor  # a prefix hit makes an admission decode-like (0.30.0)
    lone_request_threshold_off: Tensor  # no threshold with at most one request eligible (0.31.0)
    active_seqs_and_adaptive_threshold: Tensor  # config-only (0.31.0): the config refuses the knobs before
    priority_self_preemption_continues: Tensor  # PRIORITY self-preemption continues the pass (0.33.0)
    sync_spec_decode_caches_on_update: Tensor  # sync spec decode caches in update_from_output (0.33.0)
    one_waiting_queue: Tensor  # FCFS: blocked arrivals and skipped requests join `waiting`, no skipped queue (0.31.0)
    loras_counted_over_all_running: Tensor  # every running request's adapter counts against max_loras (0.33.0)
    async_with_ngram_spec_decode: Tensor  # config-only (0.33.0): the config refuses the pair before
    local_prefill_cadence: Tensor  # config-only (0.33.0): `local_interval` is the config's, which reads it
    paused_new_runs_waiting_pass: Tensor  # under PAUSED_NEW the waiting pass runs, taking nobody (0.32.0)
    release_kv_cache_memory: Tensor  # workload-only (0.31.0): the engine loop's call, no rule of the step
    pooling_samples_no_token: Tensor  # a pooling model keeps no slot for a sampled token (0.32.0): `sampled`

    # ---- per instance: the free-block queue as a ring (`block_pool.py`) and the queue counters ------------
    ring: Tensor  # int32 [B, max cap]: the queue is ring[head], ring[head + 1], ... (mod capsafe), `free` long
    head: Tensor  # [B] the ring index of the queue's front
    free: Tensor  # [B] free blocks: the queue's length (num_free_blocks)
    run_ctr: Tensor  # [B] the next `run_pos` (an admission appends to running)
    wait_tail: Tensor  # [B] the next `wait_pos` of an arrival (FCFS append, counts up)
    wait_head: Tensor  # [B] the next `wait_pos` of a preempted request (FCFS appendleft, counts down)
    skip_tail: Tensor  # [B] before 0.31.0 (FCFS): the next `wait_pos` at the back of the skipped queue

    # ---- per block [B, num_gpu_blocks] and per instance [B], only when `keyed` (`lru_free_queue.py`) ------
    fkey: Annotated[Tensor, KEYED]  # the free-queue order key; BIG: not queued (held, or the null block)
    ref: Annotated[Tensor, KEYED]  # ref count: the requests that hold the block
    blk_hash: Annotated[Tensor, KEYED]  # the hash the block is cached under; -1: none
    blk_ins: Annotated[Tensor, KEYED]  # when it was cached: a lookup returns the first inserted
    front_ctr: Annotated[Tensor, KEYED]  # [B] the lowest key a front push took (the next go below it)
    tail_ctr: Annotated[Tensor, KEYED]  # [B] the next tail append's key (counts up)
    ins_ctr: Annotated[Tensor, KEYED]  # [B] the next cache insertion order

    # ---- per slot [B, R]: one request each ----------------------------------------------------------------
    status: Annotated[Tensor, Slot(I64, EMPTY)]  # vLLM's RequestStatus value; EMPTY: no request yet
    prompt_len: Annotated[Tensor, Slot(I64, 0)]  # num_prompt_tokens
    num_out: Annotated[Tensor, Slot(I64, 0)]  # output tokens appended so far (never reset)
    C: Annotated[Tensor, Slot(I64, 0)]  # num_computed_tokens
    held: Annotated[Tensor, Slot(I64, 0)]  # blocks held: the leading entries of `table`
    max_tokens: Annotated[Tensor, Slot(I64, 0)]
    min_tokens: Annotated[Tensor, Slot(I64, 0)]  # before 0.29.0 it holds back every stop (`update.py`)
    run_pos: Annotated[Tensor, Slot(I64, 0)]  # position key in `running` (read where RUNNING)
    wait_pos: Annotated[Tensor, Slot(I64, 0)]  # position key in the FCFS `waiting` deque
    prio_rank: Annotated[Tensor, Slot(I64, 0)]  # rank by Request.__lt__: the PRIORITY heap's pop order
    prio: Annotated[Tensor, Slot(I64, 0)]  # priority
    arrival: Annotated[Tensor, Slot(F64, 0.0)]  # arrival_time
    eos: Annotated[Tensor, Slot(I64, 0)]  # the effective eos_token_id, where `has_eos`
    has_eos: Annotated[Tensor, Slot(BOOL, False)]  # the effective eos_token_id is not None (not ignore_eos)
    fin_pending: Annotated[Tensor, Slot(BOOL, False)]  # finished; the next schedule() reports it
    add_rank: Annotated[Tensor, Slot(I64, 0)]  # the order it joined `scheduler.requests` (the summary's order)
    arrival_step: Annotated[Tensor, Slot(I64, -1)]  # the step it arrives at (batched runner; -1: none)
    plen: Annotated[Tensor, Slot(I64, 0)]  # how many of `planted` are real
    # The three features: spec decode, async scheduling, prefix caching.
    nspec: Annotated[Tensor, Slot(I64, 0)]  # len(spec_token_ids): the drafts in `spec_tok`
    nprop: Annotated[Tensor, Slot(I64, 0)]  # the drafter's proposals used so far (batched runner)
    P: Annotated[Tensor, Slot(I64, 0)]  # num_output_placeholders (async)
    inflight: Annotated[Tensor, Slot(I64, 0)]  # tokens scheduled whose output is not absorbed yet (batch queue)
    stale: Annotated[Tensor, Slot(I64, 0)]  # of those, the ones scheduled before a preemption: stale output
    drop: Annotated[Tensor, Slot(BOOL, False)]  # drop_stale_output: a cache reset's victim (`controls.py`)
    reset_preempted: Annotated[Tensor, Slot(BOOL, False)]  # preempted by a cache reset; the next schedule() says so
    chunk: Annotated[Tensor, Slot(BOOL, False)]  # is_prefill_chunk as the last _update_after_schedule left it
    next_decode: Annotated[Tensor, Slot(I64, 0)]  # next_decode_eligible_step (async: the PP decode cadence)
    deferred: Annotated[Tensor, Slot(BOOL, False)]  # in vLLM's `deferred_waiting` (read while waiting)
    ncached: Annotated[Tensor, Slot(I64, 0)]  # num_cached_blocks: the leading blocks registered in the cache
    nhash: Annotated[Tensor, Slot(I64, 0)]  # how many block hashes (`bhash`) are known
    # The running hash residues of all tokens so far (one per field of `spec.block_hash`), extended as
    # tokens are appended.
    h0: Annotated[Tensor, Slot(I64, 0)]
    h1: Annotated[Tensor, Slot(I64, 0)]
    # Structured output: the grammar's state (NO_GRAMMAR, ...), a failed one a pass reached (the next update
    # finishes it), and for the batched runner the step its compile finishes at and whether it fails.
    lora: Annotated[Tensor, Slot(I64, 0)]  # LoRA: the adapter's lora_int_id, 0 without one
    skip_read: Annotated[Tensor, Slot(BOOL, False)]  # skip_reading_prefix_cache: it takes no prefix hit
    grammar: Annotated[Tensor, Slot(I64, NO_GRAMMAR)]
    grammar_error: Annotated[Tensor, Slot(BOOL, False)]
    grammar_step: Annotated[Tensor, Slot(I64, -1)]
    grammar_fails: Annotated[Tensor, Slot(BOOL, False)]

    # ---- per slot with a trailing dimension [B, R, X] -----------------------------------------------------
    table: Annotated[Tensor, Wide(I32, 0)]  # the block table [B, R, W]: `held` block ids, then padding
    stop_tok: Annotated[Tensor, Wide(I64, 0)]  # stop_token_ids, padded
    stop_valid: Annotated[Tensor, Wide(BOOL, False)]  # which entries of `stop_tok` are real
    planted: Annotated[Tensor, Wide(I64, 0)]  # the fake model's planted output tokens (batched runner)
    spec_tok: Annotated[Tensor, Wide(I64, 0)]  # spec_token_ids, padded to kmax (-1: a placeholder draft)
    prop_nd: Annotated[Tensor, Wide(I64, 0)]  # the workload's spec proposals (batched runner): num_drafts
    prop_na: Annotated[Tensor, Wide(I64, 0)]  # and num_accepted
    bhash: Annotated[Tensor, Wide(I64, -1)]  # block_hashes, one per full block of prompt + outputs

    _cols: Tensor | None  # `cols()`'s cache

    def __init__(
        self,
        configs: Sequence[SchedulerConfig],
        capacity: int,
        device: torch.device | str,
        width: int = 4,
        stops: int = 0,
        planted: int = 0,
        fillers: Sequence[int] | None = None,
        throttled: bool = False,
    ) -> None:
        """`throttled`: some schedule() call may come with `throttle_prefills=True` (a workload that says so, or an
        engine driven call by call), so the prefill cadence's state is kept whatever the configs."""
        dev = self.device = torch.device(device)
        B = self.B = len(configs)
        self.R = max(int(capacity), 1)
        self._cols = None

        def col(values: Iterable[int | bool], dtype: torch.dtype = I64) -> Tensor:
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
        self.pooling = col((x.runner == "pooling" for x in c), BOOL)
        self.max_loras = col(x.max_loras or 0 for x in c)  # 0: no LoRA config
        self.any_lora = any(x.max_loras is not None for x in c)
        self.queue_size = col(x.max_concurrent_batches for x in c)
        self.any_queue = any(x.max_concurrent_batches > 1 for x in c)
        self.decode_stagger = col(x.decode_stagger for x in c)
        self.any_cadence = any(x.async_scheduling and x.pipeline_parallel_size > 1 for x in c)
        self.current_step = torch.zeros(B, dtype=I64, device=dev)
        self.prefill_interval = col(x.prefill_schedule_interval for x in c)
        self.local_interval = col(x.local_prefill_interval for x in c)
        # vLLM keeps the cadence's state for every config; it decides something only with an interval or a throttle.
        self.any_prefill_cadence = throttled or any(x.prefill_schedule_interval > 1 for x in c)
        self.capacity_bound = torch.zeros(B, dtype=BOOL, device=dev)
        self.num_executed = torch.zeros(B, dtype=I64, device=dev)
        self.last_prefill = -self.local_interval  # one interval back: the first step is never held
        self.pause = torch.zeros(B, dtype=I64, device=dev)  # UNPAUSED
        for v in VARIANTS:  # once per batch: a step reads the columns, never the version strings
            sides = [holds(v.name, x.vllm_version) for x in c]
            setattr(self, release_column(v.name), col(sides, BOOL))
        self.older = frozenset(v.name for v in VARIANTS if not all(holds(v.name, x.vllm_version) for x in c))
        self.sampled = sampled_tokens_per_step(self.pooling, self.pooling_samples_no_token)
        self.kmax = max((x.num_speculative_tokens for x in c), default=0)
        self.any_spec = self.kmax > 0
        self.any_async = any(x.async_scheduling for x in c)
        self.any_grammar = False  # a request with a grammar was loaded (`load.py`): the passes' grammar work runs
        # The keyed free queue replaces the ring for the whole batch when any instance caches, or uses LoRA: then
        # the waiting pass walks the queue one position at a time (`waiting_cached.py`), as the adapter limit needs.
        self.keyed = any(x.enable_prefix_caching or x.max_loras is not None for x in c)
        cmax = max(int(self.cap.max()) if B else 1, 1)
        # The free queue starts as [1, 2, ..., num_gpu_blocks - 1]
        # (vllm/v1/core/block_pool.py:BlockPool.__init__ (191)).
        self.ring = torch.arange(1, cmax + 1, dtype=I32, device=dev).repeat(B, 1)
        self.head = torch.zeros(B, dtype=I64, device=dev)
        self.free = self.cap.clone()
        self.run_ctr = torch.zeros(B, dtype=I64, device=dev)
        self.wait_tail = torch.zeros(B, dtype=I64, device=dev)
        self.wait_head = torch.full((B,), -1, dtype=I64, device=dev)
        self.skip_tail = torch.full((B,), SKIPPED_QUEUE_BASE, dtype=I64, device=dev)
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
        widths: dict[WideField, int] = {
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
        c = self._cols
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
        """Grow the slot capacity to fit `need` slots, at least doubling it (pads with empty slots).

        At least doubling keeps one-at-a-time arrivals amortised; a bulk arrival gets exactly what it needs,
        so 10,000 requests added at once step over 10,000 slots, not 16,384.
        """
        if need <= self.R:
            return
        new = max(need, 2 * self.R)
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

    def grow_wide(self, name: WideField, need: int) -> None:
        """Double a trailing dimension (block table, stop tokens, planted tokens, ...) until `need` fits."""
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
        for name in BATCH_FIELDS + KEYED_FIELDS if self.keyed else BATCH_FIELDS:
            setattr(self, name, getattr(self, name).index_select(0, keep))
        self.B = int(keep.numel())

    # ---- masks ----------------------------------------------------------------
    def running_mask(self) -> torch.Tensor:
        return self.status == RUNNING

    def waiting_mask(self) -> torch.Tensor:
        return (self.status == WAITING) | (self.status == PREEMPTED) | (self.status == WAITING_FOR_GRAMMAR)

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
        status WAITING, appended at the FCFS tail (PRIORITY orders by `prio_rank` instead); a request with a grammar
        (`grammar` set by `load`) waits for it, and before 0.31.0 joins the back of the skipped queue instead
        (vllm/v1/core/sched/scheduler.py:Scheduler._enqueue_waiting_request)."""
        blocked = mask & (self.grammar != NO_GRAMMAR)
        skipped = blocked & ~self.one_waiting_queue[:, None]
        plain = mask & ~skipped
        rank = plain.long().cumsum(1) - 1
        self.wait_pos = torch.where(plain, self.wait_tail[:, None] + rank, self.wait_pos)
        self.wait_tail = self.wait_tail + plain.long().sum(1)
        rank = skipped.long().cumsum(1) - 1
        self.wait_pos = torch.where(skipped, self.skip_tail[:, None] + rank, self.wait_pos)
        self.skip_tail = self.skip_tail + skipped.long().sum(1)
        status = torch.where(
            blocked, torch.full_like(self.status, WAITING_FOR_GRAMMAR), torch.full_like(self.status, WAITING)
        )
        self.status = torch.where(mask, status, self.status)
        if self.any_prefill_cadence:  # an arrival that waits joins `deferred_waiting` (_enqueue_waiting_request)
            self.deferred = self.deferred | blocked

    @property
    def tracks_reach(self) -> bool:
        """Whether the waiting passes must note which requests they reached (`grammar.after_reach`): with a grammar
        in the batch, or a release with the skipped queue, where a skipped request moves into it."""
        return self.any_grammar or "one-waiting-queue" in self.older

    def num_skipped_waiting(self) -> torch.Tensor:
        """[B] the waiting requests in the skipped queue (before 0.31.0, FCFS): the summary's `num_skipped_waiting`."""
        fcfs = ~self.prio_policy[:, None]
        return (self.waiting_mask() & fcfs & (self.wait_pos < SKIPPED_QUEUE_BASE // 2)).long().sum(1)

    def grammars_compiled(self, mask: torch.Tensor, fails: torch.Tensor) -> None:
        """The masked slots' grammar compiles finished (`fails`: with an exception); a grammar no longer compiling
        (or a slot without one) is left as it is (vllm/v1/structured_output/request.py:StructuredOutputRequest)."""
        done = mask & (self.grammar == GRAMMAR_COMPILING)
        outcome = torch.where(fails, torch.full_like(self.grammar, GRAMMAR_FAILED), GRAMMAR_COMPILED)
        self.grammar = torch.where(done, outcome, self.grammar)


def release_column(variant: str) -> str:
    """The `BatchState` column of a variant of `spec/versions.py`: its name, with `_` for `-`."""
    return variant.replace("-", "_")


def _field_tables() -> tuple[
    dict[str, tuple[torch.dtype, float | int | bool]],
    dict[WideField, tuple[torch.dtype, float | int | bool]],
    tuple[str, ...],
    tuple[str, ...],
]:
    """The tensor fields of `BatchState` by kind, read from its annotations (in declaration order)."""
    slots: dict[str, tuple[torch.dtype, float | int | bool]] = {}
    wide: dict[WideField, tuple[torch.dtype, float | int | bool]] = {}
    batch: list[str] = []
    keyed: list[str] = []
    for name, hint in get_type_hints(BatchState, include_extras=True).items():
        if hint is Tensor:
            batch.append(name)
        elif get_origin(hint) is Annotated and get_args(hint)[0] is Tensor:
            mark = get_args(hint)[1]
            if mark == KEYED:
                keyed.append(name)
            elif isinstance(mark, Wide):
                wide[cast(WideField, name)] = (mark.dtype, mark.fresh)
            else:
                slots[name] = (mark.dtype, mark.fresh)
    if set(wide) != set(get_args(WideField)):
        raise TypeError(f"WideField {get_args(WideField)} does not name the Wide fields {tuple(wide)}")
    missing = [v.name for v in VARIANTS if release_column(v.name) not in batch]
    if missing:  # a variant added to spec/versions.py needs its column (and its use in the step)
        raise TypeError(f"BatchState has no release column for {missing}")
    return slots, wide, tuple(batch) + tuple(slots) + tuple(wide), tuple(keyed)


# Per-slot tensors [B, R] and [B, R, X], with the value a fresh slot holds; every tensor indexed by instance
# first (what `select` keeps), and those of them that exist only when `keyed`.
SLOT_FIELDS, WIDE_FIELDS, BATCH_FIELDS, KEYED_FIELDS = _field_tables()
