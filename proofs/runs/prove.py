"""Inductive proofs of the invariant catalogue, one (invariant, N, policy) at a time.

For N live requests, with every length, counter, budget and pool size an
unbounded integer, each query asks Z3 whether

    WellFormed(s) and Inv(s) and Step(s, out, s') and not (I(s, out, s') and [I(s') if I is a state invariant])

is satisfiable, where Inv is the conjunction of the catalogue's state
invariants. `unsat` is `proved`; a model is a counterexample to induction,
which is rebuilt as a concrete state, replayed on the reference, and
reported as `violated` only if the reference breaks the invariant too
(otherwise `unconfirmed`: the encoding drifted, a bug in the proof); a
timeout is `unknown`, never shown as proved.

Strengthening: `running-owes-tokens` (after a synchronous step every
running request owes at least one token) is what makes
`running-served-while-budget-lasts` inductive; the first counterexample
to induction showed a running request with nothing owed left unscheduled.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import z3

from ...spec.arith import and_, implies, not_
from ...spec.invariants import DECISION_ROWS_BY_NAME, INVARIANTS, PROVABLE, Invariant
from ...spec.versions import DEFAULT_RELEASE, known_violation
from ..encoding.order import heap_before
from ..encoding.state import Pre
from ..encoding.step import step
from ..encoding.symbolic import fresh, post_state_view, state_view, step_view, well_formed
from .concrete import Sampled, replay, to_state
from .cuts import CutProof, loop_invariant_of, obligations

PRIORITY_ONLY = ("priority-victim-is-least-important",)  # trivially true under FCFS: no cut proof needed
BLOCK_SIZE = 4  # concrete: ceil(x / bs) with a symbolic bs is nonlinear; 4 makes partial blocks common


@dataclass
class Result:
    invariant: str
    n: int
    policy: str
    verdict: str  # proved | violated | unknown | unconfirmed | known (a violation the release is known to commit)
    seconds: float
    counterexample: dict[str, Any] | None = None
    state: Any = None  # the concrete pre-state of a counterexample
    sampled: Sampled = field(default_factory=dict)
    cpu_seconds: float = 0.0  # this process's CPU time for the check: wall time is noisy on a shared machine
    release: str = DEFAULT_RELEASE  # the vLLM release whose rules were proved (spec/versions.py)


def new_solver(timeout_s: float) -> z3.Solver:
    # elim-term-ite names each if-then-else term, and arith.solver 2 is the older simplex: together about 13%
    # less CPU over the default run than plain smt after solve-eqs (same logic, unbounded integers).
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "elim-term-ite", "smt").solver()
    s.set("arith.solver", 2)
    s.set("timeout", int(timeout_s * 1000))
    return s


def minimise(pre: Pre, facts: list[Any], timeout_s: float) -> z3.ModelRef | None:
    """The smallest counterexample: shortest prompts and outputs, smallest numbers, per `Optimize`."""
    opt = z3.Optimize()
    opt.set("timeout", int(timeout_s * 1000))
    opt.add(*facts)
    c = pre.config
    lengths = [s.num_prompt_tokens + s.num_output_tokens + s.max_tokens for s in pre.slots]
    opt.minimize(z3.Sum(*lengths) if lengths else z3.IntVal(0))
    opt.minimize(c.max_model_len + c.token_budget + c.num_usable_blocks)
    for s in pre.slots:  # keep the numbers small and readable where they are free
        for t in (s.priority, s.arrival):
            opt.add(t >= 0)
    return opt.model() if opt.check() == z3.sat else None


def goal_of(invariant: Invariant, pre: Pre, post: Any) -> Any:
    goal = invariant.holds(step_view(pre, post))
    if invariant.state:
        goal = z3.And(goal, invariant.holds(post_state_view(pre, post)))
    return goal


def solve(facts: list[Any], deadline: float) -> Any:
    solver = new_solver(max(deadline - time.perf_counter(), 0.05))
    solver.add(*facts)
    return solver.check(), solver


def by_cuts(
    invariant: Invariant,
    pre: Pre,
    context: list[Any],
    deadline: float,
    proofs: dict[str, tuple[CutProof, bool]] | None = None,
) -> bool:
    """True if every lemma of the cut proof (cuts.py) and its final query are unsat; False otherwise (fall back,
    never `proved`). `proofs` keeps, per loop invariant, the built cut proof and whether its lemmas were all unsat:
    the lemmas do not depend on the invariant, so they are solved once per encoding, and only the final query is
    solved per invariant."""
    name = loop_invariant_of(invariant.name)
    if proofs is None or name not in proofs:
        proof = obligations(pre, name, step)
        lemmas_hold = all(solve((context if needs else []) + q, deadline)[0] == z3.unsat for needs, q in proof.lemmas)
        if proofs is not None:
            proofs[name] = (proof, lemmas_hold)
    proof, lemmas_hold = proofs[name] if proofs is not None else (proof, lemmas_hold)
    return lemmas_hold and solve(context + proof.final(goal_of(invariant, pre, proof.post)), deadline)[0] == z3.unsat


def _heap_order(pre: Pre, context: list[Any]) -> list[Any]:
    """Under PRIORITY, the heap order among the pre-state's waiting slots is their slot order: a fact of the context.

    WellFormed only says that each waiting slot comes before the next in the heap order; the whole order follows by
    transitivity, which Z3 would otherwise rediscover inside every query that compares two waiting requests. The
    fact is proved here from the context (one small query) and added to it only when that proof is `unsat`, so it
    assumes nothing the context does not already imply."""
    if pre.config.fcfs:
        return []
    n, slots = len(pre.slots), pre.slots
    fact = [
        implies(and_(not_(pre.running(k)), not_(pre.running(j))), heap_before(slots[k], slots[j]) == z3.BoolVal(k < j))
        for k in range(n)
        for j in range(n)
        if k != j
    ]
    if not fact:
        return []
    proved = solve(context + [z3.Not(z3.And(*fact))], time.perf_counter() + 30)[0] == z3.unsat
    return fact if proved else []


_LAST: dict[tuple[int, bool, bool, str], tuple[Pre, list[Any], Any]] = {}  # (N, fcfs, preempts, release)
_CUTS: dict[tuple[int, bool, str], dict[str, tuple[CutProof, bool]]] = {}  # per encoding of the case that preempts


def encoded_step(
    n: int, fcfs: bool, preempts: bool, reuse: bool, release: str = DEFAULT_RELEASE
) -> tuple[Pre, list[Any], Any]:
    """The pre-state, the context and one case of the step. `reuse` keeps the last ones (one N and policy):
    the jobs of a run come in (policy, N) order, so a worker builds each encoding once, not once per invariant.
    Never reused under a mutant, which changes the rules the encoding is built from."""
    key = (n, fcfs, preempts, release)
    if reuse and key in _LAST:
        return _LAST[key]
    pre = fresh(n, fcfs, BLOCK_SIZE, release=release)
    context = well_formed(pre) + [i.holds(state_view(pre)) for i in INVARIANTS if i.state]
    built = (pre, context + _heap_order(pre, context), step(pre, preempts))
    if reuse:
        if not any(k[:2] == key[:2] and k[3] == release for k in _LAST):
            _LAST.clear()
            _CUTS.clear()
        _LAST[key] = built
    return built


def check(
    invariant: Invariant,
    n: int,
    fcfs: bool,
    timeout_s: float = 30.0,
    reuse: bool = False,
    release: str = DEFAULT_RELEASE,
) -> Result:
    """Both cases of the step (pops nobody, pops somebody) must be unsat; each case's model is a real step."""
    cpu0 = time.process_time()
    r = _check(invariant, n, fcfs, timeout_s, reuse, release)
    r.cpu_seconds, r.release = time.process_time() - cpu0, release
    return mark_known(r, invariant, release)


