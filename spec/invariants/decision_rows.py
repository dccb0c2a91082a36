"""The decision invariants again, stated on a view's rows: the form Z3 can read.

`decisions.py` states each decision by walking the step, turn by turn,
against a block pool and prefix cache rebuilt from the trace. Z3 cannot
run that walk: the encoding (`proofs/`) abstracts block ids and hashes to
counts and the running pass to one symbolic formula. So each decision that
counts reach is stated a second time, here, as a predicate over the
`StepView` alone, under the same name, in the scope the Z3 encoding models:
one synchronous step with no drafts, no placeholders and no prefix hit (the
core scope). These are the walk's twins, and `tests/unit/spec/test_decision_rows.py`
checks one against the other on the core families and under the mutants: on
every step of those traces the row form and the walk agree.

The trick that makes a turn-by-turn decision a predicate over rows: what a
turn saw is a sum over the turns before it. The budget left at a running
request's turn is the budget less the grants of the requests ahead of it in
`running`; the free blocks at an admission's turn are the free blocks before
the step less what every earlier grant allocated. The one place this is not
exact is PRIORITY, where a victim popped after its own turn gave its grant
back: the view no longer shows that grant, so a turn after such a victim is
bounded, not pinned. FCFS pops only the tail, which nothing ahead of it
waits on, so there it is exact.

Two of the eight are not here, and `schedspec prove --decisions` lists them
as `n/a`: `prefix-hit-exact` and `block-choice-exact` are about which blocks
and hashes, which the encoding abstracts away. `victims-exact` is stated in
full under FCFS (a suffix of `running`, and no victim beyond the one the
last allocation needed); under PRIORITY it keeps the rule's order, since how
many blocks a victim returned depends on a grant the view no longer shows.

The rules come from `spec/rules.py`, as in the walk: these check that the
step makes the decisions the rules ask for at the turn they are asked, not
the rules' arithmetic, which the catalogue's bounds check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import rules
from ..arith import and_, implies, ite, lex_eq, lex_ge, min_, not_, or_
from .catalogue import Invariant, all_of, sum_of
from .decisions import DECISIONS
from .step_walk import ADMISSION, GRANT, ROLLBACK, STOP, VICTIMS, WORK
from .views import Row, StepView


def _any(xs: list[Any]) -> Any:
    return or_(*xs) if xs else False


def _threshold(v: StepView) -> Any:
    """The step's threshold: fixed once, from every live request (vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (754-769))."""
    eligible = sum_of(ite(r.pre_live, 1, 0) for r in v.rows)
    return ite(
        v.threshold_adaptive,
        rules.effective_threshold(v.long_prefill_token_threshold, eligible, True, v.token_budget, v.vllm_version),
        rules.effective_threshold(v.long_prefill_token_threshold, eligible, False, v.token_budget, v.vllm_version),
    )


def _ahead(v: StepView, x: Row) -> list[tuple[Row, Any]]:
    """Each other row, with whether it ran ahead of x in `running` before the step."""
    return [(y, and_(y.pre_running, y.pre_run_pos < x.pre_run_pos)) for y in v.rows if y is not x]


def _granted_ahead(v: StepView, x: Row) -> Any:
    return sum_of(ite(a, y.num_scheduled, 0) for y, a in _ahead(v, x))


def _running_grant(v: StepView, x: Row, thr: Any, given_back: Any = 0) -> Any:
    """What x gets at its turn in the running pass, with the budget the grants ahead of it left, less `given_back`."""
    owed = rules.num_owed_tokens(x.pre_num_tokens, 0, x.pre_num_computed_tokens)
    left = v.token_budget - _granted_ahead(v, x) - given_back
    return rules.running_num_new_tokens(owed, thr, left, v.max_model_len, x.pre_num_computed_tokens)


def _grant_range(v: StepView, x: Row, thr: Any) -> tuple[Any, Any]:
    """The least and the most x can have got at its turn.

    Exact (both the same) unless a PRIORITY victim ran ahead of x: a victim popped after x's turn held its grant
    then, which the output no longer shows. At most it held what the rules would give it with the budget its own
    turn could have had at most, so deducting that bounds x's grant from below."""
    most = _running_grant(v, x, thr)
    if v.fcfs:  # FCFS pops the tail, which nothing ahead of it waits on
        return most, most
    held = sum_of(ite(and_(a, y.preempted), _running_grant(v, y, thr), 0) for y, a in _ahead(v, x))
    return _running_grant(v, x, thr, held), most


