"""Induction over the running pass: cut points with a loop invariant, for every invariant in the case that preempts.

The running pass in the case that preempts (`encoding/step.py:step(pre, True)`) is
the hard part of a step for Z3: N slots, each with up to N preemption
rounds, each choosing among N victims, all chained through `free`,
`budget` and `pops`. Block and budget conservation, and the PRIORITY
victim rule, are about sums and ranks threaded through that whole chain;
every per-request invariant reads a C, an n and a block count that the
chain computed.

Here the pass is cut before every slot, before and after each of the slot's
preemption rounds, and after the pass. At each cut
the pass's state (`encoding/state.py:STATE`) is replaced by fresh symbolic values
constrained only by a loop invariant J_k. The proof is then one small
query per segment between two cuts, each over one preemption round instead
of the whole pass:

* first:           Ctx  implies  J_0(x_0), with x_0 the pass's state at the first cut, built from the pre-state;
* for each segment: J_k(x) and x' = segment_k(x)  implies  J_{k+1}(x')   (no Ctx: a stronger statement);
* final:           Ctx and J_K(x) and Case(x') and x' = rest(x)  implies  Goal.

Ctx is WellFormed(s) and Inv(s), over the pre-state, which no cut touches.
J_k may also read symbols of earlier cuts (the `n_i` and `trying` of a slot's
turn, the state of the cut before it): those are terms the real run gives
values to like any other, so the induction is over the whole vector of cut
symbols. If every query is unsat, then by induction over k the values the
real pass reaches at the cuts satisfy every J_k, so the real step is one of
the steps the final query ranges over, and the goal holds for it. A lemma
or final query that is not unsat proves nothing either way (J may be too
weak for states the pass never reaches), so the caller falls back to the
monolithic query, which finds the real counterexample if there is one. An
`unknown` is never `proved`.

The lemmas never read the goal, so one proof of them serves every invariant
that uses the same loop invariant on the same encoding: `prove.py` solves
them once per (N, policy) and worker, and then one final query per invariant.

The loop invariants (`loop_invariant_of`): three invariants have their own
(`LOOP_INVARIANTS`), and every other one uses the per-row invariant `ROWS`:

* block-conservation: free + sum(blocks) == usable, free >= 0, blocks >= 0.
* budget-conservation: remaining + sum(scheduled n) == budget, remaining >= 0,
  a scheduled n > 0, and no slot at or after the cut scheduled yet.
* priority-victim-is-least-important (PRIORITY): every victim so far ranks
  below `pops`, every slot still running ranks at or above it; with the
  rank lemma (`rank_lemma`, proved once on the pre-state) a lower rank
  means a key at least as large.
* rows (`Rows`), for each slot j: popped means it ran, is out of running,
  unscheduled, with C = 0 and no blocks; not popped means running as before
  with the pre-state's C; neither popped nor scheduled means the pre-state's
  blocks; a slot at or after the cut is unscheduled; a scheduled slot runs,
  was `trying` at its turn and holds exactly that turn's n_j and
  pre-blocks + `num_blocks_to_allocate(C, n_j)`; under FCFS the victims are
  the tail, `pops` of them. n_j is `running_num_new_tokens` over the budget
  symbol of the cut before slot j: that symbol is the ghost "budget slot j
  saw", so no extra variable is needed in the encoding. The final query
  then reads every row as a shallow term of the pre-state and that ghost,
  which is why the per-request invariants (blocks-match-tokens,
  owed-nonnegative, running-owes-tokens, computed-behind-known-tokens, ...)
  become cheap. It says nothing of `pop_seq` or the budget left; every
  invariant's final query goes through at N <= 8 all the same, and one
  that did not would fall back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from ...reference_impl import rules
from ...spec.arith import and_, implies, ite, not_, or_
from ..encoding.order import key_eq, key_gt
from ..encoding.state import STATE, Pre

_ids = itertools.count()


def _b(x: Any) -> Any:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def _all(xs) -> Any:
    return z3.And(*[_b(x) for x in xs])


def _sum(xs) -> Any:
    return z3.Sum(*[z3.IntVal(0) if isinstance(x, int) else x for x in xs]) if xs else z3.IntVal(0)


def _blocks(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    return _all(
        [
            st["free"] + _sum(st["blocks"]) == pre.config.num_usable_blocks,
            st["free"] >= 0,
            *[b >= 0 for b in st["blocks"]],
        ]
    )


def _budget(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    n = len(pre.slots)
    used = _sum([ite(st["sched"][j], st["n"][j], 0) for j in range(n)])
    return _all(
        [
            st["budget"] + used == pre.config.token_budget,
            st["budget"] >= 0,
            *[implies(st["sched"][j], st["n"][j] > 0) for j in range(n)],
            *[z3.Not(_b(st["sched"][j])) for j in range(i, n)],
            *([implies(st["trying"], st["n_i"] <= st["budget"])] if "n_i" in st else []),
        ]
    )


def _victims(pre: Pre, i: int, st: dict[str, Any]) -> Any:
    rank, pops = st["victim_rank"], st["pops"]
    return _all(
        [
            pops >= 0,
            *[
                and_(
                    implies(st["in_run"][q], and_(pre.running(q), rank[q] >= pops)),
                    implies(st["preempted"][q], and_(pre.running(q), rank[q] < pops)),
                )
                for q in range(len(pre.slots))
            ],
        ]
    )


def _eq(a: Any, b: Any) -> Any:
    return _b(a) == _b(b) if isinstance(a, bool) or isinstance(b, bool) else a == b


class Rows:
    """The per-row loop invariant, with what it remembers of earlier cuts (a fresh one per obligation build).

    For every slot j, at a cut before slot i (or within slot i's rounds):

    * a popped slot ran before the step and now is out of `running`, unscheduled, with C = 0 and no blocks;
    * a slot not popped is in `running` iff it ran before, and its C is the pre-state's;
    * a slot neither popped nor scheduled holds its pre-state blocks;
    * under FCFS, the victims so far are the tail of the running order: `pops` of them, the rest still run;
    * a slot j >= i is not scheduled; a scheduled slot j < i is running, was `trying` at its turn, and was
      given exactly that turn's `n_j` (`running_num_new_tokens` over the budget it saw: the ghost, which is
      the budget symbol of the cut before slot j) and the blocks `num_blocks_to_allocate` adds for it.

    What it remembers of slot j's turn (its `n_j`, `trying`, and the C, blocks and membership the cut before
    slot j gave it) are symbols of earlier cuts; the fact that ties them to the pre-state (running then means
    C and blocks as in the pre-state) is carried along, proved at the first cut of slot j's rounds.
    """

    def __init__(self) -> None:
        self.turn: dict[int, dict[str, Any]] = {}  # slot j: its n_j, trying and the state of the cut before it

    def __call__(self, pre: Pre, i: int, st: dict[str, Any]) -> Any:
        N, L, bs = len(pre.slots), pre.config.max_model_len, pre.config.block_size
        facts: list[Any] = []
        if pre.config.fcfs:  # the victims are the tail of the running order: running is [0, num_running - pops)
            facts.append(and_(st["pops"] >= 0, st["pops"] <= pre.num_running))
            facts += [
                and_(
                    _eq(st["preempted"][j], and_(pre.running(j), j >= pre.num_running - st["pops"])),
                    _eq(st["in_run"][j], and_(pre.running(j), j < pre.num_running - st["pops"])),
                )
                for j in range(N)
            ]
        for j, s in enumerate(pre.slots):
            Cp, Bp = s.num_computed_tokens, s.num_blocks
            pj, rj, sj = st["preempted"][j], st["in_run"][j], st["sched"][j]
            facts += [
                implies(pj, and_(pre.running(j), not_(rj), not_(sj), _eq(st["C"][j], 0), _eq(st["blocks"][j], 0))),
                implies(not_(pj), and_(_eq(rj, pre.running(j)), _eq(st["C"][j], Cp))),
                implies(and_(not_(pj), not_(sj)), _eq(st["blocks"][j], Bp)),
            ]
            t = self.turn.get(j)
            if j >= i or t is None or "n_i" not in t:
                facts.append(not_(sj))
            else:
                need = rules.num_blocks_to_allocate(rules.num_tokens_need_slot(Cp, st["n"][j], 0, L), Bp, bs)
                facts.append(
                    implies(sj, and_(rj, t["trying"], _eq(st["n"][j], t["n_i"]), _eq(st["blocks"][j], Bp + need)))
                )
            if t is not None and "n_i" in t and "C" in t:  # carried: what the cut before slot j knew of it
                facts.append(implies(t["in_run"], and_(_eq(t["C"], Cp), _eq(t["blocks"], Bp))))
        return _all(facts)

    def saw(self, i: int, st: dict[str, Any]) -> None:
        """Record slot i's turn: called with the state a cut hands on (the havocked one)."""
        if i < len(st["C"]):
            t = self.turn.setdefault(i, {})
            if "n_i" not in st:  # the cut before slot i
                t.update(C=st["C"][i], blocks=st["blocks"][i], in_run=st["in_run"][i])
            else:
                t.update(n_i=st["n_i"], trying=st["trying"])


