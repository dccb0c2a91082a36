"""Liveness: can the scheduler stop making progress for good?

The scheduler is deterministic, so with no new arrivals a step that
schedules nothing, preempts nothing and finishes nothing leaves the state
exactly as it was, and every later step repeats it: a fixed point is a
livelock that lasts forever. Z3 searches, for each N, for such a *stuck
state* among all well-formed states that satisfy the inductive invariants
(so every reachable state is covered; some unreachable ones may be too,
which is why each finding is replayed on the reference for many steps).

Two properties are checked this way:

* `no-livelock`: no live request is stuck forever. vLLM 0.33.0 breaks it
  (D1): a request whose full sequence needs more blocks than
  the pool has is preempted or never admitted, and never finished or
  rejected.
* `fits-alone-is-admitted`: a waiting request whose full sequence fits in
  the empty pool is never stuck. vLLM 0.33.0 breaks it too, by head-of-line
  blocking behind a request of the first kind.

Cycles longer than one step (preemption thrash) are not fixed points and
are not searched for here.
"""

from __future__ import annotations

import time
from typing import Any

import z3

from ...reference_impl import api, rules
from ...spec.arith import and_, min_, or_
from ...spec.invariants import INVARIANTS
from ...spec.output import ModelRunnerOutput
from ..encoding.step import step
from ..encoding.symbolic import fresh, state_view, well_formed
from .concrete import to_state
from .prove import BLOCK_SIZE, Result, minimise, new_solver

PROPERTIES = ("no-livelock", "fits-alone-is-admitted")
REPLAY_STEPS = 50


def check(prop: str, n: int, fcfs: bool, timeout_s: float = 30.0) -> Result:
    policy = "fcfs" if fcfs else "priority"
    t0 = time.perf_counter()
    pre = fresh(n, fcfs, BLOCK_SIZE)
    post = step(pre)
    c = pre.config
    stuck = and_(*[and_(z3.Not(post.scheduled[j]), z3.Not(post.preempted[j])) for j in range(n)])
    # A pool without a single usable block is a misconfiguration, not a livelock worth reporting.
    facts = (
        well_formed(pre) + [i.holds(state_view(pre)) for i in INVARIANTS if i.state] + [stuck, c.num_usable_blocks >= 1]
    )
    if prop == "fits-alone-is-admitted":
        fits_alone = [
            and_(
                j >= pre.num_running,
                rules.num_blocks_to_allocate(min_(s.num_tokens, c.max_model_len), 0, c.block_size)
                <= c.num_usable_blocks,
            )
            for j, s in enumerate(pre.slots)
        ]
        facts.append(or_(*fits_alone))
    solver = new_solver(timeout_s)
    solver.add(*facts)
    verdict = solver.check()
    if verdict == z3.unsat:
        return Result(prop, n, policy, "proved", time.perf_counter() - t0)
    if verdict == z3.unknown:
        return Result(prop, n, policy, "unknown", time.perf_counter() - t0)
    model = minimise(pre, facts, timeout_s) or solver.model()
    state, sampled = to_state(model, pre)
    confirmed, detail = replay_stuck(state)
    return Result(
        prop, n, policy, "violated" if confirmed else "unconfirmed", time.perf_counter() - t0, detail, state, sampled
    )


def replay_stuck(state: Any, steps: int = REPLAY_STEPS) -> tuple[bool, dict[str, Any]]:
    """Step the reference from `state`: a livelock schedules nothing and changes nothing, every time."""
    s = state
    for k in range(steps):
        output, after = api.schedule(s)
        if output.num_scheduled_tokens or output.preempted_req_ids:
            return False, {"progress_at_step": k}
        s, _ = api.update_from_output(after, output, ModelRunnerOutput({}))
        if (s.running, s.waiting, s.free_block_queue) != (state.running, state.waiting, state.free_block_queue):
            return False, {"changed_at_step": k}
    need = {
        rid: rules.num_blocks_to_allocate(min(r.num_tokens, s.config.max_model_len), 0, s.config.block_size)
        for rid, r in s.requests.items()
    }
    return True, {
        "stuck_for_steps": steps,
        "waiting": list(s.waiting),
        "running": list(s.running),
        "blocks_needed": need,
        "usable_blocks": s.config.num_usable_blocks,
    }
