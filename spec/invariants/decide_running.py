"""The RUNNING pass, turn by turn: each grant, each victim, and each request left out, against the rules.

vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037). The pass
visits `running` in order while the token budget lasts. At each turn:

* the async max-tokens skip (`async_max_tokens_reached`), the PP decode
  cadence (`decode_cadence_waits`: async with pipeline parallel), a prompt
  chunk in a step that defers prefills (`prefill_cadence.py`) or a grant of 0
  (`running_num_new_tokens`: owed tokens, the step's threshold, the budget
  left, the position bound) moves on to the next request (`continue`);
* otherwise the request is granted exactly that many tokens, and needs
  `num_blocks_to_allocate` more blocks. While they do not fit in the free
  blocks, the policy preempts: FCFS the tail of `running`, PRIORITY the
  first maximum of (priority, arrival) over all of `running`, scheduled this
  step or not (a scheduled victim's grant is withdrawn). No more victims
  than it takes: the allocation is retried after each. A request that is its
  own victim ends the pass under FCFS (it was the tail) and is passed over
  under PRIORITY (`continue`: §9.B);
* a request that got its blocks is scheduled, with the drafts the clamps
  leave (`num_scheduled_spec_tokens`).

So a running request owed tokens is left out only for a named reason: the
budget ran out before its turn, the skip rule, a grant of 0, it was a victim,
or the pass ended at a self-preemption. Anything else is a departure:
`running-work-conserving`, even in a step that preempted (the old
`running-served-while-budget-lasts` excuses every step that preempted, and
so missed a PRIORITY self-preemption that `break`s instead of continuing).
"""

from __future__ import annotations

from ..arith import lex_gt
from ..controls import PauseState
from ..rules import (
    allocation_fits,
    async_max_tokens_reached,
    decode_cadence_waits,
    effective_threshold,
    fcfs_victim_index,
    num_blocks_to_allocate,
    num_owed_tokens,
    num_scheduled_spec_tokens,
    num_tokens_need_slot,
    running_num_new_tokens,
    self_preemption_continues,
    victim_key,
)
from .step_walk import CADENCE, CONTROLS, GRANT, PREFILL, VICTIMS, WORK, StepWalk


def threshold(w: StepWalk) -> int:
    """The step's long-prefill threshold, fixed before either pass from the requests eligible at its start."""
    c = w.config
    eligible = sum(1 for r in w.view.rows if r.pre_running or r.pre_waiting)
    thr: int = effective_threshold(
        c.long_prefill_token_threshold,
        eligible,
        c.long_prefill_token_threshold_adaptive,
        c.max_num_batched_tokens,
        c.vllm_version,
    )
    return thr


def _victim(w: StepWalk, running: list[str]) -> tuple[str, str]:
    """The policy's victim among `running` as it stands, and why the rule picks it."""
    if w.config.policy == "fcfs":
        return running[fcfs_victim_index(len(running))], "FCFS preempts the tail of running"
    rows = w.rows
    best = running[0]
    for rid in running[1:]:  # Python's max: the first maximum in running order
        a, b = rows[rid], rows[best]
        if lex_gt(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival)):
            best = rid
    r = rows[best]
    return best, f"PRIORITY preempts the first maximum of (priority, arrival) = ({r.priority}, rank {r.arrival})"


