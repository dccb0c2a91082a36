"""The loop invariant of the proofs for every N (`every_n.py`): per request, per invariant's globals, per pair.

J_X (`shape_facts`) is one for every invariant: where a request is, its grant and blocks against its tokens, its
place in the queue, and whether the waiting pass has reached it. J_G (`GLOBAL_PARTS`) ties a sum's ghost to
the budget or the pool, or the admitted count to the victims. J_P (`PAIR_PARTS`) is the victim rules' pair part.
Each fact is kept by every event (`encoding/one_request.py`); `every_n.obligations` says so to Z3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from ...reference_impl import rules
from ...spec.arith import and_, cdiv, implies, min_, not_, or_
from ..encoding import one_request as ev
from ..encoding.order import key_eq, key_gt


def as_bool(x: Any) -> Any:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def and_all(*xs: Any) -> Any:
    return z3.And(*[as_bool(x) for x in xs])


def loop_shape(c: Any, g: ev.Globals, x: ev.Request) -> Any:
    """What every J_X says: where x is, and what its turn and grant look like; the globals' own ranges."""
    return and_all(*shape_facts(c, g, x))


def shape_facts(c: Any, g: ev.Globals, x: ev.Request) -> list[Any]:
    return [
        g.pops >= 0,
        g.A >= 0,
        z3.Or(g.phase == ev.RUNNING, g.phase == ev.WAITING, g.phase == ev.UPDATE),
        implies(and_(g.go, g.phase == ev.WAITING), rules.waiting_pass_allowed(g.pops)),
        z3.Not(and_all(x.in_run, x.in_wait)),
        implies(and_(x.popped, not_(x.admitted)), and_all(not_(x.in_run), x.C == 0, x.blocks == 0, not_(x.sched))),
        implies(and_(x.popped, not_(x.updated), not_(x.admitted)), x.in_wait),
        implies(not_(x.sched), x.n == 0),
        implies(x.sched, x.n > 0),
        implies(and_(x.running0, not_(x.turned)), not_(x.sched)),
        implies(not_(x.running0), x.turned),
        implies(and_(not_(x.running0), not_(x.admitted)), and_all(not_(x.popped), not_(x.sched), not_(x.in_run))),
        implies(x.admitted, and_all(g.phase != ev.RUNNING, x.sched, g.A >= 1)),
        implies(and_(x.admitted, not_(x.updated)), and_all(x.C == 0, x.in_run)),
        implies(g.owner == x.ident, and_all(x.running0, not_(x.turned), g.phase == ev.RUNNING)),
        implies(and_(g.owner == x.ident, x.trying), and_all(x.turn_n > 0, x.turn_n <= g.budget)),
        implies(and_(x.running0, not_(x.popped)), not_(x.in_wait)),
        # Until its update, a running request not popped is where the step found it, with its C.
        implies(
            and_(x.running0, not_(x.popped), not_(x.updated)), and_all(x.in_run, x.C == x.slot.num_computed_tokens)
        ),
        implies(and_(not_(x.running0), not_(x.admitted), not_(x.updated)), x.in_wait),
        implies(x.popped, g.pops >= 1),
        implies(and_(x.popped, x.admitted), rules.waiting_pass_allowed(g.pops)),  # Z10 is what allows it
        implies(g.phase != ev.UPDATE, not_(x.updated)),
        implies(not_(x.updated), and_all(not_(x.finished), x.T == x.slot.num_tokens)),
        implies(x.finished, and_all(x.blocks == 0, not_(x.in_run), not_(x.in_wait))),
        x.blocks >= 0,
        x.turn_need >= 0,
        x.C >= 0,
        implies(not_(x.updated), and_all(x.C <= x.slot.num_tokens, implies(x.sched, x.C + x.n <= x.slot.num_tokens))),
        implies(and_(g.owner == x.ident, x.trying), x.C + x.turn_n <= x.slot.num_tokens),
        implies(x.updated, x.C <= x.T),
        # Blocks follow the tokens computed (blocks-match-tokens), which the grant's allocation keeps.
        implies(and_(x.in_run, not_(x.sched), not_(x.updated)), x.blocks == _blocks_for(c, x.C)),
        implies(and_(x.sched, not_(x.updated)), x.blocks == _blocks_for(c, x.C + x.n)),
        implies(and_(x.updated, x.in_run), x.blocks == _blocks_for(c, x.C)),
        implies(and_(x.in_wait, not_(x.popped)), and_all(x.C == 0, x.blocks == 0)),
        implies(and_(g.owner == x.ident, x.trying, x.in_run), x.blocks + x.turn_need == _blocks_for(c, x.C + x.turn_n)),
        # The queue: a waiting request keeps its place; FCFS victims go in front of everyone who waited.
        implies(not_(x.running0), x.key0 >= 0),
        implies(and_(not_(x.running0), not_(x.popped)), x.key == z3.ToReal(x.key0)),
        implies(x.popped, x.key < 0) if c.fcfs else True,
        # The waiting pass walks the queue in order, and admits a prefix of what it reaches.
        implies(g.phase == ev.RUNNING, and_all(not_(g.started), not_(g.stopped), not_(x.processed))),
        implies(g.stopped, and_all(g.started, g.stop_key <= g.cursor, not_(g.go))),
        implies(x.processed, and_all(g.started, x.key <= g.cursor)),
        implies(and_(g.started, x.in_wait, not_(x.processed), not_(x.updated)), x.key > g.cursor),
        implies(x.admitted, and_all(x.processed, implies(g.stopped, x.key < g.stop_key))),
        implies(and_(x.processed, not_(x.admitted)), and_all(g.stopped, g.stop_key <= x.key)),
    ]


