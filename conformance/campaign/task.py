"""One workload of a campaign, as a worker process runs it: run, judge, and (later) shrink.

For each planned workload: generate it, diff the engine against the oracle
in lock-step, count the behaviours covered and the coverage map's cells
reached, and let the monitors judge the engine's own trace. The result is a
small picklable record with one of three outcomes (`differ.py`): matched,
diverged, or error.

Design notes
------------
* **An error stops there.** An engine that could not start, died, hung or
  spoke garbage tells us nothing about scheduling: no monitors on half a
  trace, no shrinking (shrinking a hang costs a timeout per candidate),
  no determinism re-run.
* **A divergence is replayed before it is reported.** The same workload is
  run again; if the second run does not give the very same divergence, the
  finding is nondeterminism, reported with both runs, and nothing is shrunk.
* **Shrinking is a second phase** (`shrink_result`), run only for the first
  `--max-counterexamples` divergences of the campaign in plan order; the
  rest are written unshrunk. It is bounded by a count of candidates
  (`--shrink-budget`), so its result does not depend on how busy the
  machine is; a wall-clock cap only stops it early, and says so. A
  candidate is kept only if it diverges twice in the same way: the shrinker
  never walks into a flake.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ...spec.engine import EngineFactory
from ...spec.invariants.decisions import DECISION_NAMES
from ...spec.trace import Trace
from ...spec.workload import Workload
from ..engines.engine_spec import EngineSpec
from ..engines.registry import engine_factory, engine_version
from ..harness.counterexample import Counterexample
from ..harness.differ import DiffResult, Divergence, compare_records, diff
from ..harness.explain import side_by_side
from ..harness.shrink import shrink
from ..workloads.families import at_release, generate
from .behaviour_coverage import behaviours_seen
from .cell_coverage import cells, judge_and_cells

SHRINK_SAFETY_CAP_S = 600.0  # stops a shrink on a machine far slower than planned; never decides a verdict


@dataclass(frozen=True)
class Task:
    family: str
    index: int
    seed: int
    engine: EngineSpec
    against: EngineSpec
    level: str
    out_dir: str
    check_determinism: bool
    shrink_budget: int = 400  # candidates tried, at most
    step_timeout_s: float = 30.0
    start_timeout_s: float = 300.0
    isolate: bool | None = None  # None: third-party engines in their own process, ours in process


@dataclass
class WorkloadResult:
    name: str
    family: str
    steps_compared: int
    seconds: float
    behaviours: Counter[str] = field(default_factory=Counter)  # behaviours seen (`behaviour_coverage.py`)
    cells: Counter[str] = field(default_factory=Counter)  # the coverage map's cells reached (`cell_coverage.py`)
    divergence: dict[str, Any] | None = None
    counterexample_file: str | None = None
    shrunk_size: dict[str, int] | None = None
    nondeterministic: dict[str, Any] | None = None
    ran_twice: bool = False  # run a second time to the end: the determinism check, or a divergence's replay
    violations: list[str] = field(default_factory=list)  # invariant monitors on the engine's own trace
    known_violations: list[str] = field(default_factory=list)  # ... that the release is known to break
    steps_table: dict[str, Any] | None = None  # explain.side_by_side of the shrunk counterexample
    error: dict[str, Any] | None = None  # differ.EngineError.to_json(): the third outcome
    crash: bool = False  # the divergence is an engine raising
    shrink_note: str | None = None  # why the counterexample is not (fully) shrunk
    skipped: str | None = None  # why the run never reached this workload
    # Seconds per part of the work (`PARTS`), every run of the workload included: what the certificate's shares add.
    seconds_in: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def outcome(self) -> str:
        """One of OUTCOMES. Two runs that differ are `nondeterministic`, never `matched`: a divergence that
        did not come back was still seen, and a match the rerun broke was not a match."""
        if self.error or self.skipped:
            return "error" if self.error else "skipped"
        return "nondeterministic" if self.nondeterministic else "diverged" if self.divergence else "matched"

    @property
    def failed(self) -> bool:
        return bool(self.error or self.skipped or self.divergence or self.nondeterministic or self.violations)


@cache
def _factory(spec: EngineSpec, isolate: bool | None, start_timeout_s: float, step_timeout_s: float) -> EngineFactory:
    return engine_factory(spec, isolate=isolate, start_timeout_s=start_timeout_s, step_timeout_s=step_timeout_s)


def _diff(
    task: Task, workload: Workload, a: EngineSpec | None, b: EngineSpec, level: str, keep_records: bool = False
) -> DiffResult:
    """`diff` with the task's factories and deadlines; `a=None` runs b alone."""
    make_a = None if a is None else _factory(a, task.isolate, task.start_timeout_s, task.step_timeout_s)
    make_b = _factory(b, task.isolate, task.start_timeout_s, task.step_timeout_s)
    return diff(
        workload,
        make_a,
        make_b,
        level,
        task.step_timeout_s,
        keep_records,
        task.start_timeout_s,
        ((a or b).name, b.name),
    )


