"""Hypothesis-driven campaigns: the public strategies, steered by `target()`.

`target()` rewards workloads that preempt often and fill the KV cache, so the
search spends its budget where the scheduler's hardest rules live. The first
test checks the reference against every invariant monitor; the second holds
it against the real vLLM 0.33.0 in lock-step, when its venv exists.
"""

import pytest
from hypothesis import HealthCheck, given, settings, target

from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.vllm import vllm_venv_ready
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.strategies import workloads
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.invariants import check_trace
from schedspec.spec.trace import Trace

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def pressure(trace: Trace) -> None:
    usable = trace.workload.config.num_usable_blocks
    target(float(sum(1 for s in trace.steps if s.output.preempted_req_ids)), label="preempting steps")
    target(max((1 - s.state.num_free_blocks / usable for s in trace.steps), default=0.0), label="cache fullness")


@SETTINGS
@given(workloads())
def test_reference_keeps_every_invariant(workload):
    trace = simulate(workload)
    pressure(trace)
    assert check_trace(trace) == []


@pytest.mark.skipif(not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh")
@settings(SETTINGS, max_examples=60)
@given(workloads(family="kv-pressure") | workloads(family="priority"))
def test_reference_matches_vllm_under_pressure(workload):
    from schedspec.conformance.engines.registry import engine_factory

    result = diff(workload, ReferenceEngine, engine_factory(parse_engine("vllm")), "blocks", keep_records=True)
    pressure(Trace(workload, tuple(result.records_a)))
    assert result.divergence is None, result.divergence