def mark_known(r: Result, invariant: Invariant, release: str) -> Result:
    """A violation, replayed, of an invariant `release` is known to break (`spec.versions.KNOWN_VIOLATIONS`):
    verdict "known", never a failure."""
    known = known_violation(invariant.name, release)
    if r.verdict == "violated" and known is not None:
        r.verdict = "known"
        r.counterexample = {**(r.counterexample or {}), "known": known.why}
    return r


def by_running_count(pre: Pre) -> list[list[Any]]:
    """One query split into N + 1, one per number of running slots: together they cover every state the context
    allows, since `well_formed` bounds that number to 0..N.

    A waiting slot's queue position is its index less the number of running slots: with that number symbolic,
    Z3 has to rediscover which slot sits where in every comparison of positions. Fixed, each query is small:
    admission-exact at N = 4 went from unknown after 60 s to 0.6 s in all, and the feature run's queries where
    nothing is preempted from tens of seconds to a fraction of one (benchmarks/RESULTS.md)."""
    return [[pre.num_running == k] for k in range(len(pre.slots) + 1)]


def _cases(invariant: Invariant, pre: Pre) -> list[list[Any]]:
    """The decision invariants' row forms, which read positions in every sum, are split (`by_running_count`).
    The catalogue is left whole: its queries are fast already, and its cut proofs are built for the unsplit state."""
    return by_running_count(pre) if invariant.name in DECISION_ROWS_BY_NAME else [[]]