def task_workload(task: Task) -> Workload:
    """The task's workload, at the vLLM release its engines name (`vllm==V`): the oracle and monitors follow it.

    The engine's release is applied last, so it is the one the config keeps when both sides are vLLM.
    """
    workload = generate(task.family, task.seed, task.index)
    for spec in (task.against, task.engine):
        if spec.release is not None:
            workload = at_release(workload, spec.release)
    return workload


def skipped(task: Task, why: str) -> WorkloadResult:
    """A workload the run did not reach: too many errors before it."""
    return WorkloadResult(task_workload(task).name, task.family, 0, 0.0, skipped=why)


PARTS = ("oracle", "engine", "differ", "monitors", "other")


def _timed(out: WorkloadResult, result: DiffResult, solo: bool = False) -> DiffResult:
    """Add a diff's seconds to the workload's parts: side a is the oracle, side b the engine; alone, b is the
    engine (the determinism rerun and the monitors' solo run drive the engine by itself)."""
    out.seconds_in["oracle"] += 0.0 if solo else result.seconds["a"]
    out.seconds_in["engine"] += result.seconds["b"]
    out.seconds_in["differ"] += result.seconds["compare"]
    return result


def run_task(task: Task) -> WorkloadResult:
    t0 = time.perf_counter()
    workload = task_workload(task)
    result = _diff(task, workload, task.against, task.engine, task.level, keep_records=True)
    out = WorkloadResult(
        workload.name, task.family, result.steps_compared, 0.0, behaviours_seen(workload, result.records_a)
    )
    _timed(out, result)
    if result.error is not None:
        out.cells = cells(workload, result.records_a)
        out.error = result.error.to_json()
        return _finish(out, t0)
    _judge_engine_trace(task, workload, result, out)  # and counts the cells
    d = result.divergence
    if d is not None:
        again = _timed(out, _diff(task, workload, task.against, task.engine, task.level))
        out.ran_twice = True  # a second run, as a determinism check is: `determinism.checked` counts it
        if not d.same_as(again.divergence):
            out.nondeterministic = {"first": d.to_json(), "second": _outcome_json(again)}
        else:
            out.divergence, out.crash = d.to_json(), d.crash
            _write(task, workload, workload, d, out, 0)
    elif task.check_determinism:  # run it alone again, and hold the two runs against each other
        again = _timed(out, _diff(task, workload, None, task.engine, "blocks", keep_records=True), solo=True)
        out.ran_twice = again.error is None
        if again.error is not None:
            out.error = again.error.to_json()
        else:
            t1 = time.perf_counter()
            flip, _ = compare_records(result.records_b, again.records_b, "blocks")
            out.seconds_in["differ"] += time.perf_counter() - t1
            if flip is not None:
                out.nondeterministic = {"first": "matched", "second": flip.to_json()}
    return _finish(out, t0)


def _finish(out: WorkloadResult, t0: float) -> WorkloadResult:
    """The workload's time, and what its parts leave of it: coverage, writing files, rebuilding the workload."""
    out.seconds = time.perf_counter() - t0
    out.seconds_in["other"] = max(out.seconds - sum(out.seconds_in[p] for p in PARTS if p != "other"), 0.0)
    return out


