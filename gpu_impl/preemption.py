"""Preemption by recompute, for every instance whose RUNNING pass hit an allocation failure.

vLLM (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (912-994), §9.A.7, §9.A.8): when request j cannot
get its blocks, victims are preempted one at a time until j's allocation
fits or j itself is the victim. Its `num_new_tokens` is fixed before that
loop; only the free-block count changes between retries. So the victims
of one failure are a *prefix of a fixed victim order*, and where it stops is
a search over the cumulative blocks the victims free:

* FCFS: the order is the running list from its tail (`running.pop()`).
  Stop at the first t with `free + freed(v_1..v_t) >= k_j`, or at j itself
  (then the pass breaks: j was the tail, everything after it is gone).
  FCFS never preempts a request scheduled earlier in the step, since those
  lie before j.
* PRIORITY: the order is `max(running, key=(priority, arrival_time))`
  taken repeatedly: descending (priority, arrival_time), ties to the first
  in running order. It ranges over all of `running`, including requests
  already scheduled in this step (their grant is refunded to the budget
  and their freshly allocated blocks are freed with the rest) and ones
  skipped earlier; removing a victim before j shifts `req_index`, which
  here is implicit because positions are fixed keys, not list indices.
  After self-preemption the pass continues with the next request from
  0.33.0; before, it ends as under FCFS (`rules.self_preemption_continues`).

Under prefix caching a shared block is freed only by its last holder, so
the cumulative freed count is counted per block (`shared_freed`).

Each victim is freed in that order (its table reversed to the queue front;
under caching, hashed blocks to the tail), becomes PREEMPTED with C = 0,
no drafts, no placeholders and its in-flight tokens stale, and is prepended to the FCFS waiting queue
(`appendleft`, so the last victim ends up first) or pushed into the
PRIORITY heap (whose order `prio_rank` already gives).

This engine may not import the reference, and `spec.rules` is written for
ints and Z3 terms, not tensors. So the victim orders and the preemption's
resets are tensor twins of those rules, named after them (`*_twin`), and
`tests/unit/gpu_impl/test_rule_twins.py` checks each against its rule.
"""

from __future__ import annotations

import torch

from . import rules
from .block_pool import expand_counts, pop_alloc, push_free
from .pass_state import RunningPass
from .prefix_cache import register
from .state import PREEMPTED, BatchState

Tensor = torch.Tensor
INT64_MIN = torch.iinfo(torch.int64).min


def fcfs_victim_index_twin(alive: Tensor, idx: Tensor) -> Tensor:
    """Tensor twin of `reference_impl.rules.fcfs_victim_index`, taken repeatedly: FCFS pops `running[-1]`
    each time, so the victims are the live positions from the tail. Dead positions come last."""
    return torch.sort(torch.where(alive, idx, torch.full_like(idx, -1)), dim=1, descending=True).indices


def victim_key_twin(prio: Tensor, arrival: Tensor, alive: Tensor) -> Tensor:
    """Tensor twin of `spec.rules.victim_key`, maximised repeatedly: the live positions in the order
    `max(running, key=victim_key)` takes them, dead positions last.

    The key descends, and equal keys keep running order because Python's `max` keeps the first of
    equals. Stable sorts from the least significant key: running position ascending (the identity),
    then arrival_time descending, then priority descending.
    """
    prio = torch.where(alive, prio, torch.full_like(prio, INT64_MIN))
    arrival = torch.where(alive, arrival, torch.full_like(arrival, -torch.inf))
    by_arrival = torch.sort(arrival, dim=1, descending=True, stable=True).indices
    by_prio = torch.sort(prio.gather(1, by_arrival), dim=1, descending=True, stable=True).indices
    return by_arrival.gather(1, by_prio)


