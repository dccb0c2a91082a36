"""The engine's calls outside schedule() in the spec and the reference (`spec/controls.py`): the workload format, the
engine loop's turning of each control into the scheduler's calls, the reset and the pauses, and the monitor that
judges them, shown to catch engines that get them wrong (`docs/features.md`)."""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.controls import Control, ControlCall, PauseState
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import Trace
from schedspec.spec.workload import Workload, WorkloadRequest

CONFIG = SchedulerConfig(
    max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=40, enable_prefix_caching=True
)


def req(rid, at=0, prompt=6, max_tokens=8):
    base = 10 + 100 * (ord(rid[0]) - ord("a"))  # prompts of their own: no request hits another's blocks
    return WorkloadRequest(Request(rid, tuple(range(base, base + prompt)), max_tokens, ignore_eos=True), at)


def workload(*controls, config=CONFIG, requests=None):
    return Workload(config, requests or (req("a"), req("b", at=1)), controls=tuple(controls), max_steps=60)


def calls(trace):
    return {r.step: [c.to_json() for c in r.controls] for r in trace.steps if r.controls}


def test_a_reset_preempts_the_running_requests_in_their_order_and_the_next_schedule_reports_and_resumes_them():
    trace = simulate(workload(Control(3, "reset_prefix_cache", reset_running_requests=True)))
    step = trace.steps[3]
    assert step.controls == (ControlCall("reset_prefix_cache", True, True),)
    assert step.output.preempted_req_ids == {"a", "b"}
    # Resumed in the same step, in their running order, with everything recomputed (no prefix hit: the cache is empty).
    assert [(n.req_id, n.resumed, n.num_computed_tokens) for n in step.output.scheduled_new_reqs] == [
        ("a", True, 0),
        ("b", True, 0),
    ]
    assert check_trace(trace) == []


def test_a_reset_without_the_running_requests_answers_false_while_blocks_are_held_and_true_when_idle():
    trace = simulate(workload(Control(2, "reset_prefix_cache"), Control(40, "reset_prefix_cache")))
    assert calls(trace) == {
        2: [{"call": "reset_prefix_cache", "reset_running_requests": False, "result": False}],
        40: [{"call": "reset_prefix_cache", "reset_running_requests": False, "result": True}],
    }
    assert check_trace(trace) == []


def test_paused_new_admits_nothing_and_paused_all_schedules_nothing_until_the_resume():
    new = simulate(workload(Control(1, "pause", mode="wait", clear_cache=False), Control(4, "resume")))
    assert [set(new.steps[i].output.num_scheduled_tokens) for i in range(1, 5)] == [{"a"}, {"a"}, {"a"}, {"a", "b"}]
    everything = simulate(workload(Control(1, "pause", mode="keep", clear_cache=False), Control(4, "resume")))
    assert [everything.steps[i].output.total_num_scheduled_tokens for i in range(1, 4)] == [0, 0, 0]
    assert set(everything.steps[4].output.num_scheduled_tokens) == {"a", "b"}
    assert check_trace(new) == [] and check_trace(everything) == []


def test_an_abort_pause_aborts_every_request_in_the_order_they_were_added():
    trace = simulate(workload(Control(1, "pause", mode="abort"), Control(3, "resume")))
    step = trace.steps[1]
    assert step.aborted == ("a", "b") and {f.status for f in step.finished.values()} == {RequestStatus.FINISHED_ABORTED}
    assert step.controls[0] == ControlCall("set_pause_state", pause_state=PauseState.PAUSED_NEW)
    assert check_trace(trace) == []


def test_a_pending_cache_clear_runs_when_the_engine_idles_even_after_a_resume():
    """A pause in mode wait with the cache clear, while `a` runs: the clear waits for the engine to go idle; the
    resume does not cancel it (vLLM's idle callback stays registered), and it is made before that step's inputs."""
    w = workload(Control(1, "pause", mode="wait"), Control(2, "resume"), requests=(req("a"), req("b", at=30)))
    trace = simulate(w)
    idle = [(s, c) for s, c in calls(trace).items() if any(x.get("before_inputs") for x in c)]
    assert len(idle) == 1 and idle[0][1] == [
        {"call": "reset_prefix_cache", "reset_running_requests": True, "result": True, "before_inputs": True}
    ]
    assert 2 < idle[0][0] <= 30
    assert check_trace(trace) == []


def test_release_kv_cache_memory_needs_a_completed_pause():
    unpaused = simulate(workload(Control(2, "release_kv_cache_memory")))
    assert 2 not in calls(unpaused)  # vLLM raises to its caller; nothing changes
    paused = simulate(
        workload(
            Control(2, "pause", mode="keep", clear_cache=False),
            Control(2, "release_kv_cache_memory"),
            Control(5, "resume"),
        )
    )
    assert calls(paused)[2][-1] == {"call": "reset_prefix_cache", "reset_running_requests": True, "result": True}
    assert paused.steps[2].output.preempted_req_ids == {"a", "b"}  # reported by the step's schedule(), which grants 0
    assert check_trace(paused) == []


