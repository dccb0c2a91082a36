"""`RunningPass`: the state of one step's running pass, shared by the pass and its preemption rounds.

`running.py` walks the running requests in order and `preemption.py`
resolves the allocations that failed; both read and write this record. It
has a module of its own so that neither of the two imports the other to
name it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .state import BatchState

Tensor = torch.Tensor


@dataclass
class RunningPass:
    st: BatchState
    order: Tensor  # [B, R] slots in running order at the start of the step (then the non-running)
    idx: Tensor  # [B, R] column positions
    alive: Tensor  # [B, R] still in `running` (by position)
    grant: Tensor  # [B, R] tokens granted (by position); 0 = not scheduled
    old_held: Tensor  # [B, R] blocks held at the start of the step (by position)
    preempted: Tensor  # [B, R] preempted in this step (by position)
    budget: Tensor  # [B] tokens left
    cursor: Tensor  # [B] first position not yet visited
    done: Tensor  # [B] the pass has ended
    rounds: int = 0
