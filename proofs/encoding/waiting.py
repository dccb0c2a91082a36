"""The waiting pass of one step: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1049-1616), unrolled over N slots.

`waiting_pass` walks the queue as the running pass left it (the victims
prepended under FCFS, pushed into the heap under PRIORITY), one position at
a time; the slot at a position is selected by `sel`, a symbolic one-hot.
`size_admission` is the arithmetic of one admission:
vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1092-1346) and
vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (531-588) in vLLM's
order: the prefix-cache lookup (`Config.prefix_caching`), the spec-decode
padding and its budget break (`Config.spec_decode`), the
threshold, head-of-line blocking under no chunked prefill, the full-sequence
gate and the slot check. With both features off it builds exactly the terms
of the core encoding, in the same order, so the core formula is unchanged.
"""

from __future__ import annotations

from ...reference_impl import rules
from ...spec.arith import and_, implies, ite, min_, not_, or_
from .order import count, heap_before
from .prefix_caching import lookup_bounds
from .state import Bool, Config, Int, Pre, Slot, StepState


def waiting_pass(pre: Pre, st: StepState, thr: Int, preempts: bool | None = None) -> None:
    """Admit from `waiting`, in queue order, while every gate passes (`preempts` as in `step.step`).

    The queue after the running pass is the old one with the victims at its head (FCFS: the last victim first)
    or in the heap (PRIORITY); positions are counts of who precedes whom. With `preempts=True` the pass is
    dropped when `rules.waiting_pass_allowed` forbids it for every count of victims.
    """
    c, slots, N = pre.config, pre.slots, len(pre.slots)
    st.in_wait = [and_(not_(pre.running(j)), not_(st.preempted[j])) for j in range(N)]
    victims = count(st.preempted)
    if c.fcfs:  # victims at the head, the last one first; then the old waiting order
        st.wpos = [
            ite(
                st.preempted[j],
                count([and_(st.preempted[k], st.pop_seq[k] > st.pop_seq[j]) for k in range(N)]),
                victims + j - pre.num_running,
            )
            for j in range(N)
        ]
    else:  # the heap: (priority, arrival, slot) order among everyone waiting
        st.wpos = [
            count([and_(or_(st.in_wait[k], st.preempted[k]), heap_before(slots[k], slots[j])) for k in range(N)])
            for j in range(N)
        ]
    st.in_wait = [or_(st.in_wait[j], st.preempted[j]) for j in range(N)]
    st.admitted = [False] * N
    st.adm_pos = [0] * N
    num_run = count(st.in_run)
    go = rules.waiting_pass_allowed(victims)
    skip_waiting = preempts is True and not any(rules.waiting_pass_allowed(v) for v in range(1, N + 1))
    any_running_scheduled = or_(*st.sched) if c.spec_decode else False  # only the running pass has scheduled so far
    if preempts is True:
        st.assume.append(victims >= 1)
    for p in range(0 if skip_waiting else N):
        go, num_run = _admit(pre, st, p, go, num_run, thr, any_running_scheduled)


