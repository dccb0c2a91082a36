"""What the proofs for every N prove (`every_n.py`): the catalogue's own predicates, read on one or two requests.

A predicate that is a conjunction over rows and pairs of rows holds of N rows iff it holds of each row and
pair, so it is read on x's view and on x beside y. A sum is read on x beside one lumped row that holds the rest
of the ghost sum. `tests/unit/proofs/test_every_n.py` proves both readings equal to the N-row one on the bounded
encoding's steps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ...spec.arith import ite
from ...spec.invariants.catalogue import BY_NAME
from ...spec.invariants.views import Row, StepView
from ..encoding import one_request as ev
from ..encoding.state import Post, Pre
from ..encoding.symbolic import caching_terms, global_terms, step_view
from .every_n_loop import and_all

SUMS = ("budget-conservation", "block-conservation")  # the predicates that add a count over the rows
BIG = z3.Real("big")  # above minus every key in a run: the queue's positions are the keys shifted by it


def _row(pre: Pre, x: ev.Request, free0: Any, tag: str) -> Row:
    """x's row, as the bounded encoding's `step_view` reads it from a one-slot state and step. Only the queue
    positions are x's own: its places when the step began, and its key's order after it."""
    one = Pre(pre.config, [x.slot], ite(x.running0, 1, 0), free0)
    post = Post(
        scheduled=[x.sched],
        num_scheduled=[ite(x.sched, x.n, 0)],
        admitted=[x.admitted],
        preempted=[x.popped],
        finished=[x.finished],
        running=[x.in_run],
        waiting=[x.in_wait],
        run_pos=[ite(x.in_run, z3.Abs(z3.Int(f"{tag}_post_run_pos")), -1)],  # any place, of the right sign
        wait_pos=[ite(x.in_wait, x.key + BIG, -1)],  # the order of the keys, shifted to >= 0
        num_computed_tokens=[x.C],
        num_tokens=[x.T],
        num_blocks=[x.blocks],
        sampled_stop=[x.extra.get("sampled_stop", False)],
        finished_stopped=[x.extra.get("finished_stopped", False)],
    )
    (row,) = step_view(one, post).rows
    return replace(
        row,
        request_id=tag,
        pre_run_pos=ite(x.running0, x.rpos0, -1),
        pre_wait_pos=ite(x.running0, -1, x.key0),
    )


def _view(pre: Pre, g: ev.Globals, free0: Any, *xs: ev.Request, lumped: bool = False) -> StepView:
    """The view of x (and y); with `lumped`, beside x one row standing for every other request at once."""
    rows = [_row(pre, x, free0, f"r{i}") for i, x in enumerate(xs)]
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
        **global_terms(pre),
        **caching_terms(pre, 0),
    )


def goal(name: str, pre: Any, g: ev.Globals, free0: Any, x: ev.Request, y: ev.Request) -> Any:
    """The invariant after the step, for every N: the catalogue's own predicate, on x's view and on x beside y,
    or for a sum on x beside one lumped row holding the rest of the ghost sum. Every other invariant of EVERY_N
    is a conjunction over rows and pairs of rows (`test_every_n.py` checks it at N = 3), so it holds of N rows
    iff it holds of each row and each pair; a sum's total is x's term plus the rest, which the lumped row holds."""
    holds = BY_NAME[name].holds
    if name in SUMS:
        return holds(_view(pre, g, free0, x, lumped=True))
    return and_all(holds(_view(pre, g, free0, x)), holds(_view(pre, g, free0, x, y)))
