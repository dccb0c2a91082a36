"""One `schedule()` plus `update_from_output()` over N request slots, as a formula.

The same function runs on two kinds of values. With Z3 terms it builds the
transition relation that `prove.py` checks invariants against; with Python
ints it computes one concrete step, which `tests/unit/test_encoding_drift.py`
compares with the reference's step on thousands of states (no drift). All
arithmetic and every decision that a mutant may plant a bug in is a call to
`reference_impl.rules`, so a bug is written once and reaches both. The rules
the monitors and the torch engine need as well (the PRIORITY victim key, the
heap order, what a preemption resets, the owed count) come from `spec.rules`.

Abstractions, each compared through in the drift test:

* Block ids become counts: a request holds `blocks` blocks and the pool has
  `free` free ones. Which ids are free is not modelled; that is what the
  concrete monitors check (`block-conservation`'s id part).
* The state is canonical: slots `0 .. num_running-1` are `running` in order,
  the rest are `waiting` in order (symmetry reduction: any state is a
  permutation of a canonical one). Queue positions after the step are
  computed as counts of who precedes whom.
* Synchronous engine, core scope by default: no drafts, no placeholders, no
  prefix hits, `max_num_scheduled_tokens` unset. The sampled token of a
  request that completes its prefill is abstract: two free booleans say
  whether it is the EOS or a stop token. Sync spec decode and prefix caching
  are behind the concrete flags `Config.spec_decode` and
  `Config.prefix_caching` (encoding_spec.py, encoding_caching.py,
  encoding_waiting.py), and async scheduling, the engine loop's
  schedule-then-absorb step, behind `Config.async_scheduling`
  (encoding_async.py); with all three off the formula is the core one, term
  for term.
* Under PRIORITY the waiting slots are sorted by (priority, arrival, id), as
  vLLM's heap pops them; `id_rank` stands for the request id's string order.

The running pass is unrolled over slots with symbolic guards; a preemption
round picks its victim by position (`rules.fcfs_victim_index`) or by the
priority key, so FCFS and PRIORITY share the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..reference_impl import rules
from ..spec.arith import and_, ite, lex_eq, lex_gt, lex_lt, min_, not_, or_, plus
from ..spec.rules import heap_key, num_owed_tokens, preempted_counters, victim_key
from .encoding_async import after_schedule
from .encoding_caching import release
from .encoding_spec import sample
from .encoding_state import Bool, Config, Int, Post, Pre, Slot
from .encoding_waiting import size_admission

__all__ = ["Config", "Post", "Pre", "Slot", "STATE", "heap_before", "step"]


def _count(flags) -> Int:
    total: Any = 0
    for f in flags:
        total = total + ite(f, 1, 0)
    return total


def _key_gt(a: Slot, b: Slot) -> Bool:
    """`a`'s victim key (`spec.rules.victim_key`) is strictly larger: PRIORITY preempts `a` before `b`.
    A slot's `arrival` is the rank of its arrival time, which orders the keys as the times do."""
    return lex_gt(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival))


def _key_eq(a: Slot, b: Slot) -> Bool:
    return lex_eq(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival))


def heap_before(a: Slot, b: Slot) -> Bool:
    """`a` pops first from the PRIORITY heap (`spec.rules.heap_key`, with the id's rank for the id)."""
    return lex_lt(heap_key(a.priority, a.arrival, a.id_rank), heap_key(b.priority, b.arrival, b.id_rank))


STATE = ("in_run", "sched", "n", "preempted", "pop_seq", "C", "blocks", "free", "budget", "pops", "active")