def walk_running_pass(w: StepWalk) -> None:
    c, sh, rows = w.config, w.shadow, w.rows
    w.threshold = thr = threshold(w)
    bs, L = c.block_size, c.max_model_len
    running = w.running
    i = 0
    ended = "every running request had its turn"
    while i < len(running):
        if w.token_budget <= 0 or w.input_budget <= 0:
            ended = "the budget ran out"
            break
        rid = running[i]
        r = rows[rid]
        C, T, S, P = r.pre_num_computed_tokens, r.pre_num_tokens, r.pre_num_spec_tokens, r.pre_num_output_placeholders
        granted = w.grants.get(rid)
        if async_max_tokens_reached(P, C, r.num_prompt_tokens, r.max_tokens):
            if granted is not None:
                w.flag(
                    GRANT, f"{rid} is scheduled, but its step in flight already reaches max_tokens: the pass skips it"
                )
            i += 1
            continue
        eligible = w.decode_eligible.get(rid, 0)
        held_back = decode_cadence_waits(w.current_step, eligible)
        if held_back and granted is None:
            i += 1
            continue
        if held_back:  # flagged, then walked on with the engine's grant: the pool stays the engine's
            w.flag(
                CADENCE,
                f"{rid} is scheduled at schedule() {w.current_step}, fewer than {c.decode_stagger} calls after its "
                f"last decode: the PP decode cadence holds it until call {eligible}",
            )
        if w.defer_prefills and w.prefill_chunk.get(rid, False):
            if granted is None:
                i += 1
                continue
            w.flag(PREFILL, f"{rid} is scheduled its next prompt chunk in a step that defers prefills")
            held_back = True  # walked on with the engine's grant, as for the decode cadence
        owed = num_owed_tokens(T + S, P, C)
        budget = min(w.token_budget, w.input_budget)
        s = c.num_sampled_tokens_per_step
        n: int = running_num_new_tokens(owed, thr, budget, L, C, s)
        if n <= 0:
            if granted is not None:
                w.flag(GRANT, f"{rid} is scheduled {granted} tokens, but the rules grant it 0 at its turn")
            i += 1
            continue
        if granted is not None and granted != n and not held_back:
            w.flag(
                GRANT,
                f"{rid} is scheduled {granted} tokens, but at its turn the rules grant {n}: owed {owed}, "
                f"threshold {thr}, budget left {budget}, position bound L - C - {s} = {L - C - s}",
            )
        use = granted if granted is not None else n
        need: int = num_blocks_to_allocate(num_tokens_need_slot(C, use, 0, L), len(sh.held(rid)), bs)
        preempted_self = False
        while not allocation_fits(need, 0, sh.num_free):
            victim, why = _victim(w, running)
            at = running.index(victim)
            del running[at]
            if at < i:
                i -= 1
            refund = w.scheduled_running.pop(victim, None)
            if refund is not None:  # PRIORITY: a victim scheduled earlier in this step gives its grant back
                w.token_budget += refund
                w.input_budget += refund
            w.victims.append(victim)
            if victim not in w.victims_recorded:
                w.flag(
                    VICTIMS,
                    f"{rid} needs {need} blocks with {sh.num_free} free at its turn, so the rule preempts {victim} "
                    f"({why}), but the step does not",
                )
            sh.free(victim)
            if victim == rid:
                preempted_self = True
                break
        if preempted_self:
            if self_preemption_continues(c.policy, c.vllm_version):
                continue  # it removed itself: `i` already points at the next request
            ended = f"{rid} preempted itself"
            break
        if granted is None and rid not in w.victims_recorded:
            w.flag(
                WORK,
                f"{rid} is owed {owed} tokens and at its turn gets {n} ({budget} budget left, {need} blocks needed, "
                f"{sh.num_free} free), yet it is neither scheduled nor preempted",
            )
        if granted is not None:
            w.allocate(rid)
        else:  # withdrawn later as a PRIORITY victim (or wrongly left out): the rule's blocks
            sh.take_front(rid, need)
        sh.register(rid, min(min(C, L) + use, T))
        if granted is not None:
            x = num_scheduled_spec_tokens(use, C, T, P) if S > 0 else 0
            drafts = min(x, S) if x > 0 else 0
            if r.num_scheduled_spec != drafts:
                w.flag(GRANT, f"{rid} is scheduled {r.num_scheduled_spec} drafts, but the clamps leave {drafts}")
        w.prefill_scheduled |= w.prefill_chunk.get(rid, False)
        w.scheduled_running[rid] = use
        w.token_budget -= use
        w.input_budget -= use
        i += 1
    for rid in running[i:]:
        if rid in w.grants and w.pause_state == PauseState.PAUSED_ALL:
            w.flag(CONTROLS, f"{rid} is scheduled under PAUSED_ALL, which schedules nothing")
        if rid in w.grants:
            w.flag(GRANT, f"{rid} is scheduled after the running pass ended ({ended})")
            w.allocate(rid)  # the shadow follows the engine
    for rid in w.victims:
        if rid in w.grants and rid in w.victims_recorded:
            w.flag(GRANT, f"{rid} is preempted in this step, yet its withdrawn grant stays in the output")
    chosen = set(w.victims)
    for rid in sorted(w.victims_recorded):
        r_ = rows.get(rid)
        if rid not in chosen and r_ is not None and r_.pre_running:
            w.flag(VICTIMS, f"{rid} is preempted, but no allocation needed it: the rule preempts only until one fits")
