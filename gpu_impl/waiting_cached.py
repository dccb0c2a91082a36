"""The WAITING pass under prefix caching: one queue position per round, every instance at once.

With a prefix cache, what request i of the queue gets depends on more than
the budget and block counts the requests before it took: they register
their blocks at allocation, so a twin admitted later in the same pass hits
them (T41); their pops evict cached hashes it might have hit; their touches
take ref-0 hit blocks out of the free queue, which changes what counts as
evictable. None of that is a prefix sum, so this pass walks the queue: round
j takes the j-th waiting request of every instance, as one tensor program
over the batch, exactly as vLLM's loop would take it
(vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1049-1616)):

1. stale output in flight: skip (`continue`; it keeps its place);
2. `len(running) >= max_num_active_reqs`, or no budget: break;
3. the hit (`get_computed_blocks`, C = 0 for every waiting request): the
   longest run of cached blocks along its hash chain, at most (T-1)//bs;
4. n = T - hit, the spec-decode padding to 1 + k (its conditions and its
   break per release: `rules.pads_spec_decode`, `rules.padded_admission_breaks`),
   the threshold, the chunked-prefill break, the budget;
5. the full-sequence gate and the slot check, each counting the hit
   blocks with ref count 0 (they leave the free queue) and the watermark;
   a failure breaks the pass;
6. admission: touch the hits, pop the new blocks from the front, register
   the full blocks up to min(hit + n, T), C = hit.

The rounds run until every instance has broken or run out of queue: the
loop is over queue positions, never over instances, and a step admits few.
"""

from __future__ import annotations

import torch

from . import rules
from .block_pool import pop_alloc
from .grammar import after_reach, blocked
from .lru_free_queue import touch
from .prefix_cache import lookup, register
from .rules import lora_limit_skips
from .state import BIG, PREEMPTED, RUNNING, BatchState
from .waiting import WaitingPass

Tensor = torch.Tensor


def lora_slots(st: BatchState, running_scheduled: Tensor) -> Tensor:
    """[B, A] which adapters (by lora_int_id, A past the largest) the RUNNING requests hold (before 0.33.0 only those
    the running pass scheduled, `running_scheduled`): vLLM's `scheduled_loras` after the running pass
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1038-1047))."""
    A = int(st.lora.max()) + 1 if st.lora.numel() else 1
    held = torch.zeros((st.B, A), dtype=torch.bool, device=st.device)
    counted = st.loras_counted_over_all_running[:, None] | running_scheduled
    rb, rs = (st.running_mask() & counted & (st.lora > 0)).nonzero(as_tuple=True)
    held[rb, st.lora[rb, rs]] = True
    return held


