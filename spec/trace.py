"""The trace format: a workload and, per step, what the engine did.

Each step record holds the inputs applied before `schedule()` (arrivals and
aborts), the `SchedulerOutput`, the fake model's answer, the state summary
after `update_from_output()`, and the requests that finished in that step
with their final status. The summary is the part of the state every engine
can expose (vLLM, ours, a third party's): the queues in order, the free-block
count, and each live request's status, num_computed_tokens and num_tokens.

A trace embeds its workload, so a trace file alone is enough to replay it on
another engine, check its invariants, or plot it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .controls import ControlCall
from .errors import SpecError
from .jsonio import read_json, validate
from .output import ModelRunnerOutput, SchedulerOutput
from .request import RequestStatus
from .state import SchedulerState
from .workload import Workload

TRACE_VERSION = 1


@dataclass(frozen=True)
class RequestSummary:
    status: RequestStatus
    num_computed_tokens: int
    num_tokens: int
    # Structured output only (None without a grammar): "compiling", "compiled" or "failed", as the
    # scheduler would find `request.structured_output_request.grammar` (spec.request.GRAMMAR_STATES).
    grammar: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "status": self.status.name,
            "num_computed_tokens": self.num_computed_tokens,
            "num_tokens": self.num_tokens,
        }
        if self.grammar is not None:
            d["grammar"] = self.grammar
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RequestSummary:
        return cls(RequestStatus[d["status"]], d["num_computed_tokens"], d["num_tokens"], d.get("grammar"))


@dataclass(frozen=True)
class StateSummary:
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    num_free_blocks: int = 0
    requests: Mapping[str, RequestSummary] = field(default_factory=dict)
    # 0.28.0-0.30.0 under FCFS: how many of `waiting`'s leading requests sit in vLLM's `skipped_waiting`
    # queue (spec.versions `one-waiting-queue`); a preempted request goes behind them. 0 elsewhere.
    num_skipped_waiting: int = 0

    @classmethod
    def of(cls, state: SchedulerState) -> StateSummary:
        return cls(
            running=state.running,
            waiting=state.waiting,
            num_free_blocks=state.num_free_blocks,
            num_skipped_waiting=state.num_skipped_waiting,
            requests={
                rid: RequestSummary(r.status, r.num_computed_tokens, r.num_tokens, r.grammar)
                for rid, r in state.requests.items()
            },
        )

    def to_json(self) -> dict[str, Any]:
        d = {
            "running": list(self.running),
            "waiting": list(self.waiting),
            "num_free_blocks": self.num_free_blocks,
            "requests": {k: v.to_json() for k, v in self.requests.items()},
        }
        if self.num_skipped_waiting:
            d["num_skipped_waiting"] = self.num_skipped_waiting
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StateSummary:
        return cls(
            tuple(d["running"]),
            tuple(d["waiting"]),
            d["num_free_blocks"],
            {k: RequestSummary.from_json(v) for k, v in d["requests"].items()},
            d.get("num_skipped_waiting", 0),
        )


@dataclass(frozen=True)
class FinishedRequest:
    status: RequestStatus
    output_token_ids: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.name, "output_token_ids": list(self.output_token_ids)}


@dataclass(frozen=True)
class StepRecord:
    step: int
    added: tuple[str, ...]
    aborted: tuple[str, ...]
    output: SchedulerOutput
    model_output: ModelRunnerOutput
    state: StateSummary  # after update_from_output
    finished: Mapping[str, FinishedRequest] = field(default_factory=dict)  # during this step
    # Which step's output update_from_output absorbed in this step: the step itself when
    # synchronous; under async scheduling an earlier one, or None while it is still in flight.
    updated_step: int | None = -1  # -1: this step (the synchronous default)
    # Speculative decoding (sync): the drafts proposed after the update, per request.
    draft_token_ids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Async: False in a step that called no schedule() (nothing to schedule, output still in flight).
    scheduled: bool = True
    # Async: the steps whose outputs are still in flight after this one, oldest first.
    in_flight: tuple[int, ...] = ()
    # Aborted after the model ran and before update_from_output() (`workload.Abort.mid_step`); their
    # finished entries are in `finished`, beside those of `aborted`.
    aborted_mid_step: tuple[str, ...] = ()
    # Structured output: the grammars whose compilation finished before this step's schedule(), by request,
    # True if it compiled and False if it failed (`workload.Grammar`). Applied after the arrivals and aborts.
    grammars: Mapping[str, bool] = field(default_factory=dict)
    # Data parallel: this step's schedule() was called with throttle_prefills=True (`Workload.throttle_prefills`).
    throttle_prefills: bool = False
    # The scheduler calls the workload's controls made before this step's schedule(), in order (`spec.controls`);
    # requests an `abort` pause aborted are in `aborted`.
    controls: tuple[ControlCall, ...] = ()

    def __post_init__(self) -> None:
        if self.updated_step == -1:
            object.__setattr__(self, "updated_step", self.step)

    def to_json(self) -> dict[str, Any]:
        d = {
            "step": self.step,
            "added": list(self.added),
            "aborted": list(self.aborted),
            "output": self.output.to_json(),
            "model_output": self.model_output.to_json(),
            "state": self.state.to_json(),
            "finished": {k: v.to_json() for k, v in self.finished.items()},
        }
        # Written only when they differ from a synchronous step, so sync traces keep their shape.
        if self.updated_step != self.step:
            d["updated_step"] = self.updated_step
        if self.draft_token_ids:
            d["draft_token_ids"] = {k: list(v) for k, v in self.draft_token_ids.items()}
        if not self.scheduled:
            d["scheduled"] = False
        if self.in_flight:
            d["in_flight"] = list(self.in_flight)
        if self.aborted_mid_step:
            d["aborted_mid_step"] = list(self.aborted_mid_step)
        if self.grammars:
            d["grammars"] = dict(self.grammars)
        if self.throttle_prefills:
            d["throttle_prefills"] = True
        if self.controls:
            d["controls"] = [c.to_json() for c in self.controls]
        if self.model_output.pooler_output:
            d["pooler_output"] = sorted(self.model_output.pooler_output)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StepRecord:
        return cls(
            d["step"],
            tuple(d["added"]),
            tuple(d["aborted"]),
            SchedulerOutput.from_json(d["output"]),
            ModelRunnerOutput(
                ModelRunnerOutput.from_json(d["model_output"]).sampled_token_ids,
                frozenset(d.get("pooler_output", ())),
            ),
            StateSummary.from_json(d["state"]),
            {
                k: FinishedRequest(RequestStatus[v["status"]], tuple(v["output_token_ids"]))
                for k, v in d["finished"].items()
            },
            updated_step=d.get("updated_step", d["step"]),
            draft_token_ids={k: tuple(v) for k, v in d.get("draft_token_ids", {}).items()},
            scheduled=d.get("scheduled", True),
            in_flight=tuple(d.get("in_flight", ())),
            aborted_mid_step=tuple(d.get("aborted_mid_step", ())),
            grammars=dict(d.get("grammars", {})),
            throttle_prefills=d.get("throttle_prefills", False),
            controls=tuple(ControlCall.from_json(c) for c in d.get("controls", ())),
        )


@dataclass(frozen=True)
class Trace:
    workload: Workload
    steps: tuple[StepRecord, ...]
    engine: str = "reference"
    end: str = "drained"  # or "max_steps": the loop gave up with requests left (a livelock)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "engine": self.engine,
            "end": self.end,
            "workload": self.workload.to_json(),
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "trace") -> Trace:
        refuse_a_workload(data, where)
        validate(data, "trace", where)
        workload = Workload.from_json(data["workload"], f"{where}.workload")
        steps = []
        for i, s in enumerate(data["steps"]):
            try:
                steps.append(StepRecord.from_json(s))
            except KeyError as e:  # a status name the schema cannot enumerate
                raise SpecError(f"{where}.steps[{i}]", e.args[0], "is not a request status") from None
        _check_ids(workload, steps, where)
        return cls(workload, tuple(steps), data["engine"], data["end"])

    @classmethod
    def load(cls, path: str) -> Trace:
        return cls.from_json(read_json(path), where=f"{path}:trace")


def _check_ids(workload: Workload, steps: list[StepRecord], where: str) -> None:
    """Every id a step mentions must be a request of the workload: the monitors look them up."""
    known = {r.request_id for r in workload.requests}
    for i, s in enumerate(steps):
        check_step_ids(known, s, f"{where}.steps[{i}]")


def check_step_ids(known: set[str] | frozenset[str], s: StepRecord, where: str) -> None:
    """`_check_ids` for one step, which `where` names: a streamed trace checks each step as it is read."""
    mentioned = {
        "added": s.added,
        "aborted": s.aborted,
        "aborted_mid_step": s.aborted_mid_step,
        "grammars": tuple(s.grammars),
        "output.num_scheduled_tokens": tuple(s.output.num_scheduled_tokens),
        "output.scheduled_new_reqs": tuple(r.req_id for r in s.output.scheduled_new_reqs),
        "output.scheduled_cached_reqs": tuple(r.req_id for r in s.output.scheduled_cached_reqs),
        "output.preempted_req_ids": tuple(s.output.preempted_req_ids),
        "output.finished_req_ids": tuple(s.output.finished_req_ids),
        "model_output": tuple(s.model_output.sampled_token_ids),
        "pooler_output": tuple(s.model_output.pooler_output),
        "state.running": s.state.running,
        "state.waiting": s.state.waiting,
        "state.requests": tuple(s.state.requests),
        "finished": tuple(s.finished),
        "draft_token_ids": tuple(s.draft_token_ids),
    }
    for name, ids in mentioned.items():
        for rid in ids:
            if rid not in known:
                raise SpecError(f"{where}.{name}", rid, "names a request that is not in the workload")


def refuse_a_workload(data: Any, where: str) -> None:
    """A workload handed where a trace belongs is named as such, not as a trace missing `engine`."""
    if isinstance(data, dict) and "requests" in data and "engine" not in data and "workload" not in data:
        raise SpecError(
            where, "a workload", "is a workload, not a trace: run it first (schedspec simulate FILE --out TRACE.json)"
        )
