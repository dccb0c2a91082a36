"""The reference as an `Engine`, and `simulate(workload) -> trace`.

The engine keeps one thawed `Scheduler` for the whole run instead of thawing
and freezing the state at every call: it runs exactly the code the pure API
runs, without copying every request twice per step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..spec import engine as engine_loop
from ..spec.config import SchedulerConfig
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import Request, RequestStatus
from ..spec.state import SchedulerState
from ..spec.trace import FinishedRequest, RequestSummary, StateSummary, StepRecord, Trace
from ..spec.workload import Workload
from .api import freeze, thaw

ENGINE_NAME = "reference"


class ReferenceEngine:
    name = ENGINE_NAME

    def __init__(self, config: SchedulerConfig) -> None:
        self.scheduler = thaw(SchedulerState.initial(config))

    def add_request(self, request: Request) -> None:
        self.scheduler.add_request(request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        aborted = self.scheduler.finish_requests([request_id], RequestStatus.FINISHED_ABORTED)
        return FinishedRequest(aborted[0].status, tuple(aborted[0].output_token_ids)) if aborted else None

    def schedule(self) -> SchedulerOutput:
        return self.scheduler.schedule()

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        return self.scheduler.update_from_output(output, model_output)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        self.scheduler.update_draft_token_ids(draft_token_ids)

    def summary(self) -> StateSummary:
        s = self.scheduler
        return StateSummary(
            running=tuple(r.request_id for r in s.running),
            waiting=tuple(r.request_id for r in s.waiting),
            num_free_blocks=s.block_pool.get_num_free_blocks(),
            requests={
                rid: RequestSummary(r.status, r.num_computed_tokens, r.num_tokens) for rid, r in s.requests.items()
            },
        )

    def state(self) -> SchedulerState:
        return freeze(self.scheduler)


def simulate(workload: Workload) -> Trace:
    return engine_loop.run(ReferenceEngine(workload.config), workload)


def simulate_steps(workload: Workload) -> Iterator[StepRecord]:
    """The same run, a step at a time: for a consumer that streams it (`schedspec simulate`) and keeps none."""
    return engine_loop.steps(ReferenceEngine(workload.config), workload)
