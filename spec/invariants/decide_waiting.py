"""The WAITING pass, turn by turn: each admission passed the whole test at its turn, and the pass stops at the first
that fails.

vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1049-1616). Only in a
step that preempted nobody (`waiting_pass_allowed`). The pass pops the queue
from its head while the token budget lasts and fewer than
`max_num_active_seqs` requests run. A preempted request whose output from
before the preemption is still in flight is passed over. For every other
head, in this order:

1. the prefix hit: the longest run of the request's block hashes that are
   cached, at most `(T - 1) // bs` blocks (`prefix-hit-exact`);
2. spec padding: a decode-like admission is padded to 1 + k tokens
   (`pads_spec_decode`), and the pass stops if 1 + k exceeds the budget;
3. the grant: `waiting_num_new_tokens` (T minus the hit, or the padding,
   clipped by the threshold); with chunked prefill off, the pass stops if it
   exceeds the budget; otherwise it is cut to the budget;
4. the blocks: with the full-sequence gate, the whole sequence must fit,
   then the slots for the grant; prefix-hit blocks nobody holds cost a free
   block each, and the watermark applies once anything runs.

The first head that fails any of these ends the pass: nobody behind it is
tried (head-of-line blocking, §9.A.5). So the admissions are exactly the
queue's prefix up to that head, less the passed-over ones
(`admission-exact`), each with exactly its grant (`grant-exact`).
"""

from __future__ import annotations

from ..rules import (
    admits_a_prefill,
    allocation_fits,
    lora_counts_every_running,
    lora_limit_skips,
    num_blocks_to_allocate,
    num_tokens_need_slot,
    padded_admission_breaks,
    pads_spec_decode,
    pause_admits_waiting,
    waiting_num_new_tokens,
    waiting_pass_allowed,
)
from .step_walk import ADMISSION, BLOCK_CHOICE, CONTROLS, GRAMMAR, GRANT, LORA, PREFILL, PREFIX_HIT, StepWalk


