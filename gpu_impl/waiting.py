"""The WAITING pass as a longest admissible prefix.

vLLM: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1049-1616).
It runs only in instances that preempted nothing in this step (§9.A.6).
vLLM pops the waiting queue in order and stops at the first request that
cannot be admitted. Two skip rules are in scope: stale async output, and
a grammar that has not compiled (`grammar.py`; LoRA, connectors and
streaming are inert here); a skipped request takes nothing and keeps its
place. So what is admitted is a prefix
of the queue minus the skipped, and without a prefix cache every condition
of request i depends only on what the requests before it took (with
caching it does not: `waiting_cached.py`):

* `len(running) < max_num_active_reqs` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1070-1074)):
  i < limit - running;
* budget left > 0 (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1062)), with grants
  by prefix sums as in the RUNNING pass;
  a waiting request asks `clamp_thr(T)`: T, not the prompt, because a
  resumed request recomputes its outputs too, and C = 0 (no prefix cache);
  a one-token ask under spec decode is padded to 1 + k (and breaks the
  pass if 1 + k exceeds the budget left, or before 0.29.0 if 1 + k > L);
* chunked prefill off and the ask above the budget left: break
  (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1337-1344));
* the full-sequence gate `cdiv(min(T, L), bs)` when
  `scheduler_reserve_full_isl`, and the slot check `cdiv(min(n, L), bs)`,
  each plus the watermark `int(watermark * num_gpu_blocks)`, which counts
  only while `running` is non-empty, and that includes requests admitted
  earlier in this same pass
  (vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (518-548), §9.A.17, D7).
  Both must fit in the free blocks left by the requests before it.

The admitted prefix is the running product of those conditions. Admitted
requests are appended to `running` in order, listed as new (WAITING) or
resumed (PREEMPTED), and their blocks are popped in admission order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import rules
from .block_pool import pop_alloc
from .grammar import after_reach, blocked
from .state import BIG, PREEMPTED, RUNNING, BatchState

Tensor = torch.Tensor


@dataclass
class WaitingPass:
    order: Tensor  # [B, R] slots in waiting order at the start of the pass
    grant: Tensor  # [B, R] tokens granted (by position)
    admitted: Tensor  # [B, R] admitted (by position): a prefix of each row
    resumed: Tensor  # [B, R] admitted from PREEMPTED (by position)
    count: Tensor  # [B] admitted
    padded: Tensor  # [B, R] a padded spec-decode admission (by position)
    skipped: Tensor  # [B, R] reached and passed over (by position): they join `deferred_waiting`


def waiting_pass(
    st: BatchState,
    threshold: Tensor,
    budget: Tensor,
    num_running: Tensor,
    allowed: Tensor,
    waiting: Tensor,
    prefill_scheduled: Tensor,
    any_running_scheduled: Tensor,
    running_scheduled: Tensor,
    defer: Tensor | None = None,
) -> WaitingPass:
    """`defer` [B]: the prefill cadence ends the pass at the first request with prompt to compute.

    `waiting` is the WAITING/PREEMPTED mask at the start of the step: where admission is allowed,
    the RUNNING pass preempted nothing, so the queue is still exactly that.

    Without a prefix cache (C = 0 for every waiting request) a request's decisions still depend only
    on what the requests before it took, with two twists from async scheduling and spec decode: a
    request whose pre-preemption output is in flight is skipped (`continue`: it takes nothing and keeps
    its place, since skipped requests return to the head in order), and a one-token admission may be
    padded to 1 + k, which breaks the pass if 1 + k exceeds the budget left. `running_scheduled` is read only
    by the walking pass (LoRA puts a batch there: `waiting_cached.py`)."""
    R = st.R
    key = torch.where(st.prio_policy[:, None], st.prio_rank, st.wait_pos)
    order = torch.where(waiting, key, torch.full_like(key, BIG)).sort(dim=1).indices
    valid = waiting.gather(1, order)
    T = st.num_tokens().gather(1, order)
    L, bs, bud = st.L[:, None], st.bs[:, None], budget[:, None]
    idx = st.cols()
    zeros = torch.zeros_like(T)
    # Stale output in flight skips the request, unless a cache reset marked it for dropping (vLLM's skip test)
    stale = (st.stale > 0) & ~st.drop
    skip = stale.gather(1, order) & valid if st.any_queue else torch.zeros_like(valid)
    if st.any_grammar:
        skip = skip | (blocked(st, order) & valid)
    take = valid & ~skip
    # The prefill cadence ends the pass at a request with prompt to compute: with C = 0 here, any T > 1.
    held = defer[:, None] & rules.admits_a_prefill(zeros, T) if defer is not None else torch.zeros_like(valid)
    k = st.k[:, None]
    room = st.padding_needs_room_to_sample[:, None]
    pad = (
        rules.pads_spec_decode(
            k,
            T,
            prefill_scheduled[:, None],
            any_running_scheduled[:, None],
            zeros,
            L,
            st.padding_after_prefix_hit[:, None],
            room,
        )
        if st.any_spec
        else torch.zeros_like(valid)
    )
    ask = torch.where(take, rules.clamp_to_threshold(torch.where(pad, 1 + k, T), threshold[:, None]), zeros)
    n = rules.grants(ask, bud)
    left = bud - torch.minimum(ask.cumsum(1) - ask, bud)
    slots = torch.where(take, rules.blocks_for(n, L, bs), zeros)
    full = torch.where(st.gate[:, None], rules.blocks_for(T, L, bs), zeros)
    before = slots.cumsum(1) - slots
    ahead = take.long().cumsum(1) - take.long()  # admitted before this one, if it is admitted at all
    watermark = torch.where(num_running[:, None] + ahead > 0, st.wm[:, None], zeros)
    ok = (
        valid
        & allowed[:, None]
        & (num_running[:, None] + ahead < st.max_active[:, None])
        & (
            skip
            | (
                (left > 0)
                & ~rules.padded_admission_breaks(pad, k, left, zeros, L, room)  # "prefer to not schedule ..."
                & (st.chunked[:, None] | (ask <= left))
                & ~held
                & (torch.maximum(slots, full) + watermark <= st.free[:, None] - before)
            )
        )
    )
    first = rules.first_index(~ok, idx, R)[:, None]
    admitted = (idx < first) & take  # the longest prefix where all hold
    count = admitted.long().sum(1)
    grant = torch.where(admitted, n, zeros)
    resumed = admitted & (st.status.gather(1, order) == PREEMPTED)
    active = num_running[:, None] + ahead < st.max_active[:, None]
    reached = valid & allowed[:, None] & (idx <= first) & (left > 0) & active
    if st.tracks_reach:  # the pass got to a request unless the budget or max_num_active_seqs ended it first
        after_reach(st, order, reached, skip)

    pop_alloc(st, order, torch.where(admitted, slots, zeros))
    in_slots = torch.zeros_like(admitted).scatter(1, order, admitted)
    st.status = torch.where(in_slots, torch.full_like(st.status, RUNNING), st.status)
    st.run_pos = st.run_pos.scatter(
        1, order, torch.where(admitted, st.run_ctr[:, None] + ahead, st.run_pos.gather(1, order))
    )
    st.run_ctr = st.run_ctr + count
    return WaitingPass(order, grant, admitted, resumed, count, admitted & pad, reached & skip)
