"""The size of one waiting-pass admission: the tokens it gets, the blocks it takes, and the gates it must pass.

`encoding.step` calls this for each position of the waiting pass, with the
slot at that position selected by `sel`. It is the arithmetic of
vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1092-1346) and
vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (531-588) in vLLM's
order: the prefix-cache lookup (`Config.prefix_caching`), the spec-decode
padding and its budget break (`Config.spec_decode`), the
threshold, head-of-line blocking under no chunked prefill, the full-sequence
gate and the slot check. With both features off it builds exactly the terms
of the core encoding, in the same order, so the core formula is unchanged.
"""

from __future__ import annotations

from typing import Any

from ..reference_impl import rules
from ..spec.arith import and_, implies, ite, min_, not_, or_
from .encoding_caching import lookup_bounds

Int = Any


def size_admission(
    c: Any,
    slots: list[Any],
    sel: list[Any],
    T: Int,
    Cp: Int,
    held: Int,
    free: Int,
    budget: Int,
    thr: Int,
    num_run: Int,
    prefill_scheduled: Any,
    any_running_scheduled: Any,
    inputs: list[Any],
) -> tuple[list[Any], Int, Int, tuple[Int, Int, Int, Any]]:
    """(gates, tokens, blocks taken from the free queue, (hit blocks, evictable, hit tokens, padded))."""
    L, bs, k, N = c.max_model_len, c.block_size, c.num_speculative_tokens, len(slots)
    gates: list[Any] = []
    h: Int = 0
    ev: Int = 0
    hit: Int = 0
    pad: Any = False
    if c.prefix_caching:  # get_computed_blocks: the hit becomes C (a waiting request holds nothing: Cp == held == 0)
        h, ev = (sum(ite(sel[j], getattr(slots[j], f), 0) for j in range(N)) for f in ("hit_blocks", "evictable"))
        hit = h * bs
        inputs += lookup_bounds(or_(*sel), T, h, ev, free, bs)
    if c.spec_decode:  # a decode-like admission is padded to 1 + k, or the pass breaks
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1311-1330))
        pad = rules.pads_spec_decode(
            k, T - hit if c.prefix_caching else T, prefill_scheduled, any_running_scheduled, hit, L
        )
        gates.append(not_(and_(pad, 1 + k > budget)))
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
