"""`schedule()` for B instances: the preamble, the two passes, and `_update_after_schedule`.

The order is vLLM's (scheduler.py:699-1877): the finished ids collected
since the last step are handed out and forgotten (I-18); the long-prefill
threshold is fixed once from `len(running) + len(waiting)` (:756-767); the
RUNNING pass; the WAITING pass only where nothing was preempted; then C
advances by the grants (:1845-1877; C counts scheduled tokens, not finished
ones).

The result, `StepOut`, is in slot space and says everything the output
needs: grants and their order in `num_scheduled_tokens` (the RUNNING pass's
grants in running order, then admissions in order), the kind of each
scheduled request (cached, new, resumed), its C before the advance, where
its new blocks start in its table, the preempted and the finished-reported
slots. `materialize.py` turns it into `SchedulerOutput`s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import rules
from .running import idle_pass, running_pass
from .state import BIG, BatchState
from .waiting import waiting_pass

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


def schedule(st: BatchState) -> StepOut:
    finished = st.fin_pending
    st.fin_pending = torch.zeros_like(finished)
    running, waiting = st.running_mask(), st.waiting_mask()
    num_running = running.long().sum(1)
    num_eligible = num_running + waiting.long().sum(1)
    threshold = (rules.effective_threshold(st.thr0, num_eligible, st.adaptive, st.input_budget0)
                 if st.any_threshold else st.thr0)  # all zero: no instance caps long prefills
    # One read-back decides which passes have any work: a pass over empty queues does nothing.
    any_running, any_waiting = torch.stack([running.any(), waiting.any()]).tolist()

    rp = running_pass(st, threshold, st.budget0, running) if any_running else idle_pass(st, st.budget0)
    zeros = torch.zeros_like(st.C)
    big = torch.full_like(zeros, BIG)
    n_sched = zeros.scatter(1, rp.order, rp.grant)
    sched_key = big.scatter(1, rp.order, torch.where(rp.grant > 0, rp.idx, big))
    kind = zeros.scatter(1, rp.order, torch.where(rp.grant > 0, CACHED, NONE))
    old_held = zeros.scatter(1, rp.order, torch.where(rp.grant > 0, rp.old_held, zeros))
    preempted = torch.zeros_like(rp.preempted)
    if rp.rounds > 1:  # a single round means no allocation failed, so nothing was preempted
        preempted = preempted.scatter(1, rp.order, rp.preempted)
    if any_waiting:
        allowed = ~rp.preempted.any(1)  # no admission in a step that preempted (§9.A.6)
        wp = waiting_pass(st, threshold, rp.budget, rp.alive.long().sum(1), allowed, waiting)
        n_sched = n_sched.scatter_add(1, wp.order, wp.grant)
        sched_key = torch.minimum(sched_key, big.scatter(1, wp.order, torch.where(wp.admitted, st.R + rp.idx, big)))
        kind_wait = torch.where(wp.admitted, torch.where(wp.resumed, RESUMED, NEW), NONE)
        kind = kind + zeros.scatter(1, wp.order, kind_wait)
    c_before = st.C
    st.C = st.C + n_sched
    return StepOut(n_sched, sched_key, kind, c_before, old_held, preempted, finished, rp.rounds)