def preempted_counters_twin(
    victims: Tensor,
    status: Tensor,
    C: Tensor,
    nspec: Tensor,
    P: Tensor,
    inflight: Tensor,
    stale: Tensor,
    drop: Tensor,
    dropping: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Tensor twin of `spec.rules.preempted_counters` for the `victims` mask [B, R]: (status, C, nspec, P,
    stale, drop), each kept where a slot is no victim. `dropping`: the rule's `drop` (a cache reset's).

    The other counters of the rule are not tensors here. `push_free` zeroes the held blocks as it frees
    them. `num_preemptions` reaches no output or summary.
    """
    zeros = torch.zeros_like(C)
    return (
        torch.where(victims, torch.full_like(status, PREEMPTED), status),
        torch.where(victims, zeros, C),
        torch.where(victims, zeros, nspec),
        torch.where(victims, zeros, P),
        torch.where(victims, inflight, stale),
        torch.where(victims, (drop & (stale > 0)) | dropping, drop),
    )


def victim_order(st: BatchState, order: Tensor, alive: Tensor) -> Tensor:
    """Positions (into the running order) in the order victims are taken; dead positions last."""
    fcfs = fcfs_victim_index_twin(alive, st.cols())
    if not st.any_priority:
        return fcfs
    prio = victim_key_twin(st.prio.gather(1, order), st.arrival.gather(1, order), alive)
    return torch.where(st.prio_policy[:, None], prio, fcfs)


def shared_freed(st: BatchState, victim_slots: Tensor, valid: Tensor) -> Tensor:
    """Under prefix caching: the blocks that victim t of the order frees [B, R] (by victim position).

    A shared (hit) block returns to the queue only with its last holder. Every holder of a block is
    a running request, so all of them are in the victim order: the block is freed by the holder that
    comes last in that order.
    """
    B, R = victim_slots.shape
    held = torch.where(valid, st.held.gather(1, victim_slots), torch.zeros_like(victim_slots))
    total = int(held.sum())
    freed = torch.zeros((B, R), dtype=torch.int64, device=st.device)
    if total == 0:
        return freed
    owner, q = expand_counts(held.reshape(-1), total)
    b = torch.div(owner, R, rounding_mode="floor")
    pos = owner - b * R
    block = st.table[b, victim_slots.reshape(-1)[owner], q].long()
    NB = st.fkey.shape[1]
    last = torch.full((B * NB,), -1, dtype=torch.int64, device=st.device).scatter_reduce_(
        0, b * NB + block, pos, reduce="amax"
    )
    hit = last >= 0
    cell = torch.arange(B * NB, device=st.device)[hit]
    return (
        freed.reshape(-1)
        .scatter_add_(0, torch.div(cell, NB, rounding_mode="floor") * R + last[hit], torch.ones_like(cell))
        .reshape(B, R)
    )


def resolve_failures(p: RunningPass, failing: Tensor, jf: Tensor, n: Tensor, k: Tensor, C: Tensor, T: Tensor) -> None:
    """Handle the allocation failure at position `jf` of every `failing` instance of the pass `p`.

    Victims are taken, freed and requeued; if the failing request survives it is granted its fixed
    `n` and allocated its `k` blocks at once (its blocks come from the front, i.e. from the last
    victim's freed blocks first). `p` is the `RunningPass` state; it is updated in place.
    """
    st, order, idx = p.st, p.order, p.idx
    B, R = order.shape
    j = jf.clamp(max=R - 1)[:, None]
    n_j, k_j = n.gather(1, j).squeeze(1), k.gather(1, j).squeeze(1)
    vo = victim_order(st, order, p.alive)
    valid = p.alive.gather(1, vo)
    if st.keyed:
        freed = shared_freed(st, order.gather(1, vo), valid)
    else:
        freed = torch.where(valid, st.held.gather(1, order.gather(1, vo)), torch.zeros_like(vo))
    fits = valid & (st.free[:, None] + freed.cumsum(1) >= k_j[:, None])
    big = torch.full_like(idx, R)
    first_fit = torch.where(fits, idx, big).min(1).values
    self_pos = torch.where(vo == j, idx, big).min(1).values
    self_preempted = first_fit >= self_pos
    count = torch.where(failing, torch.where(self_preempted, self_pos, first_fit) + 1, torch.zeros_like(jf))
    taken = idx < count[:, None]  # in victim order
    victims = torch.zeros_like(p.alive).scatter(1, vo, taken)  # in running order

    # A PRIORITY victim scheduled earlier in this step gives its grant back
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (950-968), Z1).
    p.budget = p.budget + torch.where(victims, p.grant, torch.zeros_like(p.grant)).sum(1)
    p.grant = torch.where(victims, torch.zeros_like(p.grant), p.grant)
    p.alive = p.alive & ~victims
    p.preempted = p.preempted | victims

    # vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request: free (in victim order), PREEMPTED, C = 0, prepend.
    victim_slots = order.gather(1, vo)
    push_free(st, victim_slots, taken)
    in_slots = torch.zeros_like(p.alive).scatter(1, order, victims)
    # Drafts are dropped, placeholders reset, and output still in flight becomes stale
    # (vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1823-1836)).
    st.status, st.C, st.nspec, st.P, st.stale, st.drop = preempted_counters_twin(
        in_slots, st.status, st.C, st.nspec, st.P, st.inflight, st.stale, st.drop
    )
    rank_in_slots = torch.zeros_like(st.wait_pos).scatter(1, victim_slots, idx)
    st.wait_pos = torch.where(in_slots, st.wait_head[:, None] - rank_in_slots, st.wait_pos)
    st.wait_head = st.wait_head - count

    # The failing request, if it survived, now fits: grant it (its n was fixed before the victims).
    survived = failing & ~self_preempted
    asks = torch.zeros_like(k).scatter(1, j, torch.where(survived, k_j, 0)[:, None])
    pop_alloc(st, order, asks)
    if st.keyed:
        at_j = (idx == j) & survived[:, None]
        L = st.L[:, None]
        register(st, order, torch.minimum(torch.minimum(C, L) + n, T), at_j)
    p.grant = p.grant.scatter_add(1, j, torch.where(survived, n_j, 0)[:, None])
    p.budget = p.budget - torch.where(survived, n_j, 0)
    p.cursor = torch.where(failing, jf + 1, p.cursor)
    # FCFS self-preemption ends the pass (`break`); PRIORITY continues (`continue`) from 0.33.0 and breaks before
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (982-994)).
    goes_on = rules.self_preemption_continues(st.prio_policy, st.priority_self_preemption_continues)
    p.done = p.done | (failing & self_preempted & ~goes_on)
