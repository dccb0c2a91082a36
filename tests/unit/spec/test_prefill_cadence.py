"""The prefill cadence in the spec and the reference: the config, the DP engine core's throttled steps, the
capacity escape, the local cadence of 0.33.0, and an engine that declares none of it (`docs/features.md`)."""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.request import Request
from schedspec.spec.workload import Workload, WorkloadRequest

CONFIG = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=40)


def req(rid, at=0, prompt=4, max_tokens=6):
    return WorkloadRequest(Request(rid, tuple(range(10, 10 + prompt)), max_tokens, ignore_eos=True), at)


def grants(trace):
    return [dict(s.output.num_scheduled_tokens) for s in trace.steps]


def test_a_throttled_step_holds_a_prefill_while_a_decode_runs():
    """`b` arrives at step 1, which the DP engine core throttles: `a`'s decode fills it, `b` waits for step 2."""
    w = Workload(CONFIG, (req("a"), req("b", at=1)), throttle_prefills=(1,))
    assert grants(simulate(w))[:3] == [{"a": 4}, {"a": 1}, {"a": 1, "b": 4}]
    assert grants(simulate(w.replace(throttle_prefills=())))[:2] == [{"a": 4}, {"a": 1, "b": 4}]
    assert check_trace(simulate(w)) == []


def test_with_nothing_decoding_a_throttled_step_admits_anyway():
    """`any(not r.is_prefill_chunk for r in running)`: with no decode to protect, the throttle holds nothing."""
    w = Workload(CONFIG, (req("a"),), throttle_prefills=(0,))
    assert grants(simulate(w))[0] == {"a": 4}


def test_a_throttled_step_holds_a_running_prompt_chunk_too():
    """A prompt cut by the budget keeps its next chunk for a step on the cadence; the decode still runs."""
    small = dataclasses.replace(CONFIG, max_num_batched_tokens=8, long_prefill_token_threshold=4)
    w = Workload(small, (req("a"), req("b", at=1, prompt=12)), throttle_prefills=(2,))
    got = grants(simulate(w))
    assert got[1] == {"a": 1, "b": 4} and got[2] == {"a": 1} and got[3]["b"] == 4


def test_a_release_step_that_cannot_drain_the_queue_stops_the_throttle():
    """The capacity escape: the budget ends step 1 with `c` still waiting, so the throttled step 2 admits it."""
    tight = dataclasses.replace(CONFIG, max_num_batched_tokens=6, max_model_len=6, enable_chunked_prefill=False)
    requests = (req("a", prompt=2, max_tokens=3), req("b", at=1, max_tokens=1), req("c", at=1, max_tokens=1))
    w = Workload(tight, requests, throttle_prefills=(2,))
    got = grants(simulate(w))
    assert got[1] == {"a": 1, "b": 4} and got[2] == {"a": 1, "c": 4}  # `a` still decodes: only the escape admits c
    assert check_trace(simulate(w)) == []


def test_the_local_cadence_is_0_33_s_and_counts_executed_steps():
    w = VERSION_WORKLOADS["version-prefill-cadence"]()
    assert grants(simulate(at(w, "0.33.0")))[:4] == [{"a": 4}, {"a": 1}, {"a": 1}, {"a": 1, "b": 8}]
    assert grants(simulate(at(w, "0.32.0")))[:2] == [{"a": 4}, {"a": 1, "b": 8}]
    assert at(w, "0.33.0").config.local_prefill_interval == 3
    dp = dataclasses.replace(at(w, "0.33.0").config, data_parallel_size=2)
    assert dp.local_prefill_interval == 1  # a DP rank's engine core drives the cadence instead


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prefill_schedule_interval": 0}, "config.prefill_schedule_interval"),
        ({"data_parallel_size": 0}, "config.data_parallel_size"),
        ({"data_parallel_size": 1.5}, "config.data_parallel_size"),
    ],
)
def test_a_bad_cadence_config_is_one_line_naming_the_field(change, field):
    with pytest.raises(SpecError) as e:
        SchedulerConfig.from_dict({**CONFIG.to_dict(), **change})
    assert e.value.where == field and "\n" not in str(e.value)


@pytest.mark.parametrize("steps", [(2, 1), (1, 1), (-1,)])
def test_throttled_steps_are_ascending_steps_each_once(steps):
    with pytest.raises(SpecError) as e:
        Workload(CONFIG, (req("a"),), throttle_prefills=steps)
    assert e.value.where.startswith("workload.throttle_prefills[")


def test_the_throttle_round_trips_through_json():
    w = Workload(CONFIG, (req("a"), req("b", at=1)), throttle_prefills=(1, 3))
    again = Workload.from_json(w.to_json())
    assert again.throttle_prefills == (1, 3) and again.throttled_at(3) and not again.throttled_at(2)
    assert [r.throttle_prefills for r in simulate(w).steps[:2]] == [False, True]


def test_an_engine_whose_schedule_takes_no_throttle_is_refused_in_one_line():
    class CoreOnly(ReferenceEngine):
        def schedule(self):  # type: ignore[override]
            return super().schedule()

    w = Workload(CONFIG, (req("a"), req("b", at=1)), throttle_prefills=(1,))
    with pytest.raises(SpecError) as e:
        run(CoreOnly(w.config), w)
    assert e.value.why.startswith("takes no throttle_prefills") and "\n" not in str(e.value)
    assert run(CoreOnly(w.config), w.replace(throttle_prefills=())).end == "drained"
