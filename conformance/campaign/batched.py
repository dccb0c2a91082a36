"""The batched fast path of `certify` for the torch engine: a campaign as one batch of instances.

Lock-step certification (`campaign.run_task`) drives one engine per
workload, one step at a time, which for the torch engine means B = 1 and
a tensor program per step per workload. Here the planned workloads run as
B instances of one batched state (`gpu_impl.batch.run_batch`, in chunks of
`SCHEDSPEC_TORCH_BATCH` workloads, default 1024), and afterwards each
workload's torch trace is compared with the oracle's trace step by step,
with the same comparison as the lock-step differ (`compare.first_difference`
at the task's level, the trace-length check, the diverging step counted
and kept). The results are the same `WorkloadResult` records, so the
certificate, its Markdown and the JUnit XML do not change format:

* the fake model's answers are compared too: in a batch they come from the
  engine's own tensor version of `spec.engine.fake_model` (and the drafter's
  proposals from its tensor version of `spec.engine.Drafter`; async
  instances run their own batch queue), so the whole record must agree;
* coverage (and the coverage map's cells) is counted on the oracle's steps up to the first divergence;
* the invariant monitors judge the torch trace up to the same point, with
  the same end label the lock-step path gives it;
* workloads planned for a determinism check run in a second batch, and the
  two torch traces are compared at level `blocks`;
* a divergence is re-run in lock-step (`campaign.run_task`), which shrinks
  it and writes the counterexample. If lock-step does *not* diverge, the
  bug lives in the batching itself (instances leaking into each other);
  that is still reported, unshrunk, with the batched divergence.

If the batched run raises, every task falls back to lock-step, which turns
an engine failure into a per-workload divergence instead of a crash.
It is used when the engine is `torch` and the oracle runs in process
(`reference`), unless `SCHEDSPEC_CERTIFY_LOCKSTEP=1`. It runs in one process:
`--jobs` does not apply (the batch is the parallelism; on the CPU the oracle
and the invariant monitors dominate the time). Since the determinism re-runs
form a batch of their own, they also check that an instance's trace does not
depend on which other instances share its batch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...spec.engine import run as run_engine
from ...spec.invariants import Violation, check_trace
from ...spec.trace import Trace
from ...spec.workload import Workload
from ..engines.registry import engine_factory, engine_version
from ..harness.counterexample import Counterexample
from ..harness.differ import compare_records
from ..workloads.families import generate
from .behaviour_coverage import behaviours_seen
from .cell_coverage import judge_and_cells
from .task import Task, WorkloadResult, run_task

BATCH_ENV = "SCHEDSPEC_TORCH_BATCH"
LOCKSTEP_ENV = "SCHEDSPEC_CERTIFY_LOCKSTEP"
DEFAULT_BATCH = 1024


def applicable(tasks: Sequence[Task]) -> bool:
    return (
        bool(tasks)
        and os.environ.get(LOCKSTEP_ENV) != "1"
        and all(t.engine.kind == "torch" and t.against.kind == "reference" for t in tasks)
    )


def _result(
    task: Task,
    workload: Workload,
    oracle: Trace,
    torch_trace: Trace,
    again: Trace | None,
    seconds: dict[str, float],
) -> WorkloadResult:
    """`seconds`: the workload's share of the batch ("engine") and its oracle run ("oracle")."""
    t0 = time.perf_counter()
    divergence, compared = compare_records(oracle.steps, torch_trace.steps, task.level)
    t_differ = time.perf_counter() - t0
    out = WorkloadResult(workload.name, task.family, compared, 0.0, behaviours_seen(workload, oracle.steps[:compared]))
    complete = divergence is None and compared < workload.max_steps
    engine_trace = Trace(
        workload, tuple(torch_trace.steps[:compared]), task.engine.name, "drained" if complete else "max_steps"
    )
    t1 = time.perf_counter()
    violations, out.cells, counting = judge_and_cells(
        engine_trace, oracle.steps[:compared], divergence is None and task.level == "blocks"
    )
    _judge(out, violations)
    out.seconds_in.update(seconds, monitors=time.perf_counter() - t1 - counting, differ=t_differ)
    if divergence is not None:
        lock = run_task(task)  # shrinks and writes the counterexample
        if lock.divergence is not None:
            return lock
        # Only the batch diverged. The monitors judge the engine's whole batched run.
        _judge(out, check_trace(torch_trace))
        out.divergence = divergence.to_json()
        cx = Counterexample.of(
            workload,
            divergence,
            task.against.name,
            task.engine.name,
            task.level,
            {"a": engine_version(task.against), "b": engine_version(task.engine)},
            workload,
            0,
        )
        path = os.path.join(task.out_dir, f"counterexample-{workload.name}.json")
        cx.write(path)
        out.counterexample_file, out.shrunk_size = path, cx.to_json()["size"]
    elif again is not None:
        out.ran_twice = True
        t2 = time.perf_counter()
        nondet, _ = compare_records(torch_trace.steps, again.steps, "blocks")
        out.seconds_in["differ"] += time.perf_counter() - t2
        if nondet is not None:
            out.nondeterministic = nondet.to_json()
    out.seconds = sum(seconds.values()) + time.perf_counter() - t0
    out.seconds_in["other"] = max(out.seconds - sum(out.seconds_in.values()), 0.0)
    return out


def run(
    tasks: Sequence[Task], on_done: Callable[[WorkloadResult], None] = lambda r: None, device: Any = None
) -> list[WorkloadResult]:
    from ...gpu_impl.batch import run_batch

    chunk = max(1, int(os.environ.get(BATCH_ENV, DEFAULT_BATCH)))
    results: list[WorkloadResult] = []
    for start in range(0, len(tasks), chunk):
        part = list(tasks[start : start + chunk])
        workloads = [generate(t.family, t.seed, t.index) for t in part]
        t0 = time.perf_counter()
        try:
            traces = run_batch(workloads, device)
            twice = [i for i, t in enumerate(part) if t.check_determinism]
            again = dict(zip(twice, run_batch([workloads[i] for i in twice], device)))
        except Exception:  # noqa: BLE001 - lock-step turns an engine failure into a per-workload finding
            for t in part:
                results.append(run_task(t))
                on_done(results[-1])
            continue
        share = (time.perf_counter() - t0) / len(part)
        for i, (task, workload) in enumerate(zip(part, workloads)):
            t1 = time.perf_counter()
            oracle = run_engine(engine_factory(task.against)(workload.config), workload)
            spent = {"engine": share, "oracle": time.perf_counter() - t1}
            results.append(_result(task, workload, oracle, traces[i], again.get(i), spent))
            on_done(results[-1])
    return results


def _judge(out: WorkloadResult, violations: list[Violation]) -> None:
    """A release's known violations are reported and fail nothing (`spec.versions.KNOWN_VIOLATIONS`)."""
    out.violations = [str(v) for v in violations if not v.known]
    out.known_violations = [str(v) for v in violations if v.known]
