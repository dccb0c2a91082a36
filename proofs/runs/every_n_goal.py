"""What the proofs for every N prove (`every_n.py`): the catalogue's own predicates, read on one or two requests.

A predicate that is a conjunction over rows and pairs of rows holds of N rows iff it holds of each row and
pair, so it is read on x's view and on x beside y. A sum is read on x beside one lumped row that holds the rest
of the ghost sum. `tests/unit/test_every_n.py` proves both readings equal to the N-row one on the bounded
encoding's steps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ...spec.arith import and_, ite, not_
from ...spec.invariants.catalogue import BY_NAME
from ...spec.invariants.views import Row, StepView
from ..encoding import one_request as ev
from ..encoding.symbolic import _caching, _globals
from .every_n_loop import _and


def _row(x: ev.Request, tag: str) -> Row:
    s = x.slot
    return Row(
        request_id=tag,
        num_prompt_tokens=s.num_prompt_tokens,
        max_tokens=s.max_tokens,
        priority=s.priority,
        arrival=s.arrival,
        pre_live=True,
        pre_running=x.running0,
        pre_waiting=not_(x.running0),
        pre_preempted=and_(not_(x.running0), s.preempted),
        # Positions are not modelled: any value, of the right sign (-1 means not in that queue).
        pre_run_pos=ite(x.running0, x.rpos0, -1),
        pre_wait_pos=ite(x.running0, -1, x.key0),
        pre_num_computed_tokens=s.num_computed_tokens,
        pre_num_tokens=s.num_tokens,
        pre_num_blocks=s.num_blocks,
        scheduled=x.sched,
        num_scheduled=ite(x.sched, x.n, 0),
        admitted=x.admitted,
        preempted=x.popped,
        post_live=not_(x.finished),
        post_running=x.in_run,
        post_waiting=x.in_wait,
        post_run_pos=ite(x.in_run, z3.Abs(z3.Int(f"{tag}_post_run_pos")), -1),
        post_wait_pos=ite(x.in_wait, x.key + BIG, -1),  # the order of the keys, shifted to >= 0
        post_num_computed_tokens=x.C,
        post_num_tokens=x.T,
        post_num_blocks=x.blocks,
        sampled_stop=x.extra.get("sampled_stop", False),
        finished_stopped=x.extra.get("finished_stopped", False),
        min_tokens=s.min_tokens,
    )


def _view(pre: Any, g: ev.Globals, free0: Any, *xs: ev.Request, lumped: bool = False) -> StepView:
    """The view of x (and y); with `lumped`, beside x one row standing for every other request at once."""
    rows = [_row(x, f"r{i}") for i, x in enumerate(xs)]
    if lumped:
        x = xs[0]
        rest_n = g.U - ite(x.sched, x.n, 0)  # the budget's ghost sum less x's term
        rows.append(
            replace(
                rows[0],
                request_id="rest",
                scheduled=rest_n > 0,
                num_scheduled=rest_n,
                pre_live=True,
                post_live=True,
                post_num_blocks=g.H - x.blocks,  # the pool's ghost sum less x's term
            )
        )
    return StepView(
        rows=tuple(rows),
        pre_num_free_blocks=free0,
        post_num_free_blocks=g.free,
        **_globals(pre),
        **_caching(pre, 0),
    )


SUMS = ("budget-conservation", "block-conservation")
BIG = z3.Real(
    "big"
)  # above minus every key in a run: the queue's positions are the keys shifted by it  # the predicates that add a count over the rows


def goal(name: str, pre: Any, g: ev.Globals, free0: Any, x: ev.Request, y: ev.Request) -> Any:
    """The invariant after the step, for every N: the catalogue's own predicate, on x's view and on x beside y,
    or for a sum on x beside one lumped row holding the rest of the ghost sum. Every other invariant of EVERY_N
    is a conjunction over rows and pairs of rows (`test_every_n.py` checks it at N = 3), so it holds of N rows
    iff it holds of each row and each pair; a sum's total is x's term plus the rest, which the lumped row holds."""
    holds = BY_NAME[name].holds
    if name in SUMS:
        return holds(_view(pre, g, free0, x, lumped=True))
    return _and(holds(_view(pre, g, free0, x)), holds(_view(pre, g, free0, x, y)))
