"""The scheduler's calls outside `schedule()` on the torch engine: `reset_prefix_cache` and the pause
(`spec/controls.py`).

A reset with `reset_running_requests` preempts every running request of the
asked instances at once, as `Scheduler.reset_prefix_cache` pops them one by
one from the tail of `running`: the victim order is `running` reversed, each
victim's blocks are freed in that order (its table reversed), it becomes
PREEMPTED with the counters of `preempted_counters_twin`, its in-flight
output is marked for dropping (`drop`), and it is prepended to the FCFS
waiting queue, so the queue holds the victims in their running order. The
next `schedule()` reports them (`reset_preempted`). The cache is emptied
where every block is free: each block forgets the hash it was cached under,
and the free queue keeps its order.

The pause is a column the step reads (`pause`): PAUSED_ALL gives the step no
token budget, and any pause keeps the waiting pass from the waiting queue
(`rules.paused_token_budget`, `rules.pause_admits_waiting`).
"""

from __future__ import annotations

import torch

from .block_pool import push_free
from .preemption import preempted_counters_twin
from .state import BatchState

Tensor = torch.Tensor


def reset_prefix_cache(st: BatchState, reset_running_requests: Tensor) -> Tensor:
    """vllm/v1/core/sched/scheduler.py:Scheduler.reset_prefix_cache for the instances whose `reset_running_requests`
    [B] is set (the running requests preempted first) and the others (the cache only). Returns [B]: whether each
    instance emptied its cache."""
    victims = st.running_mask() & reset_running_requests[:, None]
    count = victims.long().sum(1)
    if bool(count.any()):
        # The tail of `running` first: the highest run_pos.
        order = torch.where(victims, st.run_pos, torch.full_like(st.run_pos, -1)).argsort(dim=1, descending=True)
        taken = victims.gather(1, order)
        push_free(st, order, taken)
        st.status, st.C, st.nspec, st.P, st.stale, st.drop = preempted_counters_twin(
            victims, st.status, st.C, st.nspec, st.P, st.inflight, st.stale, st.drop, dropping=True
        )
        rank = torch.zeros_like(st.wait_pos).scatter(1, order, st.cols())  # 0 for the tail, the first to go
        st.wait_pos = torch.where(victims, st.wait_head[:, None] - rank, st.wait_pos)
        st.wait_head = st.wait_head - count
        st.reset_preempted = st.reset_preempted | victims
    emptied = st.free == st.cap
    if st.keyed:
        st.blk_hash = torch.where(emptied[:, None], torch.full_like(st.blk_hash, -1), st.blk_hash)
    return emptied
