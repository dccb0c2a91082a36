"""Hunting an engine with the lock-step machine: settings, a fresh machine per hunt, and what a finding becomes.

`hunt_engine` runs `lockstep_machine.LockstepMachine` against one engine for
a count of examples, derandomized from a seed (the same examples on any
machine; `search_budget.py`). A failure is shrunk by Hypothesis, then the
shrunk run is replayed as a plain workload through the differ, so what is
reported is what `schedspec replay` will show: the counterexample's
divergence is the differ's, not the machine's. A finding that is an
invariant broken while the engines agree at the chosen level is recorded
as the divergence `invariant NAME` at its step (replay then lists it among
the invariants engine b breaks).

`None`: all examples ran and nothing was found. `SearchCut`: the safety
cap stopped the search first. `EngineBroke`: the engine failed as a program
(start, death, hang, malformed answer); the hunt stops there, unshrunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import Phase, Verbosity, seed as hypothesis_seed
from hypothesis.stateful import run_state_machine_as_test

from ...reference_impl import ReferenceEngine
from ...spec.engine import EngineFactory
from ...spec.workload import Workload
from ..harness.differ import Divergence, diff
from .budget import DEFAULT_EXAMPLES, SearchCut
from .kill_campaign import Finding
from .lockstep_machine import EngineBroke, LockstepLog, LockstepMachine, close_quietly
from .state_machine import Counterexample, OutOfTime
from .state_machine_draws import Bounds
from .state_machine_kill import own_constants_only, profile
from .subject import Subject

STEP_COUNT = 25  # rules per example, as the reference machine's hunts
FEATURE_FAMILIES = ("prefix-caching", "spec-decode", "async")


@dataclass(frozen=True)
class EngineFinding:
    finding: Finding  # what, size (requests, steps), the shrunk workload, the run as a program
    divergence: Divergence | None  # the differ's, on the shrunk workload; None if it saw none
    machine_divergence: tuple[int, str, Any, Any]  # (step, field, a, b) as the machine saw it


def bounds_for(core: bool = False) -> Bounds:
    """The full scope (prefix caching, spec decode, async with the engine loop's queue of 2), or the core one."""
    return Bounds(features=not core, batch_queue_sizes=(2,))


def machine_for(
    factory: EngineFactory,
    name: str,
    level: str,
    bounds: Bounds,
    step_timeout_s: float | None,
    start_timeout_s: float | None,
) -> type[LockstepMachine]:
    """A fresh machine class for this engine, with its own log, so two hunts never share one."""
    attrs = {
        "bounds": bounds,
        "log": LockstepLog(),
        "factory": staticmethod(factory) if not isinstance(factory, type) else factory,
        "engine_name": name,
        "level": level,
        "step_timeout_s": step_timeout_s,
        "start_timeout_s": start_timeout_s,
        "__module__": LockstepMachine.__module__,
    }
    return type("LockstepMachine", (LockstepMachine,), attrs)


def hunt_engine(
    engine: Subject | EngineFactory,
    name: str | None = None,
    examples: int = DEFAULT_EXAMPLES,
    seed: int = 0,
    level: str = "blocks",
    core: bool | None = None,
    budget_s: float | None = None,
    step_timeout_s: float | None = 30.0,
    start_timeout_s: float | None = 300.0,
    step_count: int = STEP_COUNT,
) -> Finding | None:
    """The lock-step hunt as the mutation matrix reports it (`Finding`, or None); `hunt_engine_full` for more."""
    found = hunt_engine_full(
        engine, name, examples, seed, level, core, budget_s, step_timeout_s, start_timeout_s, step_count
    )
    return None if found is None else found.finding


def hunt_engine_full(
    engine: Subject | EngineFactory,
    name: str | None = None,
    examples: int = DEFAULT_EXAMPLES,
    seed: int = 0,
    level: str = "blocks",
    core: bool | None = None,
    budget_s: float | None = None,
    step_timeout_s: float | None = 30.0,
    start_timeout_s: float | None = 300.0,
    step_count: int = STEP_COUNT,
    on_example: Callable[[int], None] | None = None,
) -> EngineFinding | None:
    subject = engine if isinstance(engine, Subject) else None
    if subject is not None and subject.mutant is not None:
        # Planting rewrites the reference in this process, the oracle's too: a planted mutant runs in a process
        # of its own instead, as the engine `schedspec.conformance.demo_engines.mutant_engines:NAME`.
        raise ValueError(f"{subject.name} is planted, not derived; hunt mutant_engines:{subject.name} instead")
    factory = subject.factory if subject is not None else engine
    assert callable(factory)
    label = str(name or (subject.name if subject is not None else getattr(factory, "name", "engine")))
    if core is None:  # a subject says which families exercise it; an engine is hunted on the full scope
        core = subject is not None and not set(subject.families) & set(FEATURE_FAMILIES)
    machine = machine_for(factory, label, level, bounds_for(core), step_timeout_s, start_timeout_s)
    hypothesis_seed(seed)(machine)
    cfg = profile(
        examples,
        step_count,
        phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
    )
    log = machine.log
    log.on_example = on_example
    log.started = time.perf_counter()
    log.deadline = None if budget_s is None else log.started + budget_s
    try:
        with own_constants_only():
            try:
                run_state_machine_as_test(machine, settings=cfg)
                return None
            except OutOfTime:
                raise SearchCut(log.examples, examples, budget_s or 0.0) from None
            except EngineBroke:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of the engine is a finding
                failure = e
    finally:
        for engine_left in list(log.open_engines):
            close_quietly(engine_left)
        log.open_engines.clear()
    run = log.current
    workload = run.workload().replace(name=f"hunt-{label}")
    what = failure.kind if isinstance(failure, Counterexample) else f"error:{type(failure).__name__}"
    finding = Finding(
        label,
        "lockstep",
        what,
        run.steps - 1,
        workload,
        "\n".join([*run.program, str(failure)]),
        (log.first_failure or time.perf_counter()) - log.started,
        (len(run.requests), run.steps),
        log.examples_to_failure,
    )
    replayed = _replay(workload, factory, label, level, step_timeout_s, start_timeout_s)
    return EngineFinding(finding, replayed, log.divergence or (run.steps - 1, what, None, None))


def _replay(
    workload: Workload,
    factory: EngineFactory,
    name: str,
    level: str,
    step_timeout_s: float | None,
    start_timeout_s: float | None,
) -> Divergence | None:
    """The shrunk run as a plain workload through the differ: what `schedspec replay` will show."""
    result = diff(
        workload,
        ReferenceEngine,
        factory,
        level,
        timeout=step_timeout_s,
        start_timeout=start_timeout_s,
        names=("reference", name),
    )
    if result.error is not None:
        raise EngineBroke(result.error)
    return result.divergence
