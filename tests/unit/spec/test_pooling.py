"""Pooling models in the spec and the reference (`config.runner` "pooling"): the workload format, vLLM's own
pooling scenario at both sides of `pooling-samples-no-token`, the async placeholder, and `pooling-exact` shown to
catch engines that finish a pooling request wrongly (`docs/features.md`)."""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.output import ModelRunnerOutput
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import FinishedRequest, Trace
from schedspec.spec.workload import Grammar, Workload, WorkloadRequest

POOLING = SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=16, block_size=4, runner="pooling")


def pooled(*prompts: int, config: SchedulerConfig = POOLING) -> Workload:
    requests = tuple(WorkloadRequest(Request(f"p{i}", tuple(range(10, 10 + n)), 1), i) for i, n in enumerate(prompts))
    return Workload(config, requests, max_steps=40)


def test_the_format_refuses_what_a_pooling_model_cannot_run_in_one_line():
    with pytest.raises(SpecError, match=r"config\.runner: must be 'generate' with spec decode"):
        dataclasses.replace(POOLING, num_speculative_tokens=2)
    with pytest.raises(SpecError, match=r"config\.runner: must be 'generate' or 'pooling' \(got 'embed'\)"):
        dataclasses.replace(POOLING, runner="embed")
    request = Request("p", (1, 2, 3), 1)
    for bad, field in (
        (WorkloadRequest(dataclasses.replace(request, max_tokens=4)), "max_tokens"),
        (WorkloadRequest(request, output_token_ids=(5,)), "output_token_ids"),
        (WorkloadRequest(request, grammar=Grammar(0)), "grammar"),
    ):
        with pytest.raises(SpecError, match=rf"workload\.requests\[0\]\.{field}: "):
            Workload(POOLING, (bad,))
    # A prompt of max_model_len: a pooling model's own (vLLM's input processor), refused on a generate model.
    full = WorkloadRequest(Request("p", tuple(range(16)), 1))
    assert Workload(POOLING, (full,)).requests == (full,)
    with pytest.raises(SpecError, match=r"prompt_token_ids: .*shorter under a generate runner"):
        Workload(dataclasses.replace(POOLING, runner="generate"), (full,))


def test_a_request_is_pooled_in_the_step_its_prompt_ends_and_finishes_there_with_no_output():
    trace = simulate(pooled(20 - 4, 3))  # p0: 16 tokens in chunks of 8; p1 arrives at step 1
    assert [dict(s.output.num_scheduled_tokens) for s in trace.steps[:3]] == [{"p0": 8}, {"p0": 8}, {"p1": 3}]
    assert [sorted(s.model_output.pooler_output) for s in trace.steps[:3]] == [[], ["p0"], ["p1"]]
    assert trace.steps[1].finished == {"p0": FinishedRequest(RequestStatus.FINISHED_STOPPED, ())}
    assert all(not tokens for s in trace.steps for tokens in s.model_output.sampled_token_ids.values())
    assert check_trace(trace) == []


def test_vllm_s_own_pooling_test_at_both_sides_of_the_release_that_fixed_it():
    """tests/v1/core/test_scheduler.py::test_pooling_chunked_prefill_can_finish_at_max_model_len: a prompt of L = 8
    in chunks of 4. From 0.32.0 the second chunk reaches L and the request is pooled; before, the running pass
    kept a slot for a sampled token, granted 3, then nothing, for good: known violations of those releases."""
    new = simulate(at(VERSION_WORKLOADS["version-pooling-no-sample"](), "0.32.0"))
    assert [dict(s.output.num_scheduled_tokens) for s in new.steps] == [{"pool": 4}, {"pool": 4}, {}]
    assert new.end == "drained" and check_trace(new) == []
    old = simulate(at(VERSION_WORKLOADS["version-pooling-no-sample"](), "0.31.0"))
    assert [dict(s.output.num_scheduled_tokens) for s in old.steps][:3] == [{"pool": 4}, {"pool": 3}, {}]
    assert old.end == "max_steps"
    found = check_trace(old)
    assert found and all(v.known for v in found)
    assert {v.invariant for v in found} <= {"token-bounds", "running-served-while-budget-lasts", "progress-when-idle"}


@pytest.mark.parametrize("release, placeholders", [("0.33.0", 0), ("0.31.0", 1)])
def test_async_scheduling_owes_a_pooling_request_no_placeholder_from_0_32(release, placeholders):
    """AsyncScheduler._update_after_schedule adds num_sampled_tokens_per_step placeholders after the last chunk: 0
    for a pooling model from 0.32.0, 1 before (the async max-tokens rule then keeps it from being scheduled)."""
    config = dataclasses.replace(POOLING, async_scheduling=True, vllm_version=release)
    engine = ReferenceEngine(config)
    engine.add_request(Request("p", tuple(range(10, 16)), 1))
    engine.schedule()
    assert engine.state().requests["p"].num_output_placeholders == placeholders
    assert engine.schedule().num_scheduled_tokens == {}  # its whole prompt is in flight: nothing is owed, or skipped


class FinishesOnEveryChunk(ReferenceEngine):
    """A planted bug: a pooling request finishes in the update of any step that scheduled it."""

    name = "finishes-on-every-chunk"

    def update_from_output(self, output, model_output):
        everyone = frozenset(output.num_scheduled_tokens)
        return super().update_from_output(output, ModelRunnerOutput(model_output.sampled_token_ids, everyone))


class IgnoresPooledOutput(ReferenceEngine):
    """A planted bug: the update never reads the pooled output, so nothing finishes."""

    name = "ignores-pooled-output"

    def update_from_output(self, output, model_output):
        return super().update_from_output(output, ModelRunnerOutput(model_output.sampled_token_ids))


class FinishesLengthCapped(ReferenceEngine):
    """A planted bug: a pooled request finishes as FINISHED_LENGTH_CAPPED (max_tokens 1 taken for a cap)."""

    name = "finishes-length-capped"

    def update_from_output(self, output, model_output):
        finished = super().update_from_output(output, model_output)
        return {rid: dataclasses.replace(f, status=RequestStatus.FINISHED_LENGTH_CAPPED) for rid, f in finished.items()}


@pytest.mark.parametrize("engine", [FinishesOnEveryChunk, IgnoresPooledOutput, FinishesLengthCapped])
def test_pooling_exact_catches_each_planted_bug(engine):
    w = pooled(12, 5)
    trace = run(engine(w.config), w)
    found = {v.invariant for v in check_trace(trace)}
    assert "pooling-exact" in found, found
    assert check_trace(simulate(w)) == []  # the control: the reference


def test_a_pooled_trace_round_trips_through_json():
    trace = simulate(pooled(12, 5))
    again = Trace.from_json(trace.to_json())
    assert [s.model_output.pooler_output for s in again.steps] == [s.model_output.pooler_output for s in trace.steps]
    assert any(s.model_output.pooler_output for s in again.steps)
