"""One workload of a campaign, start to finish, as a worker process runs it.

For each planned workload: generate it, diff the engine against the oracle
in lock-step, count the behaviours covered, check now and then that the
engine is deterministic, and on a divergence shrink it and write the
counterexample. The result is a small picklable record; the certificate is
assembled from those in `certify.py`.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..spec.engine import EngineFactory
from ..spec.invariants import check_trace
from ..spec.trace import Trace
from .counterexample import Counterexample
from .coverage import coverage
from .differ import diff
from .explain import step_table
from .families import generate
from .registry import engine_factory, engine_version
from .shrink import shrink


@dataclass(frozen=True)
class Task:
    family: str
    index: int
    seed: int
    engine: str
    against: str
    level: str
    out_dir: str
    check_determinism: bool
    shrink_budget_s: float
    step_timeout_s: float


@dataclass
class WorkloadResult:
    name: str
    family: str
    steps_compared: int
    seconds: float
    coverage: Counter[str] = field(default_factory=Counter)
    divergence: dict[str, Any] | None = None
    counterexample_file: str | None = None
    shrunk_size: list[int] | None = None
    nondeterministic: dict[str, Any] | None = None
    violations: list[str] = field(default_factory=list)  # invariant monitors on the engine's own trace
    steps_table: dict[str, Any] | None = None  # explain.step_table of the shrunk counterexample


@cache
def _factory(spec: str) -> EngineFactory:
    return engine_factory(spec)


def run_task(task: Task) -> WorkloadResult:
    t0 = time.perf_counter()
    workload = generate(task.family, task.seed, task.index)
    oracle, engine = _factory(task.against), _factory(task.engine)
    result = diff(workload, oracle, engine, task.level, task.step_timeout_s, keep_records=True)
    out = WorkloadResult(workload.name, task.family, result.steps_compared, 0.0,
                         coverage(workload, result.records_a))
    # The monitors judge the engine on its own, whatever the oracle says.
    complete = result.divergence is None and result.steps_compared < workload.max_steps
    records_b = result.records_b
    if result.divergence is not None and not result.divergence.field.startswith(("engine", "malformed")):
        # Past a divergence the oracle says nothing, but the monitors still judge the engine's whole run;
        # driven against itself it runs to the end (`--allow-divergence` rests on this).
        solo = diff(workload, engine, engine, "blocks", task.step_timeout_s, keep_records=True)
        if solo.divergence is None:
            records_b, complete = solo.records_a, solo.steps_compared < workload.max_steps
    engine_trace = Trace(workload, tuple(records_b), task.engine, "drained" if complete else "max_steps")
    out.violations = [str(v) for v in check_trace(engine_trace)]
    if result.divergence is not None:
        d = result.divergence
        out.divergence = d.to_json()

        def still_diverges(candidate) -> bool:
            return diff(candidate, oracle, engine, task.level, task.step_timeout_s).divergence is not None

        small, calls = shrink(workload, still_diverges, time_budget_s=task.shrink_budget_s)
        again = diff(small, oracle, engine, task.level, task.step_timeout_s, keep_records=True)
        final = again.divergence or d
        out.steps_table = step_table(again.records_a, again.records_b, final) if again.divergence else None
        cx = Counterexample.of(small, final, task.against, task.engine, task.level,
                               {"a": engine_version(task.against), "b": engine_version(task.engine)}, workload, calls)
        path = os.path.join(task.out_dir, f"counterexample-{workload.name}.json")
        cx.write(path)
        out.counterexample_file = path
        out.shrunk_size = cx.to_json()["size"]
    elif task.check_determinism:
        again = diff(workload, engine, engine, "blocks", task.step_timeout_s)
        if again.divergence is not None:
            out.nondeterministic = again.divergence.to_json()
    out.seconds = time.perf_counter() - t0
    return out
