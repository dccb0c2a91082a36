"""The running pass of one step: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037), unrolled over N slots.

Each slot in `running` gets what it is owed, clamped by the threshold, the budget and `max_model_len`
(`rules.running_num_new_tokens`); while its blocks do not fit, a preemption round pops one victim: by position
(`rules.fcfs_victim_index`) under FCFS, by the priority key under PRIORITY, so the two policies share the loop.
The guards are symbolic: a slot that is not running, or that nothing is owed, is tried and given nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...reference_impl import rules
from ...spec.arith import and_, ite, min_, not_, or_, plus
from ...spec.rules import PreemptedCounters, num_owed_tokens, preempted_counters
from .order import count, key_eq, key_gt
from .prefix_caching import release
from .state import STATE, Bool, Config, Int, Pre, StepState

Cut = Callable[[int, dict[str, Any]], dict[str, Any]]


@dataclass
class Victims:
    """How the running pass picks its victims; fixed for the whole pass."""

    tail: bool  # FCFS pops the last slot still running (the unmutated `fcfs_victim_index` does)
    rank: list[Int]  # PRIORITY: slot j is the rank[j]-th victim of the step, should it be one
    after: list[PreemptedCounters]  # what `_preempt_request` leaves in each slot's counters, should it be a victim

    @classmethod
    def of(cls, pre: Pre) -> Victims:
        slots, N = pre.slots, len(pre.slots)
        # When the victim rule picks the last of k running requests for every k that can occur here, the
        # victim is simply the last slot still running.
        tail = all(rules.fcfs_victim_index(k) == k - 1 for k in range(1, N + 1))
        # What a victim's counters become (`spec.rules`). The encoding tracks only whether a step in flight
        # holds the request, and stale output takes that over unchanged.
        after = [preempted_counters(s.in_flight, 0, False, 0) for s in slots]
        # PRIORITY always takes the first maximum of (priority, arrival) among those still running, and nothing
        # joins `running` during this pass, so the victims come in one fixed order: the k-th victim of the step
        # is the request ranked k by `_first_max` applied repeatedly. Ranking once costs O(N^2), not O(N^4).
        rank = [
            count(
                [
                    and_(pre.running(k), or_(key_gt(slots[k], slots[j]), and_(key_eq(slots[k], slots[j]), k < j)))
                    for k in range(N)
                    if k != j
                ]
            )
            for j in range(N)
        ]
        return cls(tail, rank, after)

    def this_round(self, pre: Pre, st: StepState) -> list[Bool]:
        """Per slot: it is this round's victim, chosen from the state at the start of the round."""
        N = len(pre.slots)
        if not pre.config.fcfs:
            return [and_(st.in_run[j], self.rank[j] == st.pops) for j in range(N)]
        if self.tail:  # only the tail is ever popped, so the running list is [0, num_running - pops)
            return [and_(st.in_run[j], j == pre.num_running - 1 - st.pops) for j in range(N)]
        position = [count(st.in_run[:j]) for j in range(N)]
        victim_index = rules.fcfs_victim_index(count(st.in_run))
        return [and_(st.in_run[j], position[j] == victim_index) for j in range(N)]


def running_pass(pre: Pre, st: StepState, thr: Int, preempts: bool | None = None, cut: Cut | None = None) -> None:
    """Schedule the running slots in order, preempting as blocks run out; `preempts` and `cut` as in `step.step`.

    `cut(i, state)` sees the fields of `STATE` (and `victim_rank`, and within slot i's rounds its `n_i` and
    `trying`) and returns their replacements.
    """
    victims = Victims.of(pre)

    def at_cut(i: int, **local: Any) -> None:
        if cut is not None:
            state = cut(i, dict(zip(STATE, (getattr(st, k) for k in STATE)), victim_rank=victims.rank, **local))
            for k in STATE:
                setattr(st, k, state[k])

    for i in range(len(pre.slots) + 1):
        if i > 0:
            at_cut(i)
        if i == len(pre.slots):
            break
        _serve(pre, st, i, thr, preempts, victims, at_cut)


