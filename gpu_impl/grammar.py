"""Structured output's grammar wait in the WAITING pass, as tensors: the twin of the reference's
`Scheduler._handle_blocked_waiting_request` (vllm/v1/core/sched/scheduler.py).

Both waiting passes (`waiting.py`, `waiting_cached.py`) walk the queue in
order; a request waiting for its grammar is skipped there like one with
stale output. What the grammar wait adds is what happens to the requests
the pass *reached* (it got to them before the budget, `max_num_active_seqs`
or a failed admission ended it):

* a reached request whose grammar compiled is promoted to WAITING, whether
  or not it is then admitted;
* a reached request whose grammar failed is noted (`grammar_error`); the
  next update finishes it with FINISHED_ERROR (`update.py`);
* before 0.31.0 under FCFS (`one-waiting-queue`), a skipped request that
  sat in `waiting` moves to the back of the skipped queue, which the next
  pass walks first: vLLM prepends the step's skipped requests to
  `skipped_waiting`, and a pass that reached `waiting` had emptied it.

A request that was not reached keeps its status and its place.
"""

from __future__ import annotations

import torch

from . import rules
from .state import GRAMMAR_COMPILED, GRAMMAR_FAILED, SKIPPED_QUEUE_BASE, WAITING, WAITING_FOR_GRAMMAR, BatchState

Tensor = torch.Tensor


def blocked(st: BatchState, slots: Tensor) -> Tensor:
    """Whether each slot (any shape of slot indices, row by row) waits for a grammar that has not compiled."""
    rows = torch.arange(st.B, device=st.device).view(-1, *([1] * (slots.dim() - 1)))
    return rules.waits_for_grammar(
        st.status[rows, slots] == WAITING_FOR_GRAMMAR, st.grammar[rows, slots] == GRAMMAR_COMPILED
    )


def after_reach(st: BatchState, slots: Tensor, reached: Tensor, skipped: Tensor) -> None:
    """The pass reached `slots[reached]` ([B, X] slot indices and masks, in pass order); of those it skipped
    `skipped`. Promotes, notes failures, and moves skipped requests to the skipped queue where the release has one."""
    rows = torch.arange(st.B, device=st.device)[:, None]
    status, grammar = st.status[rows, slots], st.grammar[rows, slots]
    waits = reached & (status == WAITING_FOR_GRAMMAR)
    st.status[rows, slots] = torch.where(waits & (grammar == GRAMMAR_COMPILED), WAITING, status)
    failed = waits & (grammar == GRAMMAR_FAILED)
    st.grammar_error[rows, slots] = st.grammar_error[rows, slots] | failed
    older = ~st.one_waiting_queue & ~st.prio_policy
    if not bool(older.any()):
        return
    move = reached & skipped & older[:, None] & (st.wait_pos[rows, slots] >= SKIPPED_QUEUE_BASE // 2)
    rank = move.long().cumsum(1) - 1
    st.wait_pos[rows, slots] = torch.where(move, st.skip_tail[:, None] + rank, st.wait_pos[rows, slots])
    st.skip_tail = st.skip_tail + move.long().sum(1)
