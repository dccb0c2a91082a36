"""Killing a mutant with a checker: search generated workloads, then shrink what is found.

(A mutant is *killed*, as in the kill matrix; an engine is *hunted*, by
`schedspec hunt` and `lockstep_hunt.py`. The two words keep the two
searches apart.)

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

The search is bounded by a count, not by seconds (`budget.py`): the
first `examples` workloads, families round-robin from a fixed seed, always
in the same order. None found among them is a finished search that missed
(`None`); a search stopped by the safety cap `budget_s` first raises
`SearchCut`, which is unknown, never a miss. The shrink is bounded by a
count of candidates, with a seconds cap that costs only size.

What runs is a `Subject`: the reference with a catalogue mutant planted, or
an engine of the user's derived from it (`schedspec mutants --from`). An
engine that raises is caught: an `AssertionError` (vLLM's own asserts, in
the reference) as "assertion", anything else as "crash".

A mutant is searched for on the families that exercise it (`Mutant.families`),
by default the nine of the core scope: a mutant of prefix caching is
invisible on workloads that never cache, and the core mutants keep the
search order, and so the findings, they had before the feature families.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ...mutants import Mutant
from ...reference_impl import simulate
from ...spec import engine as engine_loop
from ...spec.invariants import check_trace
from ...spec.trace import Trace
from ...spec.workload import Workload
from ..harness.compare import first_difference
from ..harness.shrink import shrink, size
from ..workloads.families import FAMILIES, generate
from .budget import DEFAULT_EXAMPLES, SafetyCap
from .subject import Subject, subject as as_subject

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
SHRINK_CALLS = 2000  # candidates a shrink may try
SHRINK_SAFETY_CAP_S = 600.0  # stops a shrink on a machine far slower than planned; costs size, never the verdict

Problem = tuple[str, int]  # what caught it (an invariant, "assertion", "crash" or a field) and the step


@dataclass(frozen=True)
class Finding:
    mutant: str
    checker: str
    what: str  # the invariant, "assertion", "crash", or the diverging field
    step: int
    workload: Workload  # shrunk
    original: str
    seconds_to_find: float
    size: tuple[int, ...]
    examples: int = 0  # examples searched up to and including the one that failed


def _run(s: Subject, w: Workload) -> Trace | Problem:
    """The subject's trace of `w`, or the problem if its engine raised."""
    try:
        with s.running():
            return engine_loop.run(s.factory(w.config), w)
    except AssertionError:
        return "assertion", -1
    except Exception as e:  # noqa: BLE001 - an engine that raises has crashed: a finding about it
        if s.mutant is not None:
            raise  # the reference with a planted bug raises only through vLLM's asserts; anything else is ours
        return f"crash ({type(e).__name__})", -1


def _monitor_problem(s: Subject) -> Callable[[Workload], Problem | None]:
    def problem(w: Workload) -> Problem | None:
        trace = _run(s, w)
        if not isinstance(trace, Trace):
            return trace
        violations = check_trace(trace)
        return (violations[0].invariant, violations[0].step) if violations else None

    return problem


def _diff_problem(s: Subject, pristine: Callable[[Workload], Trace]) -> Callable[[Workload], Problem | None]:
    def problem(w: Workload) -> Problem | None:
        expected = pristine(w)  # the unmutated reference, outside the subject's context
        got = _run(s, w)
        if not isinstance(got, Trace):
            return got
        for a, b in zip(expected.steps, got.steps):
            d = first_difference(a, b, "blocks")
            if d is not None:
                return d.field.split("[")[0], a.step
        if len(expected.steps) != len(got.steps):
            return "trace length", min(len(expected.steps), len(got.steps))
        return None

    return problem


def kill_by_campaign(
    mutant: Mutant | Subject,
    checker: str = "monitors",
    seed: int = 0,
    examples: int = DEFAULT_EXAMPLES,
    families: list[str] | None = None,
    shrink_calls: int = SHRINK_CALLS,
    budget_s: float | None = None,
) -> Finding | None:
    """Search the first `examples` workloads (families round-robin) until the checker sees a problem; shrink it.

    None: none of them shows one. `SearchCut`: the safety cap `budget_s` stopped the search first.
    """
    s = as_subject(mutant)
    families = families or list(s.families or CORE_FAMILIES)
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
        problem = _diff_problem(s, pristine)
    elif checker == "monitors":
        problem = _monitor_problem(s)
    else:
        raise ValueError(f"unknown checker {checker!r}")

    cap = SafetyCap(budget_s)
    for k in range(examples):
        if cap.spent():
            raise cap.cut(k, examples)
        w = generate(families[k % len(families)], seed, k // len(families))
        found = problem(w)
        if found is None:
            continue
        elapsed = time.perf_counter() - cap.started
        what = found[0]
        small, _ = shrink(
            w,
            lambda c: (p := problem(c)) is not None and p[0] == what,  # noqa: B023 - shrink runs before the loop moves on
            time_budget_s=SHRINK_SAFETY_CAP_S,
            max_calls=shrink_calls,
        )
        again = problem(small)
        assert again is not None, "a shrunk workload fails by construction"
        return Finding(s.name, checker, what, again[1], small, w.name, elapsed, size(small), k + 1)
    return None
