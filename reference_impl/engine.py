"""The reference as an `Engine`, and `simulate(workload) -> trace`.

The engine keeps one thawed `Scheduler` for the whole run instead of thawing
and freezing the state at every call: it runs exactly the code the pure API
runs, without copying every request twice per step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..spec import engine as engine_loop
from ..spec.config import SchedulerConfig
from ..spec.controls import PauseState
from ..spec.engine import DECLARED_FEATURES, gc_paused
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import Request, RequestStatus
from ..spec.state import SchedulerState
from ..spec.trace import FinishedRequest, RequestSummary, StateSummary, StepRecord, Trace
from ..spec.workload import Workload
from .api import freeze, thaw
from .scheduler import Scheduler

ENGINE_NAME = "reference"


class ReferenceEngine:
    name = ENGINE_NAME
    features = frozenset(DECLARED_FEATURES)  # and every FEATURE_METHODS method: it models every deployment feature
    scheduler_class: type[Scheduler] = Scheduler  # a derived engine's own (`derived_engine`)

    def __init__(self, config: SchedulerConfig) -> None:
        self.scheduler = thaw(SchedulerState.initial(config), self.scheduler_class)

    def add_request(self, request: Request) -> None:
        self.scheduler.add_request(request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        return self._finish(request_id, RequestStatus.FINISHED_ABORTED)

    def finish_request(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        """A finish from outside with another finished status (`Abort.status`)."""
        return self._finish(request_id, status)

    def _finish(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        """`Scheduler.finish_requests(request_id, status)`: an abort, or a finish from outside."""
        finished = self.scheduler.finish_requests([request_id], status)
        return FinishedRequest(finished[0].status, tuple(finished[0].output_token_ids)) if finished else None

    @gc_paused  # the step builds no cycles: see `spec.engine.gc_paused`
    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        return self.scheduler.schedule(throttle_prefills)

    @gc_paused
    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        return self.scheduler.update_from_output(output, model_output)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        self.scheduler.update_draft_token_ids(draft_token_ids)

    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        self.scheduler.grammar_compiled(request_id, compiled)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        return self.scheduler.reset_prefix_cache(reset_running_requests)

    def set_pause_state(self, pause_state: PauseState) -> None:
        self.scheduler.set_pause_state(pause_state)

    def summary(self) -> StateSummary:
        s = self.scheduler
        return StateSummary(
            running=tuple(r.request_id for r in s.running),
            waiting=tuple(r.request_id for r in s.waiting),
            num_free_blocks=s.block_pool.get_num_free_blocks(),
            num_skipped_waiting=getattr(s.waiting, "num_skipped", 0),
            requests={
                rid: RequestSummary(r.status, r.num_computed_tokens, r.num_tokens, r.grammar)
                for rid, r in s.requests.items()
            },
        )

    def state(self) -> SchedulerState:
        return freeze(self.scheduler)


def derived_engine(
    scheduler_class: type[Scheduler], name: str | None = None, families: tuple[str, ...] = ()
) -> type[ReferenceEngine]:
    """An engine that is the reference except for the decisions `scheduler_class` overrides.

    The result is an engine factory (a class taking a `SchedulerConfig`), for
    `--engine module:NAME`, `schedspec hunt --engine` or a `--from` module's
    `ENGINES`. `families` names the workload families that exercise the
    change (`schedspec mutants` hunts on those; default the core scope's).
    Under async scheduling the scheduler gets `AsyncScheduler`'s placeholders
    on top of its own overrides (`api.scheduler_class_for`).
    """
    label = name or scheduler_class.__name__
    attrs = {
        "name": label,
        "scheduler_class": scheduler_class,
        "families": families,
        "__doc__": scheduler_class.__doc__,
        "__module__": scheduler_class.__module__,
    }
    return type(label, (ReferenceEngine,), attrs)


def simulate(workload: Workload) -> Trace:
    return engine_loop.run(ReferenceEngine(workload.config), workload)


def simulate_steps(workload: Workload) -> Iterator[StepRecord]:
    """The same run, a step at a time: for a consumer that streams it (`schedspec simulate`) and keeps none."""
    return engine_loop.steps(ReferenceEngine(workload.config), workload)