def _admit(
    pre: Pre, st: StepState, p: int, go: Bool, num_run: Int, thr: Int, any_running_scheduled: Bool
) -> tuple[Bool, Int]:
    """The request at position p of `waiting`: admitted if the pass goes on and it passes every gate.

    Returns whether the pass goes on to position p + 1, and how many run then.
    """
    c, slots, N = pre.config, pre.slots, len(pre.slots)
    sel = [and_(st.in_wait[j], st.wpos[j] == p) for j in range(N)]
    T = sum(ite(sel[j], slots[j].num_tokens, 0) for j in range(N))
    Cp = sum(ite(sel[j], st.C[j], 0) for j in range(N))
    held = sum(ite(sel[j], st.blocks[j], 0) for j in range(N))
    go = and_(go, or_(*sel), st.budget > 0, num_run < c.max_num_seqs)
    gates, n_p, need, (h, ev, hit, pad) = size_admission(
        c,
        slots,
        sel,
        T,
        Cp,
        held,
        st.free,
        st.budget,
        thr,
        num_run,
        st.prefill_scheduled,
        any_running_scheduled,
        st.inputs,
    )
    if c.async_scheduling:  # a request whose output from before its preemption is in flight is skipped
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1084-1089))
        held_back = or_(*[and_(sel[j], st.stale[j]) for j in range(N)])
        go, go_on = and_(go, not_(held_back), *gates), and_(go, held_back)
    else:
        go = and_(go, *gates)
    for j in range(N):
        a = and_(go, sel[j])
        st.admitted[j] = or_(st.admitted[j], a)
        st.adm_pos[j] = ite(a, num_run, st.adm_pos[j])
        st.in_run[j], st.in_wait[j] = or_(st.in_run[j], a), and_(st.in_wait[j], not_(a))
        st.sched[j] = or_(st.sched[j], a)
        st.n[j] = ite(a, n_p, st.n[j])
        if c.spec_decode:
            st.drafts[j] = ite(and_(a, pad), c.num_speculative_tokens, st.drafts[j])
        if c.prefix_caching:  # the table gains the hits and the new blocks; the free queue loses the new and evictable
            st.blocks[j] = st.blocks[j] + ite(a, need - ev + h, 0)
            st.C[j] = ite(a, hit, st.C[j])
        else:
            st.blocks[j] = st.blocks[j] + ite(a, need, 0)
            st.C[j] = ite(a, 0, st.C[j])
    st.free = st.free - ite(go, need, 0)
    st.budget = st.budget - ite(go, n_p, 0)
    if c.prefix_caching:  # hits on blocks another request holds are shared table entries
        st.shared = st.shared + ite(go, h - ev, 0)
    num_run = num_run + ite(go, 1, 0)
    if c.async_scheduling:  # a skipped request does not end the pass; the skipped keep their order at the head
        go = or_(go, go_on)
    return go, num_run


def size_admission(
    c: Config,
    slots: list[Slot],
    sel: list[Bool],
    T: Int,
    Cp: Int,
    held: Int,
    free: Int,
    budget: Int,
    thr: Int,
    num_run: Int,
    prefill_scheduled: Bool,
    any_running_scheduled: Bool,
    inputs: list[Bool],
) -> tuple[list[Bool], Int, Int, tuple[Int, Int, Int, Bool]]:
    """(gates, tokens, blocks taken from the free queue, (hit blocks, evictable, hit tokens, padded))."""
    L, bs, k, N = c.max_model_len, c.block_size, c.num_speculative_tokens, len(slots)
    gates: list[Bool] = []
    h: Int = 0
    ev: Int = 0
    hit: Int = 0
    pad: Bool = False
    if c.prefix_caching:  # get_computed_blocks: the hit becomes C (a waiting request holds nothing: Cp == held == 0)
        h, ev = (sum(ite(sel[j], getattr(slots[j], f), 0) for j in range(N)) for f in ("hit_blocks", "evictable"))
        hit = h * bs
        inputs += lookup_bounds(or_(*sel), T, h, ev, free, bs)
    if c.spec_decode:  # a decode-like admission is padded to 1 + k, or the pass breaks
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1311-1330))
        pad = rules.pads_spec_decode(
            k, T - hit if c.prefix_caching else T, prefill_scheduled, any_running_scheduled, hit, L, c.release
        )
        gates.append(not_(rules.padded_admission_breaks(pad, k, budget, hit, L, c.release)))
        n_p = rules.waiting_num_new_tokens(T, hit, thr, ite(pad, 1 + k, 0))
    else:
        n_p = rules.waiting_num_new_tokens(T, hit, thr)
    hol = and_(not_(c.enable_chunked_prefill), n_p > budget)
    n_p = min_(n_p, budget)
    wm = ite(num_run > 0, c.watermark_blocks, 0)
    if c.prefix_caching:  # allocate_slots: the hit blocks count as held; an evictable one costs a free block too
        full = rules.num_blocks_to_allocate(min_(T, L), held + h, bs) + ev
        need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(Cp + hit, n_p, 0, L), held + h, bs) + ev
    else:
        full = rules.num_blocks_to_allocate(min_(T, L), held, bs)
        need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(Cp, n_p, 0, L), held, bs)
    gates += [
        not_(hol),
        implies(c.scheduler_reserve_full_isl, rules.allocation_fits(full, wm, free)),
        rules.allocation_fits(need, wm, free),
    ]
    return gates, n_p, need, (h, ev, hit, pad)