def _pass_may_end_ahead(v: StepView, x: Row) -> Any:
    """A self-preemption ahead of x ends the pass where the release `break`s on it; under FCFS the self-preempted
    request is the tail, so nobody is behind it."""
    if v.fcfs or rules.self_preemption_continues("priority", v.vllm_version):
        return False
    return _any([and_(a, y.preempted) for y, a in _ahead(v, x)])


def _allocated(v: StepView, r: Row, start: Any) -> Any:
    """Blocks r's grant took from the free queue: slots up to start + its grant, less the blocks it held."""
    need = rules.num_tokens_need_slot(start, r.num_scheduled, 0, v.max_model_len)
    return ite(r.scheduled, rules.num_blocks_to_allocate(need, r.pre_num_blocks, v.block_size), 0)


def _start(r: Row) -> Any:
    """C when its turn came: the prefix hit for an admission, else C before the step."""
    return ite(r.admitted, r.num_hit_tokens, r.pre_num_computed_tokens)


def _any_preempted(v: StepView) -> Any:
    return _any([r.preempted for r in v.rows])


def grant_exact(v: StepView) -> Any:
    thr, preempted = _threshold(v), _any_preempted(v)
    run_granted = sum_of(ite(r.pre_running, r.num_scheduled, 0) for r in v.rows)
    facts = []
    for x in v.rows:
        least, most = _grant_range(v, x, thr)
        facts.append(implies(and_(x.pre_running, x.scheduled), and_(least <= x.num_scheduled, x.num_scheduled <= most)))
        admitted_ahead = sum_of(
            ite(and_(y.admitted, y.pre_wait_pos < x.pre_wait_pos), y.num_scheduled, 0) for y in v.rows if y is not x
        )
        left = v.token_budget - run_granted - admitted_ahead
        owed = rules.waiting_num_new_tokens(x.pre_num_tokens, x.num_hit_tokens, thr)
        facts.append(implies(and_(x.admitted, not_(preempted)), x.num_scheduled == min_(owed, left)))
    return all_of(facts)


def running_work_conserving(v: StepView) -> Any:
    # Left out although even the least budget its turn could have had gives it something: the walk's named
    # reasons (the budget ran out, a zero grant, the pass ended at a self-preemption) are all gone.
    thr = _threshold(v)
    return all_of(
        [
            implies(
                and_(x.pre_running, not_(x.scheduled), not_(x.preempted), not_(_pass_may_end_ahead(v, x))),
                _grant_range(v, x, thr)[0] <= 0,
            )
            for x in v.rows
        ]
    )


def _admits(v: StepView, x: Row, thr: Any) -> Any:
    """The whole admission test at x's turn, with everyone ahead of x in `waiting` admitted (the pass reaches x only
    then); the view's counts stand for the pass's state at that turn
    (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1052-1346);
    vllm/v1/core/kv_cache_manager.py:KVCacheManager.allocate_slots (518-588))."""
    others = [y for y in v.rows if y is not x]
    ahead = [and_(y.pre_waiting, y.pre_wait_pos < x.pre_wait_pos) for y in others]
    before = [or_(y.pre_running, a) for y, a in zip(others, ahead)]  # everyone whose turn came before x's
    left = v.token_budget - sum_of(ite(b, y.num_scheduled, 0) for y, b in zip(others, before))
    running = sum_of(ite(and_(y.pre_running, not_(y.preempted)), 1, 0) for y in others) + sum_of(
        ite(a, 1, 0) for a in ahead
    )
    free = v.pre_num_free_blocks - sum_of(ite(b, _allocated(v, y, _start(y)), 0) for y, b in zip(others, before))
    wanted = rules.waiting_num_new_tokens(x.pre_num_tokens, 0, thr)
    n = min_(wanted, left)
    watermark = ite(running > 0, v.watermark_blocks, 0)
    held, L, bs = x.pre_num_blocks, v.max_model_len, v.block_size
    full = rules.num_blocks_to_allocate(min_(x.pre_num_tokens, L), held, bs)
    need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(0, n, 0, L), held, bs)
    return and_(
        left > 0,
        running < v.max_num_seqs,
        not_(and_(not_(v.enable_chunked_prefill), wanted > left)),
        implies(v.scheduler_reserve_full_isl, rules.allocation_fits(full, watermark, free)),
        rules.allocation_fits(need, watermark, free),
    )


