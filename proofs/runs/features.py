"""Feature-mode proofs: the catalogue proved inductive with the three features in the step.

`schedspec prove --feature spec-decode` runs this instead of the core run of
`prove.py`, and reuses its machinery (the solver, the goal, the Optimize
minimisation, the replay on the reference); only the encoding it builds
differs: `symbolic.fresh(..., spec_decode=True)` makes k, every slot's
drafts and prefill flag, and what its model and drafter return symbolic,
and the step's `inputs` (0 <= accepted <= drafts scheduled, the stop token
among the appended ones, 0 <= proposal <= k) join the facts.

`--feature async` makes the step the engine loop's with a batch queue of
2: schedule, then absorb the older step in flight
(encoding/async_scheduling.py). The pre-state carries each request's record
of that step, assumed (`symbolic.in_flight_record`) and proved again after the step together with
every invariant (`goal_of`), so the strengthening is discharged by the same
checks. Without `--feature` nothing async is built; the default feature set
is the synchronous loop's two (`SYNC`).

The step is split into the same two exact cases as the core run (pops
nobody, pops somebody), each checked monolithically: the cut proofs of
`cuts.py` carry the core pass's state only, and N <= 4 does not need them.
The core path (no feature) is untouched: its formula is built exactly as
before, so `schedspec prove` without `--feature` proves what it proved.

Two invariants of the catalogue read only concrete facts (block ref counts
and cache hashes), which every abstraction here leaves True; they are
reported `n/a`, not proved, and are checked by the monitors, the state
machine and the diff.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import z3

from ...spec.invariants import BY_NAME, INVARIANTS, Invariant
from ...spec.versions import DEFAULT_RELEASE
from ..encoding.step import step
from ..encoding.symbolic import fresh, post_in_flight_record, state_view, well_formed
from . import prove

FEATURES = ("spec-decode", "prefix-caching", "async")
SYNC = FEATURES[:2]  # the default: the synchronous engine loop with both of its features
CONCRETE_ONLY = ("refcounts-match-tables", "cached-blocks-match-tokens")
SPLIT_FROM_N = 5  # from here a query is split by the number of running requests (`_refute`)


@dataclass(frozen=True)
class Job(prove.Job):
    """The core run's job, plus the features put into the step."""

    features: tuple[str, ...] = SYNC


def encoded_step(n: int, fcfs: bool, preempts: bool, features: tuple[str, ...] = SYNC, release: str = DEFAULT_RELEASE):
    pre = fresh(
        n,
        fcfs,
        prove.BLOCK_SIZE,
        spec_decode="spec-decode" in features,
        prefix_caching="prefix-caching" in features,
        async_scheduling="async" in features,
        release=release,
    )
    context = well_formed(pre) + [i.holds(state_view(pre)) for i in INVARIANTS if i.state]
    return pre, context, step(pre, preempts)


def _concretizable(pre) -> list:
    """Prefer a counterexample `concrete.to_state` builds exactly: no shared blocks, every hit evictable."""
    if not pre.config.prefix_caching:
        return []
    return [pre.num_shared_refs == 0] + [s.evictable == s.hit_blocks for s in pre.slots]


def goal_of(invariant: Invariant, pre, post) -> z3.BoolRef:
    """The invariant after the step; under async, with the in-flight record that the pre-state assumed."""
    goal = prove.goal_of(invariant, pre, post)
    return z3.And(goal, post_in_flight_record(pre, post)) if pre.config.async_scheduling else goal


def check(
    invariant: Invariant,
    n: int,
    fcfs: bool,
    timeout_s: float = 60.0,
    features: tuple[str, ...] = SYNC,
    release: str = DEFAULT_RELEASE,
) -> prove.Result:
    cpu0, t0 = time.process_time(), time.perf_counter()
    policy = "fcfs" if fcfs else "priority"
    result = prove.Result(invariant.name, n, policy, "proved", 0.0)
    if invariant.name in CONCRETE_ONLY:
        result.verdict = "n/a"
    else:
        deadline = t0 + timeout_s
        result = _refute(invariant, n, fcfs, features, release, deadline, timeout_s, t0) or result
    result.seconds, result.cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    result.release = release
    return prove.mark_known(result, invariant, release)


def _refute(
    invariant: Invariant,
    n: int,
    fcfs: bool,
    features: tuple[str, ...],
    release: str,
    deadline: float,
    timeout_s: float,
    t0: float,
) -> prove.Result | None:
    """None if every case of the step is unsat; else the unknown or replayed result of the first case that is not.

    From N = SPLIT_FROM_N each case is split by the number of running requests (`prove.by_running_count`): at
    N = 6 under PRIORITY the queries where nothing is preempted take 0.2 s each split, and budget conservation,
    unknown after 60 s whole, is proved. Below it the split costs more than it saves (all three features,
    PRIORITY, N = 4: 30 s of CPU whole, 42 s split)."""
    policy = "fcfs" if fcfs else "priority"
    for preempts in (False, True):
        pre, context, post = encoded_step(n, fcfs, preempts, features, release)
        refuted = z3.Not(goal_of(invariant, pre, post))
        for case in prove.by_running_count(pre) if n >= SPLIT_FROM_N else [[]]:
            facts = context + post.assume + post.inputs + case + [refuted]
            verdict, solver = prove.solve(facts, deadline)
            if verdict == z3.unsat:
                continue
            if verdict == z3.unknown:
                return prove.Result(invariant.name, n, policy, "unknown", 0.0)
            model = (
                prove.minimise(pre, facts + _concretizable(pre), timeout_s)
                or prove.minimise(pre, facts, timeout_s)
                or solver.model()
            )
            return prove.replayed(invariant, n, policy, pre, model, t0)
    return None


def run_job(job: Job) -> prove.Result:
    from ...mutants import BY_NAME as MUTANTS, applied

    with applied(MUTANTS[job.mutant]) if job.mutant else nullcontext():
        return check(BY_NAME[job.invariant], job.n, job.fcfs, job.timeout_s, job.features, job.release)


def jobs(
    max_requests: int,
    invariants: Iterable[str],
    policies: Iterable[str],
    timeout_s: float,
    mutant: str | None = None,
    features: tuple[str, ...] = SYNC,
    release: str = DEFAULT_RELEASE,
) -> list[Job]:
    """The core run's jobs, with the features, at `release`."""
    return [
        Job(j.invariant, j.n, j.fcfs, j.timeout_s, j.mutant, features=features, release=release)
        for j in prove.jobs(max_requests, invariants, policies, timeout_s, mutant)
    ]
