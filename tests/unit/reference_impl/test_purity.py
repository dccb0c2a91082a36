"""The pure API: no input is ever mutated, results depend only on the arguments.

`schedspec.reference_impl.{add_request, abort, schedule, update_from_output}` thaw the frozen state,
run vLLM's algorithm on a mutable copy and freeze the result. These tests compare every input with a
deep copy taken before the call (the state holds dicts, so an in-place change would otherwise go unseen),
run each call twice, and check on random small workloads that (a) the same workload gives the same trace
twice and (b) driving the pure API step by step gives exactly the trace of `simulate` (which keeps one
thawed scheduler for the whole run), with the structural invariants of §7 holding after every call.
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import add, assert_consistent, config, make_request, mock_output, new_state, step

from schedspec.reference_impl import abort, add_request, schedule, simulate, update_from_output
from schedspec.spec import engine as engine_loop
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.state import SchedulerState
from schedspec.spec.trace import FinishedRequest, StateSummary
from schedspec.spec.workload import Abort, Workload, WorkloadRequest


def busy_state() -> SchedulerState:
    """A state with running, waiting and preempted requests, held and free blocks, and a pending finish."""
    cfg = config(block_size=4, num_gpu_blocks=9, policy="priority")
    state = new_state(cfg, *(make_request(i, 8, max_tokens=5, priority=i % 2, arrival_time=i) for i in range(4)))
    _, state, _ = step(state)
    out, state, _ = step(state)
    assert out.preempted_req_ids  # the fixture really is busy
    state = add(state, make_request(7, 3))
    state = abort(state, ["0"])
    assert state.running and state.waiting and state.finished_req_ids
    return state


def test_schedule_does_not_mutate_and_is_deterministic():
    """schedule(state) leaves `state` equal to a deep copy taken before, and two calls return equal results."""
    state = busy_state()
    snapshot = copy.deepcopy(state)
    out1, next1 = schedule(state)
    assert state == snapshot
    out2, next2 = schedule(state)
    assert (out1, next1) == (out2, next2)
    assert next1 is not state


def test_update_from_output_does_not_mutate_state_output_or_model_output():
    """update_from_output mutates neither the state, nor the SchedulerOutput, nor the ModelRunnerOutput."""
    state = busy_state()
    out, after = schedule(state)
    mo = mock_output(out, after, default_token=3)
    snaps = copy.deepcopy((after, out, mo))
    r1 = update_from_output(after, out, mo)
    assert (after, out, mo) == snaps
    assert update_from_output(after, out, mo) == r1


def test_add_request_and_abort_do_not_mutate():
    """add_request and abort return new states and leave their input unchanged."""
    state = busy_state()
    snapshot = copy.deepcopy(state)
    added = add_request(state, make_request(9, 5))
    assert state == snapshot and "9" in added.requests and "9" not in state.requests
    aborted = abort(state, ["1", "2"])
    assert state == snapshot and "1" not in aborted.requests and "1" in state.requests
    assert abort(state, ["1", "2"]) == aborted


def test_old_state_still_usable_after_stepping():
    """Purity in use: stepping from the same state twice, with other calls in between, gives the same step."""
    state = busy_state()
    first = step(state)
    _ = step(first[1])
    _ = abort(state, ["1"])
    assert step(state) == first


# ---- Property: random small workloads ---------------------------------------------------------


class PureEngine:
    """The `Engine` protocol over the pure API, asserting §7 invariants after every call."""

    name = "reference"

    def __init__(self, cfg: SchedulerConfig) -> None:
        from schedspec.reference_impl import initial_state

        self.state = initial_state(cfg)
        self.reported: set[str] = set()

    def add_request(self, request: Request) -> None:
        self.state = add_request(self.state, request)
        assert_consistent(self.state)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        r = self.state.requests.get(request_id)
        self.state = abort(self.state, [request_id])
        assert_consistent(self.state)
        if r is None:
            return None
        return FinishedRequest(RequestStatus.FINISHED_ABORTED, r.output_token_ids)

    def schedule(self):
        before = self.state
        out, self.state = schedule(before)
        check_schedule_invariants(before, out, self.state)
        # I-18: finished ids are reported once.
        assert not (out.finished_req_ids & self.reported)
        self.reported |= out.finished_req_ids
        return out

    def summary(self) -> StateSummary:
        return StateSummary.of(self.state)

    def update_from_output(self, output, model_output):
        self.state, finished = update_from_output(self.state, output, model_output)
        assert_consistent(self.state)
        cfg = self.state.config
        for r in self.state.requests.values():
            assert r.num_output_tokens <= r.request.max_tokens  # I-21
            assert r.num_tokens <= cfg.max_model_len  # I-21
            assert r.num_in_flight_tokens == 0  # I-12, sync engine
            if r.status == RequestStatus.RUNNING:
                assert r.num_owed_tokens >= 0  # I-14
        return finished


def check_schedule_invariants(before: SchedulerState, out, after: SchedulerState) -> None:
    cfg = after.config
    n = out.num_scheduled_tokens
    assert_consistent(after)
    assert sum(n.values()) <= cfg.token_budget  # I-1
    assert all(v >= 1 for v in n.values())  # I-5
    assert set(n) <= set(after.running)  # I-4
    if out.preempted_req_ids:  # I-6: no admission in a step that preempted
        assert out.scheduled_new_reqs == ()
    assert len(after.running) <= cfg.max_num_active_reqs  # I-3 (stronger form)
    for rid in out.preempted_req_ids:  # I-7
        r = after.requests[rid]
        assert r.status == RequestStatus.PREEMPTED and r.num_computed_tokens == 0 and r.block_ids == ()
        assert r.num_preemptions == before.requests[rid].num_preemptions + 1
    for rid in after.running:
        r = after.requests[rid]
        assert r.num_computed_tokens <= cfg.max_model_len - 1  # I-15
        assert len(r.block_ids) * cfg.block_size >= min(r.num_computed_tokens, cfg.max_model_len)  # I-11
    for rid in n:
        r = after.requests[rid]
        assert r.is_prefill_chunk == (r.num_computed_tokens < r.num_tokens + r.num_output_placeholders)  # I-20
        c_before = before.requests[rid].num_computed_tokens if rid in before.running else 0
        assert r.num_computed_tokens == c_before + n[rid]  # C advances by n at schedule time


@st.composite
def small_workloads(draw) -> Workload:
    policy = draw(st.sampled_from(["fcfs", "priority"]))
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_num_seqs = draw(st.integers(1, 6))
    budget = draw(st.integers(max(max_num_seqs, 8), 96))
    chunked = draw(st.booleans())
    L = draw(st.integers(8, budget)) if not chunked else draw(st.integers(8, 200))
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=L,
        block_size=block_size,
        num_gpu_blocks=draw(st.integers(2, 40)),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 3, 8, min(16, L)])),
        long_prefill_token_threshold_adaptive=draw(st.booleans()),
        enable_chunked_prefill=chunked,
        policy=policy,
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        scheduler_reserve_full_isl=draw(st.booleans()),
    )
    n = draw(st.integers(1, 5))
    reqs = []
    for i in range(n):
        prompt_len = draw(st.integers(1, min(L - 1, 40)))
        reqs.append(
            WorkloadRequest(
                Request(
                    f"r{i}",
                    (i + 1,) * prompt_len,
                    max_tokens=draw(st.integers(1, 8)),
                    eos_token_id=draw(st.sampled_from([None, 2])),
                    ignore_eos=draw(st.booleans()),
                    stop_token_ids=draw(st.sampled_from([(), (3,)])),
                    priority=draw(st.integers(0, 2)),
                    arrival_time=float(draw(st.integers(0, 3))),
                ),
                arrival_step=draw(st.integers(0, 4)),
                output_token_ids=tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5]), max_size=4))),
            )
        )
    ids = [r.request_id for r in reqs]
    aborts = tuple(Abort(draw(st.integers(0, 8)), draw(st.sampled_from(ids))) for _ in range(draw(st.integers(0, 2))))
    return Workload(cfg, tuple(reqs), aborts=aborts, max_steps=60)


PROPERTY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(small_workloads())
def test_same_workload_same_trace_twice(workload):
    """Determinism: a random small workload simulated twice gives byte-identical trace JSON."""
    a = json.dumps(simulate(workload).to_json(), sort_keys=True)
    b = json.dumps(simulate(workload).to_json(), sort_keys=True)
    assert a == b


@PROPERTY
@given(small_workloads())
def test_pure_api_matches_simulate_and_keeps_invariants(workload):
    """The pure API driven call by call gives simulate's exact trace, and §7 invariants hold after every call."""
    pure = engine_loop.run(PureEngine(workload.config), workload)
    assert pure.to_json() == simulate(workload).to_json()