def _recorded_hit(w: StepWalk, rid: str, expected: list[int]) -> tuple[int, ...]:
    """The hit blocks the record gives an admitted request; a hit other than the cache's is flagged."""
    sh, bs = w.shadow, w.config.block_size
    data = w.new_reqs[rid]
    if not w.config.enable_prefix_caching:
        return ()
    got = data.block_ids[: data.num_computed_tokens // bs]
    if data.num_computed_tokens != len(expected) * bs:
        w.flag(
            PREFIX_HIT,
            f"{rid}'s prefix hit is {data.num_computed_tokens} tokens, but at its turn the cache holds "
            f"{len(expected)} blocks along its hashes (at most (T - 1) // bs): {len(expected) * bs} tokens",
        )
    hashes = sh.hashes(rid)
    for pos, b in enumerate(got):
        if pos >= len(hashes) or sh.hash_of.get(b) != hashes[pos]:
            w.flag(PREFIX_HIT, f"{rid}'s hit block {b} at position {pos} is not cached under its prefix's hash")
            break
        if pos < len(expected) and b != expected[pos]:
            w.flag(
                BLOCK_CHOICE,
                f"{rid}'s hit takes block {b} at position {pos}, but the first cached there is {expected[pos]}",
            )
            break
    return got


def walk_waiting_pass(w: StepWalk) -> None:
    c, sh, rows = w.config, w.shadow, w.rows
    bs, L, k = c.block_size, c.max_model_len, c.num_speculative_tokens
    if not waiting_pass_allowed(len(w.victims_recorded)):
        return  # admissions in a step that preempted: no-admission-after-preemption's
    if not pause_admits_waiting(w.pause_state):
        for rid, data in w.new_reqs.items():  # a pause admits only requests holding KV blocks: none in scope
            if rid in rows and rows[rid].pre_waiting:
                w.flag(CONTROLS, f"{rid} is admitted under {('', 'PAUSED_NEW', 'PAUSED_ALL')[w.pause_state]}")
                w.allocate(rid, data.block_ids[: data.num_computed_tokens // bs] if c.enable_prefix_caching else ())
        return
    num_running = len(w.running)
    any_running_scheduled = bool(w.scheduled_running)
    # The adapters of the running requests as the running pass left them, or before 0.33.0 of those it scheduled
    # (vLLM's `scheduled_loras`).
    holders = w.running if lora_counts_every_running(c.vllm_version) else list(w.scheduled_running)
    loras = {w.requests[rid].lora_int_id for rid in holders if w.requests[rid].lora_int_id > 0}
    admitted: set[str] = set()
    stop = ""
    for rid in w.waiting:
        r = rows[rid]
        if w.token_budget <= 0 or w.input_budget <= 0:
            stop = f"the pass ends before {rid}: the budget ran out"
            break
        if num_running >= c.max_num_active_reqs:
            stop = f"the pass ends before {rid}: {num_running} requests run (max_num_active_seqs)"
            break
        w.reached.add(rid)
        if r.pre_blocked:  # vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request
            if rid in w.new_reqs:
                w.flag(GRAMMAR, f"{rid} is admitted while its grammar has not compiled")
            if r.pre_grammar_failed:
                w.grammar_errors_found.append(rid)
            w.skipped.append(rid)
            continue
        if (
            r.pre_num_stale_output_tokens > 0 and rid not in w.dropping
        ):  # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1084-1089)
            if rid in w.new_reqs:
                w.flag(ADMISSION, f"{rid} is admitted while output from before its preemption is still in flight")
            w.skipped.append(rid)
            continue
        lora = w.requests[rid].lora_int_id
        if lora_limit_skips(lora, lora in loras, len(loras), c.max_loras):
            w.lora_skipped.add(rid)
            w.skipped.append(rid)
            if rid in w.new_reqs:
                w.flag(
                    LORA,
                    f"{rid} is admitted with adapter {lora} while {len(loras)} adapters run (max_loras {c.max_loras})",
                )
            continue
        T = r.pre_num_tokens
        expected = sh.lookup(rid, T)
        hit_blocks = _recorded_hit(w, rid, expected) if rid in w.new_reqs else tuple(expected)
        hit = len(hit_blocks) * bs if rid not in w.new_reqs else w.new_reqs[rid].num_computed_tokens
        if w.defer_prefills and admits_a_prefill(hit, T):
            if rid in w.new_reqs:
                w.flag(
                    PREFILL,
                    f"{rid} is admitted with {T - hit} tokens of prompt to compute in a step that defers prefills",
                )
            stop = f"the pass stops at {rid}: the step defers prefills"
            break
        budget = min(w.token_budget, w.input_budget)
        pad = pads_spec_decode(k, T - hit, w.prefill_scheduled, any_running_scheduled, hit, L, c.vllm_version)
        if padded_admission_breaks(pad, k, budget, hit, L, c.vllm_version):
            stop = (
                f"the pass stops at {rid}: its padded admission needs 1 + k = {1 + k} tokens ({budget} left) "
                f"at positions {hit}..{hit + k} (L = {L})"
            )
            break
        n: int = waiting_num_new_tokens(T, hit, w.threshold, 1 + k if pad else 0)
        if not c.enable_chunked_prefill and n > budget:
            stop = f"the pass stops at {rid}: chunked prefill is off and it needs {n} tokens, {budget} left"
            break
        n = min(n, budget)
        watermark = c.watermark_blocks if num_running > 0 else 0
        held, evictable = len(hit_blocks), sh.num_evictable(hit_blocks)
        if c.scheduler_reserve_full_isl:
            full = num_blocks_to_allocate(min(T, L), held, bs) + evictable
            if not allocation_fits(full, watermark, sh.num_free):
                stop = (
                    f"the pass stops at {rid}: its whole sequence needs {full} blocks and the watermark "
                    f"{watermark}, {sh.num_free} free"
                )
                break
        need = num_blocks_to_allocate(num_tokens_need_slot(hit, n, 0, L), held, bs) + evictable
        if not allocation_fits(need, watermark, sh.num_free):
            stop = f"the pass stops at {rid}: it needs {need} blocks and the watermark {watermark}, {sh.num_free} free"
            break
        if rid not in w.new_reqs:
            w.flag(
                ADMISSION,
                f"{rid} passes the whole admission test at its turn ({n} tokens of {budget} left, {need} blocks of "
                f"{sh.num_free} free), yet it is not admitted",
            )
            stop = f"the pass should have admitted {rid}"
            break
        granted = w.grants.get(rid, 0)
        if granted != n:
            w.flag(GRANT, f"{rid} is admitted with {granted} tokens, but at its turn the rules grant {n}")
        drafts = k if pad else 0
        if r.num_scheduled_spec != drafts:
            w.flag(GRANT, f"{rid} is admitted with {r.num_scheduled_spec} padding drafts, but the rules pad {drafts}")
        w.allocate(rid, hit_blocks)
        w.prefill_admitted |= bool(admits_a_prefill(hit, T))
        if c.max_loras is not None and lora:
            loras.add(lora)
        sh.register(rid, min(hit + granted, T))
        w.token_budget -= granted
        w.input_budget -= granted
        num_running += 1
        admitted.add(rid)
    for rid, data in w.new_reqs.items():
        if rid in w.reached and rows[rid].pre_blocked or rid in w.lora_skipped:
            continue  # flagged above: an admission past its grammar wait, or past max_loras
        if rid not in admitted and rid in rows and rows[rid].pre_waiting:
            if w.defer_prefills and admits_a_prefill(data.num_computed_tokens, rows[rid].pre_num_tokens):
                w.flag(PREFILL, f"{rid} is admitted with prompt to compute in a step that defers prefills")
            else:
                w.flag(ADMISSION, f"{rid} is admitted, but {stop or 'the pass never reaches it'}")
            # The shadow follows the engine: its blocks are taken all the same.
            w.allocate(rid, data.block_ids[: data.num_computed_tokens // bs] if c.enable_prefix_caching else ())
