"""The invariant catalogue: each rule of vLLM 0.33.0 that must hold at every step, stated once.

Each `Invariant` has a name, one sentence, the place in vLLM 0.33.0 that
makes it hold, the invariant (I-n) and bug-zoo ids it answers to (docs/glossary.md), and a
predicate over a `StepView`. The predicates use `spec.arith` instead of
`min`, `if` and `and`, so the same function checks a concrete trace and
builds the Z3 formula that `proofs/` proves inductive.

The user's four come first: non-negative owed tokens, budget conservation,
no starvation after prepend, and no waiting admission in a step that
preempted. The invariants of the three features (prefix caching, spec
decode, async scheduling) come last; over a view of a run without those
features every one of them holds trivially, so they cost the core scope
nothing. The ones the features bend are stated for all configurations,
not gated off: blocks may exceed need once drafts are rejected, shared
blocks count once, and "running requests owe a token" holds under async
too, because the placeholders P count what is in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..arith import and_, cdiv, implies, is_symbolic, ite, lex_ge, maybe, min_, not_, or_, plus
from ..rules import num_owed_tokens, victim_key
from ..versions import holds
from .features import (
    cached_blocks_match_tokens,
    computed_behind_known_tokens,
    drafts_within_held,
    no_decode_past_max_tokens,
    placeholder_counters,
    prefix_hit_below_last_token,
    refcounts_match_tables,
)
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


def all_of(xs: Sequence[Any]) -> Any:
    return and_(*xs) if xs else True


def sum_of(xs: Iterable[Any]) -> Any:
    total: Any = 0
    for x in xs:
        total = total + x
    return total


def _owed_after(r: Row) -> Any:
    return num_owed_tokens(
        plus(r.post_num_tokens, r.post_num_spec_tokens), r.post_num_output_placeholders, r.post_num_computed_tokens
    )


def owed_nonnegative(v: StepView) -> Any:
    return all_of([implies(r.post_live, _owed_after(r) >= 0) for r in v.rows])


def budget_conservation(v: StepView) -> Any:
    # sum + remaining == budget holds by definition of remaining; what can break is remaining >= 0 and n > 0.
    return and_(
        sum_of([r.num_scheduled for r in v.rows]) <= v.token_budget,
        all_of([implies(r.scheduled, and_(r.num_scheduled > 0, r.pre_live)) for r in v.rows]),
    )


def budget_detail(v: StepView) -> str:
    """The numbers behind a budget-conservation violation: the sentence alone does not say by how much."""
    total = sum(r.num_scheduled for r in v.rows)
    bad = [r for r in v.rows if r.scheduled and not (r.num_scheduled > 0 and r.pre_live)]
    if total > v.token_budget or not bad:
        return f"scheduled {total} tokens, budget {v.token_budget}"
    return f"{bad[0].request_id} is scheduled {bad[0].num_scheduled} tokens (live before the step: {bad[0].pre_live})"


def no_starvation_after_prepend(v: StepView) -> Any:
    rules = []
    for r in v.rows:
        if not (maybe(r.preempted) or maybe(r.pre_preempted)):
            continue
        # A request preempted now is waiting afterwards, ahead of everything not preempted now (FCFS); before
        # 0.31.0, behind vLLM's second queue, `skipped_waiting`, which the pass walks first (`one-waiting-queue`).
        if v.fcfs:
            rules.append(
                implies(
                    and_(r.preempted, r.post_live),
                    and_(
                        r.post_waiting,
                        all_of(
                            [
                                implies(
                                    and_(q.post_waiting, not_(q.preempted), not_(q.post_in_skipped_queue)),
                                    r.post_wait_pos < q.post_wait_pos,
                                )
                                for q in v.rows
                                if q is not r
                            ]
                        ),
                    ),
                )
            )
        # Nobody behind a waiting preempted request is admitted before it, unless its output from before the
        # preemption is still in flight (async): then it is skipped until that drains
        # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1084-1089)); or its adapter waits for a LoRA slot.
        rules.append(
            all_of(
                [
                    implies(
                        and_(
                            r.pre_preempted,
                            r.pre_num_stale_output_tokens == 0,
                            not_(r.lora_waits),
                            q.pre_waiting,
                            r.pre_wait_pos < q.pre_wait_pos,
                            q.admitted,
                        ),
                        r.admitted,
                    )
                    for q in v.rows
                    if q is not r
                ]
            )
        )
    return all_of(rules)


def no_admission_after_preemption(v: StepView) -> Any:
    any_preempted = or_(*[r.preempted for r in v.rows]) if v.rows else False
    return implies(any_preempted, all_of([not_(r.admitted) for r in v.rows]))


def seqs_limit(v: StepView) -> Any:
    return and_(
        sum_of([ite(r.post_running, 1, 0) for r in v.rows]) <= v.max_num_seqs,
        sum_of([ite(r.num_scheduled > 0, 1, 0) for r in v.rows]) <= v.max_num_seqs,
    )


def scheduled_subset_running(v: StepView) -> Any:
    return all_of(
        [
            and_(
                implies(r.num_scheduled > 0, or_(r.post_running, not_(r.post_live))),
                implies(r.preempted, r.num_scheduled == 0),
            )
            for r in v.rows
        ]
    )


def block_conservation(v: StepView) -> Any:
    # A block shared by several tables (prefix caching) is one block: its extra table entries are not held blocks.
    held = sum_of([ite(r.post_live, r.post_num_blocks, 0) for r in v.rows]) - v.post_num_shared_block_refs
    return and_(v.post_num_free_blocks + held == v.num_usable_blocks, v.post_num_free_blocks >= 0, v.ids_consistent)


def blocks_match_tokens(v: StepView) -> Any:
    # Rejected drafts roll C back but not the blocks, so with spec decode a request may hold more than C
    # needs; never fewer: every computed position has a slot (I-11). See
    # vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.get_num_blocks_to_allocate (231-236).
    def ok(r: Row) -> Any:
        need = cdiv(min_(r.post_num_computed_tokens, v.max_model_len), v.block_size)
        return and_(r.post_num_blocks >= need, implies(v.num_speculative_tokens == 0, r.post_num_blocks <= need))

    return all_of([implies(r.post_running, ok(r)) for r in v.rows])


def waiting_holds_nothing(v: StepView) -> Any:
    # _preempt_request also drops the drafts and the placeholders (I-7); a new request never had any.
    return all_of(
        [
            implies(
                r.post_waiting,
                and_(
                    r.post_num_computed_tokens == 0,
                    r.post_num_blocks == 0,
                    r.post_num_spec_tokens == 0,
                    r.post_num_output_placeholders == 0,
                ),
            )
            for r in v.rows
        ]
    )


def one_place(v: StepView) -> Any:
    return all_of(
        [
            and_(
                r.post_live == or_(r.post_running, r.post_waiting),
                not_(and_(r.post_running, r.post_waiting)),
                r.post_running == (r.post_run_pos >= 0),
                r.post_waiting == (r.post_wait_pos >= 0),
            )
            for r in v.rows
        ]
    )


def token_bounds(v: StepView) -> Any:
    # Before 0.29.0 min_tokens held back the L cap too, so a request could stay live past L - 1: a known
    # violation of those releases (`spec.versions.KNOWN_VIOLATIONS`), not a weaker invariant. A pooling model
    # samples nothing (s = 0 from 0.32.0): its prompt may be L long, and computed to its end.
    s = v.num_sampled_tokens_per_step
    return all_of(
        [
            implies(
                r.post_live,
                and_(
                    r.post_num_computed_tokens >= 0,
                    r.post_num_computed_tokens <= v.max_model_len - s,
                    r.post_num_tokens <= v.max_model_len - s,
                    r.post_num_tokens - r.num_prompt_tokens < r.max_tokens,
                ),
            )
            for r in v.rows
        ]
    )


def chunk_bounds(v: StepView) -> Any:
    # Running requests stop at position L - 1 (L for a pooling model, which samples nothing); the threshold caps any chunk unless the request was alone
    # (the adaptive threshold can only be larger, so it is not checked here).
    alone = sum_of([ite(r.pre_live, 1, 0) for r in v.rows]) <= 1
    thr = v.long_prefill_token_threshold
    capped = and_(thr > 0, not_(alone), not_(v.threshold_adaptive))
    # A padded spec-decode admission must leave room for 1 + k + 1 positions
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1320-1325)); before 0.29.0, for 1 + k.
    room = 1 if holds("padding-needs-room-to-sample", v.vllm_version) else 0
    return all_of(
        [
            and_(
                implies(
                    and_(r.pre_running, r.num_scheduled > 0),
                    r.pre_num_computed_tokens + r.num_scheduled <= v.max_model_len - v.num_sampled_tokens_per_step,
                ),
                implies(
                    and_(r.admitted, r.num_scheduled_spec > 0),
                    r.num_hit_tokens + r.num_scheduled <= v.max_model_len - room,
                ),
                implies(capped, r.num_scheduled <= thr),
            )
            for r in v.rows
        ]
    )


def fcfs_victim_is_latest(v: StepView) -> Any:
    if not v.fcfs:
        return True
    # Victims are popped from the tail: nobody after a victim in the old running order survives.
    return all_of(
        [
            implies(and_(r.preempted, q.pre_running, q.pre_run_pos > r.pre_run_pos), q.preempted)
            for r in v.rows
            if maybe(r.preempted)
            for q in v.rows
            if q is not r
        ]
    )


def priority_victim_is_least_important(v: StepView) -> Any:
    if v.fcfs:
        return True

    # The rows carry the dense rank of arrival_time, which orders the keys as the times do.
    def key_ge(a: Row, b: Row) -> Any:
        return lex_ge(victim_key(a.priority, a.arrival), victim_key(b.priority, b.arrival))

    return all_of(
        [
            implies(and_(r.preempted, q.post_running), key_ge(r, q))
            for r in v.rows
            if maybe(r.preempted)
            for q in v.rows
            if q is not r
        ]
    )


def skipped_keep_order(v: StepView) -> Any:
    # Adjacent pairs of survivors suffice for concrete rows; Z3 gets every pair.
    kept = [r for r in v.rows if maybe(and_(r.pre_waiting, r.post_waiting))]
    if not any(map(maybe_symbolic, kept)):
        kept.sort(key=lambda r: r.pre_wait_pos)
        return all_of([a.post_wait_pos < b.post_wait_pos for a, b in zip(kept, kept[1:])])
    return all_of(
        [
            implies(
                and_(r.pre_waiting, q.pre_waiting, r.post_waiting, q.post_waiting, r.pre_wait_pos < q.pre_wait_pos),
                r.post_wait_pos < q.post_wait_pos,
            )
            for r in kept
            for q in kept
            if q is not r
        ]
    )


def progress_when_idle(v: StepView) -> Any:
    # Nothing running and the head of waiting fits whole: the step must schedule something. Only the head:
    # admission stops at a head that does not fit (head-of-line blocking), even if a later request would.
    # With spec decode, a head whose prefix hit leaves one token is padded to 1 + k tokens, which need slots up
    # to T + k and 1 + k of the budget, or it waits ("prefer to not schedule than schedule un-padded",
    # vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1326-1328)): the whole sequence fitting is not enough. Two
    # livelocks of vLLM 0.33.0, like D1.
    k = v.num_speculative_tokens
    nothing_running = all_of([not_(r.pre_running) for r in v.rows])
    need = [cdiv(min_(r.pre_num_tokens + k, v.max_model_len), v.block_size) for r in v.rows]
    # A preempted head whose output is still in flight (stale) is skipped until it drains
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1084-1089)), and one waiting for its grammar until it
    # compiles (Scheduler._handle_blocked_waiting_request).
    fits = (
        or_(
            *[
                and_(
                    r.pre_wait_pos == 0,
                    r.pre_num_stale_output_tokens == 0,
                    not_(r.pre_blocked),
                    n <= v.pre_num_free_blocks,
                )
                for r, n in zip(v.rows, need)
            ]
        )
        if v.rows
        else False
    )
    # A pause holds the waiting queue (controls-exact judges it).
    return implies(
        and_(nothing_running, fits, v.admits_waiting, 1 + k <= v.token_budget),
        sum_of([r.num_scheduled for r in v.rows]) > 0,
    )


def stop_token_finishes(v: StepView) -> Any:
    # EOS and stop tokens are checked before the length caps, and finish even below min_tokens.
    return all_of([implies(r.sampled_stop, and_(not_(r.post_live), r.finished_stopped)) for r in v.rows])


def running_owes_tokens(v: StepView) -> Any:
    # After a synchronous step, every running request owes the next decode or prefill chunk. Under async
    # scheduling T + P - C = 1 after a decode is scheduled and every update keeps it, so it holds there too.
    # Under pipeline parallel without async, a request whose last chunk is in flight owes nothing until the
    # chunk's output is back: the synchronous scheduler has no placeholders.
    return all_of([implies(and_(r.post_running, _owes_after_step(v, r)), _owed_after(r) >= 1) for r in v.rows])


def _owes_after_step(v: StepView, r: Row) -> Any:
    """Whether a running request must owe tokens after the step: always, unless it has tokens in flight and
    nothing to sample for them: the synchronous scheduler's (pipeline parallel's batch queue without async
    scheduling), or a pooling model's, which adds no placeholder (`num_sampled_tokens_per_step` 0)."""
    return or_(and_(v.async_scheduling, v.num_sampled_tokens_per_step > 0), r.post_num_in_flight_tokens == 0)


