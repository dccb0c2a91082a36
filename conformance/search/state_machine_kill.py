"""Killing a mutant with the state machine: Hypothesis settings, a fresh machine per search, and its finding.

Design notes
------------
* Why it is separate from `state_machine.py`: that module is the machine,
  what one example does and which checks run after each step. This one is
  how a search is run over it, and none of it is needed to define the
  machine: the settings (`FAST` for the unit tests' `TestCase`, `LONG` for
  the slow runs), the budget, and turning Hypothesis's shrunk failure into a
  `Finding` the mutation hunt reports like any other.
* The budget is a count: `max_examples`, derandomized from a fixed seed,
  so the same examples run in the same order on any machine, however
  loaded (`search_budget.py`). Seconds are only a safety cap: a search it
  stops raises `SearchCut` (unknown), and "nothing found" always means
  every example ran.
* Each hunt gets its own subclass (`machine_for`) with its own `RunLog`, so
  two hunts in one process never read each other's runs, deadlines or
  filters.
* A mutant of a feature forces the feature bounds on (and an async mutant
  the three-deep batch queue), or the machine would never draw what the
  mutant changes.
* A hunt draws no "local constants". Hypothesis 6.170 also draws, in about
  one draw in twenty, from the literals of every non-test module of ours
  that happens to be imported (`providers._get_local_constants`). So the
  examples a hunt finds, and the sizes tests/quality pins, depended on what
  else the caller had imported: collecting two more test files moved three
  pins. `own_constants_only` leaves Hypothesis its built-in constants, so a
  hunt depends on the machine, the mutant and the (pinned) Hypothesis only.
  Measured: a fixed pool of the literals of `spec` and `reference_impl`
  found the same 34 pinned examples as none at all. Z6 now takes 25 s to find
  where the pool of whatever `schedspec mutants` had loaded found it in 5:
  that was luck, and the README table says so.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from hypothesis import HealthCheck, Phase, Verbosity, seed as hypothesis_seed, settings
from hypothesis.stateful import run_state_machine_as_test

from ...mutants import Mutant, applied
from .budget import DEFAULT_CAP_S, SearchCut
from .kill_campaign import Finding
from .state_machine import Bounds, Counterexample, OutOfTime, RunLog, SchedulerMachine

HUNT_EXAMPLES = 3000  # a hunt's examples when the caller names none: every pinned mutant is found well within


def machine_for(bounds: Bounds = Bounds()) -> type[SchedulerMachine]:
    """A fresh machine class for these bounds, with its own run log, so two hunts never share one."""
    # Placed in the machine's module, as when it was built there: Hypothesis reads a machine's source
    # (found through its module) for its digest, and this one should read SchedulerMachine's.
    return type(
        "SchedulerMachine",
        (SchedulerMachine,),
        {"bounds": bounds, "log": RunLog(), "__module__": SchedulerMachine.__module__},
    )


def profile(max_examples: int, step_count: int, **kw) -> settings:
    """Stable settings: no database, no deadline, derandomized."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=step_count,
        deadline=None,
        database=None,
        derandomize=True,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        **kw,
    )


FAST = profile(100, 30)
LONG = profile(3000, 60)


@contextmanager
def own_constants_only() -> Iterator[None]:
    """Hypothesis's built-in constants only, not the literals of whichever of our modules are loaded."""
    from hypothesis.internal.cache import LRUCache
    from hypothesis.internal.conjecture import providers

    saved = providers._get_local_constants, providers.CONSTANTS_CACHE
    providers._get_local_constants = providers.Constants  # an empty pool, asked for once per test case
    providers.CONSTANTS_CACHE = LRUCache(1024)  # it caches the pools per choice type, so it is swapped too
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = saved


def kill_by_state_machine(
    mutant: Mutant | None,
    budget_s: float | None = DEFAULT_CAP_S,
    max_examples: int = HUNT_EXAMPLES,
    step_count: int = 25,
    bounds: Bounds = Bounds(),
    seed: int = 0,
    expect: tuple[str, ...] | None = None,
) -> Finding | None:
    """Run the machine on the mutated reference: the shrunk counterexample, or None if none turned up.

    `size` is (requests, steps) of Hypothesis's shrunk example, `step` the
    0-based step that failed, `workload` replays it, `original` is the run as
    a program. `mutant=None` runs the pristine reference. With `expect`, only
    those checks (and vLLM's asserts) count: a mutant often breaks several
    rules, and Hypothesis shrinks towards whichever breaks in the smallest run.

    None means all `max_examples` examples ran and none failed. `budget_s`
    is a safety cap on the search (not the shrinking that follows a find):
    past it the hunt raises `SearchCut`, an unknown verdict.
    """
    if mutant is not None and mutant.families and not bounds.features:
        bounds = dataclasses.replace(bounds, features=True)  # a feature's mutant needs the feature drawn
        if "async" in mutant.families:
            # The engine loop and the monitors cover a queue of 2; the machine covers the deeper pipeline, where
            # a victim's output is still in flight at the next schedule() (the stale skip, bug-zoo Z5).
            bounds = dataclasses.replace(bounds, batch_queue_sizes=(3,))
            step_count = max(step_count, 40)
    machine = machine_for(bounds)
    hypothesis_seed(seed)(machine)  # a fixed seed, independent of this file's source (derandomize hashes it)
    cfg = profile(
        max_examples,
        step_count,
        phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
    )
    log = machine.log
    log.started = time.perf_counter()
    log.deadline = None if budget_s is None else log.started + budget_s
    log.expect = frozenset(expect) if expect is not None else None
    with applied(mutant) if mutant is not None else nullcontext(), own_constants_only():
        try:
            run_state_machine_as_test(machine, settings=cfg)
            return None
        except OutOfTime:
            raise SearchCut(log.examples, max_examples, budget_s or 0.0) from None
        except Exception as e:  # noqa: BLE001 - any failure of the reference is a finding
            failure = e
    run = log.current
    what = failure.kind if isinstance(failure, Counterexample) else f"error:{type(failure).__name__}"
    return Finding(
        mutant.name if mutant else "pristine",
        "state-machine",
        what,
        run.steps - 1,
        run.workload(),
        "\n".join([*run.program, str(failure)]),
        (log.first_failure or time.perf_counter()) - log.started,
        (len(run.requests), run.steps),
        log.examples_to_failure,
    )