def _judge_engine_trace(task: Task, workload: Workload, result: DiffResult, out: WorkloadResult) -> None:
    """The monitors judge the engine on its own, whatever the oracle says; the oracle's records give the cells."""
    complete = result.divergence is None and result.steps_compared < workload.max_steps
    records_b = result.records_b
    if result.divergence is not None and not result.divergence.crash:
        # Past a divergence the oracle says nothing, but the monitors still judge the engine's whole run;
        # driven against itself it runs to the end (`--allow-divergence` rests on this).
        solo = _timed(out, _diff(task, workload, None, task.engine, "blocks", keep_records=True), solo=True)
        if solo.divergence is None and solo.error is None:
            records_b, complete = solo.records_b, solo.steps_compared < workload.max_steps
    engine_trace = Trace(workload, tuple(records_b), task.engine.name, "drained" if complete else "max_steps")
    t0 = time.perf_counter()
    agree = result.divergence is None and task.level == "blocks"
    violations, out.cells, counting = judge_and_cells(engine_trace, result.records_a, agree)
    out.seconds_in["monitors"] += time.perf_counter() - t0 - counting
    out.known_violations = [str(v) for v in violations if v.known]  # the release breaks it: reported, not failed
    violations = [v for v in violations if not v.known]
    if result.divergence is not None:
        # The decision invariants restate vLLM 0.33.0's decisions from the trace alone. Beside an oracle, a wrong
        # decision is a departure, which the differ reports (and `--allow-divergence` allows); the bounds of the
        # catalogue still judge the departed run.
        violations = [v for v in violations if v.invariant not in DECISION_NAMES]
    out.violations = [str(v) for v in violations]


def _outcome_json(r: DiffResult) -> Any:
    return r.error.to_json() if r.error else r.divergence.to_json() if r.divergence else "matched"


def _write(task: Task, small: Workload, original: Workload, d: Divergence, out: WorkloadResult, calls: int) -> None:
    cx = Counterexample.of(
        small,
        d,
        task.against.name,
        task.engine.name,
        task.level,
        {"a": engine_version(task.against), "b": engine_version(task.engine)},
        original,
        calls,
    )
    path = os.path.join(task.out_dir, f"counterexample-{original.name}.json")
    cx.write(path)
    out.counterexample_file, out.shrunk_size = path, cx.to_json()["size"]


def shrink_result(job: tuple[Task, WorkloadResult]) -> WorkloadResult:
    """Shrink one diverged workload and rewrite its counterexample; the finding itself stays as found."""
    task, out = job
    workload = task_workload(task)
    first = diff_divergence(task, workload)
    if first is None:  # it reproduced a moment ago; if it does not now, say so rather than shrink a ghost
        out.shrink_note = "did not reproduce when shrinking began: left unshrunk"
        return out

    def reproduces(candidate: Workload) -> bool:  # kept only if it diverges, and the same way twice
        d1 = diff_divergence(task, candidate)
        return d1 is not None and d1.same_as(diff_divergence(task, candidate))

    small, calls = shrink(workload, reproduces, max_calls=task.shrink_budget, time_budget_s=SHRINK_SAFETY_CAP_S)
    final = _diff(task, small, task.against, task.engine, task.level, keep_records=True)
    if final.divergence is None:
        out.shrink_note = "the shrunk workload did not diverge on replay: left unshrunk"
        return out
    if calls >= task.shrink_budget:
        out.shrink_note = f"shrink budget of {task.shrink_budget} candidates spent"
    out.steps_table = side_by_side(final.records_a, final.records_b, final.divergence)
    _write(task, small, workload, final.divergence, out, calls)
    return out


def diff_divergence(task: Task, workload: Workload) -> Divergence | None:
    """The candidate's divergence; an engine error is not one (a shrinker must never walk into a crash of the machine)."""
    r = _diff(task, workload, task.against, task.engine, task.level)
    return r.divergence if r.error is None else None
