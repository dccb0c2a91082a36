"""Proofs for every N: invariants proved for any number of requests, by a loop invariant over the step's events.

The argument (docs/proofs.md, "Proofs for every N")
---------------------------------------------------
A step of N requests is a finite sequence of events (`encoding/one_request.py`),
each touching one request x and the step's globals g (budget, free blocks,
victims so far, phase, whose turn it is, and ghost sums). A loop invariant is
a pair: J_G(g), about the globals, and J_X(g, x), about one request. The
invariant "J_G holds and J_X holds of every request" is

* established by the step's start: from WellFormed and the pre-state's
  invariants, of x alone (`init`);
* kept by every event on x, for x (`own`), and for any other request y, which
  the event leaves as it was but whose J_X may read the globals it moved
  (`frame`); the phase changes keep it too;
* and at the end it implies the goal: the catalogue's own predicate on the
  view of x, or of x beside y (pairwise invariants), with the ghost sums for
  the invariants that are sums (`exit`).

Every query has one or two requests, and N appears nowhere: so if each is
unsat, by induction over the events the invariant holds after any step of
any number of requests. The events are over-approximated where the
invariants do not care (a pop may take any request still running, at any
turn; the threshold is any value >= 0), which only adds behaviours, so the
proof covers the real ones. A query that is sat is a counterexample to
induction, not necessarily a real one; then the bounded proof (`prove.check`)
at N = 1, 2, 3 looks for a real counterexample and replays it on the
reference. A query that is unknown makes the cell `unknown`, never `proved`.

Which invariants: `EVERY_N`. The per-request state facts of the pre-state
(`PER_REQUEST`) are the catalogue's state invariants that are a conjunction
over rows, evaluated on x's one-row view; `test_every_n.py` checks that each
is, at N = 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import z3

from ...reference_impl import rules
from ...spec.arith import and_, implies, not_
from ...spec.invariants.catalogue import BY_NAME
from ...spec.versions import DEFAULT_RELEASE
from ..encoding import one_request as ev
from ..encoding.symbolic import fresh, state_view, well_formed
from . import every_n_loop as loop
from .every_n_goal import BIG, SUMS, goal
from .every_n_loop import GLOBAL_PARTS, PAIR_PARTS, and_all, as_bool, no_global_part
from .prove import BLOCK_SIZE, Result, check

EVERY_N = (
    "owed-nonnegative",
    "budget-conservation",
    "no-starvation-after-prepend",
    "no-admission-after-preemption",
    "block-conservation",
    "scheduled-subset-running",
    "blocks-match-tokens",
    "waiting-holds-nothing",
    "one-place",
    "token-bounds",
    "stop-token-finishes",
    "running-owes-tokens",
    "computed-behind-known-tokens",
    "no-decode-past-max-tokens",
    "fcfs-victim-is-latest",
    "priority-victim-is-least-important",
    "skipped-keep-order",
)
# An invariant of one policy holds trivially under the other (its predicate says so): the cell is n/a there.
POLICY_ONLY = {"fcfs-victim-is-latest": "fcfs", "priority-victim-is-least-important": "priority"}
PER_REQUEST = (
    "owed-nonnegative",
    "blocks-match-tokens",
    "waiting-holds-nothing",
    "token-bounds",
    "running-owes-tokens",
    "computed-behind-known-tokens",
)
BOUNDED_SEARCH = 3  # a failed lemma: the bounded proof looks for a real counterexample at N = 1 .. this

# ---- the obligations ---------------------------------------------------------------------------------------


def fcfs_pops_tail() -> bool:
    """Whether `rules.fcfs_victim_index` picks the last of k running requests for every k >= 1 (proved, not
    sampled): then an FCFS victim is never a request already scheduled (`one_request.pop`)."""
    k = z3.Int("k")
    s = z3.Solver()
    s.add(k >= 1, z3.Not(as_bool(rules.fcfs_victim_index(k) == k - 1)))
    return bool(s.check() == z3.unsat)


@dataclass
class Model:
    """The symbols of one proof: the config, requests x and y, the globals, and the facts of the pre-state."""

    pre: Any
    x: ev.Request
    y: ev.Request
    g: ev.Globals
    thr: Any
    free0: Any
    facts: list[Any] = field(default_factory=list)  # x's pre-state, and the config
    y_facts: list[Any] = field(default_factory=list)  # y's pre-state, and how x and y differ


def model(fcfs: bool, release: str) -> Model:
    pre_x = fresh(1, fcfs, BLOCK_SIZE, prefix="x_", release=release)
    pre_y = fresh(1, fcfs, BLOCK_SIZE, prefix="y_", release=release)
    pre_y.config = pre_x.config
    x = ev.Request.fresh("x", pre_x.slots[0])
    y = ev.Request.fresh("y", pre_y.slots[0])
    thr = z3.Int("threshold")  # any threshold: the real one (rules.effective_threshold) is one of them
    facts_of = []
    for r, p in ((x, pre_x), (y, pre_y)):
        own = well_formed(p) + [BY_NAME[n].holds(state_view(p)) for n in PER_REQUEST]
        facts_of.append(
            own
            + [
                r.running0 == p.running(0),
                r.ident != ev.NOBODY,
                implies(not_(r.running0), r.key0 >= 0),
                implies(r.running0, r.rpos0 >= 0),
            ]
        )
    pair = [
        x.ident != y.ident,
        implies(and_(not_(x.running0), not_(y.running0)), x.key0 != y.key0),  # one place each in `waiting`
        implies(and_(x.running0, y.running0), x.rpos0 != y.rpos0),  # ... and in `running`
    ]
    return Model(
        pre_x,
        x,
        y,
        ev.Globals.fresh("g"),
        thr,
        z3.Int("free0"),
        facts_of[0] + [thr >= 0],
        facts_of[1] + pair,
    )


def _start(m: Model, x: ev.Request) -> ev.Request:
    s = x.slot
    return replace(
        x,
        in_run=x.running0,
        in_wait=not_(x.running0),
        sched=False,
        n=0,
        popped=False,
        admitted=False,
        C=s.num_computed_tokens,
        blocks=s.num_blocks,
        turned=not_(x.running0),
        trying=False,
        turn_n=0,
        turn_need=0,
        updated=False,
        finished=False,
        T=s.num_tokens,
        key=z3.ToReal(x.key0),
        processed=False,
    )


# What an event does when it does anything: the reachability query wants a state where it does.
WITNESS = {"turn": "trying", "pop": "popped", "allocate": "sched", "admit": "admitted", "update": "updated"}


def obligations(m: Model, name: str) -> list[tuple[str, list[Any]]]:
    """(name, facts) pairs, each to be unsat (init, own and frame per event, the phase changes, exit), except the
    `reachable` ones, each to be sat: a state the loop invariant allows that takes the event and where the event
    does something (`WITNESS`), so no lemma holds only because its hypotheses contradict each other."""
    c, g, x, y = m.pre.config, m.g, m.x, m.y
    JG = GLOBAL_PARTS.get(name, no_global_part)

    def J(gg: ev.Globals, xx: ev.Request) -> Any:
        return loop.loop_shape(c, gg, xx)

    out: list[tuple[str, list[Any]]] = []
    tail = fcfs_pops_tail()
    g0 = ev.Globals(
        budget=c.token_budget, free=m.free0, pops=0, active=True, go=False, phase=ev.RUNNING, owner=ev.NOBODY,
        U=0, H=c.num_usable_blocks - m.free0, R=g.R, A=0, cursor=g.cursor, started=False, stopped=False,
        stop_key=g.stop_key,
    )  # fmt: skip
    x0 = _start(m, x)
    start = [m.free0 >= 0, m.free0 <= c.num_usable_blocks, implies(x.running0, g.R >= 1), g.R >= 0]
    out.append(("init", m.facts + start + [z3.Not(and_all(JG(c, g0), J(g0, x0)))]))
    events: dict[str, Callable[[ev.Globals, ev.Request], tuple[Any, ev.Globals, ev.Request]]] = {
        "turn": lambda gg, xx: ev.turn(c, gg, xx, m.thr),
        "pop": lambda gg, xx: ev.pop(c, gg, xx, tail),
        "allocate": lambda gg, xx: ev.allocate(c, gg, xx),
        "admit": lambda gg, xx: ev.admit(c, gg, xx, m.thr),
        "update": lambda gg, xx: ev.update(c, gg, xx),
    }
    # The own lemmas and the phase changes speak of x alone: with one request there is no y. The frame lemma and
    # the pairwise exit have y as their subject.
    own = m.facts + [JG(c, g), J(g, x)]
    hyp = own + m.y_facts + [J(g, y)]
    JP = PAIR_PARTS.get(name)
    pair = [JP(c, x, y), JP(c, y, x)] if JP is not None else []
    if JP is not None:
        y0 = _start(m, y)
        out.append(("init: pair", m.facts + m.y_facts + [z3.Not(and_all(JP(c, x0, y0), JP(c, y0, x0)))]))
    for event, fn in events.items():
        guard, g2, x2 = fn(g, x)
        # Not vacuous: some state satisfying the loop invariant takes this event (a model is wanted, `sat`).
        out.append((f"{event}: reachable", own + [as_bool(guard), as_bool(getattr(x2, WITNESS[event]))]))
        out.append((f"{event}: own", own + [as_bool(guard), z3.Not(and_all(JG(c, g2), J(g2, x2)))]))
        # The waiting pass reaches the head first: y, waiting and not reached, is behind x (an instance, at y, of
        # the real guard "x's key is the least of those not reached").
        head = [implies(and_(y.in_wait, not_(y.processed)), y.key > x.key)] if event == "admit" else []
        out.append((f"{event}: frame", hyp + head + [as_bool(guard), z3.Not(J(g2, y))]))
        if JP is not None:  # the pair part, both ways round; an event on a third request changes neither
            pick = [loop.victim_instance(c, x, y, tail)] if event == "pop" else []
            kept = and_all(JP(c, x2, y), JP(c, y, x2))
            out.append((f"{event}: pair", hyp + pair + pick + [as_bool(guard), z3.Not(kept)]))
    for phase, fn2 in (("enter_waiting", ev.enter_waiting), ("enter_update", ev.enter_update)):
        guard, g2 = fn2(g)
        out.append((f"{phase}", own + [as_bool(guard), z3.Not(and_all(JG(c, g2), J(g2, x)))]))
    if name in SUMS:  # a sum is read when every request has been updated: the ghosts then are the totals
        done = [g.phase == ev.UPDATE, x.updated]
        out.append(("exit", own + done + [z3.Not(goal(name, m.pre, g, m.free0, x, y))]))
    else:  # a request's row after the step is its update applied to it as the waiting pass left it
        _, g1, x1 = ev.update(c, g, x)
        _, g2, y1 = ev.update(c, g1, y)
        before = [g.phase == ev.UPDATE, not_(x.updated), not_(y.updated), BIG + x.key >= 0, BIG + y.key >= 0]
        out.append(("exit", hyp + pair + before + [z3.Not(goal(name, m.pre, g2, m.free0, x1, y1))]))
    return sorted(out, key=lambda o: not o[0].endswith("reachable"))  # not vacuous, first: then the lemmas


# ---- running them ------------------------------------------------------------------------------------------


@dataclass
class EveryN:
    invariant: str
    policy: str
    verdict: str  # proved | violated (a bounded counterexample, replayed) | unconfirmed | unknown | error | n/a
    seconds: float
    queries: int
    detail: str = ""
    counterexample: Result | None = None


def prove_every_n(name: str, fcfs: bool, timeout_s: float = 60.0, release: str = DEFAULT_RELEASE) -> EveryN:
    """Every obligation must be unsat. One that is sat is a counterexample to induction: the bounded proof then
    looks for a real one at small N (replayed on the reference); one that is unknown makes the cell unknown."""
    t0 = time.perf_counter()
    policy = "fcfs" if fcfs else "priority"
    if POLICY_ONLY.get(name, policy) != policy:
        return EveryN(name, policy, "n/a", 0.0, 0, f"an invariant of {POLICY_ONLY[name].upper()} only")
    obligations_ = obligations(model(fcfs, release), name)
    for label, facts in obligations_:
        s = z3.Solver()
        s.set("timeout", max(50, int(timeout_s * 1000)))
        s.add(*[as_bool(f) for f in facts])
        verdict = s.check()
        wanted = z3.sat if label.endswith("reachable") else z3.unsat
        if verdict == wanted:
            continue
        seconds = time.perf_counter() - t0
        if verdict == z3.unknown:
            return EveryN(name, policy, "unknown", seconds, len(obligations_), f"{label}: {s.reason_unknown()}")
        if wanted == z3.sat:  # the hypotheses admit no state that takes this event: the lemmas prove nothing
            return EveryN(name, policy, "error", seconds, len(obligations_), f"{label}: vacuous (no such state)")
        return _bounded(name, fcfs, timeout_s, release, label, t0, len(obligations_))
    return EveryN(name, policy, "proved", time.perf_counter() - t0, len(obligations_))


def _bounded(name: str, fcfs: bool, timeout_s: float, release: str, label: str, t0: float, k: int) -> EveryN:
    """A lemma failed: a real counterexample, if the bounded proof finds one at N <= BOUNDED_SEARCH."""
    policy = "fcfs" if fcfs else "priority"
    for n in range(1, BOUNDED_SEARCH + 1):
        r = check(BY_NAME[name], n, fcfs, timeout_s, release=release)
        if r.verdict in ("violated", "unconfirmed"):
            seconds = time.perf_counter() - t0
            return EveryN(name, policy, r.verdict, seconds, k, f"{label}; bounded at N = {n}: {r.verdict}", r)
    seconds = time.perf_counter() - t0
    detail = f"{label} has a counterexample to induction; none is real up to N = {BOUNDED_SEARCH}"
    return EveryN(name, policy, "unknown", seconds, k, detail)


def run(
    invariants: Iterable[str] = EVERY_N,
    policies: Iterable[str] = ("fcfs", "priority"),
    timeout_s: float = 60.0,
    release: str = DEFAULT_RELEASE,
) -> list[EveryN]:
    return [prove_every_n(name, p == "fcfs", timeout_s, release) for p in policies for name in invariants]
