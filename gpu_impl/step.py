"""`schedule()` for B instances: the preamble, the two passes, and `_update_after_schedule`.

The order is vLLM's (vllm/v1/core/sched/scheduler.py:Scheduler.schedule, then
`Scheduler._update_after_schedule`): the finished ids collected since the last
step are handed out and forgotten (I-18); the long-prefill threshold is fixed
once from `len(running) + len(waiting)`
(vllm/v1/core/sched/scheduler.py:Scheduler.schedule (754-769); before 0.31.0 with no lone-request
exception, per instance); the RUNNING pass; the
WAITING pass only where nothing was preempted; then C advances by the grants
(vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule; C counts scheduled
tokens, not finished ones).

The result, `StepOut`, is in slot space and says everything the output
needs: grants and their order in `num_scheduled_tokens` (the RUNNING pass's
grants in running order, then admissions in order), the kind of each
scheduled request (cached, new, resumed), its C before the advance, where
its new blocks start in its table, the preempted and the finished-reported
slots, and the scheduled drafts. `materialize.py` turns it into
`SchedulerOutput`s. Spec decode: the drafts the clamps left are scheduled
and a granted request's drafts are consumed; async: placeholders grow in
`_update_after_schedule`. Feature work runs only in batches that have the
feature, so the plain decode step costs what it did before the three features
(prefix caching, spec decode, async scheduling) joined.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import rules
from .running import idle_pass, running_pass
from .state import BIG, BatchState
from .waiting import WaitingPass, waiting_pass
from .waiting_cached import cached_waiting_pass

Tensor = torch.Tensor

NONE, CACHED, NEW, RESUMED = 0, 1, 2, 3


@dataclass
class StepOut:
    n_sched: Tensor  # [B, R] tokens granted; 0 = not scheduled
    sched_key: Tensor  # [B, R] position in num_scheduled_tokens; BIG = not scheduled
    kind: Tensor  # [B, R] NONE / CACHED / NEW / RESUMED
    c_before: Tensor  # [B, R] num_computed_tokens as the output reports it (before the advance)
    old_held: Tensor  # [B, R] index of the first block allocated in this step
    preempted: Tensor  # [B, R] preempted in this step
    finished: Tensor  # [B, R] reported in finished_req_ids
    rounds: int  # RUNNING-pass rounds (1 + failures resolved, max over instances)
    n_spec: Tensor  # [B, R] drafts among the granted tokens (scheduled_spec_decode_tokens)
    spec_vals: Tensor  # [B, R, k] their ids (-1: padding)


def schedule(st: BatchState, calling: Tensor | None = None, throttle: Tensor | None = None) -> StepOut:
    """`calling` [B]: the instances whose engine loop calls schedule() in this step (default all); the others'
    output is dropped (a batch queue's step with nothing to schedule), and their `current_step` stays.
    `throttle` [B]: a DP engine core calls it with `throttle_prefills=True` (default none)."""
    st.current_step = st.current_step + (1 if calling is None else calling.long())
    finished = st.fin_pending
    st.fin_pending = torch.zeros_like(finished)
    running, waiting = st.running_mask(), st.waiting_mask()
    num_running = running.long().sum(1)
    num_eligible = num_running + waiting.long().sum(1)
    threshold = (
        rules.effective_threshold(st.thr0, num_eligible, st.adaptive, st.input_budget0, st.lone_request_threshold_off)
        if st.any_threshold
        else st.thr0
    )  # all zero: no instance caps long prefills
    # One read-back decides which passes have any work: a pass over empty queues does nothing.
    any_running, any_waiting = torch.stack([running.any(), waiting.any()]).tolist()

    defer = _defers_prefills(st, running, throttle) if st.any_prefill_cadence else None
    budget0 = rules.paused_token_budget(st.pause, st.budget0)  # PAUSED_ALL schedules nothing (`controls.py`)
    rp = running_pass(st, threshold, budget0, running, defer) if any_running else idle_pass(st, budget0)
    zeros = torch.zeros_like(st.C)
    big = torch.full_like(zeros, BIG)
    n_sched = zeros.scatter(1, rp.order, rp.grant)
    sched_key = big.scatter(1, rp.order, torch.where(rp.grant > 0, rp.idx, big))
    kind = zeros.scatter(1, rp.order, torch.where(rp.grant > 0, CACHED, NONE))
    old_held = zeros.scatter(1, rp.order, torch.where(rp.grant > 0, rp.old_held, zeros))
    preempted = torch.zeros_like(rp.preempted)
    if rp.rounds > 1:  # a single round means no allocation failed, so nothing was preempted
        preempted = preempted.scatter(1, rp.order, rp.preempted)
    # Reported with this step's own: a cache reset's victims since the last schedule() (`reset_preempted_req_ids`).
    reported = preempted | st.reset_preempted
    st.reset_preempted = torch.zeros_like(st.reset_preempted)
    # Drafts the clamps left (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1010-1025)); a granted request's
    # spec_token_ids are consumed either way.
    n_spec, spec_vals = zeros, st.spec_tok
    if st.any_spec:
        n_spec = torch.where(n_sched > 0, rules.num_scheduled_spec_tokens(n_sched, st.C, st.num_tokens(), st.P), zeros)
        n_spec = torch.minimum(n_spec, st.nspec)
        spec_vals = st.spec_tok.clone()
        st.nspec = torch.where(n_sched > 0, zeros, st.nspec)
    ran = ~rp.preempted.any(1) & rules.pause_runs_waiting_pass(st.pause, st.paused_new_runs_waiting_pass)
    allowed = ran & rules.pause_admits_waiting(st.pause)  # none after a preemption (§9.A.6), nor under a pause
    running_granted = n_sched > 0
    prefill_scheduled = (running_granted & st.chunk).any(1)
    wp = None
    if any_waiting:
        pass_ = cached_waiting_pass if st.keyed else waiting_pass
        wp = pass_(
            st,
            threshold,
            rp.budget,
            rp.alive.long().sum(1),
            allowed,
            waiting,
            prefill_scheduled,
            running_granted.any(1),
            running_granted,
            defer,
        )
        n_sched = n_sched.scatter_add(1, wp.order, wp.grant)
        sched_key = torch.minimum(sched_key, big.scatter(1, wp.order, torch.where(wp.admitted, st.R + rp.idx, big)))
        kind_wait = torch.where(wp.admitted, torch.where(wp.resumed, RESUMED, NEW), NONE)
        kind = kind + zeros.scatter(1, wp.order, kind_wait)
        if st.any_spec:  # a padded admission lists k placeholder drafts
            # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1578-1582))
            padded = zeros.bool().scatter(1, wp.order, wp.padded)
            n_spec = torch.where(padded, st.k[:, None].expand_as(n_spec), n_spec)
            spec_vals = torch.where(padded[..., None], torch.full_like(spec_vals, -1), spec_vals)
    if defer is not None:
        _after_the_passes(st, defer, ran, wp, n_sched, prefill_scheduled)
    c_before = st.C
    _update_after_schedule(st, n_sched, n_spec)
    return StepOut(n_sched, sched_key, kind, c_before, old_held, reported, finished, rp.rounds, n_spec, spec_vals)


def _defers_prefills(st: BatchState, running: Tensor, throttle: Tensor | None) -> Tensor:
    """[B] the prefill cadence holds every prefill back this step (vllm/v1/core/sched/scheduler.py:Scheduler.schedule
    (750-791)): a DP throttle or the local interval, while a decode runs and the last release step drained."""
    throttled = throttle if throttle is not None else torch.zeros_like(st.capacity_bound)
    any_decode = (running & ~st.chunk).any(1)
    since = st.num_executed + 1 - st.last_prefill
    return rules.defers_prefills(throttled, st.capacity_bound, any_decode, st.local_interval, since)


def _after_the_passes(
    st: BatchState, defer: Tensor, allowed: Tensor, wp: WaitingPass | None, n_sched: Tensor, prefill_scheduled: Tensor
) -> None:
    """What the step leaves the cadence (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1548, 1612-1629)):
    admissions leave `deferred_waiting` and the pass's skips join it; a release step sets the capacity flag; the
    local cadence counts executed steps and stamps the last one that carried a prefill."""
    admitted = torch.zeros_like(st.deferred)
    prefill_admitted = torch.zeros_like(st.capacity_bound)
    if wp is not None:
        admitted = admitted.scatter(1, wp.order, wp.admitted)
        skipped = torch.zeros_like(st.deferred).scatter(1, wp.order, wp.skipped)
        st.deferred = (st.deferred & ~admitted) | skipped
        # C is the hit for an admission here (its advance comes after): prompt left beyond the last token?
        prefill_admitted = (admitted & rules.admits_a_prefill(st.C, st.num_tokens())).any(1)
    waiting = st.waiting_mask()
    bound = rules.prefill_capacity_bound(waiting.long().sum(1), (st.deferred & waiting).long().sum(1))
    st.capacity_bound = torch.where(allowed & ~defer, bound, st.capacity_bound)
    local = st.local_interval > 1
    st.num_executed = st.num_executed + (local & (n_sched.sum(1) > 0)).long()
    carried = local & (prefill_scheduled | prefill_admitted)
    st.last_prefill = torch.where(carried, st.num_executed, st.last_prefill)


def _update_after_schedule(st: BatchState, n_sched: Tensor, n_spec: Tensor) -> None:
    """C advances by the grants, and so do the in-flight tokens
    (vllm/v1/core/sched/scheduler.py:Scheduler._update_after_schedule); is_prefill_chunk is set
    for the scheduled. AsyncScheduler then owes every scheduled request that is not mid-prefill its
    sampled token and drafts as placeholders, with k placeholder drafts
    (vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule)."""
    st.C = st.C + n_sched
    if not (st.any_spec or st.any_queue or st.any_prefill_cadence):  # nothing reads in-flight or is_prefill_chunk
        return
    sched = n_sched > 0
    if st.any_queue:  # without a batch queue an update absorbs the step at once, so nothing stays in flight
        st.inflight = st.inflight + n_sched
    st.chunk = torch.where(sched, st.C < st.num_tokens() + st.P, st.chunk)
    if st.any_async:
        owe = sched & ~st.chunk & st.async_[:, None]
        st.P = torch.where(owe, st.P + st.sampled[:, None] + n_spec, st.P)
        if st.kmax:
            st.nspec = torch.where(owe, st.k[:, None].expand_as(st.nspec), st.nspec)
            st.spec_tok = torch.where(owe[..., None], torch.full_like(st.spec_tok, -1), st.spec_tok)
        if st.any_cadence:  # the V2 model runner's PP decode cadence
            eligible = rules.next_decode_eligible_step(st.current_step, st.decode_stagger)[:, None]
            st.next_decode = torch.where(owe, eligible, st.next_decode)
