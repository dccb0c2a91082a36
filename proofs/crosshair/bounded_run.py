"""A bounded scenario run on the reference: the engine loop over the pure API, with the full state around each step.

`bounded.py` decides the scenario; this runs it. A contract needs more than
a trace: the full `SchedulerState` before and after each step (block ids,
ref counts, the cache), so `PureEngine` offers the reference's pure API as
an `Engine`, and `run` drives it through `spec.engine.steps`, the loop every
engine runs (sync, with the drafter under spec decode, or async's batch
queue), so a scenario steps exactly as a trace of it would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ...reference_impl import api
from ...spec.config import SchedulerConfig
from ...spec.engine import steps
from ...spec.invariants.build import view_from_states
from ...spec.invariants.views import StepView
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.state import SchedulerState
from ...spec.trace import FinishedRequest, StateSummary, StepRecord, Trace
from ...spec.workload import Workload


@dataclass(frozen=True)
class Step:
    pre: SchedulerState  # what schedule() starts from: arrivals and aborts applied
    output: SchedulerOutput
    post: SchedulerState  # after update_from_output (and the drafter's proposals)
    record: StepRecord
    absorbed: ModelRunnerOutput | None  # what update_from_output absorbed: this step's, or under async the older one's

    def view(self) -> StepView:
        # The same arguments `views_from_trace` passes: what was sampled, and what finished in the step.
        return view_from_states(self.pre, self.output, self.post, self.absorbed, self.record.finished)


class PureEngine:
    """The reference's pure API as an `Engine`: every call thaws the state and freezes the result.

    It remembers the full state each step's schedule() starts from and the
    output update_from_output absorbs, which a `Step` needs.
    """

    name = "reference"

    def __init__(self, config: SchedulerConfig) -> None:
        self.state = api.initial_state(config)
        self.pre: SchedulerState | None = None
        self.absorbed: ModelRunnerOutput | None = None

    def add_request(self, request: Request) -> None:
        self.state = api.add_request(self.state, request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        r = self.state.requests.get(request_id)
        if r is None:
            return None
        self.state = api.abort(self.state, [request_id])
        return FinishedRequest(RequestStatus.FINISHED_ABORTED, r.output_token_ids)

    def schedule(self) -> SchedulerOutput:
        self.pre = self.state
        output, self.state = api.schedule(self.state)
        return output

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        if self.pre is None:  # async with nothing live: the step only absorbs
            self.pre = self.state
        self.absorbed = model_output
        self.state, finished = api.update_from_output(self.state, output, model_output)
        return dict(finished)

    def update_draft_token_ids(self, draft_token_ids) -> None:
        self.state = api.update_draft_token_ids(self.state, draft_token_ids)

    def summary(self) -> StateSummary:
        return StateSummary.of(self.state)


def run(w: Workload) -> Iterator[Step]:
    """`spec.engine.steps`, the loop every engine runs (sync, with the drafter, or async's batch queue), on the
    reference's pure API, with the full states around each step."""
    engine = PureEngine(w.config)
    for record in steps(engine, w):
        yield Step(engine.pre or engine.state, record.output, engine.state, record, engine.absorbed)
        engine.pre = engine.absorbed = None


def trace_of(w: Workload, records: list[StepRecord]) -> Trace:
    """A trace of the steps taken, ended as `spec.engine.run` would end it."""
    last = records[-1]
    drained = len(records) < w.max_steps or (
        not (last.state.running or last.state.waiting) and last.step >= w.last_event_step
    )
    return Trace(w, tuple(records), "reference", "drained" if drained else "max_steps")
