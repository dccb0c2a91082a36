"""Induction over the running pass: cut points with a loop invariant, for the invariants that need it.

The running pass in the case that preempts (`encoding.step(pre, True)`) is
the hard part of a step for Z3: N slots, each with up to N preemption
rounds, each choosing among N victims, all chained through `free`,
`budget` and `pops`. Block and budget conservation, and the PRIORITY
victim rule, are about sums and ranks threaded through that whole chain.

Here the pass is cut before every slot (and after the last). At each cut
the pass's state (`encoding.STATE`) is replaced by fresh symbolic values
constrained only by a loop invariant J_i. The proof is then N + 1 small
queries, each over one slot's iteration instead of the whole pass:

* for i = 1 .. N:  Ctx and J_{i-1}(x) and x' = slot_{i-1}(x)  implies  J_i(x')
  (J_0 is the pass's initial state itself, built from the pre-state);
* final:           Ctx and J_N(x) and Case(x') and x' = rest(x)  implies  Goal.

Ctx is WellFormed(s) and Inv(s), over the pre-state, which no cut touches.
If every query is unsat, then by induction over i every state the real pass
reaches at cut i satisfies J_i, so the real step is one of the steps the
final query ranges over, and the goal holds for it. A lemma that fails
proves nothing either way (J may be too weak for states the pass never
reaches), so the caller falls back to the monolithic query, which finds
the real counterexample if there is one. An `unknown` is never `proved`.

The loop invariants, one per invariant (`LOOP_INVARIANTS`):

* block-conservation: free + sum(blocks) == usable, free >= 0, blocks >= 0.
* budget-conservation: remaining + sum(scheduled n) == budget, remaining >= 0,
  a scheduled n > 0, and no slot at or after the cut scheduled yet.
* priority-victim-is-least-important (PRIORITY): every victim so far ranks
  below `pops`, every slot still running ranks at or above it; with the
  rank lemma (`rank_lemma`, proved once on the pre-state) a lower rank
  means a key at least as large.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import z3

from ..spec.arith import and_, implies, ite, or_
from .encoding import STATE, Pre, _key_eq, _key_gt

_ids = itertools.count()


def _b(x: Any) -> Any:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def _all(xs) -> Any:
    return z3.And(*[_b(x) for x in xs])


def _sum(xs) -> Any:
    return z3.Sum(*[z3.IntVal(0) if isinstance(x, int) else x for x in xs]) if xs else z3.IntVal(0)


def _blocks(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    return _all([st["free"] + _sum(st["blocks"]) == pre.config.num_usable_blocks, st["free"] >= 0,
                 *[b >= 0 for b in st["blocks"]]])


def _budget(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    n = len(pre.slots)
    used = _sum([ite(st["sched"][j], st["n"][j], 0) for j in range(n)])
    return _all([st["budget"] + used == pre.config.token_budget, st["budget"] >= 0,
                 *[implies(st["sched"][j], st["n"][j] > 0) for j in range(n)],
                 *[z3.Not(_b(st["sched"][j])) for j in range(i, n)],
                 *([implies(st["trying"], st["n_i"] <= st["budget"])] if "n_i" in st else [])])


def _victims(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    rank, pops = st["victim_rank"], st["pops"]
    return _all([pops >= 0, *[and_(implies(st["in_run"][q], and_(pre.running(q), rank[q] >= pops)),
                                    implies(st["preempted"][q], and_(pre.running(q), rank[q] < pops)))
                              for q in range(len(pre.slots))]])


def key_ge(a, b) -> Any:
    return or_(_key_gt(a, b), _key_eq(a, b))


def rank_lemma(pre: Pre, rank: list[Any]) -> Any:
    """Among the running slots, ranks are distinct and a lower rank means a (priority, arrival) at least as large."""
    n = len(pre.slots)
    return _all([implies(and_(pre.running(j), pre.running(q)), and_(rank[j] != rank[q], implies(rank[j] < rank[q],
                                                                                                    key_ge(pre.slots[j], pre.slots[q]))))
                    for j in range(n) for q in range(n) if j != q])


LoopInvariant = Callable[[Pre, int, dict[str, Any]], Any]
LOOP_INVARIANTS: dict[str, tuple[LoopInvariant, bool]] = {  # name: (J, whether it needs the rank lemma)
    "block-conservation": (_blocks, False),
    "budget-conservation": (_budget, False),
    "priority-victim-is-least-important": (_victims, True),
}


def havoc(st: dict[str, Any]) -> dict[str, Any]:
    """Fresh symbolic values for every field of the running pass's state."""
    k = next(_ids)
    out: dict[str, Any] = {k: v for k, v in st.items() if k not in STATE}  # read-only context stays as it is
    for name in STATE:
        v = st[name]
        make = z3.Bool if name in ("in_run", "sched", "preempted", "active") else z3.Int
        out[name] = [make(f"cut{k}_{name}_{j}") for j in range(len(v))] if isinstance(v, list) else make(f"cut{k}_{name}")
    return out


def obligations(pre: Pre, name: str, step: Callable[..., Any], goal_of: Callable[[Any], Any]) -> list[tuple[bool, list[Any]]]:
    """The lemma queries of the cut proof, each to be unsat, final query last; with the rank lemma, its own first.

    Each comes with whether it needs the context Ctx: the first (from the pre-state itself) and the last
    do; a lemma between two cuts is proved for every state satisfying J, with no context at all, which is
    a stronger statement and a much smaller query.
    """
    J, needs_rank = LOOP_INVARIANTS[name]
    queries: list[tuple[bool, list[Any]]] = []
    hyp: list[Any] = []
    facts: list[Any] = []

    def cut(i: int, st: dict[str, Any]) -> dict[str, Any]:
        nonlocal hyp
        if needs_rank and not facts:
            facts.append(rank_lemma(pre, st["victim_rank"]))
            queries.append((True, [z3.Not(facts[0])]))
        queries.append((not hyp, facts + hyp + [z3.Not(J(pre, i, st))]))
        nxt = havoc(st)
        hyp = [J(pre, i, nxt)]
        return nxt

    post = step(pre, True, cut)
    queries.append((True, facts + hyp + list(post.assume) + [z3.Not(goal_of(post))]))
    return queries