def _blocks_for(c: Any, tokens: Any) -> Any:
    """The blocks `tokens` computed tokens fill (blocks-match-tokens, with no drafts)."""
    return cdiv(min_(tokens, c.max_model_len), c.block_size)


def _budget(c: Any, g: ev.Globals) -> Any:
    return and_all(g.budget >= 0, g.budget + g.U == c.token_budget)


def _blocks(c: Any, g: ev.Globals) -> Any:
    return and_all(g.free >= 0, g.free + g.H == c.num_usable_blocks)


def _admission(c: Any, g: ev.Globals) -> Any:
    return and_all(implies(g.phase == ev.RUNNING, g.A == 0), implies(g.pops > 0, g.A == 0))


def no_global_part(c: Any, g: ev.Globals) -> Any:
    return True  # a per-request invariant: J_X alone carries it


def _victims_pair(c: Any, x: ev.Request, y: ev.Request) -> Any:
    """Of two requests, when x is a victim: PRIORITY, y still running has a key no larger; FCFS, y behind x in the
    old running order is a victim too. Preserved by a pop of x because the pop's guard, instantiated at y
    (`victim_instance`), says x is the policy's pick among those running."""
    if c.fcfs:
        return implies(and_(x.popped, y.running0, y.rpos0 > x.rpos0), y.popped)
    return implies(and_(x.popped, y.in_run), or_(key_gt(x.slot, y.slot), key_eq(x.slot, y.slot)))


def victim_instance(c: Any, x: ev.Request, y: ev.Request, tail: bool) -> Any:
    """The victim rule's guard for popping x, instantiated at another request y: x is the policy's pick among
    those in `running` (PRIORITY: the first maximum of the victim key; FCFS: the tail, when the rule pops it)."""
    if c.fcfs:
        return implies(y.in_run, y.rpos0 < x.rpos0) if tail else True
    return implies(y.in_run, or_(key_gt(x.slot, y.slot), key_eq(x.slot, y.slot)))


PAIR_PARTS: dict[str, Callable[[Any, ev.Request, ev.Request], Any]] = {
    "fcfs-victim-is-latest": _victims_pair,
    "priority-victim-is-least-important": _victims_pair,
}


GLOBAL_PARTS: dict[str, Callable[[Any, ev.Globals], Any]] = {
    "budget-conservation": _budget,
    "no-admission-after-preemption": _admission,
    "block-conservation": _blocks,
}