def step(
    pre: Pre, preempts: bool | None = None, cut: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
) -> Post:
    """The step; `preempts` selects one case of it, `cut` lets `proofs/cuts.py` cut the running pass.

    `preempts=False` is the case where the running pass pops nobody: one round per slot, assumed not to
    pop (then no later round would either). `preempts=True` is the case where it pops somebody: the waiting
    pass is dropped when `rules.waiting_pass_allowed` forbids it for every count of victims. Each case adds
    its assumption to `Post.assume`; the two cases cover every step, and each is exact within its case.
    `cut(i, state)` may replace the running pass's state (`STATE`): it is called before slot i (i = N: after
    the pass), and before and after each of slot i's preemption rounds, then with its `n_i` and `trying`.
    """
    c, slots, N = pre.config, pre.slots, len(pre.slots)
    L, bs = c.max_model_len, c.block_size
    in_run = [pre.running(i) for i in range(N)]
    sched, n = [False] * N, [0] * N
    preempted = [False] * N
    pop_seq = [0] * N  # order of preemption: FCFS prepends, so the last victim ends up first
    C = [s.num_computed_tokens for s in slots]
    blocks = [s.num_blocks for s in slots]
    free, budget, pops = pre.num_free_blocks, c.token_budget, 0
    spec, k, cache, asy = c.spec_decode, c.num_speculative_tokens, c.prefix_caching, c.async_scheduling
    P = [s.num_output_placeholders for s in slots]  # async: placeholders; 0 otherwise
    stale = [False] * N  # async: preempted in this step with the older step in flight
    shared, inputs = pre.num_shared_refs, []
    S, drafts, prefill_scheduled = [s.num_spec_tokens for s in slots], [0] * N, False
    eligible = N  # every slot is a live request, running or waiting
    thr = ite(
        c.adaptive,
        rules.effective_threshold(c.long_prefill_token_threshold, eligible, True, c.token_budget),
        rules.effective_threshold(c.long_prefill_token_threshold, eligible, False, c.token_budget),
    )

    # ---- RUNNING pass ----
    # When the victim rule picks the last of k running requests for every k that can occur here (the
    # unmutated rule does), the victim is simply the last slot still running.
    victim_is_tail = all(rules.fcfs_victim_index(k) == k - 1 for k in range(1, N + 1))
    # PRIORITY always takes the first maximum of (priority, arrival) among those still running, and nothing
    # joins `running` during this pass, so the victims come in one fixed order: the k-th victim of the step
    # is the request ranked k by `_first_max` applied repeatedly. Ranking once costs O(N^2), not O(N^4).
    # What `_preempt_request` leaves in each slot's counters, should it be a victim (`spec.rules`). The encoding
    # tracks only whether a step in flight holds the request, and stale output takes that over unchanged.
    after = [preempted_counters(s.in_flight, 0, False, 0) for s in slots]
    victim_rank = [
        _count(
            [
                and_(pre.running(k), or_(_key_gt(slots[k], slots[j]), and_(_key_eq(slots[k], slots[j]), k < j)))
                for k in range(N)
                if k != j
            ]
        )
        for j in range(N)
    ]
    active = True
    assume: list[Any] = []

    def at_cut(i: int, **local: Any) -> None:
        nonlocal in_run, sched, n, preempted, pop_seq, C, blocks, free, budget, pops, active
        if cut is not None:
            state = cut(
                i,
                dict(
                    zip(STATE, (in_run, sched, n, preempted, pop_seq, C, blocks, free, budget, pops, active)),
                    victim_rank=victim_rank,
                    **local,
                ),
            )
            in_run, sched, n, preempted, pop_seq, C, blocks, free, budget, pops, active = (state[k] for k in STATE)

    for i in range(N + 1):
        if i > 0:
            at_cut(i)
        if i == N:
            break
        active = and_(active, budget > 0)
        s = slots[i]
        owed = num_owed_tokens(plus(s.num_tokens, S[i] if spec else 0), P[i] if asy else 0, C[i])
        n_i = rules.running_num_new_tokens(owed, thr, budget, L, C[i])
        trying = and_(active, in_run[i], n_i > 0)  # n == 0: `continue`
        # The step in flight already reaches max_tokens: `continue`
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814)).
        if asy:
            trying = and_(trying, not_(rules.async_max_tokens_reached(P[i], C[i], s.num_prompt_tokens, s.max_tokens)))
        need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(C[i], n_i, 0, L), blocks[i], bs)
        for _ in range(
            1 if preempts is False else N - i if c.fcfs else N
        ):  # each round preempts one victim until `need` fits or i is gone
            at_cut(i, n_i=n_i, trying=trying)
            want = and_(trying, in_run[i], not_(rules.allocation_fits(need, 0, free)))
            if c.fcfs and not victim_is_tail:
                position = [_count(in_run[:j]) for j in range(N)]
                victim_index = rules.fcfs_victim_index(_count(in_run))
            # Choose this round's victim from the state at the start of the round, then pop exactly it.
            if not c.fcfs:
                victim = [and_(in_run[j], victim_rank[j] == pops) for j in range(N)]
            elif victim_is_tail:  # only the tail is ever popped, so the running list is [0, num_running - pops)
                victim = [and_(in_run[j], j == pre.num_running - 1 - pops) for j in range(N)]
            else:
                victim = [and_(in_run[j], position[j] == victim_index) for j in range(N)]
            popped_now = and_(want, or_(*victim))
            if (
                preempts is False
            ):  # the case where nothing is preempted: the first round pops nobody, nor would the rest
                assume.append(not_(popped_now))
                break
            for j in range(N):
                pop = and_(want, victim[j])
                if cache:  # only the blocks nobody else holds return to the free queue
                    free, shared = release(free, shared, pop, blocks[j], slots[j].shared_freed, inputs)
                else:
                    free = free + ite(pop, blocks[j], 0)
                if not c.fcfs:  # PRIORITY refunds a victim already scheduled this step (Z1)
                    budget = budget + ite(and_(pop, sched[j]), n[j], 0)
                    sched[j] = and_(sched[j], not_(pop))
                    n[j] = ite(pop, 0, n[j])
                    if spec:
                        drafts[j] = ite(pop, 0, drafts[j])
                if spec:  # _preempt_request drops the drafts
                    S[j] = ite(pop, after[j].num_spec_tokens, S[j])
                if asy:  # ... and the placeholders; what is in flight for it turns stale
                    P[j] = ite(pop, after[j].num_output_placeholders, P[j])
                    stale[j] = or_(stale[j], and_(pop, after[j].num_stale_output_tokens))
                in_run[j] = and_(in_run[j], not_(pop))
                pop_seq[j] = ite(pop, pops, pop_seq[j])
                preempted[j] = or_(preempted[j], pop)
                blocks[j], C[j] = ite(pop, after[j].num_blocks, blocks[j]), ite(pop, after[j].num_computed_tokens, C[j])
            pops = pops + ite(popped_now, 1, 0)
        at_cut(i, n_i=n_i, trying=trying)
        ok = and_(trying, in_run[i], rules.allocation_fits(need, 0, free))
        if c.fcfs:
            active = and_(active, not_(and_(trying, not_(ok))))  # self-preempted: the pass ends
        # What the clamps left of the drafts; the drafts are consumed
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025)).
        if spec:
            left = rules.num_scheduled_spec_tokens(n_i, C[i], s.num_tokens, P[i] if asy else 0)
            drafts[i] = ite(and_(ok, S[i] > 0, left > 0), min_(left, S[i]), drafts[i])  # spec_token_ids[:left]
            S[i] = ite(and_(ok, S[i] > 0), 0, S[i])
            prefill_scheduled = or_(prefill_scheduled, and_(ok, s.is_prefill_chunk))
        sched[i] = or_(sched[i], ok)
        n[i] = ite(ok, n_i, n[i])
        free = free - ite(ok, need, 0)
        blocks[i] = blocks[i] + ite(ok, need, 0)
        budget = budget - ite(ok, n_i, 0)

    # ---- WAITING pass ----
    in_wait = [and_(not_(pre.running(j)), not_(preempted[j])) for j in range(N)]
    victims = _count(preempted)
    if c.fcfs:  # victims at the head, the last one first; then the old waiting order
        wpos = [
            ite(
                preempted[j],
                _count([and_(preempted[k], pop_seq[k] > pop_seq[j]) for k in range(N)]),
                victims + j - pre.num_running,
            )
            for j in range(N)
        ]
    else:  # the heap: (priority, arrival, slot) order among everyone waiting
        wpos = [
            _count([and_(or_(in_wait[k], preempted[k]), heap_before(slots[k], slots[j])) for k in range(N)])
            for j in range(N)
        ]
    in_wait = [or_(in_wait[j], preempted[j]) for j in range(N)]
    admitted = [False] * N
    adm_pos = [0] * N
    num_run = _count(in_run)
    go = rules.waiting_pass_allowed(victims)
    skip_waiting = preempts is True and not any(rules.waiting_pass_allowed(v) for v in range(1, N + 1))
    any_running_scheduled = or_(*sched) if spec else False  # only the running pass has scheduled so far
    if preempts is True:
        assume.append(victims >= 1)
    for p in range(0 if skip_waiting else N):
        sel = [and_(in_wait[j], wpos[j] == p) for j in range(N)]
        T = sum(ite(sel[j], slots[j].num_tokens, 0) for j in range(N))
        Cp = sum(ite(sel[j], C[j], 0) for j in range(N))
        held = sum(ite(sel[j], blocks[j], 0) for j in range(N))
        go = and_(go, or_(*sel), budget > 0, num_run < c.max_num_seqs)
        gates, n_p, need, (h, ev, hit, pad) = size_admission(
            c, slots, sel, T, Cp, held, free, budget, thr, num_run, prefill_scheduled, any_running_scheduled, inputs
        )
        if asy:  # a request whose output from before its preemption is in flight is skipped
            # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1084-1089))
            held_back = or_(*[and_(sel[j], stale[j]) for j in range(N)])
            go, go_on = and_(go, not_(held_back), *gates), and_(go, held_back)
        else:
            go = and_(go, *gates)
        for j in range(N):
            a = and_(go, sel[j])
            admitted[j] = or_(admitted[j], a)
            adm_pos[j] = ite(a, num_run, adm_pos[j])
            in_run[j], in_wait[j] = or_(in_run[j], a), and_(in_wait[j], not_(a))
            sched[j] = or_(sched[j], a)
            n[j] = ite(a, n_p, n[j])
            if spec:
                drafts[j] = ite(and_(a, pad), k, drafts[j])
            if cache:  # the table gains the hits and the new blocks; the free queue loses the new and evictable
                blocks[j] = blocks[j] + ite(a, need - ev + h, 0)
                C[j] = ite(a, hit, C[j])
            else:
                blocks[j] = blocks[j] + ite(a, need, 0)
                C[j] = ite(a, 0, C[j])
        free = free - ite(go, need, 0)
        budget = budget - ite(go, n_p, 0)
        if cache:  # hits on blocks another request holds are shared table entries
            shared = shared + ite(go, h - ev, 0)
        num_run = num_run + ite(go, 1, 0)
        if asy:  # a skipped request does not end the pass; the skipped keep their order at the head
            go = or_(go, go_on)

    # ---- _update_after_schedule, then update_from_output with the fake model ----
    post = Post(admitted=admitted, preempted=preempted, assume=assume)
    for j, s in enumerate(slots):
        C[j] = C[j] + ite(sched[j], n[j], 0)
        sampled = and_(sched[j], C[j] >= s.num_tokens)  # not a partial prefill chunk
        if asy:  # the AsyncScheduler increment, then the older step's output (encoding_async.py)
            got = after_schedule(s, C[j], P[j], S[j], sched[j], n[j], drafts[j], stale[j], L, k, spec)
            C[j], T, done, kind = got["C"], got["T"], got["done"], got["kind"]
            post.inputs += got["inputs"]
            post.num_scheduled_spec.append(drafts[j])
            post.num_spec_tokens.append(got["S"])
            post.num_output_placeholders.append(got["P"])
            for f in ("in_flight", "in_flight_num_scheduled", "in_flight_num_drafts", "in_flight_placeholders"):
                getattr(post, f).append(got[f])
        elif spec:
            got = sample(s, C[j], drafts[j], sampled, L, k)
            C[j], T, done, kind = got["C"], got["T"], got["done"], got["kind"]
            post.inputs += got["inputs"]
            post.num_scheduled_spec.append(drafts[j])
            # update_draft_token_ids: a new proposal for who sampled and runs; a scheduled request's were consumed
            post.num_spec_tokens.append(
                ite(and_(sampled, in_run[j], not_(done)), s.num_new_drafts, ite(sched[j], 0, S[j]))
            )
        else:
            T = s.num_tokens + ite(sampled, 1, 0)
            kind = rules.stop_kind(
                s.samples_eos,
                s.samples_stop,
                T,
                s.num_output_tokens + ite(sampled, 1, 0),
                L,
                s.max_tokens,
                s.min_tokens,
            )
            done = and_(sampled, kind != rules.NOT_STOPPED)
        if cache:  # a request preempted in this step holds nothing, and released its blocks then
            gone = and_(done, not_(preempted[j])) if asy else done
            free, shared = release(free, shared, gone, blocks[j], s.shared_freed, inputs)
            post.num_hit_tokens.append(s.hit_blocks * bs)
        else:
            free = free + ite(done, blocks[j], 0)
        post.scheduled.append(sched[j])
        post.num_scheduled.append(ite(sched[j], n[j], 0))
        post.finished.append(done)
        post.sampled_stop.append(got["stop_seen"] if spec or asy else and_(sampled, or_(s.samples_eos, s.samples_stop)))
        post.finished_stopped.append(and_(done, kind == rules.STOPPED))
        post.running.append(and_(in_run[j], not_(done)))
        post.waiting.append(and_(in_wait[j], not_(done)))
        post.num_computed_tokens.append(C[j])
        post.num_tokens.append(T)
        post.num_blocks.append(ite(done, 0, blocks[j]))
    run_order = [ite(admitted[j], N + adm_pos[j], j) for j in range(N)]
    post.run_pos = [
        ite(post.running[j], _count([and_(post.running[k], run_order[k] < run_order[j]) for k in range(N)]), -1)
        for j in range(N)
    ]
    post.wait_pos = [
        ite(post.waiting[j], _count([and_(post.waiting[k], wpos[k] < wpos[j]) for k in range(N)]), -1) for j in range(N)
    ]
    post.num_free_blocks = free
    post.num_shared_refs = shared
    post.inputs += inputs
    return post
