"""A step as one arbitrary request sees it: the events that touch it, for the proofs for every N (`runs/every_n.py`).

Design notes
------------
* A step of N requests is a sequence of events, each of which touches one
  request and the step's globals, never two requests at once:
  - `turn` and `allocate`, the start and the end of a running request's turn
    in the running pass (its grant is fixed at the start, from the budget
    then; its blocks are taken at the end, from the free count then);
  - `pop`, between them: a victim leaves `running` and frees its blocks;
  - `enter_waiting`, then `admit` per waiting request, head first;
  - `enter_update`, then `update` per request.
  The real step is one sequence of them. The lemmas of `every_n.py` prove a
  loop invariant preserved by every event, whatever order the events come
  in and whichever request a `pop` takes, so they hold for the real order
  and for every N: nothing in them counts requests.
* Each event is the bounded encoding's own code, not a restatement: the
  grant is `running.grant`, a pop is `running.pop_slot`, an admission is
  `waiting.size_admission`, the update is `update.update_slot`, each run on
  a one-slot `StepState` whose globals (budget, free blocks, victims so far)
  are replaced by the event's. So a mutant planted in `reference_impl.rules`
  reaches these events as it reaches the bounded proofs.
* The globals carry ghosts that the step does not compute but the sums need:
  `U`, the tokens granted to requests scheduled now (the budget's sum), `H`,
  the blocks held (block conservation's sum), `R` and `A`, how many run and
  how many were admitted, and `owner`, whose turn it is. Each event moves a
  ghost by exactly the change it makes to its one request, which is what a
  sum over the requests does when one term changes.
* Core scope: synchronous, no drafts, no prefix caching (`Config` flags off).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import z3

from ...reference_impl import rules
from ...spec.arith import and_, ite, not_, or_
from ...spec.rules import num_owed_tokens, preempted_counters
from .running import grant, pop_slot
from .state import Config, Post, Pre, Slot, StepState
from .update import update_slot
from .waiting import size_admission

RUNNING, WAITING, UPDATE = 0, 1, 2  # the step's phases, in order
NOBODY = -1  # `owner` when no running request's turn is under way


@dataclass
class Globals:
    budget: Any
    free: Any
    pops: Any
    active: Any  # the running pass goes on
    go: Any  # the waiting pass goes on
    phase: Any
    owner: Any  # the id of the request whose turn is under way, or NOBODY
    U: Any  # ghost: sum of n over the requests scheduled so far
    H: Any  # ghost: sum of blocks held
    R: Any  # ghost: how many are in `running`
    A: Any  # ghost: how many were admitted
    # The waiting pass's walk, in queue order: the key of the last request it reached, whether it has reached
    # any, and the key of the first it did not admit (after which it admits nobody).
    cursor: Any = 0
    started: Any = False
    stopped: Any = False
    stop_key: Any = 0

    @classmethod
    def fresh(cls, tag: str) -> Globals:
        i, b, r = (lambda n: z3.Int(f"{tag}_{n}")), (lambda n: z3.Bool(f"{tag}_{n}")), (lambda n: z3.Real(f"{tag}_{n}"))
        return cls(
            i("budget"), i("free"), i("pops"), b("active"), b("go"), i("phase"), i("owner"), i("U"), i("H"), i("R"),
            i("A"), r("cursor"), b("started"), b("stopped"), r("stop_key"),
        )  # fmt: skip


@dataclass
class Request:
    """One request mid-step: its slot (the pre-state, fixed) and what the step has done to it so far."""

    slot: Slot
    ident: Any  # distinct per request: what `owner` names
    running0: Any  # in `running` when the step began
    in_run: Any
    in_wait: Any
    sched: Any
    n: Any
    popped: Any
    admitted: Any
    C: Any
    blocks: Any
    turned: Any  # its turn in the running pass is over
    trying: Any  # at its turn: it may be scheduled (the pass is on, it runs, it is owed tokens)
    turn_n: Any  # at its turn: its grant
    turn_need: Any  # at its turn: the blocks the grant needs
    updated: Any
    finished: Any
    T: Any  # num_tokens after its update
    key0: Any = 0  # its place in `waiting` when the step began (waiting requests)
    rpos0: Any = 0  # its place in `running` when the step began (running requests)
    key: Any = 0  # its place in `waiting` now, as a real: a victim goes in front (FCFS) or anywhere (PRIORITY)
    processed: Any = False  # the waiting pass has reached it
    extra: dict[str, Any] = field(default_factory=dict)  # the update's verdicts (`update_slot`'s Post row)

    @classmethod
    def fresh(cls, tag: str, slot: Slot) -> Request:
        i, b = (lambda n: z3.Int(f"{tag}_{n}")), (lambda n: z3.Bool(f"{tag}_{n}"))
        return cls(
            slot, i("id"), b("running0"), b("in_run"), b("in_wait"), b("sched"), i("n"), b("popped"), b("admitted"),
            i("C"), i("blocks"), b("turned"), b("trying"), i("turn_n"), i("turn_need"), b("updated"), b("finished"),
            i("T"), i("key0"), i("rpos0"), z3.Real(f"{tag}_key"), b("processed"),
        )  # fmt: skip


def _one_slot(c: Config, x: Request, g: Globals) -> tuple[Pre, StepState]:
    """A one-slot pre-state and pass state holding x, with g's globals: what the encoding's per-slot code runs on."""
    pre = Pre(c, [x.slot], ite(x.running0, 1, 0), g.free)
    st = StepState.before(pre)
    st.in_run, st.sched, st.n, st.preempted = [x.in_run], [x.sched], [x.n], [x.popped]
    st.C, st.blocks, st.free, st.budget, st.pops, st.active = [x.C], [x.blocks], g.free, g.budget, g.pops, g.active
    st.in_wait, st.admitted = [x.in_wait], [x.admitted]
    return pre, st


def turn(c: Config, g: Globals, x: Request, thr: Any) -> tuple[Any, Globals, Request]:
    """The start of x's turn: the pass goes on while budget is left; x's grant and blocks needed are fixed."""
    guard = and_(g.phase == RUNNING, g.owner == NOBODY, x.running0, not_(x.turned))
    active = and_(g.active, g.budget > 0)
    n_i, need = grant(c, num_owed_tokens(x.slot.num_tokens, 0, x.C), x.C, x.blocks, g.budget, thr)
    trying = and_(active, x.in_run, n_i > 0)
    return guard, replace(g, active=active, owner=x.ident), replace(x, trying=trying, turn_n=n_i, turn_need=need)


def pop(c: Config, g: Globals, x: Request, fcfs_pops_tail: bool = True) -> tuple[Any, Globals, Request]:
    """x is a victim (of anyone's turn): `running.pop_slot` on it, with the ghosts moved by its change.

    Any request still running may be the victim, which covers both policies' rules, except that an FCFS victim
    is never one already scheduled: FCFS pops the tail of `running`, which is the request whose turn it is or
    one behind it, and a request is scheduled only at the end of its own turn. That holds only if the victim rule
    pops the tail, which `every_n.fcfs_pops_tail` proves of `rules.fcfs_victim_index` for every count (a
    mutant may not), so the caller says whether it may assume it."""
    unscheduled = not_(x.sched) if c.fcfs and fcfs_pops_tail else True
    guard = and_(g.phase == RUNNING, g.owner != NOBODY, x.in_run, unscheduled)
    pre, st = _one_slot(c, x, g)
    pop_slot(pre, st, 0, True, preempted_counters(False, 0, False, 0))
    was = ite(x.sched, x.n, 0)
    now = ite(st.sched[0], st.n[0], 0)
    g2 = replace(
        g,
        budget=st.budget,
        free=st.free,
        pops=g.pops + 1,
        U=g.U - was + now,
        H=g.H - x.blocks + st.blocks[0],
        R=g.R - 1,
    )
    # FCFS prepends (the last victim first); PRIORITY pushes into the heap, at a place the lemmas leave free.
    key = z3.ToReal(-1 - g.pops) if c.fcfs else z3.FreshReal("victim_key")
    x2 = replace(
        x,
        in_run=st.in_run[0],
        in_wait=True,
        sched=st.sched[0],
        n=st.n[0],
        popped=True,
        C=st.C[0],
        blocks=st.blocks[0],
        key=key,
    )
    return guard, g2, x2


def allocate(c: Config, g: Globals, x: Request) -> tuple[Any, Globals, Request]:
    """The end of x's turn (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (994-1037)): its blocks if they fit."""
    guard = and_(g.phase == RUNNING, g.owner == x.ident)
    ok = and_(x.trying, x.in_run, rules.allocation_fits(x.turn_need, 0, g.free))
    active = g.active
    if not rules.self_preemption_continues("fcfs" if c.fcfs else "priority", c.release):
        active = and_(active, not_(and_(x.trying, not_(ok))))
    g2 = replace(
        g,
        budget=g.budget - ite(ok, x.turn_n, 0),
        free=g.free - ite(ok, x.turn_need, 0),
        active=active,
        owner=NOBODY,
        U=g.U + ite(ok, x.turn_n, 0) - ite(and_(ok, x.sched), x.n, 0),
        H=g.H + ite(ok, x.turn_need, 0),
    )
    x2 = replace(
        x,
        sched=or_(x.sched, ok),
        n=ite(ok, x.turn_n, x.n),
        blocks=x.blocks + ite(ok, x.turn_need, 0),
        turned=True,
    )
    return guard, g2, x2


def enter_waiting(g: Globals) -> tuple[Any, Globals]:
    """The running pass is over; the waiting pass runs only if `rules.waiting_pass_allowed` (Z10)."""
    guard = and_(g.phase == RUNNING, g.owner == NOBODY)
    return guard, replace(g, phase=WAITING, go=rules.waiting_pass_allowed(g.pops), started=False, stopped=False)


def admit(c: Config, g: Globals, x: Request, thr: Any) -> tuple[Any, Globals, Request]:
    """x at the head of `waiting`: admitted if the pass goes on and every gate of `size_admission` passes.

    The walk goes in queue order: x's key is past the last one reached, and (what `every_n` adds to the frame
    lemma) below every other request still waiting and not reached."""
    guard = and_(g.phase == WAITING, x.in_wait, not_(x.processed), or_(not_(g.started), x.key > g.cursor))
    pre, st = _one_slot(c, x, g)
    gates, n_p, need, _ = size_admission(
        c, [x.slot], [True], x.slot.num_tokens, x.C, x.blocks, g.free, g.budget, thr, g.R, False, False, []
    )
    go = and_(g.go, g.budget > 0, g.R < c.max_num_seqs, *gates)
    g2 = replace(
        g,
        go=go,
        budget=g.budget - ite(go, n_p, 0),
        free=g.free - ite(go, need, 0),
        U=g.U + ite(go, n_p, 0) - ite(and_(go, x.sched), x.n, 0),
        H=g.H + ite(go, need, 0),
        R=g.R + ite(go, 1, 0),
        A=g.A + ite(go, 1, 0),
        cursor=x.key,
        started=True,
        stopped=or_(g.stopped, not_(go)),
        stop_key=ite(and_(not_(g.stopped), not_(go)), x.key, g.stop_key),
    )
    x2 = replace(
        x,
        processed=True,
        admitted=or_(x.admitted, go),
        in_run=or_(x.in_run, go),
        in_wait=and_(x.in_wait, not_(go)),
        sched=or_(x.sched, go),
        n=ite(go, n_p, x.n),
        blocks=x.blocks + ite(go, need, 0),
        C=ite(go, 0, x.C),
    )
    return guard, g2, x2


def enter_update(g: Globals) -> tuple[Any, Globals]:
    guard = or_(g.phase == WAITING, and_(g.phase == RUNNING, g.owner == NOBODY))
    return guard, replace(g, phase=UPDATE)


def update(c: Config, g: Globals, x: Request) -> tuple[Any, Globals, Request]:
    """update_from_output on x: `update.update_slot`, its freed blocks back to the pool."""
    guard = and_(g.phase == UPDATE, not_(x.updated))
    pre, st = _one_slot(c, x, g)
    post = Post(admitted=[x.admitted], preempted=[x.popped])
    update_slot(pre, st, post, 0)
    done = post.finished[0]
    g2 = replace(g, free=st.free, H=g.H - x.blocks + post.num_blocks[0], R=g.R - ite(and_(x.in_run, done), 1, 0))
    x2 = replace(
        x,
        C=post.num_computed_tokens[0],
        blocks=post.num_blocks[0],
        T=post.num_tokens[0],
        finished=done,
        in_run=post.running[0],
        in_wait=post.waiting[0],
        updated=True,
        extra={"sampled_stop": post.sampled_stop[0], "finished_stopped": post.finished_stopped[0]},
    )
    return guard, g2, x2