def key_ge(a, b) -> Any:
    return or_(key_gt(a, b), key_eq(a, b))


def rank_lemma(pre: Pre, rank: list[Any]) -> Any:
    """Among the running slots, ranks are distinct and a lower rank means a (priority, arrival) at least as large."""
    n = len(pre.slots)
    return _all(
        [
            implies(
                and_(pre.running(j), pre.running(q)),
                and_(rank[j] != rank[q], implies(rank[j] < rank[q], key_ge(pre.slots[j], pre.slots[q]))),
            )
            for j in range(n)
            for q in range(n)
            if j != q
        ]
    )


LoopInvariant = Callable[[Pre, int, dict[str, Any]], Any]
LOOP_INVARIANTS: dict[str, tuple[LoopInvariant, bool]] = {  # name: (J, whether it needs the rank lemma)
    "block-conservation": (_blocks, False),
    "budget-conservation": (_budget, False),
    "priority-victim-is-least-important": (_victims, True),
}
ROWS = "rows"  # the per-row loop invariant (`Rows`), shared by every invariant without one of its own


def havoc(st: dict[str, Any]) -> dict[str, Any]:
    """Fresh symbolic values for every field of the running pass's state."""
    k = next(_ids)
    out: dict[str, Any] = {k: v for k, v in st.items() if k not in STATE}  # read-only context stays as it is
    for name in STATE:
        v = st[name]
        make = z3.Bool if name in ("in_run", "sched", "preempted", "active") else z3.Int
        out[name] = (
            [make(f"cut{k}_{name}_{j}") for j in range(len(v))] if isinstance(v, list) else make(f"cut{k}_{name}")
        )
    return out


