"""One `schedule()` plus `update_from_output()` over N request slots, as a formula.

The same function runs on two kinds of values. With Z3 terms it builds the
transition relation that `runs/prove.py` checks invariants against; with Python
ints it computes one concrete step, which `tests/unit/proofs/test_encoding_drift.py`
compares with the reference's step on thousands of states (no drift). All
arithmetic and every decision that a mutant may plant a bug in is a call to
`reference_impl.rules`, so a bug is written once and reaches both. The rules
the monitors and the torch engine need as well (the PRIORITY victim key, the
heap order, what a preemption resets, the owed count) come from `spec.rules`.

It follows vLLM's `Scheduler.schedule()` in order: the running pass
(`running.py`), the waiting pass (`waiting.py`), then the update
(`update.py`); each works on the `StepState` record (`state.py`) of the
terms they thread through: the budget, the free blocks, each slot's
membership, grant, C and blocks, and the features' counters.

Abstractions, each compared through in the drift test:

* Block ids become counts: a request holds `blocks` blocks and the pool has
  `free` free ones. Which ids are free is not modelled; that is what the
  concrete monitors check (`block-conservation`'s id part).
* The state is canonical: slots `0 .. num_running-1` are `running` in order,
  the rest are `waiting` in order (symmetry reduction: any state is a
  permutation of a canonical one). Queue positions after the step are
  computed as counts of who precedes whom.
* Synchronous engine, core scope by default: no drafts, no placeholders, no
  prefix hits, `max_num_scheduled_tokens` unset. The sampled token of a
  request that completes its prefill is abstract: two free booleans say
  whether it is the EOS or a stop token. Sync spec decode and prefix caching
  are behind the concrete flags `Config.spec_decode` and
  `Config.prefix_caching` (spec_decode.py, prefix_caching.py, waiting.py),
  and async scheduling, the engine loop's schedule-then-absorb step, behind
  `Config.async_scheduling` (async_scheduling.py); with all three off the
  formula is the core one, term for term.
* Under PRIORITY the waiting slots are sorted by (priority, arrival, id), as
  vLLM's heap pops them; `id_rank` stands for the request id's string order.
"""

from __future__ import annotations

from ...reference_impl import rules
from ...spec.arith import ite
from .running import Cut, running_pass
from .state import Post, Pre, StepState
from .update import update_from_output
from .waiting import waiting_pass


def step(pre: Pre, preempts: bool | None = None, cut: Cut | None = None) -> Post:
    """The step; `preempts` selects one case of it, `cut` lets `runs/cuts.py` cut the running pass.

    `preempts=False` is the case where the running pass pops nobody: one round per slot, assumed not to
    pop (then no later round would either). `preempts=True` is the case where it pops somebody: the waiting
    pass is dropped when `rules.waiting_pass_allowed` forbids it for every count of victims. Each case adds
    its assumption to `Post.assume`; the two cases cover every step, and each is exact within its case.
    `cut(i, state)` may replace the running pass's state (`state.STATE`): it is called before slot i (i = N:
    after the pass), and before and after each of slot i's preemption rounds, then with its `n_i` and `trying`.
    """
    c = pre.config
    st = StepState.before(pre)
    eligible = len(pre.slots)  # every slot is a live request, running or waiting
    thr = ite(
        c.adaptive,
        rules.effective_threshold(c.long_prefill_token_threshold, eligible, True, c.token_budget, c.release),
        rules.effective_threshold(c.long_prefill_token_threshold, eligible, False, c.token_budget, c.release),
    )
    running_pass(pre, st, thr, preempts, cut)
    waiting_pass(pre, st, thr, preempts)
    return update_from_output(pre, st)