def cached_waiting_pass(
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
    """The waiting pass one queue position per round; `running_scheduled` [B, R]: the running pass granted it;
    `defer` [B]: the prefill cadence ends the pass at the first request with prompt to compute."""
    B, R = st.B, st.R
    key = torch.where(st.prio_policy[:, None], st.prio_rank, st.wait_pos)
    order = torch.where(waiting, key, torch.full_like(key, BIG)).sort(dim=1).indices
    valid = waiting.gather(1, order)
    depth = int((valid & allowed[:, None]).long().sum(1).max()) if B else 0
    dev = st.device
    zeros = torch.zeros((B, R), dtype=torch.int64, device=dev)
    grant, admitted, padded = zeros.clone(), zeros.bool(), zeros.bool()
    resumed, skipped = zeros.bool(), zeros.bool()
    alive = allowed.clone()
    bud = budget.clone()
    nrun = num_running.clone()
    rows = torch.arange(B, device=dev)
    L, bs, k, thr = st.L, st.bs, st.k, threshold
    after_hit, room = st.padding_after_prefix_hit, st.padding_needs_room_to_sample  # the release's padding
    adapters = (
        lora_slots(st, running_scheduled) if st.any_lora else None
    )  # [B, A]: the adapters running, as admissions add them
    for j in range(depth):
        s = order[:, j]
        here = valid[:, j] & alive
        if not bool(here.any()):
            break
        ended = here & ((nrun >= st.max_active) | (bud <= 0))  # before the skip rules look at the request
        skip = here & (st.stale[rows, s] > 0) & ~st.drop[rows, s]  # dropped stale output does not hold it back
        if st.any_grammar:
            skip = skip | (here & blocked(st, s))
        if adapters is not None:  # after the grammar and stale checks, as vLLM asks them
            lid = st.lora[rows, s]
            skip = skip | (here & lora_limit_skips(lid, adapters[rows, lid], adapters[:, 1:].sum(1), st.max_loras))
        if st.tracks_reach:
            after_reach(st, s[:, None], (here & ~ended)[:, None], skip[:, None])
        skipped[:, j] = here & ~ended & skip
        cand = here & ~skip
        brk = cand & ended
        T = st.num_tokens()[rows, s]
        limit = torch.minimum(rules.max_prefix_hit_blocks(T, bs), st.nhash[rows, s])
        lookup_enabled = rules.prefix_cache_lookup_enabled(st.caching, st.skip_read[rows, s])
        limit = torch.where(lookup_enabled, limit, torch.zeros_like(limit))
        blocks, h = lookup(st, st.bhash[rows, s], limit)
        hit = h * bs
        if defer is not None:  # 3a. the step defers prefills: one with prompt to compute ends the pass
            brk |= cand & defer & rules.admits_a_prefill(hit, T)
        n = T - hit
        pad = rules.pads_spec_decode(k, n, prefill_scheduled, any_running_scheduled, hit, L, after_hit, room)
        brk |= cand & rules.padded_admission_breaks(pad, k, bud, hit, L, room)
        n = rules.clamp_to_threshold(torch.where(pad, 1 + k, n), thr)
        brk |= cand & ~st.chunked & (n > bud)
        n = torch.minimum(n, bud)
        cols = torch.arange(blocks.shape[1], device=dev)[None, :]
        hits = cols < h[:, None]
        evictable = (hits & (st.ref.gather(1, blocks) == 0)).long().sum(1)
        wm = torch.where(nrun > 0, st.wm, torch.zeros_like(st.wm))
        full = (rules.cdiv(torch.minimum(T, L), bs) - h).clamp(min=0) + evictable
        need = torch.minimum(torch.minimum(hit, L) + n, L)
        new = (rules.cdiv(need, bs) - h).clamp(min=0)
        fits = (~st.gate | (full + wm <= st.free)) & (new + evictable + wm <= st.free)
        brk |= cand & ~fits
        adm = cand & ~brk
        alive = alive & ~brk

        # Admission: the hit blocks join the table as cached, then the new blocks, then registration.
        take = hits & adm[:, None]
        touch(st, blocks, take)
        st.grow_width(int(h.max()) if h.numel() else 0)
        tb, tq = take.nonzero(as_tuple=True)
        st.table[tb, s[tb], tq] = blocks[tb, tq].to(st.table.dtype)
        st.held[rows, s] = torch.where(adm, h, st.held[rows, s])
        st.ncached[rows, s] = torch.where(adm, h, st.ncached[rows, s])
        pop_alloc(st, s[:, None], torch.where(adm, new, torch.zeros_like(new))[:, None])
        register(st, s[:, None], torch.minimum(torch.minimum(hit, L) + n, T)[:, None], adm[:, None])
        resumed[:, j] = adm & (st.status[rows, s] == PREEMPTED)
        st.status[rows, s] = torch.where(adm, RUNNING, st.status[rows, s])
        st.run_pos[rows, s] = torch.where(adm, st.run_ctr, st.run_pos[rows, s])
        st.run_ctr = st.run_ctr + adm.long()
        st.C[rows, s] = torch.where(adm, hit, st.C[rows, s])  # the hit becomes computed
        if adapters is not None:
            lid = st.lora[rows, s]
            adapters[rows, lid] = adapters[rows, lid] | (adm & (lid > 0))
        grant[:, j] = torch.where(adm, n, 0)
        admitted[:, j] = adm
        padded[:, j] = adm & pad
        bud = bud - torch.where(adm, n, 0)
        nrun = nrun + adm.long()
    return WaitingPass(order, grant, admitted, resumed, admitted.long().sum(1), padded, skipped)