def loop_invariant_of(name: str) -> str:
    """The loop invariant an invariant's cut proof uses: its own, or the per-row one (`ROWS`) for all the others."""
    return name if name in LOOP_INVARIANTS else ROWS


@dataclass
class CutProof:
    """The lemmas of one cut proof (each to be unsat), and what the final query assumes of the state after the pass."""

    lemmas: list[tuple[bool, list[Any]]]  # (needs the context Ctx, query); the rank lemma first where there is one
    hyp: list[Any]  # the rank lemma and J at the last cut, over that cut's fresh symbols
    post: Any  # the rest of the step, from that cut's state

    def final(self, goal: Any) -> list[Any]:
        """Ctx and this and Case and not Goal: to be unsat (with Ctx added by the caller)."""
        return self.hyp + list(self.post.assume) + [z3.Not(goal)]


def obligations(pre: Pre, name: str, step: Callable[..., Any]) -> CutProof:
    """The lemma queries of the cut proof with loop invariant `name` (a LOOP_INVARIANTS key or ROWS), and its final query.

    Each lemma comes with whether it needs the context Ctx: the first (from the pre-state itself) does;
    a lemma between two cuts is proved for every state satisfying J, with no context at all, which is
    a stronger statement and a much smaller query. The lemmas do not depend on the goal, so one proof of
    them serves every invariant that uses the same loop invariant on the same encoding.
    """
    rows = Rows() if name == ROWS else None
    J, needs_rank = (rows, False) if rows is not None else LOOP_INVARIANTS[name]
    queries: list[tuple[bool, list[Any]]] = []
    hyp: list[Any] = []
    facts: list[Any] = []

    def cut(i: int, st: dict[str, Any]) -> dict[str, Any]:
        nonlocal hyp
        if needs_rank and not facts:
            facts.append(rank_lemma(pre, st["victim_rank"]))
            queries.append((True, [z3.Not(facts[0])]))
        if rows is not None and "n_i" in st:
            rows.saw(i, st)
        queries.append((not hyp, facts + hyp + [z3.Not(J(pre, i, st))]))
        nxt = havoc(st)
        if rows is not None and "n_i" not in st:
            rows.saw(i, nxt)
        hyp = [J(pre, i, nxt)]
        return nxt

    post = step(pre, True, cut)
    return CutProof(queries, facts + hyp, post)
