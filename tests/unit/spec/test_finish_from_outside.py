"""Requests finished from outside with a status other than aborted (`workload.Abort.status`): vLLM's
`Scheduler.finish_requests(ids, status)` with any finished status, as vLLM's own tests call it. The format, the
engine loop, the check that an engine finishes with the status asked, the torch engine, and real vLLM."""

from __future__ import annotations

import dataclasses

import pytest

from both_engines import ENGINES, Driven

from schedspec.gpu_impl.batch import run_batch
from schedspec.reference_impl import ReferenceEngine, simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.invariants.onepass import check_all
from schedspec.spec.request import Request, RequestStatus
from schedspec.spec.trace import FinishedRequest, Trace
from schedspec.spec.workload import Abort, Workload, WorkloadRequest

STOPPED, ABORTED = RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_ABORTED
CONFIG = SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=4, block_size=4, num_gpu_blocks=20)


def workload(*aborts: Abort, config: SchedulerConfig = CONFIG) -> Workload:
    requests = tuple(
        WorkloadRequest(Request(rid, tuple(range(10 + i, 16 + i)), 8, ignore_eos=True), i) for i, rid in enumerate("ab")
    )
    return Workload(config, requests, aborts, max_steps=40)


def test_the_status_round_trips_and_a_status_that_is_not_finished_is_one_line():
    w = workload(Abort(2, "a", status=STOPPED), Abort(3, "b", mid_step=True))
    again = Workload.from_json(w.to_json())
    assert again.aborts == w.aborts and w.to_json()["aborts"][0]["status"] == "FINISHED_STOPPED"
    assert "status" not in w.to_json()["aborts"][1]  # aborted: the default, left out
    with pytest.raises(SpecError, match=r"workload\.aborts\[0\]\.status: must be a finished status"):
        workload(Abort(2, "a", status=RequestStatus.RUNNING))


@pytest.mark.parametrize("mid_step", [False, True])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_request_finished_from_outside_ends_with_that_status_and_every_check_holds(mid_step, async_scheduling):
    config = dataclasses.replace(CONFIG, async_scheduling=async_scheduling)
    trace = simulate(workload(Abort(3, "a", mid_step=mid_step, status=STOPPED), config=config))
    (f,) = [s.finished["a"] for s in trace.steps if "a" in s.finished]
    assert f.status == STOPPED and len(f.output_token_ids) < 8
    assert check_trace(trace) == []
    torch_trace = run_batch([trace.workload], "cpu")[0]
    assert [s.to_json() for s in torch_trace.steps] == [s.to_json() for s in trace.steps]


def test_an_engine_that_finishes_with_another_status_breaks_the_trace_check():
    class AlwaysAborts(ReferenceEngine):
        name = "always-aborts"

        def finish_request(self, request_id, status):
            return super().finish_request(request_id, ABORTED)

    w = workload(Abort(3, "a", status=STOPPED))
    found = {v.invariant for v in check_all(run(AlwaysAborts(w.config), w)).inconsistent}
    assert found == {"trace-membership"}, found
    assert check_all(simulate(w)).inconsistent == []  # the control: the reference


def test_an_engine_without_finish_request_is_refused_in_one_line():
    class AbortsOnly(ReferenceEngine):
        finish_request = None

    w = workload(Abort(3, "a", status=STOPPED))
    with pytest.raises(SpecError, match="outside the engine's declared scope"):
        run(AbortsOnly(w.config), w)
    assert run(AbortsOnly(w.config), workload(Abort(3, "a"))).end == "drained"  # a plain abort needs none


@pytest.mark.parametrize("kind", ENGINES)
def test_both_engines_finish_a_running_request_from_outside_as_stopped(kind):
    """vLLM's own tests call `scheduler.finish_requests(request_id, FINISHED_STOPPED)`: the request leaves running with
    that status and its blocks, and the next schedule() reports it."""
    e = Driven(kind, CONFIG)
    try:
        e.add(Request("a", tuple(range(10, 16)), 8, ignore_eos=True), Request("b", tuple(range(20, 26)), 8))
        e.step()
        free = e.num_free_blocks()
        assert e.engine.finish_request("a", STOPPED) == FinishedRequest(STOPPED, (0,))
        assert e.engine.finish_request("a", STOPPED) is None  # already finished
        assert e.num_free_blocks() == free + 2
        out = e.schedule()
        assert out.finished_req_ids == {"a"} and set(out.num_scheduled_tokens) == {"b"}
    finally:
        e.close()


def test_a_trace_with_a_finish_from_outside_round_trips():
    trace = simulate(workload(Abort(3, "a", status=STOPPED)))
    assert Trace.from_json(trace.to_json()).workload.aborts == trace.workload.aborts