def _check(invariant: Invariant, n: int, fcfs: bool, timeout_s: float, reuse: bool, release: str) -> Result:
    policy = "fcfs" if fcfs else "priority"
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    for preempts in (False, True):
        pre, context, post = encoded_step(n, fcfs, preempts, reuse, release)
        cases = _cases(invariant, pre)
        cut = preempts and not (fcfs and invariant.name in PRIORITY_ONLY) and len(cases) == 1
        proofs = _CUTS.setdefault((n, fcfs, release), {}) if reuse else None
        if cut and by_cuts(invariant, pre, context, deadline, proofs):
            continue
        refuted = z3.Not(goal_of(invariant, pre, post))
        for case in cases:
            facts = context + post.assume + case + [refuted]
            verdict, solver = solve(facts, deadline)
            if verdict == z3.unsat:
                continue
            if verdict == z3.unknown:
                return Result(invariant.name, n, policy, "unknown", time.perf_counter() - t0)
            return replayed(invariant, n, policy, pre, minimise(pre, facts, timeout_s) or solver.model(), t0)
    return Result(invariant.name, n, policy, "proved", time.perf_counter() - t0)


def replayed(invariant: Invariant, n: int, policy: str, pre: Pre, model: z3.ModelRef, t0: float) -> Result:
    """A model of the negated goal, as a concrete state stepped by the reference: `violated` only if it breaks too."""
    state, sampled = to_state(model, pre)
    confirmed, what = replay(state, sampled, invariant)
    c = pre.config
    if "error" in what:
        detail = {"error": what["error"]}
    else:
        out = what["output"]
        detail = {"num_scheduled_tokens": dict(out.num_scheduled_tokens)}
        if c.spec_decode or c.prefix_caching or c.async_scheduling:  # a feature run also shows the drafts
            detail["scheduled_spec_decode_tokens"] = {r: len(t) for r, t in out.scheduled_spec_decode_tokens.items()}
        detail["preempted"] = sorted(out.preempted_req_ids)
    return Result(
        invariant.name,
        n,
        policy,
        "violated" if confirmed else "unconfirmed",
        time.perf_counter() - t0,
        detail,
        state,
        sampled,
    )


@dataclass(frozen=True)
class Job:
    invariant: str
    n: int
    fcfs: bool
    timeout_s: float
    mutant: str | None = None
    release: str = field(default=DEFAULT_RELEASE, kw_only=True)  # keyword-only: subclasses add positional fields


def run_job(job: Job) -> Result:
    if job.mutant is None:
        return check(PROVABLE[job.invariant], job.n, job.fcfs, job.timeout_s, reuse=True, release=job.release)
    from ...mutants import BY_NAME as MUTANTS, applied

    with applied(MUTANTS[job.mutant]):
        return check(PROVABLE[job.invariant], job.n, job.fcfs, job.timeout_s, release=job.release)


def jobs(
    max_requests: int,
    invariants: Iterable[str],
    policies: Iterable[str],
    timeout_s: float,
    mutant: str | None = None,
    min_requests: int = 1,
    release: str = DEFAULT_RELEASE,
) -> list[Job]:
    return [
        Job(name, n, policy == "fcfs", timeout_s, mutant, release=release)
        for policy in policies
        for n in range(min_requests, max_requests + 1)
        for name in invariants
    ]
