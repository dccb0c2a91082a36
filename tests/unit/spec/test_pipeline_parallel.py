"""Pipeline parallel in the spec and the reference: the config, the engine loop's batch queue, the async decode
cadence, and what a release refuses (`docs/features.md`, "Pipeline parallel")."""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.workloads.families import at_release, generate
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Workload, WorkloadRequest

CONFIG = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=32)


def workload(n=3, max_tokens=6, **config):
    requests = tuple(
        WorkloadRequest(Request(f"r{i}", (1, 2, 3, 4, 5), max_tokens, ignore_eos=True), i) for i in range(n)
    )
    return Workload(dataclasses.replace(CONFIG, **config), requests, max_steps=200)


@pytest.mark.parametrize(("pp", "async_scheduling", "size"), [(1, False, 1), (1, True, 2), (3, False, 3), (3, True, 4)])
def test_the_batch_queue_is_vllm_s_max_concurrent_batches(pp, async_scheduling, size):
    """vllm/config/vllm.py:VllmConfig.max_concurrent_batches (V2 runner): pp, one more under async; and the loop
    fills it: a step leaves at most size - 1 steps in flight, and this workload reaches that."""
    w = workload(pipeline_parallel_size=pp, async_scheduling=async_scheduling)
    assert w.config.max_concurrent_batches == size
    trace = simulate(w)
    assert max(len(r.in_flight) for r in trace.steps) == size - 1
    assert trace.end == "drained" and check_trace(trace) == []


def test_a_synchronous_pipeline_passes_over_a_request_whose_step_is_in_flight():
    """The synchronous scheduler has no placeholders: a request owes nothing until its output is back, so with
    two stages a lone decode runs every other schedule()."""
    trace = simulate(workload(n=1, pipeline_parallel_size=2))
    grants = [dict(r.output.num_scheduled_tokens) for r in trace.steps if r.scheduled]
    assert grants[:6] == [{"r0": 5}, {}, {"r0": 1}, {}, {"r0": 1}, {}]


def decode_calls(trace: Trace, rid: str) -> list[int]:
    """The schedule() calls (1-based, vLLM's `current_step`) that granted `rid` a decode."""
    calls = [r for r in trace.steps if r.scheduled]
    return [i + 1 for i, r in enumerate(calls) if r.output.num_scheduled_tokens.get(rid) == 1]


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_async_decodes_are_pp_schedule_calls_apart(pp):
    """vllm/v1/core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule: next_decode_eligible_step is
    current_step + pp; without the cadence the lone request would decode at every call (placeholders)."""
    trace = simulate(workload(n=1, max_tokens=8, async_scheduling=True, pipeline_parallel_size=pp))
    calls = decode_calls(trace, "r0")
    assert len(calls) >= 4 and {b - a for a, b in zip(calls, calls[1:])} == {pp}
    one = decode_calls(simulate(workload(n=1, max_tokens=8, async_scheduling=True)), "r0")
    assert {b - a for a, b in zip(one, one[1:])} == {1}


def test_the_cadence_holds_one_request_while_the_others_fill_the_step():
    trace = simulate(workload(n=3, max_tokens=8, async_scheduling=True, pipeline_parallel_size=2))
    mixed = [r for r in trace.steps if r.scheduled and 0 < len(r.output.num_scheduled_tokens) < 3]
    assert mixed and check_trace(trace) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pipeline_parallel_size": 0}, "config.pipeline_parallel_size"),
        ({"pipeline_parallel_size": 17}, "config.pipeline_parallel_size"),
        ({"pipeline_parallel_size": "2"}, "config.pipeline_parallel_size"),
        # synchronous spec decode under PP: when the drafts reach the scheduler is timing
        ({"pipeline_parallel_size": 2, "num_speculative_tokens": 2}, "config.pipeline_parallel_size"),
        # before 0.33.0 spec decode runs on the V1 model runner, which does not fully support async with PP
        (
            {"pipeline_parallel_size": 2, "num_speculative_tokens": 2, "async_scheduling": True,
             "speculative_method": "ngram_gpu", "vllm_version": "0.32.0"},
            "config.pipeline_parallel_size",
        ),
    ],
)  # fmt: skip
def test_a_config_the_spec_refuses_is_one_line_naming_the_field(change, field):
    with pytest.raises(SpecError) as e:
        SchedulerConfig.from_dict({**CONFIG.to_dict(), **change})
    assert e.value.where == field and "\n" not in str(e.value)


def test_async_spec_decode_under_pp_is_modelled_from_0_33():
    c = SchedulerConfig(num_speculative_tokens=2, async_scheduling=True, pipeline_parallel_size=2)
    assert c.max_concurrent_batches == 3 and c.decode_stagger == 2


def test_at_release_runs_spec_decode_on_one_stage_before_0_33():
    w = generate("pipeline-parallel", 0, 3)  # async spec decode (stratum 3), pp 2
    assert w.config.num_speculative_tokens and w.config.async_scheduling and w.config.pipeline_parallel_size > 1
    old = at_release(w, "0.32.0")
    assert old.config.pipeline_parallel_size == 1 and "pipeline_parallel_size=" in old.description
    assert at_release(w, "0.33.0").config.pipeline_parallel_size == w.config.pipeline_parallel_size
    plain = generate("pipeline-parallel", 0, 4)  # no spec decode: every release takes the pipeline
    assert at_release(plain, "0.28.0").config.pipeline_parallel_size == plain.config.pipeline_parallel_size
