"""The invariant catalogue: each rule of vLLM 0.33.0 that must hold at every step, stated once.

Each `Invariant` has a name, one sentence, the place in vLLM 0.33.0 that
makes it hold, the semantics doc (I-n) and bug-zoo ids it answers to, and a
predicate over a `StepView`. The predicates use `spec.arith` instead of
`min`, `if` and `and`, so the same function checks a concrete trace and
builds the Z3 formula that `proofs/` proves inductive.

The user's four come first: non-negative owed tokens, budget conservation,
no starvation after prepend, and no waiting admission in a step that
preempted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..arith import and_, cdiv, implies, is_symbolic, ite, maybe, min_, not_, or_
from .views import Row, StepView


@dataclass(frozen=True)
class Invariant:
    name: str
    sentence: str
    vllm: str  # where vLLM 0.33.0 makes it hold
    ids: tuple[str, ...]  # semantics-doc invariants and bug-zoo catalogue ids
    holds: Callable[[StepView], Any]
    # A state invariant reads only the state after the step, so it also holds of one state on its own
    # (the degenerate view, where nothing is scheduled): it is what induction assumes and must re-establish.
    state: bool = False


def maybe_symbolic(r: Row) -> bool:
    return is_symbolic(r.pre_wait_pos) or is_symbolic(r.post_wait_pos) or is_symbolic(r.pre_waiting)


def _all(xs) -> Any:
    return and_(*xs) if xs else True


def _sum(xs) -> Any:
    total: Any = 0
    for x in xs:
        total = total + x
    return total


def owed_nonnegative(v: StepView) -> Any:
    return _all([implies(r.post_live, r.post_num_tokens + r.post_num_spec_tokens + r.post_num_output_placeholders
                         - r.post_num_computed_tokens >= 0) for r in v.rows])


def budget_conservation(v: StepView) -> Any:
    # sum + remaining == budget holds by definition of remaining; what can break is remaining >= 0 and n > 0.
    return and_(_sum([r.num_scheduled for r in v.rows]) <= v.token_budget,
                _all([implies(r.scheduled, and_(r.num_scheduled > 0, r.pre_live)) for r in v.rows]))


def no_starvation_after_prepend(v: StepView) -> Any:
    rules = []
    for r in v.rows:
        if not (maybe(r.preempted) or maybe(r.pre_preempted)):
            continue
        # A request preempted now is waiting afterwards, ahead of everything not preempted now (FCFS).
        if v.fcfs:
            rules.append(implies(and_(r.preempted, r.post_live), and_(r.post_waiting, _all([
                implies(and_(q.post_waiting, not_(q.preempted)), r.post_wait_pos < q.post_wait_pos)
                for q in v.rows if q is not r]))))
        # Nobody behind a waiting preempted request is admitted before it.
        rules.append(_all([
            implies(and_(r.pre_preempted, q.pre_waiting, r.pre_wait_pos < q.pre_wait_pos, q.admitted), r.admitted)
            for q in v.rows if q is not r]))
    return _all(rules)


def no_admission_after_preemption(v: StepView) -> Any:
    any_preempted = or_(*[r.preempted for r in v.rows]) if v.rows else False
    return implies(any_preempted, _all([not_(r.admitted) for r in v.rows]))


def seqs_limit(v: StepView) -> Any:
    return and_(_sum([ite(r.post_running, 1, 0) for r in v.rows]) <= v.max_num_seqs,
                _sum([ite(r.num_scheduled > 0, 1, 0) for r in v.rows]) <= v.max_num_seqs)


def scheduled_subset_running(v: StepView) -> Any:
    return _all([and_(implies(r.num_scheduled > 0, or_(r.post_running, not_(r.post_live))),
                      implies(r.preempted, r.num_scheduled == 0)) for r in v.rows])


def block_conservation(v: StepView) -> Any:
    held = _sum([ite(r.post_live, r.post_num_blocks, 0) for r in v.rows])
    return and_(v.post_num_free_blocks + held == v.num_usable_blocks, v.post_num_free_blocks >= 0, v.ids_consistent)


def blocks_match_tokens(v: StepView) -> Any:
    return _all([implies(r.post_running, r.post_num_blocks == cdiv(min_(r.post_num_computed_tokens, v.max_model_len), v.block_size))
                 for r in v.rows])


def waiting_holds_nothing(v: StepView) -> Any:
    return _all([implies(r.post_waiting, and_(r.post_num_computed_tokens == 0, r.post_num_blocks == 0)) for r in v.rows])


def one_place(v: StepView) -> Any:
    return _all([and_(r.post_live == or_(r.post_running, r.post_waiting), not_(and_(r.post_running, r.post_waiting)),
                      r.post_running == (r.post_run_pos >= 0), r.post_waiting == (r.post_wait_pos >= 0))
                 for r in v.rows])


def token_bounds(v: StepView) -> Any:
    return _all([implies(r.post_live, and_(r.post_num_computed_tokens >= 0,
                                           r.post_num_computed_tokens <= v.max_model_len - 1,
                                           r.post_num_tokens < v.max_model_len,
                                           r.post_num_tokens - r.num_prompt_tokens < r.max_tokens))
                 for r in v.rows])


def chunk_bounds(v: StepView) -> Any:
    # Running requests stop at position L - 1; the threshold caps any chunk unless the request was alone
    # (the adaptive threshold can only be larger, so it is not checked here).
    alone = _sum([ite(r.pre_live, 1, 0) for r in v.rows]) <= 1
    thr = v.long_prefill_token_threshold
    capped = and_(thr > 0, not_(alone), not_(v.threshold_adaptive))
    return _all([and_(implies(and_(r.pre_running, r.num_scheduled > 0),
                              r.pre_num_computed_tokens + r.num_scheduled <= v.max_model_len - 1),
                      implies(capped, r.num_scheduled <= thr))
                 for r in v.rows])


def fcfs_victim_is_latest(v: StepView) -> Any:
    if not v.fcfs:
        return True
    # Victims are popped from the tail: nobody after a victim in the old running order survives.
    return _all([implies(and_(r.preempted, q.pre_running, q.pre_run_pos > r.pre_run_pos), q.preempted)
                 for r in v.rows if maybe(r.preempted) for q in v.rows if q is not r])


def priority_victim_is_least_important(v: StepView) -> Any:
    if v.fcfs:
        return True

    def key_ge(a: Row, b: Row) -> Any:
        return or_(a.priority > b.priority, and_(a.priority == b.priority, a.arrival >= b.arrival))

    return _all([implies(and_(r.preempted, q.post_running), key_ge(r, q))
                 for r in v.rows if maybe(r.preempted) for q in v.rows if q is not r])


def skipped_keep_order(v: StepView) -> Any:
    # Adjacent pairs of survivors suffice for concrete rows; Z3 gets every pair.
    kept = [r for r in v.rows if maybe(and_(r.pre_waiting, r.post_waiting))]
    if not any(map(maybe_symbolic, kept)):
        kept.sort(key=lambda r: r.pre_wait_pos)
        return _all([a.post_wait_pos < b.post_wait_pos for a, b in zip(kept, kept[1:])])
    return _all([implies(and_(r.pre_waiting, q.pre_waiting, r.post_waiting, q.post_waiting,
                              r.pre_wait_pos < q.pre_wait_pos), r.post_wait_pos < q.post_wait_pos)
                 for r in kept for q in kept if q is not r])


def progress_when_idle(v: StepView) -> Any:
    # Nothing running and the head of waiting fits whole: the step must schedule something. Only the head:
    # admission stops at a head that does not fit (head-of-line blocking), even if a later request would.
    nothing_running = _all([not_(r.pre_running) for r in v.rows])
    fits = or_(*[and_(r.pre_wait_pos == 0, cdiv(min_(r.pre_num_tokens, v.max_model_len), v.block_size) <= v.pre_num_free_blocks)
                 for r in v.rows]) if v.rows else False
    return implies(and_(nothing_running, fits), _sum([r.num_scheduled for r in v.rows]) > 0)


def stop_token_finishes(v: StepView) -> Any:
    # EOS and stop tokens are checked before the length caps, and finish even below min_tokens.
    return _all([implies(r.sampled_stop, and_(not_(r.post_live), r.finished_stopped)) for r in v.rows])


def running_owes_tokens(v: StepView) -> Any:
    # After a synchronous step, every running request owes the next decode or prefill chunk.
    return _all([implies(r.post_running, r.post_num_tokens + r.post_num_spec_tokens + r.post_num_output_placeholders
                         - r.post_num_computed_tokens >= 1) for r in v.rows])


def running_served_while_budget_lasts(v: StepView) -> Any:
    # A running request left unscheduled although budget remained and nobody was preempted owed nothing.
    total = _sum([r.num_scheduled for r in v.rows])
    any_preempted = or_(*[r.preempted for r in v.rows]) if v.rows else False
    return _all([implies(and_(r.pre_running, r.num_scheduled == 0, total < v.token_budget, not_(any_preempted)),
                         r.pre_num_tokens - r.pre_num_computed_tokens <= 0) for r in v.rows])


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("owed-nonnegative", "Every live request is owed num_tokens_with_spec + num_output_placeholders - num_computed_tokens >= 0 tokens.",
              "scheduler.py:839-856 (every clamp is a min with the owed count); :2361-2364, :2767-2769", ("I-14", "OWED"), owed_nonnegative, state=True),
    Invariant("budget-conservation", "The scheduled tokens sum to at most the token budget (the remaining budget stays >= 0), and only live requests are scheduled.",
              "scheduler.py:847-849, :1346, asserts :1620, :1631", ("I-1", "I-24", "BUDGET"), budget_conservation),
    Invariant("no-starvation-after-prepend", "A preempted request goes to the head of waiting (FCFS), and no request behind a preempted one is admitted before it.",
              "scheduler.py:1840 (prepend_request), request_queue.py:95", ("I-7", "RESUME"), no_starvation_after_prepend),
    Invariant("no-admission-after-preemption", "A step that preempted admits no waiting request.",
              "scheduler.py:1050", ("I-6", "NOPREEMPT-ADMIT"), no_admission_after_preemption),
    Invariant("seqs-limit", "At most max_num_seqs requests run, and at most that many are scheduled.",
              "scheduler.py:1071-1074, assert :1633", ("I-3", "SEQS"), seqs_limit, state=True),
    Invariant("scheduled-subset-running", "Every scheduled request is running after the step; a preempted request has no tokens in it.",
              "scheduler.py:950-966 (refund), assert :1637-1639", ("I-4", "SUBSET"), scheduled_subset_running),
    Invariant("block-conservation", "Free blocks plus held blocks equal the usable blocks; no block is held twice or free twice.",
              "block_pool.py:706-740, :816-849; kv_cache_manager.py:582-587", ("I-10", "CONSERVE", "ATOMIC"), block_conservation, state=True),
    Invariant("blocks-match-tokens", "A running request holds exactly the blocks its computed tokens need: ceil(min(C, L) / block_size).",
              "kv_cache_manager.py:550-553, single_type_kv_cache_manager.py:229-236", ("I-11", "CONSERVE"), blocks_match_tokens, state=True),
    Invariant("waiting-holds-nothing", "A waiting or preempted request has num_computed_tokens 0 and holds no blocks.",
              "scheduler.py:1825-1831 (_preempt_request), :2697-2707", ("I-7", "I-17", "NOLEAK"), waiting_holds_nothing, state=True),
    Invariant("one-place", "Every live request is in exactly one of running and waiting.",
              "scheduler.py:2540-2550 (remove_all), :2964-3029", ("I-17",), one_place, state=True),
    Invariant("token-bounds", "0 <= num_computed_tokens <= L - 1, num_tokens < L and outputs < max_tokens for every live request; reaching either cap finishes it.",
              "scheduler.py:851-856; utils.py:115-120 (check_stop)", ("I-15", "I-21", "MAXTOK"), token_bounds, state=True),
    Invariant("chunk-bounds", "A running request's chunk stops at position L - 1, and no chunk exceeds the long-prefill threshold unless the request was alone.",
              "scheduler.py:845-856, :1331, :756-767", ("I-15", "MAXTOK"), chunk_bounds),
    Invariant("fcfs-victim-is-latest", "Under FCFS the victims are the tail of the running order: nobody admitted after a victim survives it.",
              "scheduler.py:938 (running.pop())", ("I-8", "VICTIM"), fcfs_victim_is_latest),
    Invariant("priority-victim-is-least-important", "Under PRIORITY a victim's (priority, arrival) is at least that of every request still running.",
              "scheduler.py:925-928 (max over running)", ("I-9", "VICTIM"), priority_victim_is_least_important),
    Invariant("skipped-keep-order", "Waiting requests that stay waiting keep their relative order.",
              "scheduler.py:1054-1060, :1606-1610", ("I-22", "ORDER"), skipped_keep_order),
    Invariant("progress-when-idle", "With nothing running, a head of waiting whose whole sequence fits in the free blocks gets tokens.",
              "scheduler.py:1435-1452 (allocate_slots succeeds), kv_cache_manager.py:531-549", ("PROGRESS",), progress_when_idle),
    Invariant("stop-token-finishes", "A request that samples its EOS or a stop token finishes as FINISHED_STOPPED, even at a length cap or below min_tokens.",
              "utils.py:98-140 (check_stop order)", ("STOP", "I-21"), stop_token_finishes),
    Invariant("running-owes-tokens", "After a synchronous step every running request owes at least one token: a sampled token always follows a completed prefill.",
              "scheduler.py:1863 (is_prefill_chunk), :2744-2770 (append)", ("I-14", "I-25", "PROGRESS"), running_owes_tokens, state=True),
    Invariant("running-served-while-budget-lasts", "A running request owed tokens is scheduled unless the budget ran out or the step preempted.",
              "scheduler.py:793-1037 (continue only on n == 0)", ("PROGRESS", "MAXTOK"), running_served_while_budget_lasts),
)

BY_NAME = {inv.name: inv for inv in INVARIANTS}
