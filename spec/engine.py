"""The engine protocol and the one engine loop every engine is driven by.

An engine is anything that can take requests and aborts, schedule a step,
and absorb the model's output: our reference, our torch engine, the real
vLLM behind a pipe, or a third party's scheduler. The loop that feeds it a
workload, and the fake model that answers each step, live here, once, so two
engines can only differ in what they decide, never in how they were driven.

The loop mirrors vLLM's synchronous `EngineCore.step` (core.py:667-697):
arrivals and aborts, then `schedule()`, then the model, then
`update_from_output()` with that same step's output.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping, Protocol

from .config import SchedulerConfig
from .output import ModelRunnerOutput, SchedulerOutput
from .request import Request
from .trace import FinishedRequest, StateSummary, StepRecord, Trace
from .workload import Workload


class Engine(Protocol):
    """One scheduler instance. `name` identifies it in traces and certificates."""

    name: str

    def add_request(self, request: Request) -> None: ...

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        """Finish a request as aborted; None if it had already finished."""

    def schedule(self) -> SchedulerOutput: ...

    def summary(self) -> StateSummary: ...

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> Mapping[str, FinishedRequest]:
        """Absorb one step's model output; return the requests that finished in it."""


EngineFactory = Callable[[SchedulerConfig], Engine]


def fake_model(workload: Workload, output: SchedulerOutput, after_schedule: StateSummary) -> ModelRunnerOutput:
    """vLLM's GPU runner without the GPU: one planted sample per request that completed its prefill.

    A request whose `num_computed_tokens` is still short of its tokens after
    the advance is in a partial prefill chunk (vLLM's `is_prefill_chunk`) and
    samples nothing. Otherwise it samples its next planted token: the index is
    how many outputs it has, which survives preemption, so a recomputed
    request continues where it stopped.
    """
    prompt_len = {r.request_id: r.request.num_prompt_tokens for r in workload.requests}
    sampled: dict[str, tuple[int, ...]] = {}
    for rid in output.num_scheduled_tokens:
        r = after_schedule.requests[rid]
        if r.num_computed_tokens < r.num_tokens:
            sampled[rid] = ()
        else:
            sampled[rid] = (workload.sampled_token(rid, r.num_tokens - prompt_len[rid]),)
    return ModelRunnerOutput(sampled)


def steps(engine: Engine, workload: Workload) -> Iterator[StepRecord]:
    """Drive `engine` through `workload` one step at a time, yielding each step's record.

    It stops once every request has finished and been reported, or after
    `workload.max_steps` steps: vLLM 0.33.0 has livelocks (semantics doc D1),
    and a trace must end. Lock-step comparison consumes two of these at once.
    """
    for step in range(workload.max_steps):
        added = workload.arrivals_at(step)
        for request in added:
            engine.add_request(request)
        aborted = workload.aborts_at(step)
        finished: dict[str, FinishedRequest] = {}
        for rid in aborted:
            f = engine.abort_request(rid)
            if f is not None:
                finished[rid] = f
        output = engine.schedule()
        model_output = fake_model(workload, output, engine.summary())
        finished_in_update = engine.update_from_output(output, model_output)
        finished.update(finished_in_update)
        state = engine.summary()
        record = StepRecord(step, tuple(r.request_id for r in added), tuple(aborted), output, model_output, state, finished)
        yield record
        if drained_after(record, workload):
            return


def drained_after(record: StepRecord, workload: Workload) -> bool:
    """Nothing is live, nothing is due to arrive, and nothing is left to report after this step.

    A request that finished in this step's update_from_output is reported by
    the next schedule(), so the loop goes on for that step. Every engine's
    loop ends by this rule (the batched torch runner calls it too).
    """
    reported = all(rid in record.aborted for rid in record.finished)
    state = record.state
    return not (state.running or state.waiting) and record.step >= workload.last_event_step and reported


def run(engine: Engine, workload: Workload) -> Trace:
    records = tuple(steps(engine, workload))
    drained = bool(records) and drained_after(records[-1], workload)
    return Trace(workload, records, engine.name, "drained" if drained else "max_steps")