def running_served_while_budget_lasts(v: StepView) -> Any:
    # A running request left unscheduled although budget remained and nobody was preempted owed nothing; in a step
    # that defers prefills, a prompt chunk is left for a step on the cadence (prefill-cadence-exact judges it).
    total = sum_of([r.num_scheduled for r in v.rows])
    any_preempted = or_(*[r.preempted for r in v.rows]) if v.rows else False
    return all_of(
        [
            implies(
                and_(
                    r.pre_running,
                    r.num_scheduled == 0,
                    total < v.token_budget,
                    not_(any_preempted),
                    not_(v.prefills_deferred),
                ),
                r.pre_num_tokens - r.pre_num_computed_tokens <= 0,
            )
            for r in v.rows
        ]
    )


def placeholders_match_in_flight(v: StepView) -> Any:
    # The async strengthening (docs/proofs.md): what ties P to the steps in flight. Stale output is
    # in flight from before a preemption (_preempt_request sets stale = in-flight, P = 0), and the rest of the
    # in-flight tokens were scheduled since, each advancing C by as much (C is 0 after the preemption) and at
    # most 1 + drafts of them adding placeholders
    # (vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule). Placeholders exist only for a
    # running request whose decode caught up with T + P: a caught-up decode leaves T + P - C = 1, and an
    # update keeps it (T and P move by the tokens returned, P and C both lose the rejected drafts).
    def ok(r: Row) -> Any:
        P, I, stale = r.post_num_output_placeholders, r.post_num_in_flight_tokens, r.post_num_stale_output_tokens
        return and_(
            stale <= I,
            P <= I - stale,
            I - stale <= r.post_num_computed_tokens,
            implies(P > 0, and_(r.post_running, r.post_num_tokens + P - r.post_num_computed_tokens == 1)),
        )

    return all_of([implies(r.post_live, ok(r)) for r in v.rows])


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "owed-nonnegative",
        "Every live request is owed num_tokens_with_spec + num_output_placeholders - num_computed_tokens >= 0 tokens.",
        "every clamp is a min with the owed count: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (839-857); rollbacks: "
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2360-2364), vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output (2766-2769)",
        ("I-14", "OWED"),
        owed_nonnegative,
        state=True,
    ),
    Invariant(
        "budget-conservation",
        "The scheduled tokens sum to at most the token budget (the remaining budget stays >= 0), and only live requests are scheduled.",
        "the mins and asserts of vllm/v1/core/sched/scheduler.py:Scheduler.schedule (846-848, 1346, 1620, 1631)",
        ("I-1", "I-24", "BUDGET"),
        budget_conservation,
    ),
    Invariant(
        "no-starvation-after-prepend",
        "A preempted request goes to the head of waiting (FCFS), and no request behind a preempted one is admitted before it.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1842); vllm/v1/core/sched/request_queue.py:FCFSRequestQueue.prepend_request",
        ("I-7", "RESUME"),
        no_starvation_after_prepend,
    ),
    Invariant(
        "no-admission-after-preemption",
        "A step that preempted admits no waiting request.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1050)",
        ("I-6", "NOPREEMPT-ADMIT"),
        no_admission_after_preemption,
    ),
    Invariant(
        "seqs-limit",
        "At most max_num_seqs requests run, and at most that many are scheduled.",
        "the gate and assert of vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1070-1074, 1633)",
        ("I-3", "SEQS"),
        seqs_limit,
        state=True,
    ),
    Invariant(
        "scheduled-subset-running",
        "Every scheduled request is running after the step; a preempted request has no tokens in it.",
        "the refund and assert of vllm/v1/core/sched/scheduler.py:Scheduler.schedule (950-968, 1637-1639)",
        ("I-4", "SUBSET"),
        scheduled_subset_running,
    ),
    Invariant(
        "block-conservation",
        "Free blocks plus held blocks equal the usable blocks; no block is held twice or free twice.",
        "vllm/v1/core/block_pool.py:BlockPool.get_new_blocks; vllm/v1/core/block_pool.py:BlockPool.free_blocks; vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (582-588)",
        ("I-10", "CONSERVE", "ATOMIC"),
        block_conservation,
        state=True,
    ),
    Invariant(
        "blocks-match-tokens",
        "A running request holds exactly the blocks its computed tokens need: ceil(min(C, L) / block_size).",
        "vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (550-553); vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.get_num_blocks_to_allocate (230-236)",
        ("I-11", "CONSERVE"),
        blocks_match_tokens,
        state=True,
    ),
    Invariant(
        "waiting-holds-nothing",
        "A waiting or preempted request has num_computed_tokens 0 and holds no blocks.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request (1817-1822); vllm/v1/core/sched/scheduler.py:Scheduler._holds_kv_blocks",
        ("I-7", "I-17", "NOLEAK"),
        waiting_holds_nothing,
        state=True,
    ),
    Invariant(
        "one-place",
        "Every live request is in exactly one of running and waiting.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2543-2550); vllm/v1/core/sched/scheduler.py:Scheduler.finish_requests",
        ("I-17",),
        one_place,
        state=True,
    ),
    Invariant(
        "token-bounds",
        "0 <= num_computed_tokens <= L - 1, num_tokens < L and outputs < max_tokens for every live request; reaching either cap finishes it (a pooling model's, which samples nothing: C <= L and T <= L).",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule (850-857); vllm/v1/core/sched/utils.py:check_stop (114-119)",
        ("I-15", "I-21", "MAXTOK"),
        token_bounds,
        state=True,
    ),
    Invariant(
        "chunk-bounds",
        "A running request's chunk stops at position L - 1 (L for a pooling model), and no chunk exceeds the long-prefill threshold unless the request was alone.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule (754-769, 844-857, 1332-1333)",
        ("I-15", "MAXTOK"),
        chunk_bounds,
    ),
    Invariant(
        "fcfs-victim-is-latest",
        "Under FCFS the victims are the tail of the running order: nobody admitted after a victim survives it.",
        "`running[-1]`, then `running.pop()`: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (938, 970)",
        ("I-8", "VICTIM"),
        fcfs_victim_is_latest,
    ),
    Invariant(
        "priority-victim-is-least-important",
        "Under PRIORITY a victim's (priority, arrival) is at least that of every request still running.",
        "max over running: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (932-936)",
        ("I-9", "VICTIM"),
        priority_victim_is_least_important,
    ),
    Invariant(
        "skipped-keep-order",
        "Waiting requests that stay waiting keep their relative order.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1054-1060, 1607-1610)",
        ("I-22", "ORDER"),
        skipped_keep_order,
    ),
    Invariant(
        "progress-when-idle",
        "With nothing running, a head of waiting whose whole sequence fits in the free blocks gets tokens.",
        "allocate_slots succeeds: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1435-1452); vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (531-548)",
        ("PROGRESS",),
        progress_when_idle,
    ),
    Invariant(
        "stop-token-finishes",
        "A request that samples its EOS or a stop token finishes as FINISHED_STOPPED, even at a length cap or below min_tokens.",
        "the order of vllm/v1/core/sched/utils.py:check_stop",
        ("STOP", "I-21"),
        stop_token_finishes,
    ),
    Invariant(
        "running-owes-tokens",
        "After a synchronous step every running request owes at least one token: a sampled token always follows a completed prefill.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule (1863-1865); vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output",
        ("I-14", "I-25", "PROGRESS"),
        running_owes_tokens,
        state=True,
    ),
    Invariant(
        "running-served-while-budget-lasts",
        "A running request owed tokens is scheduled unless the budget ran out or the step preempted.",
        "`continue` only on n == 0: vllm/v1/core/sched/scheduler.py:Scheduler.schedule (793-1037)",
        ("PROGRESS", "MAXTOK"),
        running_served_while_budget_lasts,
    ),
    # The three features (prefix caching, spec decode, async scheduling): features.py.
    Invariant(
        "placeholder-counters",
        "Output placeholders, in-flight and stale output tokens are >= 0, and all three are 0 in the synchronous engine.",
        "the asserts of vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2323) and vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output (2769); "
        "the only increment, vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule",
        ("I-12", "I-13"),
        placeholder_counters,
        state=True,
    ),
    Invariant(
        "computed-behind-known-tokens",
        "A running request has computed at most all but the last of its tokens and placeholders (C <= T + P - 1): rejected drafts and trimmed tokens are rolled back.",
        "rejection: vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2349-2364); trim: vllm/v1/core/sched/scheduler.py:Scheduler._update_request_with_output",
        ("I-14", "I-25", "SPEC"),
        computed_behind_known_tokens,
        state=True,
    ),
    Invariant(
        "drafts-within-held",
        "The drafts scheduled are at most those held (k for a padded admission), only after all of T + P is scheduled, so never in a prefill chunk; at most k drafts are held.",
        "vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025, 1578-1582); vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids (2872-2876)",
        ("I-19", "SPEC"),
        drafts_within_held,
    ),
    Invariant(
        "no-decode-past-max-tokens",
        "No step samples past max_tokens: a sampling request has fewer than max_tokens outputs, counting the one token an in-flight step guarantees.",
        "the async skip rule, vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814)",
        ("MAXTOK", "Z2"),
        no_decode_past_max_tokens,
    ),
    Invariant(
        "refcounts-match-tables",
        "Every block's ref count is the number of block tables holding it, and the free queue holds exactly the unreferenced blocks.",
        "vllm/v1/core/block_pool.py:BlockPool.get_new_blocks; vllm/v1/core/block_pool.py:BlockPool.touch; vllm/v1/core/block_pool.py:BlockPool.free_blocks",
        ("I-10", "CONSERVE", "ATOMIC"),
        refcounts_match_tables,
        state=True,
    ),
    Invariant(
        "prefix-hit-below-last-token",
        "A prefix hit is whole blocks and never covers an admitted request's last token; without prefix caching there is none.",
        "vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks (301-302); the assert at vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1220)",
        ("I-16", "PREFIX-LAST"),
        prefix_hit_below_last_token,
    ),
    Invariant(
        "cached-blocks-match-tokens",
        "A request's first num_cached_blocks blocks are cached under the hashes of its own tokens, and none of its later blocks is cached.",
        "vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks; vllm/v1/core/block_pool.py:BlockPool.cache_full_blocks; "
        "evict on reuse: vllm/v1/core/block_pool.py:BlockPool._maybe_evict_cached_block",
        ("PREFIX",),
        cached_blocks_match_tokens,
        state=True,
    ),
    Invariant(
        "placeholders-match-in-flight",
        "Stale output is part of what is in flight; the rest was computed since (in-flight - stale <= C) and bounds the placeholders; only a running request whose decode caught up holds placeholders, and then T + P - C = 1.",
        "vllm/v1/core/sched/scheduler.py:Scheduler._preempt_request; vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule; "
        "vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule; the rollback in vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2360-2364)",
        ("I-12", "I-13", "ASYNC"),
        placeholders_match_in_flight,
        state=True,
    ),
)

BY_NAME = {inv.name: inv for inv in INVARIANTS}
