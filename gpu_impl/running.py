"""The RUNNING pass (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037)), for all instances at once.

vLLM walks `running` in order. Each request asks
`min(clamp_thr(T + S + P - C), L - C - s)` tokens (S drafts, P async
placeholders; 0 under the async max-tokens skip rule) (the threshold clamp, then the
max_model_len clamp `n <= L - C - num_sampled_tokens_per_step`, §9.A.1, floored at 0:
a request past L - 1, which a min_tokens request reaches before 0.29.0, asks 0) and
gets `min(ask, budget left)`; an ask of 0 is skipped with `continue`, not
`break` (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (891-909)); the pass stops when the budget is spent. With
non-negative asks the grants are prefix sums:
`grant_i = min(cum_ask_i, B) - min(cum_ask_{i-1}, B)` (`rules.grants`).

Blocks: request i needs `k_i = max(cdiv(min(min(C, L) + n, L), bs) - held, 0)` new
blocks (vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (550-588); no watermark and no full-sequence gate
for RUNNING requests), taken from the front of the free queue in order. The
first request whose cumulative need exceeds the free count is where vLLM
starts preempting (`preemption.py`).

Rounds: everything before the first failure is granted and allocated in one
go; the failure is resolved (victims found by a search over their cumulative
freed blocks, the failing request granted if it survives); the pass resumes
after it. Each round past the first preempts at least one request, so an
instance takes at most 1 + (requests preempted in the step) rounds, and the
loop runs max over instances of that: almost always 1, since a step that
preempts is rare. Rounds are a loop in Python over tensor programs that
each cover every request of every instance. Under prefix caching each
allocation also registers the request's full blocks up to min(C + n, T).
"""

from __future__ import annotations

import torch

from . import rules
from .block_pool import pop_alloc
from .pass_state import RunningPass
from .preemption import resolve_failures
from .prefix_cache import register
from .state import BIG, BatchState

Tensor = torch.Tensor


def idle_pass(st: BatchState, budget: Tensor) -> RunningPass:
    """The pass when no instance has a running request: nothing granted, nothing preempted."""
    zeros = torch.zeros((st.B, st.R), dtype=torch.int64, device=st.device)
    none = torch.zeros_like(zeros, dtype=torch.bool)
    return RunningPass(
        st,
        st.cols(),
        st.cols(),
        none,
        zeros,
        zeros,
        none,
        budget.clone(),
        torch.zeros_like(budget),
        torch.ones_like(budget, dtype=torch.bool),
    )


def running_pass(
    st: BatchState, threshold: Tensor, budget: Tensor, running: Tensor, defer: Tensor | None = None
) -> RunningPass:
    """`running` is the RUNNING mask [B, R] at the start of the step; `defer` [B]: the prefill cadence holds every
    prompt chunk back in this step."""
    B, R = st.B, st.R
    order = torch.where(running, st.run_pos, torch.full_like(st.run_pos, BIG)).sort(dim=1).indices
    alive = running.gather(1, order)
    C = st.C.gather(1, order)
    T = st.num_tokens().gather(1, order)
    L, bs = st.L[:, None], st.bs[:, None]
    owed = (st.num_owed_tokens() if st.any_spec or st.any_async else st.num_tokens() - st.C).gather(1, order)
    ask = torch.minimum(rules.clamp_to_threshold(owed, threshold[:, None]), L - C - st.sampled[:, None]).clamp(min=0)
    if st.any_async:  # the step in flight already reaches max_tokens: skip (`continue`,
        # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814))
        P = st.P.gather(1, order)
        done = rules.async_max_tokens_reached(P, C, st.prompt_len.gather(1, order), st.max_tokens.gather(1, order))
        ask = torch.where(done, torch.zeros_like(ask), ask)
    if st.any_cadence:  # decoded fewer than pp schedule() calls ago: skip (`continue`,
        # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (816-820))
        waits = rules.decode_cadence_waits(st.current_step[:, None], st.next_decode.gather(1, order))
        ask = torch.where(waits, torch.zeros_like(ask), ask)
    if defer is not None:  # a prompt chunk waits for a step on the cadence: skip (`continue`,
        # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (822-826))
        ask = torch.where(defer[:, None] & st.chunk.gather(1, order), torch.zeros_like(ask), ask)
    zeros = torch.zeros_like(C)
    p = RunningPass(
        st,
        order,
        st.cols(),
        alive,
        zeros,
        st.held.gather(1, order),
        torch.zeros_like(alive),
        budget.clone(),
        torch.zeros(B, dtype=torch.int64, device=st.device),
        torch.zeros(B, dtype=torch.bool, device=st.device),
    )
    while True:
        p.rounds += 1
        if p.rounds == 1:  # everything is still to visit, nothing has been allocated yet
            a, held = torch.where(alive, ask, zeros), p.old_held
        else:
            a = torch.where(p.alive & (p.idx >= p.cursor[:, None]) & ~p.done[:, None], ask, zeros)
            held = st.held.gather(1, order)
        n = rules.grants(a, p.budget[:, None])
        k = torch.where(n > 0, (rules.blocks_for(torch.minimum(C, L) + n, L, bs) - held).clamp(min=0), zeros)
        fail = (n > 0) & (k.cumsum(1) > st.free[:, None])
        jf = rules.first_index(fail, p.idx, R)
        failing = jf < R
        ok = (n > 0) & (p.idx < jf[:, None])
        any_failing = pop_alloc(st, order, torch.where(ok, k, zeros), also=failing.any())
        granted = torch.where(ok, n, zeros)
        if st.keyed:  # allocate_slots registers the full blocks up to min(C + n, T) at once
            register(st, order, torch.minimum(torch.minimum(C, L) + granted, T), ok)
        p.grant = p.grant + granted
        p.budget = p.budget - granted.sum(1)
        p.done = p.done | ~failing
        if not any_failing:
            return p
        if p.rounds > R + 1:  # each failure preempts at least one request: this cannot happen
            raise RuntimeError(f"running pass did not converge after {p.rounds} rounds")
        resolve_failures(p, failing, jf, n, k, C, T)