def _serve(
    pre: Pre,
    st: StepState,
    i: int,
    thr: Int,
    preempts: bool | None,
    victims: Victims,
    at_cut: Callable[..., None],
) -> None:
    """Slot i's turn: its grant, the preemption rounds until its blocks fit or it is gone, and its allocation."""
    c, s, N = pre.config, pre.slots[i], len(pre.slots)
    spec, asy = c.spec_decode, c.async_scheduling
    st.active = and_(st.active, st.budget > 0)
    owed = num_owed_tokens(plus(s.num_tokens, st.S[i] if spec else 0), st.P[i] if asy else 0, st.C[i])
    n_i, need = grant(c, owed, st.C[i], st.blocks[i], st.budget, thr)
    trying = and_(st.active, st.in_run[i], n_i > 0)  # n == 0: `continue`
    # The step in flight already reaches max_tokens: `continue`
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814)).
    if asy:
        trying = and_(trying, not_(rules.async_max_tokens_reached(st.P[i], st.C[i], s.num_prompt_tokens, s.max_tokens)))
    # Each round preempts one victim until `need` fits or i is gone
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (912-994)). In the case where nothing is preempted,
    # the first round pops nobody, nor would the rest.
    for _ in range(1 if preempts is False else N - i if c.fcfs else N):
        at_cut(i, n_i=n_i, trying=trying)
        _preemption_round(pre, st, i, trying, need, preempts, victims)
    at_cut(i, n_i=n_i, trying=trying)
    ok = and_(trying, st.in_run[i], rules.allocation_fits(need, 0, st.free))
    if not rules.self_preemption_continues("fcfs" if c.fcfs else "priority", c.release):
        st.active = and_(st.active, not_(and_(trying, not_(ok))))  # self-preempted: the pass ends
    # What the clamps left of the drafts; the drafts are consumed
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025)).
    if spec:
        left = rules.num_scheduled_spec_tokens(n_i, st.C[i], s.num_tokens, st.P[i] if asy else 0)
        st.drafts[i] = ite(and_(ok, st.S[i] > 0, left > 0), min_(left, st.S[i]), st.drafts[i])  # spec_token_ids[:left]
        st.S[i] = ite(and_(ok, st.S[i] > 0), 0, st.S[i])
        st.prefill_scheduled = or_(st.prefill_scheduled, and_(ok, s.is_prefill_chunk))
    st.sched[i] = or_(st.sched[i], ok)
    st.n[i] = ite(ok, n_i, st.n[i])
    st.free = st.free - ite(ok, need, 0)
    st.blocks[i] = st.blocks[i] + ite(ok, need, 0)
    st.budget = st.budget - ite(ok, n_i, 0)


def grant(c: Config, owed: Int, C: Int, blocks: Int, budget: Int, thr: Int) -> tuple[Int, Int]:
    """A running request's turn: its grant from the owed tokens and the budget left, and the blocks it needs
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-857); `allocate_slots`). One home for the
    bounded pass (`_serve`) and the proofs for every N (`one_request.turn`)."""
    L = c.max_model_len
    n = rules.running_num_new_tokens(owed, thr, budget, L, C)
    return n, rules.num_blocks_to_allocate(rules.num_tokens_need_slot(C, n, 0, L), blocks, c.block_size)


def _preemption_round(
    pre: Pre, st: StepState, i: int, trying: Bool, need: Int, preempts: bool | None, victims: Victims
) -> None:
    """If slot i's blocks do not fit, pop this round's victim; with `preempts=False`, assume nobody is popped."""
    want = and_(trying, st.in_run[i], not_(rules.allocation_fits(need, 0, st.free)))
    victim = victims.this_round(pre, st)
    popped_now = and_(want, or_(*victim))
    if preempts is False:
        st.assume.append(not_(popped_now))
        return
    for j in range(len(pre.slots)):
        pop_slot(pre, st, j, and_(want, victim[j]), victims.after[j])
    st.pops = st.pops + ite(popped_now, 1, 0)


def pop_slot(pre: Pre, st: StepState, j: int, pop: Bool, after: PreemptedCounters) -> None:
    """Slot j, if `pop`: vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1812-1842), and its blocks freed."""
    c = pre.config
    if c.prefix_caching:  # only the blocks nobody else holds return to the free queue
        st.free, st.shared = release(st.free, st.shared, pop, st.blocks[j], pre.slots[j].shared_freed, st.inputs)
    else:
        st.free = st.free + ite(pop, st.blocks[j], 0)
    if not c.fcfs:  # PRIORITY refunds a victim already scheduled this step (Z1)
        st.budget = st.budget + ite(and_(pop, st.sched[j]), st.n[j], 0)
        st.sched[j] = and_(st.sched[j], not_(pop))
        st.n[j] = ite(pop, 0, st.n[j])
        if c.spec_decode:
            st.drafts[j] = ite(pop, 0, st.drafts[j])
    if c.spec_decode:  # _preempt_request drops the drafts
        st.S[j] = ite(pop, after.num_spec_tokens, st.S[j])
    if c.async_scheduling:  # ... and the placeholders; what is in flight for it turns stale
        st.P[j] = ite(pop, after.num_output_placeholders, st.P[j])
        st.stale[j] = or_(st.stale[j], and_(pop, after.num_stale_output_tokens))
    st.in_run[j] = and_(st.in_run[j], not_(pop))
    st.pop_seq[j] = ite(pop, st.pops, st.pop_seq[j])
    st.preempted[j] = or_(st.preempted[j], pop)
    st.blocks[j], st.C[j] = ite(pop, after.num_blocks, st.blocks[j]), ite(pop, after.num_computed_tokens, st.C[j])
