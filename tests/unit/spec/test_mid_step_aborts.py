"""Aborts where vLLM processes them: after the model ran, before the update (`Abort.mid_step`).

EngineCore drains its aborts queue between a step's execution and its
`update_from_output` (vllm/v1/engine/core.py:EngineCore.step, and
`step_with_batch_queue` before the oldest output's update), so a client that
disconnects while the model runs aborts a request the step has just
scheduled. The update passes it over: its sampled tokens are dropped and it
ends with the outputs it had. Under async scheduling a step that absorbs no
output drains nothing, and the abort lands at the next step (the input
queue's copy). The reference, the torch engine (lock-step and batched) and
vLLM 0.33.0 itself agree on every case here (`tests/campaigns/` runs vLLM).
"""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.harness.differ import compare_records
from schedspec.conformance.workloads.families import generate
from schedspec.gpu_impl.batch import run_batch
from schedspec.gpu_impl.engine import TorchEngine
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.invariants import check_trace
from schedspec.spec.invariants.consistency import check_consistency
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest


def two_decoding(async_scheduling: bool = False) -> Workload:
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64, block_size=4, num_gpu_blocks=20,
        async_scheduling=async_scheduling,
    )  # fmt: skip
    reqs = tuple(
        WorkloadRequest(Request(rid, tuple(range(1, 6)), max_tokens=6), 0, tuple(range(20, 26))) for rid in ("a", "b")
    )
    return Workload(config, reqs, (Abort(2, "a", mid_step=True),), max_steps=40)


def test_a_mid_step_abort_lands_between_the_schedule_and_the_update():
    trace = simulate(two_decoding())
    step2 = trace.steps[2]
    assert step2.aborted == () and step2.aborted_mid_step == ("a",)
    assert "a" in step2.output.num_scheduled_tokens  # scheduled in this very step
    assert step2.model_output.sampled_token_ids["a"]  # the model answered it ...
    finished = step2.finished["a"]
    assert finished.status == RequestStatus.FINISHED_ABORTED
    assert len(finished.output_token_ids) == 2  # ... and the update dropped that answer: the 2 of the steps before
    assert "a" in trace.steps[3].output.finished_req_ids  # reported by the next schedule()
    assert check_trace(trace) == []


def test_under_async_a_step_that_absorbs_nothing_passes_its_mid_step_aborts_on():
    w = two_decoding(async_scheduling=True)
    trace = simulate(w.replace(aborts=(Abort(0, "a", mid_step=True),)))
    first = trace.steps[0]
    assert first.updated_step is None and first.aborted_mid_step == ()  # no update in step 0: nothing drained
    assert trace.steps[1].aborted == ("a",)  # the input queue's copy, before step 1's schedule
    assert check_trace(trace) == []


def test_the_consistency_check_catches_a_mid_step_abort_recorded_before_the_schedule():
    """A planted bug of the kind an engine's glue makes: the abort reported as one before schedule()."""
    trace = simulate(two_decoding())
    steps = list(trace.steps)
    steps[2] = dataclasses.replace(steps[2], aborted=("a",), aborted_mid_step=())
    violations = check_consistency(Trace(trace.workload, tuple(steps), trace.engine, trace.end))
    assert any(v.invariant == "trace-inputs" and "aborted" in v.detail for v in violations), violations
    assert check_consistency(trace) == []


@pytest.mark.parametrize(
    "family", ["aborts", "async", "budget", "kv-pressure", "priority", "spec-decode", "prefix-caching"]
)
def test_the_torch_engine_agrees_with_the_reference(family):
    workloads = []
    for i in range(4):
        w = generate(family, 3, i)
        extra = tuple(Abort(1 + (k % 4), r.request_id, True) for k, r in enumerate(w.requests[:4]))
        workloads.append(w.replace(aborts=w.aborts + extra))
    batched = run_batch(workloads, "cpu")
    for w, b in zip(workloads, batched):
        ref = simulate(w)
        assert any(r.aborted_mid_step for r in ref.steps) or w.config.async_scheduling
        lockstep = run(TorchEngine(w.config, "cpu"), w)
        for other in (lockstep, b):
            d, _ = compare_records(ref.steps, other.steps, "blocks")
            assert d is None and ref.end == other.end, (w.name, d)
            assert [r.aborted_mid_step for r in other.steps] == [r.aborted_mid_step for r in ref.steps]
        assert check_trace(ref) == []