def admission_exact(v: StepView) -> Any:
    thr = _threshold(v)
    allowed = rules.waiting_pass_allowed(sum_of(ite(r.preempted, 1, 0) for r in v.rows))
    facts = []
    for x in v.rows:
        heads_ahead = all_of(
            [implies(and_(y.pre_waiting, y.pre_wait_pos < x.pre_wait_pos), y.admitted) for y in v.rows if y is not x]
        )
        facts.append(implies(x.pre_waiting, x.admitted == and_(allowed, heads_ahead, _admits(v, x, thr))))
    return all_of(facts)


def _sampled(r: Row) -> Any:
    """It samples a token: scheduled up to its last known token (a partial prefill chunk samples nothing)."""
    return and_(r.scheduled, _start(r) + r.num_scheduled >= r.pre_num_tokens)


def rollback_exact(v: StepView) -> Any:
    # With no drafts nothing is rolled back: C is where schedule() left it, and T grew by the one sampled token.
    return all_of(
        [
            implies(
                and_(r.pre_live, r.post_live),
                and_(
                    r.post_num_computed_tokens
                    == ite(r.preempted, 0, ite(r.scheduled, _start(r) + r.num_scheduled, r.pre_num_computed_tokens)),
                    r.post_num_tokens == r.pre_num_tokens + ite(_sampled(r), 1, 0),
                ),
            )
            for r in v.rows
        ]
    )


def stop_exact(v: StepView) -> Any:
    facts = []
    for r in v.rows:
        T = r.pre_num_tokens + 1
        verdict = rules.stop_kind(
            r.sampled_stop,
            False,
            T,
            T - r.num_prompt_tokens,
            v.max_model_len,
            r.max_tokens,
            r.min_tokens,
            v.vllm_version,
        )
        # A request aborted mid-step finishes by the abort: the update passes it over.
        finished = and_(r.pre_live, not_(r.post_live), not_(r.aborted_mid_step))
        stops = and_(r.pre_live, _sampled(r), verdict != rules.NOT_STOPPED, not_(r.aborted_mid_step))
        facts.append(and_(finished == stops, r.finished_stopped == and_(stops, verdict == rules.STOPPED)))
    return all_of(facts)


def victims_exact(v: StepView) -> Any:
    if not v.fcfs:  # the rule's order: every victim is the first maximum of the key among those still running
        key = {id(r): rules.victim_key(r.priority, r.arrival) for r in v.rows}
        return all_of(
            [
                implies(
                    and_(y.preempted, x.pre_running, not_(x.preempted)),
                    and_(
                        lex_ge(key[id(y)], key[id(x)]),
                        implies(lex_eq(key[id(y)], key[id(x)]), y.pre_run_pos < x.pre_run_pos),
                    ),
                )
                for y in v.rows
                for x in v.rows
                if x is not y
            ]
        )
    # The tail, and no more of it than the last allocation needed: the last victim, the one nearest the head, left
    # fewer blocks free after the pass than it gave back, or it was the request whose allocation failed.
    thr = _threshold(v)
    free = v.pre_num_free_blocks - sum_of(ite(r.pre_running, _allocated(v, r, _start(r)), 0) for r in v.rows)
    free = free + sum_of(ite(r.preempted, r.pre_num_blocks, 0) for r in v.rows)
    facts = []
    for y in v.rows:
        ahead = _ahead(v, y)
        behind = [and_(x.pre_running, x.pre_run_pos > y.pre_run_pos) for x in v.rows if x is not y]
        facts += [implies(and_(y.preempted, b), x.preempted) for x, b in zip([x for x in v.rows if x is not y], behind)]
        last = and_(y.preempted, all_of([not_(and_(a, x.preempted)) for x, a in ahead]))
        n = _running_grant(v, y, thr)
        need = rules.num_blocks_to_allocate(
            rules.num_tokens_need_slot(y.pre_num_computed_tokens, n, 0, v.max_model_len), y.pre_num_blocks, v.block_size
        )
        facts.append(implies(last, free - y.pre_num_blocks < need))
    return all_of(facts)


_ROW_FORMS = {
    VICTIMS: victims_exact,
    WORK: running_work_conserving,
    GRANT: grant_exact,
    ADMISSION: admission_exact,
    STOP: stop_exact,
    ROLLBACK: rollback_exact,
}
# Each twin keeps its walk's name, sentence, vLLM place and ids: the same rule, read on rows.
DECISION_ROWS: tuple[Invariant, ...] = tuple(
    replace(d, holds=_ROW_FORMS[d.name]) for d in DECISIONS if d.name in _ROW_FORMS
)
DECISION_ROWS_BY_NAME = {inv.name: inv for inv in DECISION_ROWS}