@pytest.mark.parametrize(
    "control, where, value",
    [
        ({"step": 1, "call": "sleep"}, "workload.controls[0].call", "sleep"),
        ({"step": 1, "call": "pause", "mode": "later"}, "workload.controls[0].mode", "later"),
        ({"step": 1, "call": "resume", "mode": "keep"}, "workload.controls[0].mode", "keep"),
        ({"step": 1, "call": "pause", "before_inputs": True}, "workload.controls[0].before_inputs", True),
    ],
)
def test_a_malformed_control_is_refused_naming_the_field_and_the_value(control, where, value):
    data = workload().to_json()
    data["controls"] = [control]
    with pytest.raises(SpecError) as e:
        Workload.from_json(data)
    assert (e.value.where, e.value.value) == (where, value)


def test_controls_out_of_order_and_a_release_before_0_31_0_are_refused():
    with pytest.raises(SpecError, match=r"controls\[1\]\.step"):
        workload(Control(3, "resume"), Control(2, "resume"))
    old = dataclasses.replace(CONFIG, vllm_version="0.30.0")
    with pytest.raises(SpecError, match="0.31.0"):
        workload(Control(1, "release_kv_cache_memory"), config=old)
    w = workload(Control(1, "pause", mode="keep"), Control(2, "reset_prefix_cache", before_inputs=True))
    assert Workload.from_json(w.to_json()) == w  # the format round-trips


def test_the_release_variant_shows_on_its_workload():
    w = VERSION_WORKLOADS["version-paused-waiting-pass"]()
    admitted = {}
    for release in ("0.31.0", "0.32.0"):
        trace = simulate(w.replace(config=dataclasses.replace(w.config, vllm_version=release)))
        admitted[release] = next(s.step for s in trace.steps for n in s.output.scheduled_new_reqs if n.req_id == "b")
        assert check_trace(trace) == []
    assert admitted == {"0.31.0": 12, "0.32.0": 3}


class Unreported(ReferenceEngine):
    """A planted bug: the next schedule() forgets a reset's victims."""

    name = "unreported"

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        done = super().reset_prefix_cache(reset_running_requests)
        self.scheduler.reset_preempted_req_ids.clear()
        return done


class WrongAnswer(ReferenceEngine):
    """A planted bug: the reset answers True whatever the pool holds."""

    name = "wrong-answer"

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        super().reset_prefix_cache(reset_running_requests)
        return True


class PausedAllSchedules(ReferenceEngine):
    """A planted bug: PAUSED_ALL is taken for PAUSED_NEW."""

    name = "paused-all-schedules"

    def set_pause_state(self, pause_state: PauseState) -> None:
        super().set_pause_state(min(pause_state, PauseState.PAUSED_NEW))


@pytest.mark.parametrize(
    "engine, control",
    [
        (Unreported, Control(3, "reset_prefix_cache", reset_running_requests=True)),
        (WrongAnswer, Control(2, "reset_prefix_cache")),
        (PausedAllSchedules, Control(2, "pause", mode="keep", clear_cache=False)),
    ],
)
def test_controls_exact_catches_each_planted_bug(engine, control):
    w = workload(control, Control(6, "resume"))
    trace = run(engine(w.config), w)
    found = {v.invariant for v in check_trace(trace)}
    assert "controls-exact" in found, found
    assert check_trace(simulate(w)) == []  # the control: the reference


def test_an_engine_without_the_control_methods_is_refused_in_one_line():
    class Plain:
        name = "plain"

        def __init__(self, config):
            self.inner = ReferenceEngine(config)

        def __getattr__(self, name):
            if name in ("reset_prefix_cache", "set_pause_state"):
                raise AttributeError(name)
            return getattr(self.inner, name)

    w = workload(Control(1, "resume"))
    with pytest.raises(SpecError, match="reset_prefix_cache"):
        Trace(w, tuple(run(Plain(w.config), w).steps))


def test_a_reset_answered_with_no_bool_is_the_engine_s_failure_never_a_verdict():
    from schedspec.conformance.harness.differ import diff
    from schedspec.spec.errors import InfrastructureError

    class Mistyped(ReferenceEngine):
        name = "mistyped"

        def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
            super().reset_prefix_cache(reset_running_requests)
            return "yes"  # type: ignore[return-value]

    w = workload(Control(2, "reset_prefix_cache"))
    with pytest.raises(InfrastructureError, match="malformed output"):
        run(Mistyped(w.config), w)
    result = diff(w, ReferenceEngine, Mistyped, "blocks")
    assert result.divergence is None and result.error is not None and result.error.kind == "malformed"
