"""Hunting a mutant with a checker: search generated workloads, then shrink what is found.

Two checkers live here, both driven by the seeded families:

* `monitors`: simulate the mutated reference and run the invariant monitors
  on its trace. A mutant that trips one of vLLM's own assertions inside the
  reference (the end-of-step asserts of
  `vllm/v1/core/sched/scheduler.py:Scheduler.schedule (1619-1639)`, which the
  reference keeps) is reported as caught by that assertion: those asserts are
  vLLM's built-in monitors of I-1, I-3 and I-4.
* `diff`: compare the mutated reference's trace with the pristine one's at
  level `blocks`; it catches what no invariant states (a different but legal
  decision).

Each finding is shrunk with the same checker as predicate, so the reported
workload is minimal for that checker and still shows the same problem.

A mutant is hunted on the families that exercise it (`Mutant.families`),
by default the nine of the core scope: a mutant of prefix caching is
invisible on workloads that never cache, and the core mutants keep the
search order, and so the findings, they had before the feature families.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..mutants import Mutant, applied
from ..reference_impl import simulate
from ..spec.invariants import check_trace
from ..spec.trace import Trace
from ..spec.workload import Workload
from .compare import first_difference
from .families import FAMILIES, generate
from .shrink import shrink, size

CORE_FAMILIES = (
    "budget",
    "threshold",
    "no-chunking",
    "kv-pressure",
    "priority",
    "max-model-len",
    "stops",
    "aborts",
    "big-batch",
)


@dataclass(frozen=True)
class Finding:
    mutant: str
    checker: str
    what: str  # the invariant, "assertion", or the diverging field
    step: int
    workload: Workload  # shrunk
    original: str
    seconds_to_find: float
    size: tuple[int, ...]


def _monitor_problem(w: Workload) -> tuple[str, int] | None:
    try:
        trace = simulate(w)
    except AssertionError as e:
        return "assertion", -1 if not str(e) else -1
    violations = check_trace(trace)
    return (violations[0].invariant, violations[0].step) if violations else None


def _diff_problem(pristine: Callable[[Workload], Trace]) -> Callable[[Workload], tuple[str, int] | None]:
    def problem(w: Workload) -> tuple[str, int] | None:
        expected = pristine(w)
        try:
            got = simulate(w)
        except AssertionError:
            return "assertion", -1
        for a, b in zip(expected.steps, got.steps):
            d = first_difference(a, b, "blocks")
            if d is not None:
                return d.field.split("[")[0], a.step
        if len(expected.steps) != len(got.steps):
            return "trace length", min(len(expected.steps), len(got.steps))
        return None

    return problem


def hunt(
    mutant: Mutant,
    checker: str = "monitors",
    seed: int = 0,
    budget_s: float = 30.0,
    families: list[str] | None = None,
    shrink_budget_s: float = 30.0,
) -> Finding | None:
    """Search the families round-robin until the checker sees a problem; shrink it; None if the budget ran out."""
    families = families or list(mutant.families or CORE_FAMILIES)
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}")
    pristine_cache: dict[str, Trace] = {}

    def pristine(w: Workload) -> Trace:
        key = repr(w.to_json())
        if key not in pristine_cache:
            pristine_cache[key] = simulate(w)
        return pristine_cache[key]

    if checker == "diff":
        # Traces of the unmutated reference are computed outside the mutant's context, on demand.
        def problem(w: Workload):
            pristine(w)
            with applied(mutant):
                return _diff_problem(lambda x: pristine_cache[repr(x.to_json())])(w)
    elif checker == "monitors":

        def problem(w: Workload):
            with applied(mutant):
                return _monitor_problem(w)
    else:
        raise ValueError(f"unknown checker {checker!r}")

    t0 = time.perf_counter()
    index = 0
    while time.perf_counter() - t0 < budget_s:
        for family in families:
            w = generate(family, seed, index)
            found = problem(w)
            if found is not None:
                elapsed = time.perf_counter() - t0
                what = found[0]
                small, _ = shrink(
                    w,
                    lambda c: (p := problem(c)) is not None and p[0] == what,  # noqa: B023 - shrink runs before the loop moves on
                    time_budget_s=shrink_budget_s,
                )
                step = problem(small)[1]
                return Finding(mutant.name, checker, what, step, small, w.name, elapsed, size(small))
        index += 1
    return None
